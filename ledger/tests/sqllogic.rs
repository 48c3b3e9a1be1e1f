//! Runs the SQL logic tests in `queries/tests/*.slt`: one file per accounting rule, each with
//! tiny inputs written as `INSERT ... VALUES` and results worked out by hand.
//!
//! Each file gets a fresh session with every store table empty and in memory. The statement
//! `RUN ACCOUNTING` runs `queries/` once over what the file inserted (all days at once, as a
//! cluster would); lines after it, up to the record's end, are an optional configuration file
//! (TOML) for that run (without one: every default, and a price of 1 per GPU-hour). Queries
//! after it see every view of the accounting.
//!
//! `cargo test -p gpuledger-ledger --test sqllogic [-- NAME]` runs every file, or those whose
//! name contains NAME.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, Float32Array, Float64Array};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use datafusion::datasource::MemTable;
use datafusion::prelude::SessionContext;
use gpuledger_ledger::accounting::{Accounting, RunOptions};
use gpuledger_ledger::config::Config;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};

#[derive(Debug, thiserror::Error)]
enum SltError {
    #[error("{0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),
    #[error("{0}")]
    Ledger(#[from] gpuledger_ledger::Error),
    #[error("configuration after RUN ACCOUNTING: {0}")]
    Config(String),
    #[error("{0}")]
    Arrow(#[from] arrow::error::ArrowError),
}

struct Session {
    ctx: SessionContext,
}

impl Session {
    fn new() -> Result<Session, SltError> {
        let ctx = SessionContext::new();
        gpuledger_engine::udf::register(&ctx);
        for table in gpuledger_schemas::TABLES {
            // Every column nullable, so that a file inserts only the columns its rule reads.
            let mut fields: Vec<Field> = table.arrow_schema().fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
            fields.push(Field::new(gpuledger_schemas::PARTITION_KEY, DataType::Utf8, true));
            let empty = MemTable::try_new(Arc::new(Schema::new(fields)), vec![vec![]])?;
            ctx.register_table(table.name, Arc::new(empty))?;
        }
        Ok(Session { ctx })
    }

    async fn run_accounting(&mut self, toml: &str) -> Result<(), SltError> {
        let config = if toml.trim().is_empty() {
            Config::with_default_price(1.0)
        } else {
            Config::parse(toml, Path::new("RUN ACCOUNTING")).map_err(|e| SltError::Config(e.to_string()))?
        };
        let accounting = Accounting::run_at_once(self.ctx.clone(), &config, &RunOptions::default()).await?;
        self.ctx = accounting.context().clone();
        Ok(())
    }
}

#[async_trait::async_trait]
impl AsyncDB for Session {
    type Error = SltError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, SltError> {
        let trimmed = sql.trim_start();
        if let Some(rest) = trimmed.strip_prefix("RUN ACCOUNTING") {
            self.run_accounting(rest).await?;
            return Ok(DBOutput::StatementComplete(0));
        }
        let upper = trimmed.get(..6).unwrap_or(trimmed).to_ascii_uppercase();
        let batches = self.ctx.sql(sql).await?.collect().await?;
        if !(upper.starts_with("SELECT") || upper.starts_with("WITH")) {
            return Ok(DBOutput::StatementComplete(0));
        }
        let columns = batches.first().map_or(0, |b| b.num_columns());
        let options = FormatOptions::default().with_null("NULL");
        let mut rows = Vec::new();
        for batch in &batches {
            let cells: Vec<Vec<String>> = batch.columns().iter().map(|c| format_column(c.as_ref(), &options)).collect::<Result<_, _>>()?;
            for r in 0..batch.num_rows() {
                rows.push(cells.iter().map(|c| c[r].clone()).collect());
            }
        }
        Ok(DBOutput::Rows { types: vec![DefaultColumnType::Any; columns], rows })
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "gpuledger"
    }
}

/// Every value as text; floats rounded to 9 decimals and printed without a trailing `.0`, so
/// that a result worked by hand (`120`, `0.5`) reads as written. Decimals (money) are exact and
/// printed in full, less trailing zeros: `15.000000` is `15`, `33.333334` stays as it is.
fn format_column(array: &dyn Array, options: &FormatOptions) -> Result<Vec<String>, SltError> {
    let float = |v: f64| {
        let r = (v * 1e9).round() / 1e9;
        if r == 0.0 { "0".to_string() } else { format!("{r}") }
    };
    if let Some(a) = array.as_any().downcast_ref::<Float64Array>() {
        return Ok((0..a.len()).map(|i| if a.is_null(i) { "NULL".into() } else { float(a.value(i)) }).collect());
    }
    if let Some(a) = array.as_any().downcast_ref::<Float32Array>() {
        return Ok((0..a.len()).map(|i| if a.is_null(i) { "NULL".into() } else { float(f64::from(a.value(i))) }).collect());
    }
    let f = ArrayFormatter::try_new(array, options)?;
    let decimal = matches!(array.data_type(), DataType::Decimal128(_, s) if *s > 0);
    Ok((0..array.len())
        .map(|i| {
            let text = f.value(i).to_string();
            if decimal && !array.is_null(i) {
                let trimmed = text.trim_end_matches('0').trim_end_matches('.');
                if trimmed == "-0" { "0".to_string() } else { trimmed.to_string() }
            } else {
                text
            }
        })
        .collect())
}

fn slt_files() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../queries/tests");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "slt"))
        .collect();
    files.sort();
    files
}

fn main() {
    // `cargo test -- ...` passes libtest's flags too (some with a value): the first other word
    // is a name filter.
    let args: Vec<String> = std::env::args().skip(1).collect();
    let takes_value = ["--test-threads", "--skip", "--format", "--color", "--logfile", "-Z"];
    let is_flag_value = |i: usize| i > 0 && takes_value.contains(&args[i - 1].as_str());
    let filter: Option<String> = args.iter().enumerate().find(|(i, a)| !a.starts_with('-') && !is_flag_value(*i)).map(|(_, a)| a.clone());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    let files: Vec<PathBuf> = slt_files()
        .into_iter()
        .filter(|f| filter.as_deref().is_none_or(|want| f.file_name().unwrap_or_default().to_string_lossy().contains(want)))
        .collect();
    let ran = files.len();
    // The files are independent (a session each) and mostly single-threaded planning: one per
    // core at a time, each worker thread driving its own file on the shared runtime.
    let queue = std::sync::Mutex::new(files.into_iter());
    let failed = std::sync::Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(ran.max(1));
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    let Some(file) = queue.lock().expect("queue").next() else { break };
                    let name = file.file_name().unwrap_or_default().to_string_lossy().into_owned();
                    let started = std::time::Instant::now();
                    let mut runner = sqllogictest::Runner::new(|| async { Session::new() });
                    runner.with_column_validator(sqllogictest::default_column_validator);
                    match runtime.block_on(runner.run_file_async(&file)) {
                        Ok(()) => println!("ok      {name} ({:.1} s)", started.elapsed().as_secs_f64()),
                        Err(e) => {
                            println!("FAILED  {name}\n{}\n", e.display(false));
                            failed.lock().expect("failed list").push(name);
                        }
                    }
                }
            });
        }
    });
    let mut failed = failed.into_inner().expect("failed list");
    failed.sort();
    println!("\n{ran} .slt files run, {} failed", failed.len());
    if ran == 0 && filter.is_none() {
        eprintln!("no .slt file found under queries/tests");
        std::process::exit(1);
    }
    if !failed.is_empty() {
        eprintln!("failed: {}", failed.join(", "));
        std::process::exit(1);
    }
}
