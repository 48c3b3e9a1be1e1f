//! A running `gpuledger serve` for tests, and the real clients that talk to it: psql (the
//! PostgreSQL client) and plain HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::util::{PATIENCE, bin, run};

pub const PASSWORD: &str = "grafana-s3cret";
pub const TOKEN: &str = "api-t0ken";

/// A simulated store with its derived tables and the config the simulator's cluster is priced
/// with, built once per test binary (8 GPUs, 2 days: two months, runs of every outcome).
pub fn demo_store() -> &'static (PathBuf, PathBuf) {
    static DEMO: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    DEMO.get_or_init(|| {
        // Under cargo's scratch directory for integration tests (one per process: nextest runs many).
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("serving-demo-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        run(&["demo", "--out", &dir.display().to_string(), "--gpus", "8", "--days", "2"], 0);
        (dir.join("store"), dir.join("gpuledger.toml"))
    })
}

/// The demo's configuration plus a `[serve]` section (`extra` lines appended to it).
pub fn serve_config(dir: &Path, base: &Path, extra: &str) -> PathBuf {
    let mut text = without_serve_sections(&std::fs::read_to_string(base).unwrap());
    // A test that is not about the time limit must not meet it on a busy machine.
    let timeout = if extra.contains("query_timeout") { String::new() } else { format!("query_timeout = \"{}s\"\n", PATIENCE.as_secs()) };
    text.push_str(&format!(
        "\n[serve]\npg_listen = \"127.0.0.1:0\"\nhttp_listen = \"127.0.0.1:0\"\n{timeout}{extra}\n[[serve.users]]\nname = \"grafana\"\npassword_env = \"TEST_GRAFANA_PASSWORD\"\n"
    ));
    let path = dir.join("serve.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// `base` without its `[serve]` and `[[serve.users]]` tables (the example configuration has
/// them), so the test's own section is the only one.
fn without_serve_sections(base: &str) -> String {
    let mut keep = true;
    let mut out = String::new();
    for line in base.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            let name = t.trim_start_matches('[').trim_start();
            keep = !(name.starts_with("serve]") || name.starts_with("serve.") || name.starts_with("serve ]"));
        }
        if keep {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `gpuledger serve` in the background; killed on drop.
pub struct Server {
    child: Child,
    pub pg_port: u16,
    pub http_port: u16,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    /// Starts the server and waits for its ready line (both ports bound).
    pub fn start(store: &Path, config: &Path) -> Server {
        let mut child = bin()
            .args(["serve", "--store", &store.display().to_string(), "--config", &config.display().to_string()])
            .env("TEST_GRAFANA_PASSWORD", PASSWORD)
            .env("GPULEDGER_API_TOKEN", TOKEN)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let reader = {
            let mut pipe = child.stderr.take().unwrap();
            let sink = stderr.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            })
        };
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        if line.is_empty() {
            // It exited before binding: the reader ends at the pipe's end, with the whole message.
            let _ = child.wait();
            let _ = reader.join();
        }
        let port = |key: &str| -> u16 {
            let addr = line.split_whitespace().find_map(|w| w.strip_prefix(key)).unwrap_or_else(|| panic!("no {key} in ready line {line:?}; stderr: {}", stderr.lock().unwrap()));
            addr.rsplit(':').next().unwrap().parse().unwrap()
        };
        let (pg_port, http_port) = (port("sql="), port("http="));
        Server { child, pg_port, http_port, stderr }
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// psql with `args` as the grafana user and `password`; (exit code, stdout, stderr).
    pub fn psql_as(&self, password: &str, args: &[&str]) -> (i32, String, String) {
        let out = Command::new("psql")
            .args(["-h", "127.0.0.1", "-p", &self.pg_port.to_string(), "-U", "grafana", "-d", "datafusion", "-X", "-v", "ON_ERROR_STOP=1"])
            .args(args)
            .env("PGPASSWORD", password)
            .env("PGCONNECT_TIMEOUT", PATIENCE.as_secs().to_string())
            .env_remove("PGSERVICE")
            .output()
            .expect("psql runs (Debian package postgresql-client)");
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// Runs `sql` through psql and returns its CSV output (header first); Err carries psql's
    /// error text.
    pub fn psql_csv(&self, sql: &str) -> Result<Vec<Vec<String>>, String> {
        let (code, out, err) = self.psql_as(PASSWORD, &["--csv", "-c", sql]);
        if code != 0 {
            return Err(err);
        }
        Ok(parse_csv(&out))
    }

    /// A GET with the right token (or `token`), returning (status, content type, body).
    pub fn get(&self, path: &str, token: Option<&str>) -> (u16, String, String) {
        http_get(self.http_port, path, token)
    }
}

impl Server {
    /// Sends SIGTERM and waits for the process to end (at most PATIENCE: None if it has not).
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let end = Instant::now() + PATIENCE;
        while Instant::now() < end {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.1 GET (Connection: close), so tests do not need an HTTP client crate.
pub fn http_get(port: u16, path: &str, token: Option<&str>) -> (u16, String, String) {
    let (status, head, body) = http_request(port, path, token.map(|t| format!("Bearer {t}")).as_deref());
    let content_type = head.lines().find_map(|l| l.strip_prefix("content-type:").map(|v| v.trim().to_owned())).unwrap_or_default();
    (status, content_type, body)
}

/// A GET with `authorization` as the raw header value: (status, lower-cased head, body).
pub fn http_request(port: u16, path: &str, authorization: Option<&str>) -> (u16, String, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(PATIENCE)).unwrap();
    let auth = authorization.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let head = head.to_ascii_lowercase();
    let body = if head.contains("transfer-encoding: chunked") { dechunk(body) } else { body.to_owned() };
    (status, head, body)
}

pub fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// RFC 4180 CSV as psql --csv writes it; panics on text that is not CSV.
pub fn parse_csv(text: &str) -> Vec<Vec<String>> {
    csv_records(text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

/// The records of RFC 4180 text: quoted fields may hold commas, quotes (doubled) and line breaks.
pub fn csv_records(text: &str) -> Result<Vec<Vec<String>>, String> {
    let mut records: Vec<Vec<String>> = Vec::new();
    let mut record: Vec<String> = Vec::new();
    let mut field = String::new();
    let mut chars = text.chars().peekable();
    let mut quoted = false;
    let mut any = false;
    while let Some(c) = chars.next() {
        any = true;
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    chars.next();
                    field.push('"');
                }
                '"' => quoted = false,
                _ => field.push(c),
            }
            continue;
        }
        match c {
            '"' => quoted = true,
            ',' => record.push(std::mem::take(&mut field)),
            '\r' => {}
            '\n' => {
                record.push(std::mem::take(&mut field));
                records.push(std::mem::take(&mut record));
                any = false;
            }
            _ => field.push(c),
        }
    }
    if quoted {
        return Err("CSV ends inside a quoted field".into());
    }
    if any {
        record.push(field);
        records.push(record);
    }
    Ok(records)
}

/// Waits until `f` holds, up to [`PATIENCE`] (a hang guard).
pub fn eventually(mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + PATIENCE;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    f()
}
