//! The `[collector]` section of the configuration file (the ledger reads the other sections).
//!
//! Checked by the one loader of `gpuledger-config`, beside the other sections: every problem is
//! reported with the file, the line and the key, `gpuledger.toml:4: collector.scrape_interval:
//! "30" is not a duration (write 30s, 5m, 1h or 250ms)`.

use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuledger_config::Document;
use gpuledger_store::StoreLocation;
use serde::Deserialize;
use toml::Spanned;

pub use gpuledger_config::ConfigError;

/// What the live collector does, with every default filled in.
#[derive(Debug, Clone, PartialEq)]
pub struct CollectorConfig {
    pub scrape_interval: Duration,
    /// Per-request limit of a scrape; never longer than the interval.
    pub scrape_timeout: Duration,
    pub dcgm_endpoints: Vec<String>,
    pub dcgm_discovery: bool,
    pub dcgm_selector: String,
    pub dcgm_port: u16,
    /// How often the exporter pods are looked up again.
    pub discovery_interval: Duration,
    pub kubernetes: bool,
    pub listen: SocketAddr,
    pub flush_interval: Duration,
    /// A WAL segment is flushed early once it holds this many rows.
    pub flush_rows: usize,
    /// Relative paths are resolved against the store by [`CollectorConfig::wal_path`].
    pub wal_dir: PathBuf,
    /// How often closed days stored in many files are compacted (`None`: never, `"off"`).
    pub compact_interval: Option<Duration>,
    /// The counters `[[units.counters]]` names (the ledger's section, handed over by whoever
    /// loads the file): the only metrics kept from the pods scraped for units.
    pub unit_metrics: Vec<String>,
    /// Whether pods exposing those counters are found through the API server and scraped.
    pub unit_discovery: bool,
    /// Which pods are scraped for units: those this label selector matches, else (`None`) those
    /// annotated `prometheus.io/scrape: "true"`.
    pub unit_selector: Option<String>,
    /// The port of a unit pod without a `prometheus.io/port` annotation (vLLM serves its
    /// metrics on its API port, 8000).
    pub unit_port: u16,
}

impl Default for CollectorConfig {
    fn default() -> Self {
        CollectorConfig {
            scrape_interval: Duration::from_secs(30),
            scrape_timeout: Duration::from_secs(10),
            dcgm_endpoints: Vec::new(),
            dcgm_discovery: true,
            dcgm_selector: "app=nvidia-dcgm-exporter".into(),
            dcgm_port: 9400,
            discovery_interval: Duration::from_secs(60),
            kubernetes: true,
            listen: SocketAddr::from(([127, 0, 0, 1], 9464)),
            flush_interval: Duration::from_secs(300),
            flush_rows: 1_000_000,
            wal_dir: PathBuf::from("wal"),
            compact_interval: Some(Duration::from_secs(3600)),
            unit_metrics: Vec::new(),
            unit_discovery: true,
            unit_selector: None,
            unit_port: 8000,
        }
    }
}

impl CollectorConfig {
    /// Reads the `[collector]` section of the file at `path` (absent: all defaults).
    pub fn load(path: &Path) -> Result<CollectorConfig, ConfigError> {
        let text = Document::read(path)?;
        CollectorConfig::parse(&text, path)
    }

    /// Parses `text`; `origin` names the file in messages. The other sections' contents are
    /// not looked at (their components check them), but an unknown section is refused.
    pub fn parse(text: &str, origin: &Path) -> Result<CollectorConfig, ConfigError> {
        let doc = Document::parse(text, origin);
        let c = CollectorConfig::check(&doc);
        doc.finish()?;
        Ok(c)
    }

    /// Checks `[collector]` of `doc`, reporting every problem to it. The result has the
    /// defaults wherever a value was refused; it is only meant to be used when `doc` has no
    /// problems.
    pub fn check(doc: &Document<'_>) -> CollectorConfig {
        let mut c = CollectorConfig::default();
        let Some(raw) = doc.section::<RawCollector>("collector") else { return c };
        let err = |span: Range<usize>, key: &str, reason: String| doc.report(span, format!("collector.{key}"), reason);
        let duration = |v: &Spanned<String>, key: &str, min: Duration| -> Option<Duration> {
            gpuledger_schemas::units::parse_duration_at_least(v.get_ref(), min).map_err(|reason| err(v.span(), key, reason)).ok()
        };
        if let Some(d) = raw.scrape_interval.as_ref().and_then(|v| duration(v, "scrape_interval", Duration::from_millis(10))) {
            c.scrape_interval = d;
        }
        if let Some(d) = raw.scrape_timeout.as_ref().and_then(|v| duration(v, "scrape_timeout", Duration::from_millis(10))) {
            c.scrape_timeout = d;
        }
        c.scrape_timeout = c.scrape_timeout.min(c.scrape_interval);
        if let Some(list) = raw.dcgm_endpoints {
            for v in &list {
                let url = v.get_ref().trim();
                let ok = reqwest::Url::parse(url).is_ok_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
                if !ok {
                    err(v.span(), "dcgm_endpoints", format!("{url:?} is not an http(s) URL such as http://10.0.0.5:9400/metrics"));
                }
            }
            c.dcgm_endpoints = list.into_iter().map(|v| v.into_inner().trim().to_owned()).collect();
        }
        if let Some(v) = raw.dcgm_discovery {
            c.dcgm_discovery = v;
        }
        let selector = |v: &Spanned<String>, key: &str, example: &str| -> Option<String> {
            let sel = v.get_ref().trim();
            if sel.is_empty() || sel.split(',').any(|term| term.trim().is_empty()) {
                err(v.span(), key, format!("{sel:?} is not a label selector such as {example}"));
                return None;
            }
            Some(sel.to_owned())
        };
        let port = |v: &Spanned<i64>, key: &str| -> Option<u16> {
            let p = u16::try_from(*v.get_ref()).ok().filter(|p| *p > 0);
            if p.is_none() {
                err(v.span(), key, format!("{} is not a TCP port (1-65535)", v.get_ref()));
            }
            p
        };
        if let Some(sel) = raw.dcgm_selector.as_ref().and_then(|v| selector(v, "dcgm_selector", "app=nvidia-dcgm-exporter")) {
            c.dcgm_selector = sel;
        }
        if let Some(p) = raw.dcgm_port.as_ref().and_then(|v| port(v, "dcgm_port")) {
            c.dcgm_port = p;
        }
        if let Some(v) = raw.unit_discovery {
            c.unit_discovery = v;
        }
        if let Some(sel) = raw.unit_selector.as_ref().and_then(|v| selector(v, "unit_selector", "app.kubernetes.io/name=vllm")) {
            c.unit_selector = Some(sel);
        }
        if let Some(p) = raw.unit_port.as_ref().and_then(|v| port(v, "unit_port")) {
            c.unit_port = p;
        }
        if let Some(d) = raw.discovery_interval.as_ref().and_then(|v| duration(v, "discovery_interval", Duration::from_millis(100))) {
            c.discovery_interval = d;
        }
        if let Some(v) = &raw.kubernetes {
            c.kubernetes = *v.get_ref();
        }
        if let Some(v) = &raw.listen {
            match v.get_ref().trim().parse() {
                Ok(a) => c.listen = a,
                Err(_) => err(v.span(), "listen", format!("{:?} is not an address:port such as 127.0.0.1:9464", v.get_ref())),
            }
        }
        if let Some(d) = raw.flush_interval.as_ref().and_then(|v| duration(v, "flush_interval", Duration::from_millis(100))) {
            c.flush_interval = d;
        }
        if let Some(v) = &raw.flush_rows {
            match usize::try_from(*v.get_ref()).ok().filter(|n| *n > 0) {
                Some(n) => c.flush_rows = n,
                None => err(v.span(), "flush_rows", format!("{} must be a positive number of rows", v.get_ref())),
            }
        }
        if let Some(v) = &raw.wal_dir {
            if v.get_ref().trim().is_empty() {
                err(v.span(), "wal_dir", "must not be empty".into());
            } else {
                c.wal_dir = PathBuf::from(v.get_ref().trim());
            }
        }
        if let Some(v) = &raw.compact_interval {
            if v.get_ref().trim() == "off" {
                c.compact_interval = None;
            } else if let Some(d) = duration(v, "compact_interval", Duration::from_secs(1)) {
                c.compact_interval = Some(d);
            }
        }
        if !c.kubernetes && c.dcgm_endpoints.is_empty() {
            let span = raw.kubernetes.as_ref().map_or(0..0, Spanned::span);
            err(span, "kubernetes", "kubernetes = false leaves nothing to collect: list dcgm_endpoints".into());
        }
        c
    }

    /// The WAL directory: `wal_dir` under the store unless absolute. A store in object
    /// storage has no local directory, so there a relative `wal_dir` is taken from the
    /// current directory.
    pub fn wal_path(&self, store: &StoreLocation) -> PathBuf {
        match store.local() {
            _ if self.wal_dir.is_absolute() => self.wal_dir.clone(),
            Some(root) => root.join(&self.wal_dir),
            None => self.wal_dir.clone(),
        }
    }

    /// Exporters are looked up through the API server only when both are enabled.
    pub fn discovers(&self) -> bool {
        self.kubernetes && self.dcgm_discovery
    }

    /// Pods are scraped for unit counters when the API server can list them, discovery is on
    /// and some counter is configured.
    pub fn discovers_unit_pods(&self) -> bool {
        self.kubernetes && self.unit_discovery && !self.unit_metrics.is_empty()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCollector {
    scrape_interval: Option<Spanned<String>>,
    scrape_timeout: Option<Spanned<String>>,
    dcgm_endpoints: Option<Vec<Spanned<String>>>,
    dcgm_discovery: Option<bool>,
    dcgm_selector: Option<Spanned<String>>,
    dcgm_port: Option<Spanned<i64>>,
    discovery_interval: Option<Spanned<String>>,
    kubernetes: Option<Spanned<bool>>,
    listen: Option<Spanned<String>>,
    flush_interval: Option<Spanned<String>>,
    flush_rows: Option<Spanned<i64>>,
    wal_dir: Option<Spanned<String>>,
    compact_interval: Option<Spanned<String>>,
    unit_discovery: Option<bool>,
    unit_selector: Option<Spanned<String>>,
    unit_port: Option<Spanned<i64>>,
}

// The duration spelling is shared with the server's `[serve]` section.
pub use gpuledger_schemas::units::{format_duration, parse_duration};

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<CollectorConfig, ConfigError> {
        CollectorConfig::parse(text, Path::new("g.toml"))
    }

    #[test]
    fn absent_section_gives_the_defaults() {
        assert_eq!(parse("[prices]\ndefault = 1.0\n").unwrap(), CollectorConfig::default());
    }

    #[test]
    fn every_key_of_the_issue_is_read() {
        let c = parse(
            "[prices]\ndefault = 1.0\n[collector]\nscrape_interval = \"15s\"\ndcgm_endpoints = [\"http://10.0.0.5:9400/metrics\"]\n\
             dcgm_discovery = false\ndcgm_selector = \"app.kubernetes.io/name=dcgm-exporter\"\ndcgm_port = 9401\nkubernetes = true\n\
             listen = \"0.0.0.0:9999\"\nflush_interval = \"2m\"\nwal_dir = \"/var/wal\"\n",
        )
        .unwrap();
        assert_eq!(c.scrape_interval, Duration::from_secs(15));
        assert_eq!(c.scrape_timeout, Duration::from_secs(10));
        assert_eq!(c.dcgm_endpoints, vec!["http://10.0.0.5:9400/metrics".to_owned()]);
        assert!(!c.dcgm_discovery && !c.discovers());
        assert_eq!(c.dcgm_selector, "app.kubernetes.io/name=dcgm-exporter");
        assert_eq!(c.dcgm_port, 9401);
        assert_eq!(c.listen.port(), 9999);
        assert_eq!(c.flush_interval, Duration::from_secs(120));
        let local = StoreLocation::Local(PathBuf::from("/store"));
        assert_eq!(c.wal_path(&local), PathBuf::from("/var/wal"));
        assert_eq!(CollectorConfig::default().wal_path(&local), PathBuf::from("/store/wal"));
        let remote = StoreLocation::parse("memory://wal-test/p").unwrap();
        assert_eq!(CollectorConfig::default().wal_path(&remote), PathBuf::from("wal"));
    }

    #[test]
    fn unit_pods_are_scraped_only_with_counters_configured_and_the_api_server_on() {
        let mut c = parse("[collector]\nunit_selector = \"app.kubernetes.io/name=vllm\"\nunit_port = 8080\n").unwrap();
        assert_eq!((c.unit_selector.as_deref(), c.unit_port), (Some("app.kubernetes.io/name=vllm"), 8080));
        assert!(!c.discovers_unit_pods(), "no counter configured: nothing to scrape for");
        c.unit_metrics = vec!["vllm:generation_tokens_total".into()];
        assert!(c.discovers_unit_pods());
        c.unit_discovery = false;
        assert!(!c.discovers_unit_pods());
        assert_eq!(CollectorConfig::default().unit_port, 8000);
    }

    #[test]
    fn compaction_runs_hourly_unless_set_or_turned_off() {
        assert_eq!(CollectorConfig::default().compact_interval, Some(Duration::from_secs(3600)));
        assert_eq!(parse("[collector]\ncompact_interval = \"15m\"\n").unwrap().compact_interval, Some(Duration::from_secs(900)));
        assert_eq!(parse("[collector]\ncompact_interval = \"off\"\n").unwrap().compact_interval, None);
        assert_error("[collector]\ncompact_interval = \"never\"\n", 2, "collector.compact_interval", &["not a duration"]);
    }

    #[test]
    fn scrape_timeout_never_exceeds_the_interval() {
        let c = parse("[collector]\nscrape_interval = \"2s\"\n").unwrap();
        assert_eq!(c.scrape_timeout, Duration::from_secs(2));
    }

    fn assert_error(text: &str, line: usize, key: &str, words: &[&str]) {
        let e = parse(text).expect_err("must be refused").to_string();
        assert!(e.starts_with(&format!("g.toml:{line}: {key}")), "{e}");
        for w in words {
            assert!(e.contains(w), "{e:?} lacks {w:?}");
        }
    }

    #[test]
    fn bad_values_are_located() {
        assert_error("[collector]\n\nscrape_interval = \"30\"\n", 3, "collector.scrape_interval", &["\"30\"", "not a duration"]);
        assert_error("[collector]\ndcgm_endpoints = [\"http://a:9400/metrics\",\n  \"10.0.0.5:9400\"]\n", 3, "collector.dcgm_endpoints", &["10.0.0.5:9400", "http"]);
        assert_error("[collector]\ndcgm_port = 70000\n", 2, "collector.dcgm_port", &["70000"]);
        assert_error("[collector]\nlisten = \"localhost\"\n", 2, "collector.listen", &["address:port"]);
        assert_error("[collector]\nflush_interval = \"0s\"\n", 2, "collector.flush_interval", &["longer than zero"]);
        assert_error("[collector]\nscrape_intervall = \"30s\"\n", 2, "collector.scrape_intervall", &["unknown field", "did you mean `scrape_interval`?"]);
        assert_error("[collector]\ndcgm_selector = \"\"\n", 2, "collector.dcgm_selector", &["label selector"]);
        assert_error("[collector]\nunit_selector = \"app=vllm,\"\n", 2, "collector.unit_selector", &["label selector"]);
        assert_error("[collector]\nunit_port = 0\n", 2, "collector.unit_port", &["TCP port"]);
        assert_error("[collector]\nkubernetes = false\n", 2, "collector.kubernetes", &["nothing to collect"]);
        assert_error("[collector]\nlisten = \"127.0.0.1:1\"\nlisten = \"127.0.0.1:2\"\n", 3, "collector", &["duplicate key", "listen"]);
    }

    #[test]
    fn every_problem_of_the_section_is_reported() {
        let e = parse("[collector]\nscrape_interval = \"30\"\ndcgm_port = 0\nlisten = \"x\"\nflush_rows = \"many\"\n").unwrap_err().to_string();
        let keys: Vec<&str> = e.lines().map(|l| l.split(": ").nth(1).unwrap_or_default()).collect();
        assert_eq!(keys, ["collector.scrape_interval", "collector.dcgm_port", "collector.listen", "collector.flush_rows"], "{e}");
    }

    #[test]
    fn durations_round_trip() {
        for (s, ms) in [("250ms", 250), ("30s", 30_000), ("5m", 300_000), ("1h", 3_600_000), ("2d", 172_800_000)] {
            let d = parse_duration(s).unwrap();
            assert_eq!(d.as_millis(), ms);
            assert_eq!(format_duration(d), s);
        }
        for bad in ["", "30", "s", "1.5s", "-1s", "5 m", "5w"] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
    }
}
