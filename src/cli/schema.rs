//! `gpuledger schema [TABLE]`: prints the store's tables and columns, so SQL writers never guess.

use std::process::ExitCode;

use anyhow::bail;
use gpuledger_schemas::{PARTITION_KEY, TABLES, Table};

/// Print the store's tables: columns, types, meaning, partitioning and sort order.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Table to show (all when omitted), e.g. gpu_samples.
    table: Option<String>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let tables: Vec<&Table> = match &args.table {
        Some(name) => match gpuledger_schemas::table(name) {
            Some(t) => vec![t],
            None => {
                let names: Vec<&str> = TABLES.iter().map(|t| t.name).collect();
                bail!("no table named {name:?}; tables: {}", names.join(", "))
            }
        },
        None => TABLES.iter().collect(),
    };
    let mut out = String::new();
    for t in tables {
        out.push_str(&describe(t));
        out.push('\n');
    }
    print!("{out}");
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
    for c in t.columns {
        let null = if c.nullable { "" } else { " NOT NULL" };
        s.push_str(&format!("  {:w$}  {}{}\n      {}\n", c.name, c.ty.sql_name(), null, c.doc));
    }
    s.push_str(&format!("  {:w$}  VARCHAR NOT NULL\n      Partition directory (YYYY-MM-DD, UTC); filter on it to read fewer files\n", PARTITION_KEY));
    s
}
