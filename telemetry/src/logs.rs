//! Where the libraries' `tracing` events go: one subscriber, installed once by the binary.
//!
//! The libraries only emit events (`tracing::info!(endpoint = %url, "scraping again")`); which
//! of them are written, and how, is decided here. The filter is read from `GPULEDGER_LOG`
//! (EnvFilter syntax: `debug`, `gpuledger_collector=debug,warn`, ...) and defaults to
//! [`DEFAULT_FILTER`]: gpuledger's own events from `info` up, the dependencies' from `warn`.

use tracing_subscriber::EnvFilter;

/// The environment variable holding the filter.
pub const FILTER_ENV: &str = "GPULEDGER_LOG";

/// The filter used when [`FILTER_ENV`] is unset: DataFusion, kube and hyper log a lot at
/// `info`/`debug` that an operator does not need, and delta-rs warns of commits it retries over
/// a concurrent commit, which is normal (compaction commits each day on top of the last).
pub const DEFAULT_FILTER: &str = "warn,deltalake_core=error,gpuledger=info,gpuledger_collector=info,gpuledger_ledger=info,gpuledger_serve=info,gpuledger_store=info";

/// How each event is written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// One line per event: time, level, module, message, then `key=value` fields.
    #[default]
    Text,
    /// One JSON object per line (`timestamp`, `level`, `target`, `fields`), for log shippers.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<LogFormat, String> {
        match s {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("log format {other:?} is neither text nor json")),
        }
    }
}

/// Why the subscriber could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("{FILTER_ENV}={value:?} is not a log filter: {reason}")]
    Filter { value: String, reason: String },
    // Worded as `gpuledger_store::Bug` words every bug (this crate sits below the store).
    #[error("internal error: a log subscriber is already installed. This is a gpuledger bug: please report it with the command that was run")]
    Internal,
}

/// The filter from `value` (the environment variable's text), or the default when unset.
pub fn filter(value: Option<&str>) -> Result<EnvFilter, LogError> {
    let text = value.map(str::trim).filter(|v| !v.is_empty()).unwrap_or(DEFAULT_FILTER);
    EnvFilter::builder().parse(text).map_err(|e| LogError::Filter { value: text.to_string(), reason: e.to_string() })
}

/// Installs the process's subscriber: events to stderr in `format`, filtered by
/// `GPULEDGER_LOG`. No colours: stderr is as often a file or a pod log as a terminal.
pub fn init(format: LogFormat) -> Result<(), LogError> {
    let value = std::env::var(FILTER_ENV).ok();
    let filter = filter(value.as_deref())?;
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let done = match format {
        LogFormat::Text => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().with_current_span(false).try_init(),
    };
    done.map_err(|_| LogError::Internal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_parse_or_name_the_bad_value() {
        assert_eq!(filter(None).unwrap().to_string(), filter(Some(DEFAULT_FILTER)).unwrap().to_string());
        assert_eq!(filter(Some("  ")).unwrap().to_string(), filter(None).unwrap().to_string());
        assert!(filter(Some("gpuledger_collector=debug,warn")).is_ok());
        let e = filter(Some("gpuledger=loud")).unwrap_err().to_string();
        assert!(e.starts_with("GPULEDGER_LOG=\"gpuledger=loud\" is not a log filter: "), "{e}");
        assert_eq!("json".parse::<LogFormat>(), Ok(LogFormat::Json));
        assert!("yaml".parse::<LogFormat>().unwrap_err().contains("yaml"));
    }
}
