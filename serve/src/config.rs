//! The `[serve]` section of `gpuledger.toml`: listen addresses, limits, users, TLS.
//!
//! Checked by the one loader of `gpuledger-config`, beside the other sections: every problem is
//! reported with the file, the line and the key,
//! `gpuledger.toml:12: serve.users[0].password_env: GPULEDGER_GRAFANA_PASSWORD is not set`.
//! Secrets are resolved here, once, and never printed: [`Secret`] has no readable `Debug`.

use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuledger_config::Document;
use gpuledger_schemas::units::parse_bytes;
use serde::Deserialize;
use toml::Spanned;

pub use gpuledger_config::ConfigError;

/// A password or token. Its `Debug` and `Display` print a placeholder so that no log line,
/// error or panic message ever carries it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// One login of the SQL endpoint.
#[derive(Debug, Clone)]
pub struct User {
    pub name: String,
    pub password: Secret,
}

/// Everything `gpuledger serve` reads from `[serve]`.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// PostgreSQL wire protocol listener.
    pub pg_listen: SocketAddr,
    /// HTTP API listener.
    pub http_listen: SocketAddr,
    /// The variable holding the HTTP API's bearer token.
    pub http_token_env: String,
    /// The bearer token, read from `http_token_env` (None when the variable is unset).
    pub http_token: Option<Secret>,
    /// Longest a statement may run, result transfer included.
    pub query_timeout: Duration,
    /// Most memory one statement's operators may hold (sorts, joins, aggregates).
    pub memory_limit: u64,
    /// Most memory all statements together may hold.
    pub memory_total: u64,
    /// How long a table's file listing is reused before the directory is read again: the delay
    /// after which new Parquet files show up.
    pub refresh_interval: Duration,
    /// Bytes of query answers kept to send again to clients asking the same within
    /// `refresh_interval` (see `results`); 0 keeps none.
    pub result_cache: u64,
    /// Most SQL connections logged in at once; more are refused.
    pub max_connections: usize,
    /// Most SQL connections at once that have not logged in yet (they do not count in
    /// `max_connections`); more are refused.
    pub max_unauthenticated: usize,
    /// How long a SQL connection may take to log in before it is closed.
    pub startup_timeout: Duration,
    /// Statements one user (or the HTTP API, as one) may run at once; more wait their turn
    /// within their time limit.
    pub max_statements_per_user: usize,
    /// Worker threads of the runtime statements run on, apart from the threads that accept
    /// connections and answer the HTTP API. 0: one per CPU.
    pub statement_threads: usize,
    /// Most HTTP connections open at once: past it, new ones wait in the listen queue until
    /// one closes, so the server's file descriptors are bounded by this, not by the kernel.
    pub http_max_connections: usize,
    /// An HTTP connection that neither sends nor receives a byte for this long is closed: a
    /// client that never finishes its headers, or an idle keep-alive connection. Longer than
    /// `query_timeout`, so that a slow answer is never cut.
    pub http_idle_timeout: Duration,
    pub users: Vec<User>,
    /// PEM certificate chain and PKCS#8 key: with both, the SQL endpoint speaks TLS.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    /// Refuse SQL connections that do not negotiate TLS (needs `tls_cert` and `tls_key`).
    pub require_tls: bool,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            pg_listen: SocketAddr::from(([127, 0, 0, 1], 5432)),
            http_listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            http_token_env: "GPULEDGER_API_TOKEN".into(),
            http_token: None,
            query_timeout: Duration::from_secs(60),
            memory_limit: 2 << 30,
            memory_total: 4 << 30,
            refresh_interval: Duration::from_secs(5),
            result_cache: 256 << 20,
            max_connections: 64,
            max_unauthenticated: 1024,
            startup_timeout: Duration::from_secs(10),
            max_statements_per_user: 8,
            statement_threads: 0,
            http_max_connections: 2048,
            http_idle_timeout: Duration::from_secs(90),
            users: Vec::new(),
            tls_cert: None,
            tls_key: None,
            require_tls: false,
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServe {
    pg_listen: Option<Spanned<String>>,
    http_listen: Option<Spanned<String>>,
    http_token_env: Option<Spanned<String>>,
    query_timeout: Option<Spanned<String>>,
    memory_limit: Option<Spanned<String>>,
    memory_total: Option<Spanned<String>>,
    refresh_interval: Option<Spanned<String>>,
    result_cache: Option<Spanned<String>>,
    max_connections: Option<Spanned<i64>>,
    max_unauthenticated: Option<Spanned<i64>>,
    startup_timeout: Option<Spanned<String>>,
    max_statements_per_user: Option<Spanned<i64>>,
    statement_threads: Option<Spanned<i64>>,
    http_max_connections: Option<Spanned<i64>>,
    http_idle_timeout: Option<Spanned<String>>,
    tls_cert: Option<Spanned<String>>,
    tls_key: Option<Spanned<String>>,
    require_tls: Option<Spanned<bool>>,
    users: Option<Vec<Spanned<RawUser>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUser {
    name: Spanned<String>,
    password: Option<Spanned<String>>,
    password_env: Option<Spanned<String>>,
}

impl ServeConfig {
    /// Reads `[serve]` from the file at `path`; secrets come from the process environment.
    pub fn load(path: &Path) -> Result<ServeConfig, ConfigError> {
        let text = Document::read(path)?;
        ServeConfig::parse(&text, path, &|name| std::env::var(name).ok())
    }

    /// Parses `text` (`origin` names it in messages); `env` looks up environment variables.
    /// The other sections' contents are not looked at, but an unknown section is refused.
    pub fn parse(text: &str, origin: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<ServeConfig, ConfigError> {
        let doc = Document::parse(text, origin);
        let c = ServeConfig::check(&doc, env);
        doc.finish()?;
        Ok(c)
    }

    /// Checks `[serve]` of `doc`, reporting every problem to it; secrets are read with `env`
    /// (and a variable that is not set is a problem). The result has the defaults wherever a
    /// value was refused; it is only meant to be used when `doc` has no problems.
    pub fn check(doc: &Document<'_>, env: &dyn Fn(&str) -> Option<String>) -> ServeConfig {
        let mut c = ServeConfig::default();
        let Some(raw) = doc.section::<RawServe>("serve") else {
            c.http_token = env(&c.http_token_env).filter(|t| !t.is_empty()).map(Secret::new);
            return c;
        };
        let err = |span: Range<usize>, key: &str, reason: String| doc.report(span, format!("serve.{key}"), reason);
        let addr = |v: &Spanned<String>, key: &str| -> Option<SocketAddr> {
            let parsed = v.get_ref().trim().parse().ok();
            if parsed.is_none() {
                err(v.span(), key, format!("{:?} is not an address:port such as 127.0.0.1:5432", v.get_ref()));
            }
            parsed
        };
        let duration = |v: &Spanned<String>, key: &str, min: Duration| -> Option<Duration> {
            gpuledger_schemas::units::parse_duration_at_least(v.get_ref(), min).map_err(|reason| err(v.span(), key, reason)).ok()
        };
        let bytes = |v: &Spanned<String>, key: &str| -> Option<u64> {
            parse_bytes(v.get_ref()).map_err(|reason| err(v.span(), key, reason)).ok()
        };
        let positive = |v: &Spanned<i64>, key: &str| -> Option<usize> {
            let n = usize::try_from(*v.get_ref()).ok().filter(|n| *n > 0);
            if n.is_none() {
                err(v.span(), key, format!("{} must be a positive number", v.get_ref()));
            }
            n
        };
        if let Some(a) = raw.pg_listen.as_ref().and_then(|v| addr(v, "pg_listen")) {
            c.pg_listen = a;
        }
        if let Some(a) = raw.http_listen.as_ref().and_then(|v| addr(v, "http_listen")) {
            c.http_listen = a;
        }
        if let Some(v) = &raw.http_token_env {
            let name = v.get_ref().trim();
            if name.is_empty() || name.contains(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_')) {
                err(v.span(), "http_token_env", format!("{name:?} is not an environment variable name"));
            } else {
                c.http_token_env = name.to_owned();
            }
        }
        c.http_token = env(&c.http_token_env).filter(|t| !t.is_empty()).map(Secret::new);
        if let Some(d) = raw.query_timeout.as_ref().and_then(|v| duration(v, "query_timeout", Duration::from_millis(10))) {
            c.query_timeout = d;
        }
        if let Some(d) = raw.refresh_interval.as_ref().and_then(|v| duration(v, "refresh_interval", Duration::from_millis(100))) {
            c.refresh_interval = d;
        }
        if let Some(v) = &raw.memory_limit {
            match bytes(v, "memory_limit") {
                Some(n) if n < 1 << 20 => err(v.span(), "memory_limit", format!("{} is below the minimum 1MiB", v.get_ref())),
                Some(n) => c.memory_limit = n,
                None => {}
            }
        }
        // "0" (or "off") keeps no answers.
        match &raw.result_cache {
            Some(v) if matches!(v.get_ref().trim(), "0" | "off") => c.result_cache = 0,
            Some(v) => {
                if let Some(n) = bytes(v, "result_cache") {
                    c.result_cache = n;
                }
            }
            None => {}
        }
        let total = raw.memory_total.as_ref().and_then(|v| bytes(v, "memory_total"));
        match (&raw.memory_total, total) {
            // Unset: at least one statement's worth.
            (None, _) => c.memory_total = c.memory_total.max(c.memory_limit),
            (Some(v), Some(n)) if n < c.memory_limit => err(
                v.span(),
                "memory_total",
                format!("{} MiB is less than memory_limit ({} MiB): one statement could never use its limit", n >> 20, c.memory_limit >> 20),
            ),
            (Some(_), Some(n)) => c.memory_total = n,
            (Some(_), None) => {}
        }
        if let Some(n) = raw.max_connections.as_ref().and_then(|v| positive(v, "max_connections")) {
            c.max_connections = n;
        }
        if let Some(n) = raw.max_unauthenticated.as_ref().and_then(|v| positive(v, "max_unauthenticated")) {
            c.max_unauthenticated = n;
        }
        if let Some(d) = raw.startup_timeout.as_ref().and_then(|v| duration(v, "startup_timeout", Duration::from_millis(100))) {
            c.startup_timeout = d;
        }
        if let Some(n) = raw.max_statements_per_user.as_ref().and_then(|v| positive(v, "max_statements_per_user")) {
            c.max_statements_per_user = n;
        }
        if let Some(v) = &raw.statement_threads {
            match usize::try_from(*v.get_ref()) {
                Ok(n) => c.statement_threads = n,
                Err(_) => err(v.span(), "statement_threads", format!("{} must be 0 (one per CPU) or a positive number", v.get_ref())),
            }
        }
        if let Some(n) = raw.http_max_connections.as_ref().and_then(|v| positive(v, "http_max_connections")) {
            c.http_max_connections = n;
        }
        match &raw.http_idle_timeout {
            Some(v) => {
                if let Some(d) = duration(v, "http_idle_timeout", Duration::from_millis(100)) {
                    c.http_idle_timeout = d;
                }
            }
            // Unset: past the query timeout, so that an answer still being computed is not cut.
            None => c.http_idle_timeout = c.http_idle_timeout.max(c.query_timeout + Duration::from_secs(30)),
        }
        let path = |v: &Spanned<String>, key: &str| -> Option<PathBuf> {
            let p = PathBuf::from(v.get_ref().trim());
            if !p.is_file() {
                err(v.span(), key, format!("{} is not a readable file", p.display()));
                return None;
            }
            Some(p)
        };
        c.tls_cert = raw.tls_cert.as_ref().and_then(|v| path(v, "tls_cert"));
        c.tls_key = raw.tls_key.as_ref().and_then(|v| path(v, "tls_key"));
        if let Some(v) = &raw.require_tls {
            c.require_tls = *v.get_ref();
            if c.require_tls && (raw.tls_cert.is_none() || raw.tls_key.is_none()) {
                err(v.span(), "require_tls", "require_tls needs tls_cert and tls_key: without them no client could connect".into());
            }
        }
        if raw.tls_cert.is_some() != raw.tls_key.is_some() {
            let span = raw.tls_cert.as_ref().or(raw.tls_key.as_ref()).map_or(0..0, Spanned::span);
            err(span, "tls_cert", "TLS needs both tls_cert and tls_key".into());
        }
        for (i, user) in raw.users.unwrap_or_default().iter().enumerate() {
            let key = |k: &str| format!("users[{i}].{k}");
            let u = user.get_ref();
            let name = u.name.get_ref().trim();
            if name.is_empty() {
                err(u.name.span(), &key("name"), "must not be empty".into());
                continue;
            }
            if c.users.iter().any(|x| x.name == name) {
                err(u.name.span(), &key("name"), format!("user {name:?} is defined twice"));
                continue;
            }
            let password = match (&u.password, &u.password_env) {
                (Some(_), Some(v)) => {
                    err(v.span(), &key("password_env"), "give password or password_env, not both".into());
                    continue;
                }
                (None, None) => {
                    err(user.span(), &key("password_env"), format!("user {name:?} has no password: set password_env (or password)"));
                    continue;
                }
                (Some(v), None) => v.get_ref().clone(),
                (None, Some(v)) => match env(v.get_ref().trim()) {
                    Some(p) => p,
                    None => {
                        err(v.span(), &key("password_env"), format!("environment variable {} is not set", v.get_ref().trim()));
                        continue;
                    }
                },
            };
            if password.is_empty() {
                let span = u.password.as_ref().or(u.password_env.as_ref()).map_or(0..0, Spanned::span);
                err(span, &key("password"), "an empty password is refused".into());
                continue;
            }
            c.users.push(User { name: name.to_owned(), password: Secret::new(password) });
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_with(text: &str, vars: &[(&str, &str)]) -> Result<ServeConfig, ConfigError> {
        let vars: Vec<(String, String)> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        ServeConfig::parse(text, Path::new("g.toml"), &move |name| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()))
    }

    fn error(text: &str, vars: &[(&str, &str)]) -> String {
        parse_with(text, vars).unwrap_err().to_string()
    }

    #[test]
    fn absent_section_gives_defaults_and_still_reads_the_token() {
        let c = parse_with("[accounting]\nteam_label = \"team\"\n", &[("GPULEDGER_API_TOKEN", "t0k")]).unwrap();
        assert_eq!(c.pg_listen.to_string(), "127.0.0.1:5432");
        assert_eq!(c.http_listen.to_string(), "127.0.0.1:8080");
        assert_eq!(c.query_timeout, Duration::from_secs(60));
        assert_eq!(c.memory_limit, 2 << 30);
        assert_eq!((c.http_max_connections, c.http_idle_timeout), (2048, Duration::from_secs(90)));
        assert_eq!(c.http_token.as_ref().map(Secret::expose), Some("t0k"));
        // Unset, the idle timeout stays past a long query timeout: a slow answer is never cut.
        let c = parse_with("[serve]\nquery_timeout = \"5m\"\n", &[]).unwrap();
        assert_eq!(c.http_idle_timeout, Duration::from_secs(330));
        assert!(error("[serve]\nhttp_max_connections = 0\n", &[]).contains("http_max_connections: 0 must be a positive number"));
        assert!(error("[serve]\nmax_statements_per_user = 0\n", &[]).contains("max_statements_per_user: 0 must be a positive number"));
        assert!(error("[serve]\nstatement_threads = -1\n", &[]).contains("statement_threads: -1 must be 0"));
        assert!(error("[serve]\nrequire_tls = true\n", &[]).contains("require_tls: require_tls needs tls_cert and tls_key"));
        assert!(c.users.is_empty());
    }

    #[test]
    fn every_key_is_read() {
        let text = r#"
[serve]
pg_listen = "0.0.0.0:6432"
http_listen = "127.0.0.1:9090"
http_token_env = "MY_TOKEN"
query_timeout = "5s"
memory_limit = "512MiB"
memory_total = "1GiB"
refresh_interval = "1s"
result_cache = "0"
max_connections = 8
http_max_connections = 100
http_idle_timeout = "10s"
max_unauthenticated = 50
startup_timeout = "3s"
max_statements_per_user = 3
statement_threads = 6
[[serve.users]]
name = "grafana"
password_env = "GRAFANA_PW"
[[serve.users]]
name = "analyst"
password = "inline"
"#;
        let c = parse_with(text, &[("MY_TOKEN", "abc"), ("GRAFANA_PW", "s3cret")]).unwrap();
        assert_eq!(c.pg_listen.to_string(), "0.0.0.0:6432");
        assert_eq!(c.http_listen.port(), 9090);
        assert_eq!(c.http_token.unwrap().expose(), "abc");
        assert_eq!(c.query_timeout, Duration::from_secs(5));
        assert_eq!(c.memory_limit, 512 << 20);
        assert_eq!(c.memory_total, 1 << 30);
        assert_eq!(c.refresh_interval, Duration::from_secs(1));
        assert_eq!(c.result_cache, 0);
        assert_eq!(c.max_connections, 8);
        assert_eq!(c.http_max_connections, 100);
        assert_eq!(c.http_idle_timeout, Duration::from_secs(10));
        assert_eq!((c.max_unauthenticated, c.startup_timeout), (50, Duration::from_secs(3)));
        assert_eq!((c.max_statements_per_user, c.statement_threads), (3, 6));
        let users: Vec<(&str, &str)> = c.users.iter().map(|u| (u.name.as_str(), u.password.expose())).collect();
        assert_eq!(users, [("grafana", "s3cret"), ("analyst", "inline")]);
    }

    #[test]
    fn the_example_configuration_documents_the_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gpuledger.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        let c = ServeConfig::parse(&text, &path, &|name| (name == "GPULEDGER_GRAFANA_PASSWORD").then(|| "pw".to_string())).unwrap();
        let d = ServeConfig::default();
        assert_eq!((c.pg_listen, c.http_listen, &c.http_token_env), (d.pg_listen, d.http_listen, &d.http_token_env));
        assert_eq!((c.query_timeout, c.memory_limit, c.memory_total, c.refresh_interval, c.max_connections), (d.query_timeout, d.memory_limit, d.memory_total, d.refresh_interval, d.max_connections));
        assert_eq!((c.http_max_connections, c.http_idle_timeout), (d.http_max_connections, d.http_idle_timeout));
        assert_eq!((c.max_unauthenticated, c.startup_timeout), (d.max_unauthenticated, d.startup_timeout));
        assert_eq!((c.max_statements_per_user, c.statement_threads), (d.max_statements_per_user, d.statement_threads));
        assert_eq!(c.users.iter().map(|u| u.name.as_str()).collect::<Vec<_>>(), ["grafana"]);
    }

    #[test]
    fn errors_name_line_and_key_and_never_the_secret() {
        let e = error("[serve]\nquery_timeout = \"60\"\n", &[]);
        assert!(e.starts_with("g.toml:2: serve.query_timeout: "), "{e}");
        let e = error("[serve]\nmemory_limit = \"lots\"\n", &[]);
        assert!(e.starts_with("g.toml:2: serve.memory_limit: ") && e.contains("not a size"), "{e}");
        let e = error("[serve]\n\n[[serve.users]]\nname = \"g\"\npassword_env = \"NOPE\"\n", &[]);
        assert!(e.starts_with("g.toml:5: serve.users[0].password_env: environment variable NOPE is not set"), "{e}");
        let e = error("[serve]\nmemory_limit = \"4GiB\"\nmemory_total = \"2GiB\"\n", &[]);
        assert!(e.starts_with("g.toml:3: serve.memory_total: ") && e.contains("less than memory_limit"), "{e}");
        let e = error("[serve]\npg_listen = \"localhost\"\n", &[]);
        assert!(e.starts_with("g.toml:2: serve.pg_listen:"), "{e}");
        let e = error("[serve]\nbogus = 1\n", &[]);
        assert!(e.starts_with("g.toml:2: serve.bogus: unknown field"), "{e}");
        let e = error("[serve]\n[[serve.users]]\nname = \"a\"\npassword = \"x\"\n[[serve.users]]\nname = \"a\"\npassword = \"y\"\n", &[]);
        assert!(e.contains("serve.users[1].name") && e.contains("twice"), "{e}");
        let c = parse_with("[serve]\n[[serve.users]]\nname = \"a\"\npassword = \"hunter2\"\n", &[]).unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
