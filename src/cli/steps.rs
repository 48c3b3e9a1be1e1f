//! Steps several commands share: the ledger configuration (or the default price), the
//! accounting run with its progress lines, the derived tables written with a line per table, a
//! month's report, a file written whole, and the wait for a shutdown signal.

use std::io::IsTerminal;
use std::path::Path;
use std::time::Instant;

use anyhow::Context;
use gpuledger_engine::{Engine, MemoryStats};
use gpuledger_ledger::accounting::{Accounting, RunOptions};
use gpuledger_ledger::config::{Config, IdlePolicy};
use gpuledger_ledger::report::Report;
use gpuledger_ledger::types::Month;
use gpuledger_store::StoreLocation;

use super::progress::ProgressMode;

/// The configuration file, or the defaults (with a note) when none is given.
pub fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    match path {
        Some(p) => super::config::load(p, super::config::Uses { ledger: true, serve: false })?.ledger.ok_or_else(|| gpuledger_store::Bug::new("a checked configuration without its ledger sections").into()),
        None => {
            eprintln!("gpuledger: no --config: every GPU-hour costs 2.0 USD, no overheads (see examples/gpuledger.toml)");
            Ok(Config::with_default_price(2.0))
        }
    }
}

/// Runs the accounting on `engine` with progress lines on stderr, then names the bad
/// annotation values it ignored; also returns what the in-process memory pool saw.
pub async fn run_accounting(store: &StoreLocation, config: &Config, options: &RunOptions, engine: &Engine, progress: ProgressMode) -> anyhow::Result<(Accounting, Option<MemoryStats>)> {
    let terminal = std::io::stderr().is_terminal();
    let show = match progress {
        ProgressMode::Off => false,
        ProgressMode::On | ProgressMode::Auto => true,
    };
    let started = Instant::now();
    let mut last_line = Instant::now();
    let mut report = |p: gpuledger_ledger::accounting::Progress<'_>| {
        if !show {
            return;
        }
        let (pass, done, total, day) = (p.pass, p.done, p.total, p.day);
        // A terminal gets one line rewritten in place; a log gets a line every few seconds.
        if terminal {
            eprint!("\rgpuledger: accounting, {pass}, day {done}/{total} ({day}), {:.0} s", started.elapsed().as_secs_f64());
            if done == total {
                eprintln!();
            }
        } else if done == total || last_line.elapsed().as_secs() >= 5 {
            eprintln!("gpuledger: accounting, {pass}, day {done}/{total} ({day}), {:.0} s", started.elapsed().as_secs_f64());
            last_line = Instant::now();
        }
    };
    let (accounting, memory) = gpuledger_ledger::run::account(store, config, options, engine, &mut report).await.with_context(|| format!("accounting over {store}"))?;
    print_bad_annotations(&gpuledger_ledger::run::bad_annotations(&accounting).await?);
    print_dra_mismatches(&gpuledger_ledger::run::dra_mismatches(&accounting).await?);
    for missing in gpuledger_ledger::run::missing_queue_objects(&accounting).await? {
        eprintln!("gpuledger: warning: {missing} is not in the capture: GPU Workloads waited for it, but it selects no node, so their waits strand no capacity");
    }
    Ok((accounting, memory))
}

/// Annotations the accounting ignored as bad input: counted, and the first few named, on stderr.
fn print_bad_annotations(lines: &[String]) {
    const SHOWN: usize = 10;
    if lines.is_empty() {
        return;
    }
    eprintln!("gpuledger: {} bad annotation value(s) ignored:", lines.len());
    for line in lines.iter().take(SHOWN) {
        eprintln!("  {line}");
    }
    if lines.len() > SHOWN {
        eprintln!("  ... and {} more (SELECT * FROM bad_annotations)", lines.len() - SHOWN);
    }
}

/// Samples whose pod labels and ResourceClaim disagree: a warning per GPU, pod and claim, the
/// first few named.
fn print_dra_mismatches(lines: &[String]) {
    const SHOWN: usize = 10;
    for line in lines.iter().take(SHOWN) {
        eprintln!("gpuledger: warning: {line}");
    }
    if lines.len() > SHOWN {
        eprintln!("gpuledger: warning: ... and {} more GPUs, pods and claims whose samples and claims disagree", lines.len() - SHOWN);
    }
}

/// Writes the derived tables of a finished run to the store and says on stderr what was written.
pub async fn write_derived(accounting: &Accounting, store: &StoreLocation, config: &Config, started: Instant) -> anyhow::Result<()> {
    let written = gpuledger_ledger::run::write_derived(accounting, store, config, None).await?;
    eprintln!("ledger: {} days of samples accounted in {:.1} s; tables written to {}:", accounting.days.len(), started.elapsed().as_secs_f64(), store.join("ledger/"));
    if let Some(m) = &accounting.memo {
        eprintln!(
            "  day tables: {} days computed, {} reused (first pass: {} computed, {} reused) in {}",
            m.pass2_computed,
            m.pass2_read,
            m.pass1_computed,
            m.pass1_read,
            store.join(gpuledger_ledger::days::DAYS_DIR)
        );
        print_computed_days(&m.computed);
    }
    if accounting.split_days > 0 {
        eprintln!("  {} days computed in parts of their nodes (more samples than the memory limit takes at once): {} units in the first pass, {} in the second", accounting.split_days, accounting.units.0, accounting.units.1);
    }
    for t in written {
        eprintln!("  {:<24} {:>9} rows {:>10.1} KiB", t.name, t.rows, t.bytes as f64 / 1024.0);
    }
    Ok(())
}

/// Which days a run computed and why (what changed since their day tables were kept); a long list
/// (a first run, a changed configuration) as counts per reason.
fn print_computed_days(computed: &[(String, String)]) {
    const LISTED: usize = 8;
    if computed.is_empty() {
        return;
    }
    if computed.len() <= LISTED {
        let days: Vec<String> = computed.iter().map(|(day, why)| format!("{day} ({why})")).collect();
        eprintln!("  computed: {}", days.join(", "));
        return;
    }
    let mut by_reason: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for (_, why) in computed {
        *by_reason.entry(why.as_str()).or_default() += 1;
    }
    let reasons: Vec<String> = by_reason.iter().map(|(why, n)| format!("{n} x {why}")).collect();
    eprintln!("  computed: {}", reasons.join("; "));
}

/// A store an older gpuledger wrote (raw tables without Delta logs) is converted on a writer's
/// first use, with a line saying so; nothing is rewritten.
pub async fn upgrade_store(store: &StoreLocation) -> anyhow::Result<()> {
    for (table, e) in gpuledger_store::delta::upgrade(store).await.with_context(|| format!("upgrading {store}"))? {
        if e.created && e.converted_files > 0 {
            eprintln!("gpuledger: {table}: converted to a Delta table (its {} files are its first version)", e.converted_files);
        }
    }
    Ok(())
}

/// One month of the ledger in `ctx`, a finished run's session or the stored tables (the
/// busiest month when none is named).
pub async fn month_report(ctx: &datafusion::prelude::SessionContext, store: &StoreLocation, config: &Config, month: Option<&Month>, idle_policy: Option<IdlePolicy>) -> anyhow::Result<Report> {
    let policy = idle_policy.unwrap_or(config.accounting.idle_policy);
    let month = gpuledger_ledger::run::pick_month(ctx, store, month).await?;
    Ok(gpuledger_ledger::monthly::stored_report(ctx, &month, &config.accounting.currency, policy).await?)
}

/// Writes a report so that a reader never sees half of one.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    gpuledger_store::atomic::write_file(path, bytes)?;
    Ok(())
}

/// Resolves at the first SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
