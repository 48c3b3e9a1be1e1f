//! The `[serve]` section of `gpuledger.toml`: listen addresses, limits, users, TLS.
//!
//! Errors name the file, the line and the key, like the ledger's and the collector's:
//! `gpuledger.toml:12: serve.users[0].password_env: GPULEDGER_GRAFANA_PASSWORD is not set`.
//! Secrets are resolved here, once, and never printed: [`Secret`] has no readable `Debug`.

use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuledger_schemas::units::{format_duration, parse_bytes, parse_duration};
use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{}:{line}: {key}: {reason}", path.display())]
    Invalid { path: PathBuf, line: usize, key: String, reason: String },
}

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
    /// Most SQL connections open at once; more are refused.
    pub max_connections: usize,
    pub users: Vec<User>,
    /// PEM certificate chain and PKCS#8 key: with both, the SQL endpoint speaks TLS.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
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
            max_connections: 64,
            users: Vec::new(),
            tls_cert: None,
            tls_key: None,
        }
    }
}

#[derive(Deserialize)]
struct RawFile {
    serve: Option<RawServe>,
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
    max_connections: Option<Spanned<i64>>,
    tls_cert: Option<Spanned<String>>,
    tls_key: Option<Spanned<String>>,
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
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io { path: path.to_path_buf(), source })?;
        ServeConfig::parse(&text, path, &|name| std::env::var(name).ok())
    }

    /// Parses `text` (`origin` names it in messages); `env` looks up environment variables.
    pub fn parse(text: &str, origin: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<ServeConfig, ConfigError> {
        let line = |offset: usize| text[..offset.min(text.len())].bytes().filter(|b| *b == b'\n').count() + 1;
        let err = |span: Range<usize>, key: &str, reason: String| ConfigError::Invalid { path: origin.to_path_buf(), line: line(span.start), key: format!("serve.{key}"), reason };
        let file: RawFile = toml::from_str(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            ConfigError::Invalid { path: origin.to_path_buf(), line: line(span.start), key: "serve".into(), reason: e.message().trim().to_owned() }
        })?;
        let mut c = ServeConfig::default();
        let Some(raw) = file.serve else {
            c.http_token = env(&c.http_token_env).filter(|t| !t.is_empty()).map(Secret::new);
            return Ok(c);
        };
        let addr = |v: &Spanned<String>, key: &str| -> Result<SocketAddr, ConfigError> {
            v.get_ref().trim().parse().map_err(|_| err(v.span(), key, format!("{:?} is not an address:port such as 127.0.0.1:5432", v.get_ref())))
        };
        let duration = |v: &Spanned<String>, key: &str, min: Duration| -> Result<Duration, ConfigError> {
            let d = parse_duration(v.get_ref()).map_err(|reason| err(v.span(), key, reason))?;
            if d < min {
                return Err(err(v.span(), key, format!("{} is shorter than the minimum {}", v.get_ref(), format_duration(min))));
            }
            Ok(d)
        };
        if let Some(v) = &raw.pg_listen {
            c.pg_listen = addr(v, "pg_listen")?;
        }
        if let Some(v) = &raw.http_listen {
            c.http_listen = addr(v, "http_listen")?;
        }
        if let Some(v) = &raw.http_token_env {
            let name = v.get_ref().trim();
            if name.is_empty() || name.contains(|ch: char| !(ch.is_ascii_alphanumeric() || ch == '_')) {
                return Err(err(v.span(), "http_token_env", format!("{name:?} is not an environment variable name")));
            }
            c.http_token_env = name.to_owned();
        }
        c.http_token = env(&c.http_token_env).filter(|t| !t.is_empty()).map(Secret::new);
        if let Some(v) = &raw.query_timeout {
            c.query_timeout = duration(v, "query_timeout", Duration::from_millis(10))?;
        }
        if let Some(v) = &raw.refresh_interval {
            c.refresh_interval = duration(v, "refresh_interval", Duration::from_millis(100))?;
        }
        if let Some(v) = &raw.memory_limit {
            c.memory_limit = parse_bytes(v.get_ref()).map_err(|reason| err(v.span(), "memory_limit", reason))?;
            if c.memory_limit < 1 << 20 {
                return Err(err(v.span(), "memory_limit", format!("{} is below the minimum 1MiB", v.get_ref())));
            }
        }
        if let Some(v) = &raw.memory_total {
            c.memory_total = parse_bytes(v.get_ref()).map_err(|reason| err(v.span(), "memory_total", reason))?;
        }
        if raw.memory_total.is_none() {
            // Unset: at least one statement's worth.
            c.memory_total = c.memory_total.max(c.memory_limit);
        } else if c.memory_total < c.memory_limit {
            let span = raw.memory_total.as_ref().map_or(0..0, Spanned::span);
            return Err(err(span, "memory_total", format!("{} MiB is less than memory_limit ({} MiB): one statement could never use its limit", c.memory_total >> 20, c.memory_limit >> 20)));
        }
        if let Some(v) = &raw.max_connections {
            c.max_connections = usize::try_from(*v.get_ref()).ok().filter(|n| *n > 0).ok_or_else(|| err(v.span(), "max_connections", format!("{} must be a positive number", v.get_ref())))?;
        }
        let path = |v: &Spanned<String>, key: &str| -> Result<PathBuf, ConfigError> {
            let p = PathBuf::from(v.get_ref().trim());
            if !p.is_file() {
                return Err(err(v.span(), key, format!("{} is not a readable file", p.display())));
            }
            Ok(p)
        };
        c.tls_cert = raw.tls_cert.as_ref().map(|v| path(v, "tls_cert")).transpose()?;
        c.tls_key = raw.tls_key.as_ref().map(|v| path(v, "tls_key")).transpose()?;
        if c.tls_cert.is_some() != c.tls_key.is_some() {
            let span = raw.tls_cert.as_ref().or(raw.tls_key.as_ref()).map_or(0..0, Spanned::span);
            return Err(err(span, "tls_cert", "TLS needs both tls_cert and tls_key".into()));
        }
        for (i, user) in raw.users.unwrap_or_default().iter().enumerate() {
            let key = |k: &str| format!("users[{i}].{k}");
            let u = user.get_ref();
            let name = u.name.get_ref().trim();
            if name.is_empty() {
                return Err(err(u.name.span(), &key("name"), "must not be empty".into()));
            }
            if c.users.iter().any(|x| x.name == name) {
                return Err(err(u.name.span(), &key("name"), format!("user {name:?} is defined twice")));
            }
            let password = match (&u.password, &u.password_env) {
                (Some(_), Some(v)) => return Err(err(v.span(), &key("password_env"), "give password or password_env, not both".into())),
                (None, None) => return Err(err(user.span(), &key("password_env"), format!("user {name:?} has no password: set password_env (or password)"))),
                (Some(v), None) => v.get_ref().clone(),
                (None, Some(v)) => env(v.get_ref().trim()).ok_or_else(|| err(v.span(), &key("password_env"), format!("environment variable {} is not set", v.get_ref().trim())))?,
            };
            if password.is_empty() {
                let span = u.password.as_ref().or(u.password_env.as_ref()).map_or(0..0, Spanned::span);
                return Err(err(span, &key("password"), "an empty password is refused".into()));
            }
            c.users.push(User { name: name.to_owned(), password: Secret::new(password) });
        }
        Ok(c)
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
        assert_eq!(c.http_token.as_ref().map(Secret::expose), Some("t0k"));
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
max_connections = 8
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
        assert_eq!(c.max_connections, 8);
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
        assert!(e.starts_with("g.toml:2: serve:") && e.contains("bogus"), "{e}");
        let e = error("[serve]\n[[serve.users]]\nname = \"a\"\npassword = \"x\"\n[[serve.users]]\nname = \"a\"\npassword = \"y\"\n", &[]);
        assert!(e.contains("serve.users[1].name") && e.contains("twice"), "{e}");
        let c = parse_with("[serve]\n[[serve.users]]\nname = \"a\"\npassword = \"hunter2\"\n", &[]).unwrap();
        assert!(!format!("{c:?}").contains("hunter2"));
    }
}
