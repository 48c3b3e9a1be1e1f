//! The whole `gpuledger.toml`, loaded once for any command: every section is checked on one
//! parsed document (the ledger's, the collector's, the server's) so that a run names every
//! problem of the file, not only those of the section the command reads.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use gpuledger_collector::live::CollectorConfig;
use gpuledger_config::{ConfigError, Document};
use gpuledger_ledger::config::Config;
use gpuledger_ledger::retention::StoreSettings;
use gpuledger_serve::ServeConfig;

/// What the command will use, which decides what is required rather than merely checked.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Uses {
    /// The ledger's sections: `prices.default` is required. Otherwise they are checked only
    /// when the file has any of them (a collector-only file has no prices).
    pub ledger: bool,
    /// `[serve]` secrets and TLS files are looked up only for the command that serves: another
    /// command's environment need not hold the server's passwords.
    pub serve: bool,
}

/// Every section of one file, checked.
#[derive(Debug)]
pub(crate) struct FileConfig {
    /// `None` when the command does not use the ledger and the file has no ledger section.
    pub ledger: Option<Config>,
    pub collector: CollectorConfig,
    pub serve: ServeConfig,
    pub store: StoreSettings,
}

/// Reads and checks the file at `path`; the error lists every problem found, one per line.
pub(crate) fn load(path: &Path, uses: Uses) -> Result<FileConfig, ConfigError> {
    let text = Document::read(path)?;
    check(&text, path, uses, &|name| std::env::var(name).ok())
}

fn check(text: &str, path: &Path, uses: Uses, env: &dyn Fn(&str) -> Option<String>) -> Result<FileConfig, ConfigError> {
    let doc = Document::parse(text, path);
    // The ledger's sections are those the loader's table names as the ledger's.
    let has_ledger_section = gpuledger_config::SECTIONS.iter().any(|(s, reader)| *reader == "ledger" && doc.section_span(s).is_some());
    let ledger = (uses.ledger || has_ledger_section).then(|| Config::check(&doc)).flatten();
    let collector = CollectorConfig::check(&doc);
    let store = StoreSettings::check(&doc);
    // Stands in for every variable when the command does not serve: the names are still
    // checked, the values are the server's business.
    let unresolved = |_: &str| Some("unresolved".to_owned());
    let serve = if uses.serve { ServeConfig::check(&doc, env) } else { ServeConfig::check(&doc, &unresolved) };
    doc.finish()?;
    Ok(FileConfig { ledger, collector, serve, store })
}

/// Check a configuration file: every section, every mistake at once, nothing run.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Check FILE the way every command reads it (the ledger's, the collector's and the
    /// server's sections) and print every mistake, one per line with its line number; exit 1
    /// when there is any, 0 when there is none. Nothing is run and no store is opened.
    #[command(after_help = "Examples:\n  gpuledger config check gpuledger.toml\n  gpuledger config check --serve gpuledger.toml   also the server's password variables and TLS files, as `serve` reads them")]
    Check(CheckArgs),
}

#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The configuration file (gpuledger.toml).
    file: PathBuf,
    /// Also look up what only the server reads: the `[[serve.users]]` password variables and
    /// the bearer token's in this environment, and the TLS files.
    #[arg(long)]
    serve: bool,
    /// Require the ledger's sections (`[prices] default`) even when the file has none, as
    /// `ledger` and `report` do.
    #[arg(long)]
    ledger: bool,
}

pub fn run(command: Command) -> anyhow::Result<ExitCode> {
    let Command::Check(args) = command;
    match load(&args.file, Uses { ledger: args.ledger, serve: args.serve }) {
        Ok(config) => {
            let mut read = vec!["collector", "store"];
            if config.ledger.is_some() {
                read.insert(0, "ledger");
            }
            read.push("serve");
            outln!("{}: no mistakes (checked: {})", args.file.display(), read.join(", "))?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ gpuledger_config::ConfigError::Invalid { .. }) => {
            let count = e.problems().len();
            outln!("{e}")?;
            eprintln!("gpuledger: {}: {count} mistake{}", args.file.display(), if count == 1 { "" } else { "s" });
            Ok(ExitCode::from(super::EXIT_BAD_INPUT))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Uses = Uses { ledger: true, serve: true };

    #[test]
    fn problems_in_every_section_are_reported_together_in_file_order() {
        let text = "\
[accounting]
currency = \"usd\"
idle_policy = \"everyone\"

[prices]
default = -1.0

[collector]
scrape_interval = \"30\"
dcgm_prot = 9400

[serve]
memory_limit = \"lots\"

[[serve.users]]
name = \"grafana\"
password_env = \"UNSET_PASSWORD\"

[[overheads]]
month = \"2026-13\"
network = 1.0
";
        let e = check(text, Path::new("g.toml"), ALL, &|_| None).unwrap_err().to_string();
        let lines: Vec<&str> = e.lines().collect();
        let at: Vec<String> = lines.iter().map(|l| l.splitn(4, ": ").take(2).collect::<Vec<_>>().join(": ")).collect();
        assert_eq!(
            at,
            [
                "g.toml:2: accounting.currency",
                "g.toml:3: accounting.idle_policy",
                "g.toml:6: prices.default",
                "g.toml:9: collector.scrape_interval",
                "g.toml:10: collector.dcgm_prot",
                "g.toml:13: serve.memory_limit",
                "g.toml:17: serve.users[0].password_env",
                "g.toml:20: overheads[0].month",
            ],
            "{e}"
        );
        assert!(lines[4].ends_with("did you mean `dcgm_port`?"), "{e}");
    }

    #[test]
    fn secrets_are_resolved_only_for_the_server_and_prices_only_required_by_the_ledger() {
        let text = "[collector]\nlisten = \"0.0.0.0:9464\"\n[[serve.users]]\nname = \"g\"\npassword_env = \"UNSET\"\n";
        let c = check(text, Path::new("g.toml"), Uses { ledger: false, serve: false }, &|_| None).unwrap();
        assert!(c.ledger.is_none());
        assert_eq!(c.collector.listen.port(), 9464);
        let e = check(text, Path::new("g.toml"), ALL, &|_| None).unwrap_err().to_string();
        assert!(e.contains("g.toml:1: prices.default: missing") && e.contains("g.toml:5: serve.users[0].password_env"), "{e}");
    }

    #[test]
    fn shipped_configurations_load() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let example = root.join("examples/gpuledger.toml");
        let text = std::fs::read_to_string(&example).unwrap();
        let c = check(&text, &example, ALL, &|_| Some("pw".into())).unwrap_or_else(|e| panic!("{e}"));
        assert!(c.ledger.is_some());
        assert_eq!(c.serve.users.len(), 1);
    }
}
