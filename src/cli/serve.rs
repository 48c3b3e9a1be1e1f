//! `gpuledger serve`: the store and its ledger over the PostgreSQL wire protocol and HTTP.

use gpuledger_store::StoreLocation;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use gpuledger_serve::Options;

/// How long `serve` drains after SIGTERM or Ctrl-C before it exits regardless.
const DRAIN_LIMIT: std::time::Duration = std::time::Duration::from_secs(20);

/// Serve the store to Grafana, SQL clients and HTTP until SIGTERM or Ctrl-C (then it drains
/// for at most 20 s).
///
/// The SQL endpoint speaks the PostgreSQL wire protocol: Grafana's PostgreSQL data source, psql,
/// DBeaver or any PostgreSQL driver connect to it and see every store table and every derived
/// ledger table (written by `gpuledger ledger`) under its name, with pg_catalog and
/// information_schema for their catalog queries. It is read-only: statements that would write,
/// read files or URLs, or change server settings are refused. Logins are the [[serve.users]] of
/// the config (SCRAM-SHA-256); each statement runs under query_timeout and memory_limit.
///
/// The HTTP API (/api/v1/chargeback, /states, /queue, /failures, /report.html, /months, /metrics;
/// described at /api/v1/openapi.json) needs `Authorization: Bearer $GPULEDGER_API_TOKEN`
/// (the variable is serve.http_token_env). /healthz is open.
///
/// New Parquet files show up within refresh_interval (5 s); a `gpuledger ledger` run while
/// serving replaces the derived tables in place.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  GPULEDGER_GRAFANA_PASSWORD=... GPULEDGER_API_TOKEN=... gpuledger serve --store ./store --config gpuledger.toml
  psql \"postgresql://grafana@127.0.0.1:5432/datafusion\" -c '\\dt'
  curl -H \"Authorization: Bearer $GPULEDGER_API_TOKEN\" 'http://127.0.0.1:8080/api/v1/chargeback?month=2026-10&format=csv'

The [serve] section (see examples/gpuledger.toml):
  [serve]
  pg_listen = \"127.0.0.1:5432\"
  http_listen = \"127.0.0.1:8080\"
  http_token_env = \"GPULEDGER_API_TOKEN\"
  query_timeout = \"60s\"
  memory_limit = \"2GiB\"
  [[serve.users]]
  name = \"grafana\"
  password_env = \"GPULEDGER_GRAFANA_PASSWORD\"")]
pub struct Args {
    /// Store: a directory, or an object-store URL (s3://bucket/prefix, gs://..., az://...); run `gpuledger ledger` on it for the derived tables.
    #[arg(long, env = "GPULEDGER_STORE", value_parser = super::store_location)]
    store: StoreLocation,
    /// Configuration file: its [serve] section, and [accounting] for the currency.
    #[arg(long, env = "GPULEDGER_CONFIG")]
    config: PathBuf,
    /// Overrides serve.pg_listen (port 0 picks a free port; the ready line names it).
    #[arg(long, value_name = "ADDR")]
    pg: Option<SocketAddr>,
    /// Overrides serve.http_listen.
    #[arg(long, value_name = "ADDR")]
    http: Option<SocketAddr>,
}

pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let file = super::config::load(&args.config, super::config::Uses { ledger: true, serve: true })?;
    let ledger_config = file.ledger.ok_or_else(|| gpuledger_store::Bug::new("a checked configuration without its ledger sections"))?;
    let mut config = file.serve;
    if let Some(a) = args.pg {
        config.pg_listen = a;
    }
    if let Some(a) = args.http {
        config.http_listen = a;
    }
    if let Some(dir) = args.store.local()
        && !dir.is_dir()
    {
        anyhow::bail!("store {} does not exist (run `gpuledger ingest` or `gpuledger demo` first)", dir.display());
    }
    let options = Options {
        store: args.store.clone(),
        config,
        currency: ledger_config.accounting.currency.clone(),
        idle_policy: ledger_config.accounting.idle_policy,
    };
    // One line on stdout once both ports are bound, for scripts and tests to wait on.
    let ready = |b: gpuledger_serve::Bound| {
        let mut out = std::io::stdout();
        let _ = writeln!(out, "ready sql={} http={}", b.pg, b.http);
        let _ = out.flush();
    };
    let shutdown = async {
        super::steps::shutdown_signal().await;
        // The server drains (open statements and requests finish); a drain that does not end
        // in time, a statement that never yields or clients that keep their connections, ends
        // with the process, so SIGTERM stops the server within DRAIN_LIMIT, before Kubernetes'
        // default 30 s grace period has passed. A thread of its own: the runtime's workers may be
        // the ones stuck.
        std::thread::spawn(|| {
            std::thread::sleep(DRAIN_LIMIT);
            let _ = writeln!(std::io::stderr(), "gpuledger: serve: still draining {} s after the stop signal: exiting", DRAIN_LIMIT.as_secs());
            std::process::exit(0);
        });
    };
    super::runtime()?
        .block_on(gpuledger_serve::run(options, ready, shutdown))
        .with_context(|| format!("serving {}", args.store))?;
    Ok(ExitCode::SUCCESS)
}
