//! `gpuledger schema [TABLE]`: prints the store's tables and columns, so SQL writers never guess.

use std::process::ExitCode;

use anyhow::bail;
use gpuledger_schemas::{DERIVED_TABLES, DerivedTable, PARTITION_KEY, TABLES, Table};

/// Print the store's tables: columns, types, meaning, partitioning and sort order; then the
/// tables `gpuledger ledger` derives from them.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Table to show (all when omitted), e.g. gpu_samples or chargeback_monthly.
    table: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let descriptions: Vec<String> = match &args.table {
        Some(name) => match (gpuledger_schemas::table(name), gpuledger_schemas::derived_table(name)) {
            (Some(t), _) => vec![describe(t)],
            (None, Some(d)) => vec![describe_derived(d)],
            (None, None) => {
                let names: Vec<&str> = TABLES.iter().map(|t| t.name).chain(DERIVED_TABLES.iter().map(|t| t.name)).collect();
                bail!("no table named {name:?}; tables: {}", names.join(", "))
            }
        },
        None => TABLES.iter().map(describe).chain(DERIVED_TABLES.iter().map(describe_derived)).collect(),
    };
    let mut out = String::new();
    for d in descriptions {
        out.push_str(&d);
        out.push('\n');
    }
    out!("{out}")?;
    Ok(ExitCode::SUCCESS)
}

/// Text description of one table.
pub fn describe(t: &Table) -> String {
    let mut s = format!("{} -- {}\n", t.name, t.doc);
    s.push_str(&format!(
        "  files: {}/{PARTITION_KEY}=YYYY-MM-DD/part-*.parquet (date of {}), sorted by {}; unique key ({})\n",
        t.name,
        t.partition_column,
        t.sort_by.join(", "),
        t.key.join(", ")
    ));
    let w = t.columns.iter().map(|c| c.name.len()).max().unwrap_or(0).max(PARTITION_KEY.len());
    push_columns(&mut s, t.columns.iter().map(|c| (c.name, c.ty.sql_name(), c.nullable, c.doc)), w);
    s.push_str(&format!("  {:w$}  VARCHAR NOT NULL\n      Partition directory (YYYY-MM-DD, UTC); filter on it to read fewer files\n", PARTITION_KEY));
    s
}

/// Text description of one derived table.
pub fn describe_derived(t: &DerivedTable) -> String {
    let mut s = format!("{} (derived) -- {}\n", t.name, t.doc);
    s.push_str(&format!("  file: {}, written whole by `gpuledger ledger`\n", gpuledger_store::layout::derived_rel(t.name)));
    let w = t.columns.iter().map(|c| c.name.len()).max().unwrap_or(0);
    push_columns(&mut s, t.columns.iter().map(|c| (c.name, c.ty.sql_name(), c.nullable, c.doc)), w);
    s
}

/// One entry per column: (name, SQL type, nullable, meaning), names padded to `w`.
fn push_columns<'a>(s: &mut String, columns: impl Iterator<Item = (&'a str, &'a str, bool, &'a str)>, w: usize) {
    for (name, ty, nullable, doc) in columns {
        let null = if nullable { "" } else { " NOT NULL" };
        s.push_str(&format!("  {name:w$}  {ty}{null}\n      {doc}\n"));
    }
}
