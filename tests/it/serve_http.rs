//! `gpuledger serve`'s HTTP API against independent references: `gpuledger report` for the
//! chargeback, `gpuledger query` over the stored ledger tables for states, queues, failures and
//! the Prometheus gauges, a real OpenAPI validator and schemathesis for the published contract.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use chrono::NaiveDate;
use serde_json::Value;

use super::serving::{Server, TOKEN, demo_store, parse_csv, serve_config};
use super::util::{PATIENCE, query, run};

/// A server over the shared demo store; the tempdir holds its config and must outlive it.
fn start() -> (tempfile::TempDir, Server, &'static Path, PathBuf) {
    let (store, demo_config) = demo_store();
    let dir = tempfile::tempdir().unwrap();
    let config = serve_config(dir.path(), demo_config, "");
    let server = Server::start(store, &config);
    (dir, server, store.as_path(), config)
}

/// A GET with the right token that must answer 200 with JSON.
fn get_json(server: &Server, path: &str) -> Value {
    let (status, content_type, body) = server.get(path, Some(TOKEN));
    assert_eq!(status, 200, "GET {path}: {body}\nserver log:\n{}", server.log());
    assert!(content_type.starts_with("application/json"), "GET {path}: content type {content_type:?}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"))
}

/// Floats that are summed in another order on each side may differ in their last bits: the
/// report's energy (kWh are floats), and sums this test takes itself over the points of a time
/// series, and numbers read back through serde_json (its default float parsing may be one unit
/// in the last place off). Relative 1e-9, or absolute 1e-9 for values below 1. The chargeback,
/// exact in the ledger and written by the same serializer on both sides, is compared with `==`.
fn close(a: f64, b: f64) -> bool {
    a == b || (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// Structural equality with [`close`] numbers; an absent object key equals null (arrow's JSON
/// writer leaves nulls out). Err names the first difference by its path.
fn same(a: &Value, b: &Value, at: &str) -> Result<(), String> {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            let (x, y) = (x.as_f64().unwrap(), y.as_f64().unwrap());
            if close(x, y) { Ok(()) } else { Err(format!("{at}: {x} != {y}")) }
        }
        (Value::Array(x), Value::Array(y)) => {
            if x.len() != y.len() {
                return Err(format!("{at}: {} items != {} items", x.len(), y.len()));
            }
            x.iter().zip(y).enumerate().try_for_each(|(i, (x, y))| same(x, y, &format!("{at}[{i}]")))
        }
        (Value::Object(x), Value::Object(y)) => {
            let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            keys.into_iter().try_for_each(|k| same(x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null), &format!("{at}.{k}")))
        }
        _ if a == b => Ok(()),
        _ => Err(format!("{at}: {a} != {b}")),
    }
}

fn assert_same(served: &Value, reference: &Value, what: &str) {
    if let Err(diff) = same(served, reference, "$") {
        panic!("{what}: {diff}\n--- served\n{served:#}\n--- reference\n{reference:#}");
    }
}

fn f64_of(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))
}

/// `gpuledger report` with the server's own config (its [accounting] and [prices]).
fn report(store: &Path, config: &Path, month: Option<&str>, format: &str) -> String {
    let (store, config) = (store.display().to_string(), config.display().to_string());
    let mut args = vec!["report", "--store", &store, "--config", &config, "--format", format];
    if let Some(m) = month {
        args.extend(["--month", m]);
    }
    String::from_utf8(run(&args, 0).stdout).unwrap()
}

#[test]
fn chargeback_json_and_csv_equal_gpuledger_report() {
    let (_dir, server, store, config) = start();

    let listed = get_json(&server, "/api/v1/months");
    let months: Vec<String> = listed["months"].as_array().unwrap().iter().map(|m| str_of(m).to_owned()).collect();
    let stored: Vec<String> = query(store, "SELECT DISTINCT month FROM chargeback_monthly ORDER BY month").iter().map(|r| str_of(&r["month"]).to_owned()).collect();
    assert_eq!(months, stored, "/api/v1/months against chargeback_monthly");
    assert!(months.len() >= 2, "the demo spans two months: {months:?}");
    let busiest = str_of(&listed["busiest"]).to_owned();
    assert!(months.contains(&busiest), "busiest {busiest} is not one of {months:?}");

    // Each report run redoes the whole accounting (seconds in a debug build): run them side by
    // side. None is the report without --month (the busiest month).
    let mut cases: Vec<(Option<&str>, &str)> = months.iter().flat_map(|m| [(Some(m.as_str()), "json"), (Some(m.as_str()), "csv")]).collect();
    cases.push((None, "json"));
    let config = config.as_path();
    let references: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = cases.iter().map(|&(m, f)| s.spawn(move || report(store, config, m, f))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    for ((month, format), reference) in cases.iter().zip(&references) {
        let path = match month {
            Some(m) => format!("/api/v1/chargeback?month={m}&format={format}"),
            None => "/api/v1/chargeback".to_owned(),
        };
        if *format == "json" {
            let served = get_json(&server, &path);
            let reference: Value = serde_json::from_str(reference).unwrap();
            assert_same(&served, &reference, &format!("GET {path} against gpuledger report --month {month:?}"));
            // The chargeback itself is exact (decimal amounts, GPU-hours from integer
            // nanoseconds): identical, not merely close, though the report recomputed it.
            assert_eq!(served["chargeback"], reference["chargeback"], "GET {path}: the chargeback to the last bit");
            let expected_month = month.map_or(busiest.as_str(), |m| m);
            assert_eq!(served["month"], expected_month, "GET {path}");
            let rows = served["chargeback"].as_array().unwrap();
            assert!(!rows.is_empty(), "GET {path}: no chargeback rows");
            assert!(rows.iter().all(|r| r["month"] == expected_month), "GET {path}: rows of another month");
        } else {
            let (status, content_type, body) = server.get(&path, Some(TOKEN));
            assert_eq!(status, 200, "GET {path}: {body}");
            assert!(content_type.starts_with("text/csv"), "GET {path}: content type {content_type:?}");
            let (served, reference) = (parse_csv(&body), parse_csv(reference));
            assert_eq!(served.first(), reference.first(), "GET {path}: CSV header");
            assert_eq!(served.len(), reference.len(), "GET {path}: CSV rows\n{body}\n--- report\n{reference:?}");
            assert!(served.len() > 1, "GET {path}: no rows");
            for (i, (s, r)) in served.iter().zip(&reference).enumerate().skip(1) {
                assert_eq!(s.len(), r.len(), "GET {path}: row {i} width");
                for (j, (a, b)) in s.iter().zip(r).enumerate() {
                    match (a.parse::<f64>(), b.parse::<f64>()) {
                        // The CSV keeps 4 decimals: two values a few bits apart can round to
                        // neighbouring last digits, so allow one unit of the last place.
                        (Ok(x), Ok(y)) => assert!((x - y).abs() <= 1.000_001e-4, "GET {path}: row {i} column {} {a} != {b}", served[0][j]),
                        _ => assert_eq!(a, b, "GET {path}: row {i} column {}", served[0][j]),
                    }
                }
            }
            assert!(served[1..].iter().all(|r| Some(&r[0]) == month.map(str::to_owned).as_ref()), "GET {path}: rows of another month");
        }
    }

    // The month's lists (budgets, why idle, anomalies, quota) are the report's rows, in its
    // order; each endpoint's first list must have some (the demo configures budgets, its months
    // have idle time, complete days and ClusterQueues with quota).
    let endpoints: [(&str, &[(&str, &str)]); 4] = [
        ("budgets", &[("budgets", "budgets")]),
        ("idle", &[("idle_reasons", "idle_reasons"), ("stranded", "stranded")]),
        ("anomalies", &[("days", "anomalies"), ("drivers", "anomaly_drivers")]),
        ("quota", &[("quota", "quota")]),
    ];
    for (path, lists) in endpoints {
        let mut seen = 0;
        for ((month, format), reference) in cases.iter().zip(&references) {
            let (Some(month), "json") = (month, *format) else { continue };
            let served = get_json(&server, &format!("/api/v1/{path}?month={month}"));
            let reference: Value = serde_json::from_str(reference).unwrap();
            for (i, (list, in_report)) in lists.iter().enumerate() {
                let (served, reference) = (served[*list].as_array().unwrap(), reference[*in_report].as_array().unwrap());
                assert_eq!(served.len(), reference.len(), "{path} {list} of {month}: {served:?}");
                for (s, r) in served.iter().zip(reference) {
                    for key in r.as_object().unwrap().keys() {
                        assert_same(&s[key], &r[key], &format!("{path} {list} of {month}: {key}"));
                    }
                }
                if i == 0 {
                    seen += served.len();
                }
            }
        }
        assert!(seen > 0, "/api/v1/{path}: the demo's months have no {}", lists[0].0);
    }
}

/// Endpoints that need the token, each with a query that would otherwise be valid or, for the
/// last ones, a bad parameter (the token is checked before the parameters).
const PROTECTED: [&str; 15] = [
    "/api/v1/chargeback",
    "/api/v1/chargeback?format=csv",
    "/api/v1/states?step=1d",
    "/api/v1/fleet?step=1h",
    "/api/v1/queue",
    "/api/v1/failures?limit=5",
    "/api/v1/budgets",
    "/api/v1/idle",
    "/api/v1/anomalies",
    "/api/v1/quota",
    "/api/v1/report.html",
    "/api/v1/months",
    "/metrics",
    "/api/v1/states?step=abc",
    "/api/v1/chargeback?month=1999-01",
];

/// One GET with `authorization` as the raw header value; (status, lower-cased head, body).
fn get_with_authorization(port: u16, path: &str, authorization: Option<&str>) -> (u16, String, String) {
    super::serving::http_request(port, path, authorization)
}

/// `/metrics` read with the right token and parsed by an independent parser.
fn scrape(server: &Server) -> prometheus_parse::Scrape {
    let (status, content_type, body) = server.get("/metrics", Some(TOKEN));
    assert_eq!(status, 200, "GET /metrics: {body}");
    assert!(content_type.starts_with("text/plain"), "GET /metrics: content type {content_type:?}");
    prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_owned()))).unwrap_or_else(|e| panic!("/metrics does not parse ({e}):\n{body}"))
}

fn value(sample: &prometheus_parse::Sample) -> f64 {
    match sample.value {
        prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => v,
        ref other => panic!("{} is not a plain number: {other:?}", sample.metric),
    }
}

/// The single sample of `metric` with exactly these labels (among others).
fn sample_value(scrape: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<f64> = scrape.samples.iter().filter(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))).map(value).collect();
    assert!(found.len() <= 1, "{metric}{labels:?} appears {} times", found.len());
    found.first().copied()
}

#[test]
fn api_refuses_requests_without_the_right_token() {
    let (_dir, server, _store, _config) = start();

    // The document's own idea of what is protected agrees with the list above.
    let doc = get_json(&server, "/api/v1/openapi.json");
    let open_in_doc: BTreeSet<&str> = doc["paths"].as_object().unwrap().iter().filter(|(_, item)| item["get"]["security"] == serde_json::json!([])).map(|(p, _)| p.as_str()).collect();
    assert_eq!(open_in_doc, BTreeSet::from(["/healthz", "/api/v1/openapi.json"]), "operations the OpenAPI document marks as open");
    for path in doc["paths"].as_object().unwrap().keys().filter(|p| !open_in_doc.contains(p.as_str())) {
        assert!(PROTECTED.iter().any(|p| p.split('?').next() == Some(path.as_str())), "{path} is documented but not tested here");
    }

    let before = scrape(&server);
    let counter = |s: &prometheus_parse::Scrape, name: &str| sample_value(s, name, &[]).unwrap_or_else(|| panic!("no {name}"));
    let wrong = [
        None,
        Some("Bearer not-the-token".to_owned()),
        Some(format!("Bearer {}", &TOKEN[..TOKEN.len() - 1])),
        Some(format!("Bearer {TOKEN}x")),
        Some(format!("Basic {TOKEN}")),
        Some(TOKEN.to_owned()),
        Some("Bearer ".to_owned()),
    ];
    let mut refused = 0u32;
    for path in PROTECTED {
        for auth in &wrong {
            let (status, head, body) = get_with_authorization(server.http_port, path, auth.as_deref());
            assert_eq!(status, 401, "GET {path} with Authorization {auth:?}: {head}\n{body}");
            assert!(head.contains("\r\nwww-authenticate: bearer"), "GET {path} with Authorization {auth:?}: no WWW-Authenticate: Bearer\n{head}");
            assert!(head.contains("\r\ncontent-type: application/json"), "GET {path}: 401 without JSON\n{head}");
            let error: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: 401 body is not JSON ({e}): {body}"));
            assert!(error["error"].as_str().is_some_and(|e| !e.is_empty()), "GET {path}: 401 body {body}");
            // Nothing of the ledger leaks into a refusal.
            assert!(!body.contains("chargeback\"") && !body.contains("gpuledger_cost"), "GET {path}: {body}");
            refused += 1;
        }
        // The right token passes (the endpoint exists and the 401s came from the token).
        let (status, _, body) = server.get(path, Some(TOKEN));
        assert_ne!(status, 401, "GET {path} with the right token: {body}");
    }

    for path in ["/healthz", "/api/v1/openapi.json"] {
        for auth in [None, Some("Bearer not-the-token")] {
            let (status, _, body) = get_with_authorization(server.http_port, path, auth);
            assert_eq!(status, 200, "GET {path} with Authorization {auth:?}: {body}");
        }
    }
    let (_, content_type, body) = server.get("/healthz", None);
    assert!(content_type.starts_with("text/plain") && body.trim() == "ok", "/healthz: {content_type:?} {body:?}");

    let after = scrape(&server);
    let name = "gpuledger_http_unauthorized_total";
    assert_eq!(counter(&after, name) - counter(&before, name), f64::from(refused), "{name} grows by the requests refused");
    // Every protected request counts: the refused ones, the right-token ones and this scrape.
    let name = "gpuledger_http_requests_total";
    assert_eq!(counter(&after, name) - counter(&before, name), f64::from(refused) + PROTECTED.len() as f64 + 1.0, "{name}");
}

/// Sums of `gpu_hours` and `cost` per state over the points of a `/api/v1/states` answer.
fn state_totals(answer: &Value) -> BTreeMap<String, (f64, f64)> {
    let mut totals = BTreeMap::new();
    for p in answer["points"].as_array().unwrap() {
        let t: &mut (f64, f64) = totals.entry(str_of(&p["state"]).to_owned()).or_default();
        t.0 += p["gpu_hours"].as_f64().unwrap_or(0.0);
        t.1 += p["cost"].as_f64().unwrap_or(0.0);
    }
    totals
}

/// The same sums straight from the stored table.
fn stored_state_totals(store: &Path, filter: &str) -> BTreeMap<String, (f64, f64)> {
    let sql = format!("SELECT state, SUM(gpu_hours) AS h, SUM(cost) AS c FROM priced_state_hours {filter} GROUP BY state");
    query(store, &sql).iter().map(|r| (str_of(&r["state"]).to_owned(), (r["h"].as_f64().unwrap_or(0.0), r["c"].as_f64().unwrap_or(0.0)))).collect()
}

fn assert_totals(served: &BTreeMap<String, (f64, f64)>, stored: &BTreeMap<String, (f64, f64)>, what: &str) {
    assert_eq!(served.keys().collect::<Vec<_>>(), stored.keys().collect::<Vec<_>>(), "{what}: states");
    for (state, (h, c)) in served {
        let (sh, sc) = stored[state];
        assert!(close(*h, sh) && close(*c, sc), "{what}: {state} served {h} h {c} cost, stored {sh} h {sc} cost");
    }
}

/// The day of a point's `time` (`2026-10-30T00:00:00Z`: midnight UTC, nothing else).
fn point_day(p: &Value) -> NaiveDate {
    let time = str_of(&p["time"]);
    let day = time.strip_suffix("T00:00:00Z").unwrap_or_else(|| panic!("point time {time:?} is not a UTC midnight"));
    NaiveDate::parse_from_str(day, "%Y-%m-%d").unwrap()
}

/// The first day of the month after `month` (YYYY-MM).
fn next_month(month: &str) -> String {
    let (y, m): (i32, u32) = (month[..4].parse().unwrap(), month[5..].parse().unwrap());
    if m == 12 { format!("{}-01-01", y + 1) } else { format!("{y}-{:02}-01", m + 1) }
}

#[test]
fn states_queue_failures_and_metrics_agree_with_the_stored_tables() {
    let (_dir, server, store, _config) = start();

    // States, whole range, day by day.
    let daily = get_json(&server, "/api/v1/states?step=1d");
    assert_eq!(daily["step_hours"], 24);
    assert_eq!(daily["team"], Value::Null);
    assert_same(&get_json(&server, "/api/v1/states"), &daily, "step defaults to 1d");
    assert_totals(&state_totals(&daily), &stored_state_totals(store, ""), "states step=1d");
    let days: Vec<String> = query(store, "SELECT DISTINCT day FROM priced_state_hours ORDER BY day").iter().map(|r| str_of(&r["day"]).to_owned()).collect();
    let points = daily["points"].as_array().unwrap();
    let served_days: BTreeSet<String> = points.iter().map(|p| point_day(p).to_string()).collect();
    assert_eq!(served_days.into_iter().collect::<Vec<_>>(), days, "one point time per stored day");
    let keys: Vec<(NaiveDate, &str)> = points.iter().map(|p| (point_day(p), str_of(&p["state"]))).collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "points are in (time, state) order, each once: {keys:?}");

    // One team over a range: only its days in [from, to).
    assert!(days.len() >= 3, "the demo covers at least three days: {days:?}");
    let team = query(store, "SELECT team FROM priced_state_hours WHERE team <> 'platform' GROUP BY team ORDER BY SUM(gpu_hours) DESC LIMIT 1");
    let team = str_of(&team[0]["team"]).to_owned();
    let (from, to) = (&days[1], &days[days.len() - 1]);
    let ranged = get_json(&server, &format!("/api/v1/states?team={team}&from={from}&to={to}"));
    assert_eq!(ranged["team"], team.as_str());
    assert!(!ranged["points"].as_array().unwrap().is_empty(), "team {team} has hours in [{from}, {to})");
    for p in ranged["points"].as_array().unwrap() {
        let d = point_day(p).to_string();
        assert!(d.as_str() >= from.as_str() && d.as_str() < to.as_str(), "point {p} outside [{from}, {to})");
    }
    let filter = format!("WHERE team = '{team}' AND day >= '{from}' AND day < '{to}'");
    assert_totals(&state_totals(&ranged), &stored_state_totals(store, &filter), &format!("states of {team} in [{from}, {to})"));
    // An RFC 3339 time is an instant: 22:00 at -02:00 is the next day's midnight, UTC.
    let first = &days[0];
    let rfc = get_json(&server, &format!("/api/v1/states?team={team}&from={first}T22:00:00-02:00&to={to}T00:00:00Z"));
    let next_day = (NaiveDate::parse_from_str(first, "%Y-%m-%d").unwrap() + chrono::Days::new(1)).to_string();
    let filter = format!("WHERE team = '{team}' AND day >= '{next_day}' AND day < '{to}'");
    assert_totals(&state_totals(&rfc), &stored_state_totals(store, &filter), "states from an RFC 3339 time with an offset");
    let nobody = get_json(&server, "/api/v1/states?team=no-such-team");
    assert_eq!(nobody["points"], serde_json::json!([]), "an unknown team has no points");

    // Hourly points (the ledger's grain): one per stored hour, the same totals, and each day's
    // hours add up to its daily point.
    let hourly = get_json(&server, "/api/v1/states?step=1h");
    assert_eq!(hourly["step_hours"], 1);
    assert_totals(&state_totals(&hourly), &state_totals(&daily), "states step=1h against step=1d");
    let hours: Vec<String> = query(store, "SELECT DISTINCT hour FROM priced_state_hours ORDER BY hour").iter().map(|r| str_of(&r["hour"]).to_owned()).collect();
    let hourly_points = hourly["points"].as_array().unwrap();
    let served_hours: BTreeSet<String> = hourly_points.iter().map(|p| str_of(&p["time"]).to_owned()).collect();
    assert_eq!(served_hours.into_iter().collect::<Vec<_>>(), hours, "one point time per stored hour");
    assert!(hours.len() > 24 * (days.len() - 1), "{} hours over {} days", hours.len(), days.len());
    let mut by_day: BTreeMap<(NaiveDate, String), f64> = BTreeMap::new();
    for p in hourly_points {
        let day = NaiveDate::parse_from_str(&str_of(&p["time"])[..10], "%Y-%m-%d").unwrap();
        *by_day.entry((day, str_of(&p["state"]).to_owned())).or_default() += f64_of(&p["gpu_hours"]);
    }
    for p in points {
        let key = (point_day(p), str_of(&p["state"]).to_owned());
        assert!(close(f64_of(&p["gpu_hours"]), by_day[&key]), "daily point {p}: its hours sum to {}", by_day[&key]);
    }
    // A time inside an hour: the hours starting at or after it.
    let mid = hours[1].replace(":00:00Z", ":30:00Z");
    let late = get_json(&server, &format!("/api/v1/states?step=1h&from={mid}"));
    let earliest = late["points"].as_array().unwrap().iter().map(|p| str_of(&p["time"]).to_owned()).min().unwrap();
    assert_eq!(earliest, hours[2], "from={mid}");
    assert_totals(&state_totals(&late), &stored_state_totals(store, &format!("WHERE hour >= '{}'", hours[2])), "states from a time inside an hour");

    // Weekly points: no more of them, aligned on 7-day bins from 1970-01-01, each the sum of
    // the daily points it covers.
    let weekly = get_json(&server, "/api/v1/states?step=7d");
    assert_eq!(weekly["step_hours"], 168);
    let weekly_points = weekly["points"].as_array().unwrap();
    assert!(weekly_points.len() <= points.len(), "{} weekly points > {} daily", weekly_points.len(), points.len());
    assert_totals(&state_totals(&weekly), &state_totals(&daily), "states step=7d against step=1d");
    let epoch = NaiveDate::from_ymd_opt(1970, 1, 1).unwrap();
    let mut binned: BTreeMap<(NaiveDate, String), f64> = BTreeMap::new();
    for p in points {
        let days_since = (point_day(p) - epoch).num_days();
        let bin = epoch + chrono::Days::new((days_since - days_since.rem_euclid(7)) as u64);
        *binned.entry((bin, str_of(&p["state"]).to_owned())).or_default() += p["gpu_hours"].as_f64().unwrap_or(0.0);
    }
    assert_eq!(binned.len(), weekly_points.len(), "weekly points against the daily points binned by week");
    for p in weekly_points {
        let key = (point_day(p), str_of(&p["state"]).to_owned());
        let expected = binned.get(&key).unwrap_or_else(|| panic!("weekly point {p} matches no week of daily points"));
        assert!(close(f64_of(&p["gpu_hours"]), *expected), "weekly point {p}: daily points sum to {expected}");
    }

    // Bad parameters: 400 (or 404 for a well-formed month without data), always JSON `error`.
    let bad = [
        ("/api/v1/states?step=90m", 400),
        ("/api/v1/states?step=abc", 400),
        ("/api/v1/states?step=0d", 400),
        ("/api/v1/states?step=367d", 400),
        ("/api/v1/states?from=yesterday", 400),
        ("/api/v1/states?to=2026-02-30", 400),
        ("/api/v1/states?from=2026-10-31&to=2026-10-31", 400),
        ("/api/v1/states?from=2026-11-01&to=2026-10-31", 400),
        ("/api/v1/fleet?step=90m", 400),
        ("/api/v1/fleet?from=2026-11-01&to=2026-10-31", 400),
        ("/api/v1/chargeback?month=2026-13", 400),
        ("/api/v1/chargeback?month=2026-1", 400),
        ("/api/v1/chargeback?month=", 400),
        ("/api/v1/chargeback?month=1999-01", 404),
        ("/api/v1/chargeback?format=xml", 400),
        ("/api/v1/chargeback?month=2026-10&format=CSV", 400),
        ("/api/v1/report.html?month=1999-01", 404),
        ("/api/v1/report.html?format=csv", 400),
        ("/api/v1/queue?month=2026-13", 400),
        ("/api/v1/queue?month=1999-01", 404),
        ("/api/v1/failures?limit=0", 400),
        ("/api/v1/failures?limit=1001", 400),
        ("/api/v1/failures?limit=ten", 400),
        ("/api/v1/failures?month=1999-01", 404),
        ("/api/v1/no-such-endpoint", 404),
    ];
    for (path, expected) in bad {
        let (status, content_type, body) = server.get(path, Some(TOKEN));
        assert_eq!(status, expected, "GET {path}: {body}");
        assert!(content_type.starts_with("application/json"), "GET {path}: content type {content_type:?}: {body}");
        let error: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"));
        assert!(error["error"].as_str().is_some_and(|e| !e.is_empty()), "GET {path}: no error message: {body}");
    }

    // Queues: the summary table as it is stored, and the month table for each month.
    let queue = get_json(&server, "/api/v1/queue");
    assert_eq!(queue["month"], Value::Null);
    let stored = Value::Array(query(store, "SELECT * FROM queue_wait_summary ORDER BY team, cluster_queue"));
    assert!(!stored.as_array().unwrap().is_empty(), "the demo has admissions");
    assert_same(&queue["queues"], &stored, "/api/v1/queue against queue_wait_summary");
    let months: Vec<String> = query(store, "SELECT DISTINCT month FROM chargeback_monthly ORDER BY month").iter().map(|r| str_of(&r["month"]).to_owned()).collect();
    for m in &months {
        let served = get_json(&server, &format!("/api/v1/queue?month={m}"));
        assert_eq!(served["month"], m.as_str());
        let stored = Value::Array(query(store, &format!("SELECT * FROM queue_wait_monthly WHERE month = '{m}' ORDER BY team, cluster_queue")));
        assert_same(&served["queues"], &stored, &format!("/api/v1/queue?month={m} against queue_wait_monthly"));
    }

    // Failures: causes ranked by cost; the costliest runs of the month, all of them at
    // limit=1000, the top ones at a small limit.
    let mut any_cause = false;
    for m in &months {
        let served = get_json(&server, &format!("/api/v1/failures?month={m}&limit=1000"));
        assert_eq!(served["month"], m.as_str());
        let causes = served["causes"].as_array().unwrap();
        let costs: Vec<f64> = causes.iter().map(|c| f64_of(&c["cost"])).collect();
        assert!(costs.windows(2).all(|w| w[0] >= w[1]), "/api/v1/failures?month={m}: causes not by cost: {costs:?}");
        any_cause |= !causes.is_empty();
        let stored = Value::Array(query(store, &format!("SELECT * FROM failure_causes WHERE month = '{m}' ORDER BY cost DESC, gpu_hours DESC, cause")));
        assert_same(&served["causes"], &stored, &format!("/api/v1/failures?month={m} causes against failure_causes"));

        // Runs have no unique cost order (ties), so compare them keyed by run and segment.
        let key = |r: &Value| (str_of(&r["namespace"]).to_owned(), str_of(&r["run"]).to_owned(), r["segment"].as_i64().unwrap());
        let by_key = |rows: &[Value]| rows.iter().map(|r| (key(r), r.clone())).collect::<BTreeMap<_, _>>();
        let runs = served["runs"].as_array().unwrap();
        let stored_runs = query(store, &format!("SELECT * FROM run_failures WHERE to_char(ended_at, '%Y-%m') = '{m}'"));
        assert_eq!(runs.len(), stored_runs.len(), "/api/v1/failures?month={m}&limit=1000: every failed run of the month");
        let (served_map, stored_map) = (by_key(runs), by_key(&stored_runs));
        assert_eq!(served_map.keys().collect::<Vec<_>>(), stored_map.keys().collect::<Vec<_>>(), "failed runs of {m}");
        for (k, run) in &served_map {
            assert_same(run, &stored_map[k], &format!("failed run {k:?}"));
        }
        let run_costs: Vec<f64> = runs.iter().map(|r| f64_of(&r["cost"])).collect();
        assert!(run_costs.windows(2).all(|w| w[0] >= w[1]), "/api/v1/failures?month={m}: runs not by cost: {run_costs:?}");
        let top = get_json(&server, &format!("/api/v1/failures?month={m}&limit=3"));
        let top_costs: Vec<f64> = top["runs"].as_array().unwrap().iter().map(|r| f64_of(&r["cost"])).collect();
        assert_eq!(top_costs, run_costs.iter().take(3).copied().collect::<Vec<_>>(), "/api/v1/failures?month={m}&limit=3");
    }
    assert!(any_cause, "the demo has failed runs in some month");
    let busiest = get_json(&server, "/api/v1/months")["busiest"].clone();
    assert_eq!(get_json(&server, "/api/v1/failures")["month"], busiest, "failures default to the busiest month");

    // /metrics: one gauge per month, team and state or component, equal to chargeback_monthly.
    let metrics = scrape(&server);
    assert_eq!(sample_value(&metrics, "gpuledger_ledger_available", &[]), Some(1.0));
    let rows = query(store, "SELECT * FROM chargeback_monthly ORDER BY month, team");
    let states = [
        ("productive", "productive_gpu_hours"),
        ("allocated_idle", "allocated_idle_gpu_hours"),
        ("failed", "failed_gpu_hours"),
        ("preempted", "preempted_gpu_hours"),
        ("unallocated", "unallocated_gpu_hours"),
    ];
    for row in &rows {
        let (month, team) = (str_of(&row["month"]), str_of(&row["team"]));
        let total = sample_value(&metrics, "gpuledger_cost", &[("component", "total"), ("month", month), ("team", team), ("currency", "USD")]);
        // close, not ==: the stored row is read back through serde_json, whose default float
        // parsing may land one unit in the last place off a 17-digit number.
        assert!(total.is_some_and(|t| close(t, f64_of(&row["total"]))), "gpuledger_cost total {month} {team}: {total:?} != {}", row["total"]);
        for (state, column) in states {
            let hours = sample_value(&metrics, "gpuledger_gpu_hours", &[("state", state), ("month", month), ("team", team)]);
            assert!(hours.is_some_and(|h| close(h, f64_of(&row[column]))), "gpuledger_gpu_hours {month} {team} {state}: {hours:?} != {}", row[column]);
        }
    }
    let totals = metrics.samples.iter().filter(|s| s.metric == "gpuledger_cost" && s.labels.get("component") == Some("total")).count();
    assert_eq!(totals, rows.len(), "one total per chargeback row, no others");
    // The gauges summed over months and teams give the states endpoint's totals per state, and
    // each team's month gives that team's states over the month's days.
    let daily_totals = state_totals(&daily);
    for (state, _) in states {
        let gauge: f64 = metrics.samples.iter().filter(|s| s.metric == "gpuledger_gpu_hours" && s.labels.get("state") == Some(state)).map(value).sum();
        let served = daily_totals.get(state).map_or(0.0, |t| t.0);
        assert!((gauge - served).abs() <= 1e-6 * gauge.abs().max(1.0), "{state}: gauges sum to {gauge}, /api/v1/states to {served}");
    }
    for row in &rows {
        let (month, team) = (str_of(&row["month"]), str_of(&row["team"]));
        let answer = get_json(&server, &format!("/api/v1/states?team={team}&from={month}-01&to={}", next_month(month)));
        let served = state_totals(&answer);
        for (state, column) in states {
            let got = served.get(state).map_or(0.0, |t| t.0);
            assert!((got - f64_of(&row[column])).abs() <= 1e-6 * got.abs().max(1.0), "{month} {team} {state}: states endpoint {got}, chargeback_monthly {}", row[column]);
        }
    }

    // The HTML report names the month and every team of it.
    for m in &months {
        let (status, content_type, body) = server.get(&format!("/api/v1/report.html?month={m}"), Some(TOKEN));
        assert_eq!(status, 200, "report.html?month={m}: {body}");
        assert!(content_type.starts_with("text/html"), "report.html: content type {content_type:?}");
        assert!(body.to_ascii_lowercase().contains("<html"), "report.html?month={m} is not an HTML page");
        assert!(body.contains(m.as_str()), "report.html?month={m} does not name the month");
        for row in rows.iter().filter(|r| r["month"] == m.as_str()) {
            let team = str_of(&row["team"]);
            assert!(body.contains(team), "report.html?month={m} does not name team {team}");
        }
    }
    let (status, _, body) = server.get("/api/v1/report.html", Some(TOKEN));
    assert_eq!(status, 200);
    assert!(body.contains(str_of(&busiest)), "report.html without month is the busiest month's");
}

/// A query parameter given twice is a bad request like any other: 400 with a JSON `error`
/// (the API's documented error form), or accepted; never a plain-text framework message.
#[test]
fn repeated_query_parameters_get_a_json_answer() {
    let (_dir, server, _store, _config) = start();
    for path in [
        "/api/v1/chargeback?format=csv&format=json",
        "/api/v1/chargeback?month=2026-10&month=2026-11",
        "/api/v1/failures?limit=1&limit=2",
        "/api/v1/states?step=1d&step=7d",
        "/api/v1/queue?month=2026-10&month=2026-10",
        "/api/v1/report.html?month=2026-10&month=2026-11",
    ] {
        let (status, content_type, body) = server.get(path, Some(TOKEN));
        if status == 200 {
            continue;
        }
        assert_eq!(status, 400, "GET {path}: {body}");
        assert!(content_type.starts_with("application/json"), "GET {path}: 400 as {content_type:?}, not the API's JSON error: {body:?}");
        let error: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"));
        assert!(error["error"].is_string(), "GET {path}: {body}");
    }
}

/// Runs `program args` in `dir`, stopped after `limit`; (exit code, stdout + stderr).
fn run_bounded(program: &str, args: &[&str], dir: &Path, limit: Duration) -> (Option<i32>, String) {
    let log = dir.join(format!("{program}.log"));
    let out = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("{program} does not start ({e}): install it with `pip install schemathesis openapi-spec-validator`"));
    let end = Instant::now() + limit;
    let code = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    (code, std::fs::read_to_string(&log).unwrap_or_default())
}

/// The first of `names` that runs with `--version`.
fn find_program(names: &[&'static str]) -> Option<&'static str> {
    names.iter().copied().find(|n| Command::new(n).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok_and(|s| s.success()))
}

#[test]
fn openapi_document_validates_and_schemathesis_finds_no_server_error() {
    let (dir, server, _store, _config) = start();

    // The document as served, checked by the reference validator of OpenAPI 3.
    let (status, content_type, body) = server.get("/api/v1/openapi.json", None);
    assert_eq!(status, 200, "{body}");
    assert!(content_type.starts_with("application/json"), "{content_type}");
    let doc: Value = serde_json::from_str(&body).unwrap();
    assert!(doc["openapi"].as_str().is_some_and(|v| v.starts_with("3.")), "not an OpenAPI 3 document");
    let file = dir.path().join("openapi.json");
    std::fs::write(&file, &body).unwrap();
    let python = find_program(&["python3", "python"]).expect("python3 is needed for openapi-spec-validator (pip install openapi-spec-validator)");
    let (code, out) = run_bounded(python, &["-m", "openapi_spec_validator", &file.display().to_string()], dir.path(), PATIENCE);
    assert!(!out.contains("No module named"), "openapi-spec-validator is not installed: pip install openapi-spec-validator\n{out}");
    assert_eq!(code, Some(0), "openapi-spec-validator rejects /api/v1/openapi.json:\n{out}");

    // Schemathesis generates requests from the document (valid and invalid parameters) and
    // checks each answer: no 5xx, a documented status, a documented content type and a body
    // that matches the response schema. Bounded: 30 examples per operation and a fixed seed so a
    // failure reproduces; the time limits only catch a hang (a slow machine must not fail it).
    let st = find_program(&["schemathesis", "st"]).expect("schemathesis is not installed: pip install schemathesis (its CLI is `schemathesis` or `st`)");
    let url = format!("http://127.0.0.1:{}/api/v1/openapi.json", server.http_port);
    let auth = format!("Authorization: Bearer {TOKEN}");
    let request_timeout = PATIENCE.as_secs().to_string();
    let args = [
        "run",
        &url,
        "--header",
        &auth,
        "--checks",
        "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
        "--max-examples",
        "30",
        "--seed",
        "20261030",
        "--generation-database",
        "none",
        "--request-timeout",
        &request_timeout,
        "--no-color",
    ];
    let (code, out) = run_bounded(st, &args, dir.path(), 2 * PATIENCE);
    assert!(code.is_some(), "schemathesis ran longer than {:?}:\n{out}", 2 * PATIENCE);
    // A token schemathesis failed to send would turn every answer into a documented 401 and
    // pass: the server's counters show that its requests got through (it leaves the token out
    // of a few on purpose, to see them refused).
    let metrics = scrape(&server);
    let requests = sample_value(&metrics, "gpuledger_http_requests_total", &[]).unwrap();
    let refused = sample_value(&metrics, "gpuledger_http_unauthorized_total", &[]).unwrap();
    assert!(requests - refused >= 50.0, "schemathesis made {requests} API requests, {refused} refused for the token:\n{out}");
    assert_eq!(code, Some(0), "schemathesis found problems (exit {code:?}):\n{out}\nserver log:\n{}", server.log());
    assert!(out.contains("passed"), "schemathesis ran no test case:\n{out}");
}

/// Reports (several statements each) run under the same per-statement limits as one SQL
/// statement. At the smallest limits the server takes (10 ms and 1 MiB), a report of the demo
/// store, half a dozen statements over Parquet files, cannot finish: the chargeback, the HTML
/// report and the month list are refused (504 past the time, 503 past the memory) with the
/// limit named, one request after the other. (They used to run on the shared session,
/// outside every limit, and answered 200.)
#[test]
fn report_requests_are_cut_off_by_the_limits() {
    let (store, base) = demo_store();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(store, &serve_config(tmp.path(), base, "query_timeout = \"10ms\"\nmemory_limit = \"1MiB\""));
    for path in ["/api/v1/chargeback?format=json", "/api/v1/chargeback?format=csv", "/api/v1/report.html", "/api/v1/months"] {
        let (status, _, body) = server.get(path, Some(TOKEN));
        assert!(status == 503 || status == 504, "GET {path}: {status} {body}\nserver log:\n{}", server.log());
        assert!(body.contains("query_timeout") || body.contains("memory_limit"), "GET {path}: {body}");
    }
}

/// `/api/v1/fleet` answers from the hourly rollups: against `node_hourly` read from the store,
/// per node (XID samples, hottest reading, most GPUs), hour by hour (one point per node and hour)
/// and for one node and day.
#[test]
fn fleet_answers_from_the_hourly_rollups() {
    let (_dir, server, store, _config) = start();
    let per_node: BTreeMap<String, (f64, f64, f64)> = query(store, "SELECT hostname, SUM(xid_samples) AS x, MAX(max_temp_c) AS t, MAX(gpus) AS g FROM node_hourly GROUP BY hostname")
        .iter()
        .map(|r| (str_of(&r["hostname"]).to_owned(), (f64_of(&r["x"]), f64_of(&r["t"]), f64_of(&r["g"]))))
        .collect();
    assert!(per_node.len() >= 3 && per_node.values().any(|v| v.0 > 0.0), "the demo has nodes and XID errors: {per_node:?}");

    let daily = get_json(&server, "/api/v1/fleet?step=1d");
    assert_eq!(daily["step_hours"], 24);
    let mut served: BTreeMap<String, (f64, f64, f64)> = BTreeMap::new();
    for p in daily["points"].as_array().unwrap() {
        point_day(p);
        let e = served.entry(str_of(&p["node"]).to_owned()).or_insert((0.0, f64::MIN, 0.0));
        e.0 += f64_of(&p["xid_samples"]);
        e.1 = e.1.max(f64_of(&p["max_temp_c"]));
        e.2 = e.2.max(f64_of(&p["gpus"]));
        let activity = f64_of(&p["activity"]);
        assert!((0.0..=100.0).contains(&activity), "{p}");
    }
    assert_eq!(served, per_node, "daily points per node against node_hourly");

    let hours = query(store, "SELECT COUNT(*) AS n FROM node_hourly")[0]["n"].as_i64().unwrap();
    let hourly = get_json(&server, "/api/v1/fleet?step=1h");
    assert_eq!(hourly["points"].as_array().unwrap().len() as i64, hours, "one point per node and hour");

    let node = per_node.keys().next().unwrap();
    let day = query(store, &format!("SELECT MIN(date) AS d FROM node_hourly WHERE hostname = '{node}'"))[0]["d"].as_str().unwrap().to_owned();
    let next = NaiveDate::parse_from_str(&day, "%Y-%m-%d").unwrap().succ_opt().unwrap();
    let want = query(store, &format!("SELECT COUNT(*) AS n FROM node_hourly WHERE hostname = '{node}' AND date = '{day}'"))[0]["n"].as_i64().unwrap();
    let one = get_json(&server, &format!("/api/v1/fleet?node={node}&step=1h&from={day}&to={next}"));
    let points = one["points"].as_array().unwrap();
    assert_eq!(points.len() as i64, want, "{one}");
    assert!(points.iter().all(|p| p["node"] == node.as_str()), "{one}");
}

/// A server whose configuration names another idle policy than the one the stored figures were
/// computed with labels them with theirs (the ledger's run record), answers what `gpuledger
/// report` answers with the ledger's own configuration, and says on `/healthz` how they differ.
#[test]
fn a_server_configured_with_another_idle_policy_labels_the_stored_figures_with_theirs() {
    let (store, demo_config) = demo_store();
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(demo_config).unwrap();
    assert!(text.contains("idle_policy = \"platform\""), "the demo's ledger runs with the platform policy:\n{text}");
    let share = dir.path().join("share.toml");
    std::fs::write(&share, text.replace("idle_policy = \"platform\"", "idle_policy = \"share\"")).unwrap();
    let config = serve_config(dir.path(), &share, "");
    let server = Server::start(store, &config);

    let month = str_of(&get_json(&server, "/api/v1/months")["busiest"]).to_owned();
    let served = get_json(&server, &format!("/api/v1/chargeback?month={month}"));
    assert_eq!(str_of(&served["idle_policy"]), "platform", "the label of the stored figures: {served:#}");
    let reference: Value = serde_json::from_str(&report(store, demo_config, Some(&month), "json")).unwrap();
    assert_same(&served, &reference, "the served chargeback against `gpuledger report` with the ledger's own configuration");

    let (status, _, body) = server.get("/healthz", None);
    assert_eq!(status, 200, "/healthz: {body}");
    let note = body.lines().nth(1).unwrap_or_else(|| panic!("/healthz says nothing of the difference: {body:?}"));
    assert!(note.starts_with("note: ") && note.contains("idle policy platform") && note.contains("says share"), "/healthz: {body:?}");
}

/// Hostile HTTP clients (issue 46): 1,000 connections that send half a request and wait hold
/// no one else out (the API answers beside them), and the server closes each once it has moved
/// no byte for `http_idle_timeout`, instead of keeping their file descriptors for ever.
#[test]
fn half_sent_connections_neither_block_the_api_nor_stay_open() {
    use std::io::{Read, Write};
    let (store, demo_config) = demo_store();
    let dir = tempfile::tempdir().unwrap();
    let config = serve_config(dir.path(), demo_config, "http_idle_timeout = \"2s\"\n");
    let server = Server::start(store, &config);
    let mut held = Vec::new();
    for i in 0..1000 {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", server.http_port)).unwrap_or_else(|e| panic!("connection {i}: {e}"));
        // No blank line: the headers never end.
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n").unwrap();
        held.push(s);
    }
    let (status, _, body) = server.get("/healthz", None);
    assert_eq!(status, 200, "{body}\nserver log:\n{}", server.log());
    for (i, s) in held.iter_mut().enumerate() {
        s.set_read_timeout(Some(PATIENCE)).unwrap();
        let mut rest = Vec::new();
        match s.read_to_end(&mut rest) {
            // Closed by the server (a reset is a close too).
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("connection {i} still open after {PATIENCE:?}: {e}"),
        }
    }
}
