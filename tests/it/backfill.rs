//! `gpuledger backfill` against a real Prometheus, no mocks: a simulated capture becomes TSDB
//! blocks (`promtool tsdb create-blocks-from openmetrics`), the real `prometheus` binary serves
//! them, and what backfill stores is compared row for row with `gpuledger ingest` of the same
//! capture. Then the resumability (markers, no second query, no duplicate) and the failure paths.
//!
//! Needs `promtool` and `prometheus` (Debian package `prometheus`; `.ci/run` installs it). When
//! they are missing these tests fail and say so: a skipped test would pass silently in CI.

use std::collections::BTreeMap;
use std::fs;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use tempfile::TempDir;

use crate::util::{PATIENCE, count, ingest, query, run};

const STEP_MS: i64 = 60_000;
const CHUNK_MS: i64 = 3_600_000;
/// Hours of the simulated day that go through Prometheus (the whole day would make promtool
/// and the comparison slow; three chunks show everything).
const HOURS: i64 = 3;

fn require_tool(name: &str) {
    match Command::new(name).arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => panic!(
            "`{name}` is not installed, and the backfill tests need the real Prometheus: install the Debian package \
             `prometheus` (apt-get install prometheus), which brings `prometheus` and `promtool`; .ci/run does so"
        ),
    }
}

/// `1793318405.280` (what the markers are named with; written here independently of gpuledger).
fn unix_secs(ms: i64) -> String {
    if ms % 1000 == 0 { format!("{}", ms / 1000) } else { format!("{}.{:03}", ms / 1000, ms % 1000) }
}

fn rfc3339_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).unwrap().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// One sample of the capture, as text.
struct Sample {
    /// `name{labels}` exactly as the exporter wrote it.
    series: String,
    ts_ms: i64,
    value: String,
}

impl Sample {
    fn name(&self) -> &str {
        self.series.split('{').next().unwrap()
    }
}

/// Splits an exposition line into `name{labels}`, value and optional timestamp. Label values
/// hold spaces (`modelName="NVIDIA H100 80GB HBM3"`), so the series ends at the last `}`.
fn split_line(line: &str) -> (&str, &str, Option<i64>) {
    let end = line.rfind('}').map_or_else(|| line.find(' ').unwrap(), |i| i + 1);
    let mut rest = line[end..].split_whitespace();
    let value = rest.next().unwrap_or_else(|| panic!("no value in {line:?}"));
    (&line[..end], value, rest.next().map(|t| t.parse().unwrap()))
}

/// The simulator writes two DCGM styles: `<host>/<unix-millis>.prom`, one scrape per file without
/// per-sample timestamps, and `<host>/<date>.prom`, a whole day with per-sample millisecond
/// timestamps. Returns each host's first scrape time and whether both styles are present.
fn first_scrapes(dcgm: &Path) -> (BTreeMap<String, i64>, bool, bool) {
    let (mut per_scrape, mut per_day) = (false, false);
    let mut firsts = BTreeMap::new();
    for host in fs::read_dir(dcgm).unwrap() {
        let host = host.unwrap().path();
        let name = host.file_name().unwrap().to_string_lossy().into_owned();
        let mut first = i64::MAX;
        for f in fs::read_dir(&host).unwrap() {
            let f = f.unwrap().path();
            let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
            if let Ok(ms) = stem.parse::<i64>() {
                per_scrape = true;
                first = first.min(ms);
            } else {
                per_day = true;
                // The day file starts with its first scrape; `subset` checks nothing comes earlier.
                let line = BufReader::new(fs::File::open(&f).unwrap()).lines().map(Result::unwrap).find(|l| !l.starts_with('#')).unwrap();
                first = first.min(split_line(&line).2.unwrap());
            }
        }
        firsts.insert(name, first);
    }
    (firsts, per_scrape, per_day)
}

/// Copies the capture's samples up to `last_ms` into `out` (same layout, same styles) and
/// returns them.
fn subset(dcgm: &Path, out: &Path, from_ms: i64, last_ms: i64) -> Vec<Sample> {
    let mut samples = Vec::new();
    for host in fs::read_dir(dcgm).unwrap() {
        let host = host.unwrap().path();
        let host_out = out.join(host.file_name().unwrap());
        fs::create_dir_all(&host_out).unwrap();
        for f in fs::read_dir(&host).unwrap() {
            let f = f.unwrap().path();
            let scrape_ms = f.file_stem().unwrap().to_string_lossy().parse::<i64>().ok();
            if scrape_ms.is_some_and(|ms| ms > last_ms) {
                continue;
            }
            let mut w = BufWriter::new(fs::File::create(host_out.join(f.file_name().unwrap())).unwrap());
            for line in BufReader::new(fs::File::open(&f).unwrap()).lines() {
                let line = line.unwrap();
                if line.starts_with('#') || line.trim().is_empty() {
                    writeln!(w, "{line}").unwrap();
                    continue;
                }
                // One of an HA pair's two servers: its samples sit 10 s after the other's, and
                // Prometheus answers both on the same grid instant, where they are the same
                // row (the replica is only a label). The ledger keeps one of them anyway.
                if line.contains("prometheus_replica=\"b\"") {
                    continue;
                }
                let (series, value, ts) = split_line(&line);
                let ts_ms = ts.or(scrape_ms).unwrap_or_else(|| panic!("{}: no time for {line:?}", f.display()));
                assert!(ts_ms >= from_ms, "{}: sample before the first scrape: {line}", f.display());
                if ts_ms <= last_ms {
                    writeln!(w, "{line}").unwrap();
                    samples.push(Sample { series: series.to_string(), ts_ms, value: value.to_string() });
                }
            }
            w.flush().unwrap();
        }
    }
    samples
}

/// OpenMetrics text for promtool: one `# TYPE <name> gauge` per family with all its samples
/// together (grouped by name, then series, then time), timestamps in seconds, `# EOF` at the
/// end. promtool turns seconds into milliseconds by truncating `ts * 1000`, and `.380` times
/// 1000 can come out as 379.99...; a quarter millisecond added keeps every time exact.
/// Returns the number of samples written.
fn write_openmetrics(samples: &mut [Sample], path: &Path) -> usize {
    samples.sort_by(|a, b| (a.name(), &a.series, a.ts_ms).cmp(&(b.name(), &b.series, b.ts_ms)));
    let mut w = BufWriter::new(fs::File::create(path).unwrap());
    let mut family = "";
    let mut n = 0;
    let mut prev: Option<(&str, i64)> = None;
    for s in samples.iter() {
        assert_ne!(prev, Some((s.series.as_str(), s.ts_ms)), "the capture repeats a sample: {} at {}", s.series, s.ts_ms);
        prev = Some((&s.series, s.ts_ms));
        if s.name() != family {
            family = s.name();
            writeln!(w, "# TYPE {family} gauge").unwrap();
        }
        writeln!(w, "{} {} {}.{:03}25", s.series, s.value, s.ts_ms / 1000, s.ts_ms % 1000).unwrap();
        n += 1;
    }
    writeln!(w, "# EOF").unwrap();
    w.flush().unwrap();
    n
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A minimal HTTP/1.0 GET (the test crate has no HTTP client): status and body.
fn http_get(port: u16, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")?;
    let mut text = String::new();
    s.read_to_string(&mut text)?;
    let status = text.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b).to_string();
    Ok((status, body))
}

/// The real `prometheus`, serving the blocks in `tsdb`; killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    log: PathBuf,
    query_log: PathBuf,
}

impl Prometheus {
    fn start(tsdb: &Path, dir: &Path) -> Prometheus {
        let config = dir.join("prometheus.yml");
        // The query log is written while a query is answered, before the answer goes out: once
        // a client has its answers, every query it asked is in the log (the request counter on
        // /metrics is bumped after the answer, so a fast client can read it before it moves).
        let query_log = dir.join("queries.jsonl");
        fs::write(
            &config,
            format!("# no scrape jobs: this server only serves the blocks promtool built\nglobal:\n  query_log_file: {}\nscrape_configs: []\n", query_log.display()),
        )
        .unwrap();
        let log = dir.join("prometheus.log");
        let port = free_port();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", tsdb.display()))
            .arg("--storage.tsdb.retention.time=100y")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            // Blocks built by promtool carry no staleness markers, so with the default 5 minute
            // lookback a series would live on for 5 minutes after its pod left and a missed
            // scrape would be filled with the one before. A lookback just under the scrape
            // interval makes every scrape answer exactly one grid instant and nothing else,
            // which is what a Prometheus that scraped these exporters itself would answer.
            .arg("--query.lookback-delta=59999ms")
            .stdout(Stdio::null())
            .stderr(fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start prometheus: {e}"));
        let mut p = Prometheus { child, port, log, query_log };
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Ok((200, _)) = http_get(port, "/-/ready") {
                return p;
            }
            if let Ok(Some(status)) = p.child.try_wait() {
                panic!("prometheus exited ({status}) before it was ready:\n{}", fs::read_to_string(&p.log).unwrap_or_default());
            }
            assert!(Instant::now() < deadline, "prometheus not ready within {PATIENCE:?}:\n{}", fs::read_to_string(&p.log).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The range queries Prometheus ran, from its query log (instant queries have step 0).
    fn range_queries(&self) -> u64 {
        let text = fs::read_to_string(&self.query_log).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("query log line is not JSON ({e}): {l}")))
            .filter(|entry| entry["params"]["step"].as_f64().is_some_and(|s| s > 0.0))
            .count() as u64
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn backfill(args: &[&str], code: i32) -> (Value, Output) {
    let mut all = vec!["backfill", "--format", "json", "--progress", "off"];
    all.extend_from_slice(args);
    let out = run(&all, code);
    let summary = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("summary is not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    (summary, out)
}

/// Every row of a sample table as sorted JSON lines, `ts` as epoch milliseconds (`ts_ms`) passed
/// through `map_ts`, the partition column left out.
fn rows(store: &Path, sql: &str, map_ts: impl Fn(i64) -> i64) -> Vec<String> {
    let mut out: Vec<String> = query(store, sql)
        .into_iter()
        .map(|mut r| {
            let obj = r.as_object_mut().unwrap();
            obj.remove("ts");
            obj.remove("date");
            let t = obj["ts_ms"].as_i64().unwrap();
            obj.insert("ts_ms".into(), Value::from(map_ts(t)));
            r.to_string()
        })
        .collect();
    out.sort();
    out
}

fn assert_same_rows(what: &str, backfilled: &[String], ingested: &[String]) {
    if backfilled != ingested {
        let only_b: Vec<&String> = backfilled.iter().filter(|r| ingested.binary_search(r).is_err()).take(3).collect();
        let only_i: Vec<&String> = ingested.iter().filter(|r| backfilled.binary_search(r).is_err()).take(3).collect();
        panic!("{what}: {} rows backfilled, {} ingested\nonly backfilled: {only_b:#?}\nonly ingested: {only_i:#?}", backfilled.len(), ingested.len());
    }
}

fn markers(store: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let Ok(keys) = fs::read_dir(store.join(".backfill")) else { return names };
    for key in keys {
        for m in fs::read_dir(key.unwrap().path()).unwrap() {
            let m = m.unwrap();
            names.push(format!("{}/{}", m.path().parent().unwrap().file_name().unwrap().to_string_lossy(), m.file_name().to_string_lossy()));
        }
    }
    names.sort();
    names
}

const COUNTS: &str = "SELECT (SELECT count(*) FROM gpu_samples) AS g, (SELECT count(*) FROM metric_samples) AS m";

fn table_counts(store: &Path) -> (i64, i64) {
    let r = &query(store, COUNTS)[0];
    (r["g"].as_i64().unwrap(), r["m"].as_i64().unwrap())
}

#[test]
fn backfill_from_prometheus_equals_ingest_and_resumes_without_duplicates() {
    require_tool("promtool");
    require_tool("prometheus");
    let started = Instant::now();
    let dir = TempDir::new().unwrap();
    let cap = dir.path().join("cap");
    run(&["simulate", "--out", cap.to_str().unwrap(), "--gpus", "8", "--days", "1", "--scrape-interval", "60s", "--start", "2026-10-30T00:00:00Z"], 0);

    // Every host scrapes every 60 s at its own offset within the minute. The grid starts on the
    // earliest host's first scrape, so that host's rows keep their exact scrape times; the other
    // hosts' scrapes are answered at the next grid instant (the lookback), checked below.
    let (firsts, per_scrape, per_day) = first_scrapes(&cap.join("dcgm"));
    assert!(per_scrape && per_day && firsts.len() >= 2, "the simulator should write both DCGM styles: {firsts:?}");
    let (aligned_host, from) = firsts.iter().min_by_key(|(_, t)| **t).map(|(h, t)| (h.clone(), *t)).unwrap();
    assert_ne!(from % 1000, 0, "the scrape times should have milliseconds, the case worth testing");
    let last = from + HOURS * CHUNK_MS - STEP_MS;
    let snap = |t: i64| from + (t - from + STEP_MS - 1).div_euclid(STEP_MS) * STEP_MS;

    let sub = dir.path().join("sub");
    let mut samples = subset(&cap.join("dcgm"), &sub.join("dcgm"), from, last);
    let om = dir.path().join("capture.om.txt");
    let n_samples = write_openmetrics(&mut samples, &om) as u64;
    drop(samples);
    assert!(n_samples > 50_000, "{n_samples} samples");
    let tsdb = dir.path().join("tsdb");
    let out = Command::new("promtool").args(["tsdb", "create-blocks-from", "openmetrics"]).arg(&om).arg(&tsdb).output().unwrap();
    assert!(out.status.success(), "promtool: {}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    let prom = Prometheus::start(&tsdb, dir.path());
    let prepared = started.elapsed();

    // --from as unix seconds with milliseconds, --to as RFC 3339 with milliseconds: both forms.
    let store = dir.path().join("store");
    let store_s = store.to_str().unwrap();
    let url = prom.url();
    let from_arg = unix_secs(from);
    let to_arg = rfc3339_ms(last);
    let args = ["--prometheus", &url, "--from", &from_arg, "--to", &to_arg, "--step", "60s", "--chunk", "1h", "--store", store_s];
    let queries_before = prom.range_queries();
    let (s1, _) = backfill(&args, 0);
    assert_eq!((s1["chunks"].as_u64(), s1["done"].as_u64(), s1["skipped"].as_u64(), s1["failed"].as_u64()), (Some(3), Some(3), Some(0), Some(0)), "{s1}");
    assert_eq!(s1["requests"], 3, "{s1}");
    assert_eq!(prom.range_queries(), queries_before + 3, "one query per chunk");
    assert_eq!(s1["samples"].as_u64(), Some(n_samples), "every sample given to promtool comes back exactly once: {s1}");
    assert_eq!(s1["rejected"], 0, "{s1}");

    // The same capture through `gpuledger ingest`.
    let ingested = dir.path().join("ingested");
    let si = ingest(&[&sub], &ingested);
    assert_eq!(si["samples"].as_u64(), Some(n_samples), "{si}");

    let (g, m) = table_counts(&store);
    assert!(g > 1000 && m > 0, "backfilled rows: {g} gpu, {m} metric");
    assert_eq!((g, m), table_counts(&ingested), "row counts, backfilled vs ingested");
    assert_eq!(s1["rows_written"]["gpu_samples"].as_i64(), Some(g), "{s1}");

    // Row for row, every column (identity, every metric column, labels), with the ingested
    // scrape times moved to the grid instant Prometheus answers them at.
    let gpu_sql = "SELECT *, CAST(ts AS BIGINT) AS ts_ms FROM gpu_samples";
    assert_same_rows("gpu_samples", &rows(&store, gpu_sql, |t| t), &rows(&ingested, gpu_sql, snap));
    let metric_sql = "SELECT metric, labels, value, CAST(ts AS BIGINT) AS ts_ms FROM metric_samples";
    assert_same_rows("metric_samples", &rows(&store, metric_sql, |t| t), &rows(&ingested, metric_sql, snap));
    // The host on the grid keeps its exact scrape times, with no snapping at all. (Its exporter
    // may write the node's name in upper case or as an FQDN: the simulator draws both.)
    let times = format!("SELECT DISTINCT CAST(ts AS BIGINT) AS t FROM gpu_samples WHERE split_part(lower(hostname), '.', 1) = '{aligned_host}' ORDER BY t");
    let t_backfilled = query(&store, &times);
    assert!(t_backfilled.len() > 100, "{aligned_host}: {} scrape times", t_backfilled.len());
    assert_eq!(t_backfilled, query(&ingested, &times), "{aligned_host}: scrape times");
    // And sums over the value columns agree (a second look at the same fact, whole-table).
    // Rounded: float sums depend on the order rows are added in, which differs between stores.
    let sums = "SELECT count(*) AS n, round(sum(gpu_util), 3) AS u, round(sum(power_w), 3) AS p, round(sum(fb_used_mib), 3) AS f, \
                round(sum(sm_clock_mhz), 3) AS c, round(sum(energy_mj), 3) AS e, round(sum(temp_c), 3) AS t FROM gpu_samples";
    let (sums_b, sums_i) = (query(&store, sums), query(&ingested, sums));
    assert_eq!(sums_b, sums_i, "sums of value columns");
    assert!(sums_b[0]["u"].as_f64().unwrap() > 0.0 && sums_b[0]["e"].as_f64().unwrap() > 0.0, "{sums_b:?}");

    // One marker per chunk, named by its first and last instant in unix seconds.
    let key = s1["key"].as_str().unwrap();
    let expected: Vec<String> = (0..HOURS).map(|i| format!("{key}/{}-{}", unix_secs(from + i * CHUNK_MS), unix_secs(from + (i + 1) * CHUNK_MS - STEP_MS))).collect();
    assert_eq!(markers(&store), expected);

    // Rerun: everything skipped, Prometheus not asked, nothing written.
    let before = prom.range_queries();
    let (s2, _) = backfill(&args, 0);
    assert_eq!((s2["done"].as_u64(), s2["skipped"].as_u64(), s2["requests"].as_u64()), (Some(0), Some(3), Some(0)), "{s2}");
    assert_eq!(prom.range_queries(), before, "a rerun must not query Prometheus");
    assert_eq!(table_counts(&store), (g, m));

    // Lose the middle chunk's marker (a crash right after its Parquet files): exactly that chunk
    // is asked again, and its rows, already stored, are not stored twice.
    fs::remove_file(store.join(".backfill").join(&expected[1])).unwrap();
    let middle = count(&store, &format!("SELECT count(*) AS n FROM gpu_samples WHERE CAST(ts AS BIGINT) BETWEEN {} AND {}", from + CHUNK_MS, from + 2 * CHUNK_MS - STEP_MS));
    assert!(middle > 0);
    let (s3, _) = backfill(&args, 0);
    assert_eq!((s3["done"].as_u64(), s3["skipped"].as_u64(), s3["requests"].as_u64()), (Some(1), Some(2), Some(1)), "{s3}");
    assert_eq!(prom.range_queries(), before + 1);
    assert_eq!(s3["rows_written"]["gpu_samples"].as_i64().unwrap_or(0), 0, "{s3}");
    assert_eq!(s3["duplicates_skipped"]["gpu_samples"].as_i64(), Some(middle), "{s3}");
    assert_eq!(table_counts(&store), (g, m), "no duplicates after the rerun");
    assert_eq!(markers(&store), expected, "the marker is back");

    // Prometheus refusing the query (a selector it cannot parse): retried, reported with the
    // chunk's range and Prometheus' own reason, exit 1, no marker.
    let bad_store = dir.path().join("bad");
    let one_chunk = rfc3339_ms(from + CHUNK_MS - STEP_MS);
    let (sb, out) = backfill(&["--prometheus", &url, "--from", &from_arg, "--to", &one_chunk, "--step", "60s", "--match", "DCGM_(", "--store", bad_store.to_str().unwrap(), "--retry-backoff", "10ms"], 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&format!("chunk {}..{} failed after 4 attempts: HTTP 400 Bad Request: ", rfc3339_ms(from), rfc3339_ms(from + CHUNK_MS - STEP_MS))), "{stderr}");
    assert!(stderr.contains("parse error"), "Prometheus' reason is passed on: {stderr}");
    assert!(stderr.contains("1 chunk failed; rerun to retry them"), "{stderr}");
    assert_eq!((sb["failed"].as_u64(), sb["requests"].as_u64()), (Some(1), Some(4)), "{sb}");
    assert!(markers(&bad_store).is_empty());

    eprintln!("backfill test: {:.1}s preparing (simulate, promtool, prometheus), {:.1}s in all", prepared.as_secs_f64(), started.elapsed().as_secs_f64());
}

#[test]
fn unreachable_prometheus_fails_each_chunk_and_exits_1() {
    // A port nobody listens on: bound, then released.
    let port = free_port();
    let dir = TempDir::new().unwrap();
    let store = dir.path().join("store");
    let url = format!("http://127.0.0.1:{port}");
    let args = ["--prometheus", &url, "--from", "2026-10-30T00:00:00Z", "--to", "1793325570", "--step", "30s", "--store", store.to_str().unwrap(), "--retry-backoff", "10ms"];
    let (s, out) = backfill(&args, 1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    for range in ["2026-10-30T00:00:00Z..2026-10-30T00:59:30Z", "2026-10-30T01:00:00Z..2026-10-30T01:59:30Z"] {
        assert!(stderr.contains(&format!("chunk {range} failed after 4 attempts: ")), "{range} not reported: {stderr}");
    }
    assert!(stderr.contains("2 chunks failed; rerun to retry them"), "{stderr}");
    assert_eq!((s["chunks"].as_u64(), s["done"].as_u64(), s["failed"].as_u64(), s["requests"].as_u64()), (Some(2), Some(0), Some(2), Some(8)), "{s}");
    assert_eq!(s["failures"][1]["start"], "2026-10-30T01:00:00Z", "{s}");
    assert!(markers(&store).is_empty(), "failed chunks leave no marker");
}

#[test]
fn unusable_flags_are_refused_before_anything_starts() {
    let dir = TempDir::new().unwrap();
    let store = dir.path().join("store");
    let s = store.to_str().unwrap();
    let common = ["backfill", "--from", "2026-10-30T00:00:00Z", "--to", "2026-10-31T00:00:00Z", "--store", s];
    let closed = format!("http://127.0.0.1:{}", free_port());
    let closed = closed.as_str();
    let refuse = |extra: &[&str], expected: &str| {
        let mut a = common.to_vec();
        a.extend_from_slice(extra);
        let out = run(&a, 2);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{extra:?}: expected {expected:?} in {stderr}");
    };
    refuse(&["--prometheus", closed, "--step", "60s", "--chunk", "90s"], "--chunk 90s is not a multiple of --step 1m");
    refuse(&["--prometheus", closed, "--step", "1s", "--chunk", "4h"], "--chunk 4h at --step 1s asks Prometheus for 14400 points per series, more than the 11000 it answers in one query: use --chunk 11000s or shorter");
    refuse(&["--prometheus", "prometheus:9090"], "--prometheus \"prometheus:9090\"");
    assert!(!store.exists(), "refused flags must not create the store");
    // Just within the limit (45m at 250ms is 10,800 points) the same run starts, and fails on
    // the closed port instead.
    let one = ["backfill", "--prometheus", closed, "--from", "1793318400", "--to", "1793318400", "--step", "250ms", "--chunk", "45m"];
    let out = run(&[&one[..], &["--store", s, "--retry-backoff", "1ms", "--progress", "off"]].concat(), 1);
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 chunk failed"));
    // A directory that is not a store is refused (exit 2), before any query.
    let notes = dir.path().join("notes");
    fs::create_dir(&notes).unwrap();
    fs::write(notes.join("notes.txt"), "x").unwrap();
    let out = run(&[&common[..5], &["--store", notes.to_str().unwrap(), "--prometheus", closed]].concat(), 2);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("gpuledger: error: backfilling ") && stderr.contains("not a gpuledger store"), "{stderr}");
    // Times in neither form are refused by the flag parser itself.
    let out = run(&["backfill", "--prometheus", closed, "--from", "yesterday", "--to", "1793318400", "--store", s], 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"yesterday\" is neither RFC 3339 (2026-10-30T00:00:00Z) nor unix seconds"));
}

#[test]
fn help_teaches_chunks_resumability_and_an_example() {
    let out = run(&["backfill", "--help"], 0);
    let text = String::from_utf8_lossy(&out.stdout);
    for want in ["/api/v1/query_range", "step grid", "scrape interval", "11,000", "<store>/.backfill/<key>/<start>-<end>", "skips marked chunks", "rerun", "gpuledger backfill --prometheus http://", "Exit codes:"] {
        assert!(text.contains(want), "backfill --help lacks {want:?}:\n{text}");
    }
    let out = run(&["--help"], 0);
    assert!(String::from_utf8_lossy(&out.stdout).contains("gpuledger backfill --prometheus"));
}
