//! `gpuledger collect` against loopback servers: the replay API server (real `kube` client),
//! DCGM exporter endpoints, faults, `kill -9`, and live == offline.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::replay::{ApiServer, Behaviour, Collector, DcgmServer, Mode, Served, wait_for, wait_until};
use crate::util;

/// A simulated capture (objects + DCGM text), made once per test.
fn simulate(dir: &Path, gpus: &str, interval: &str) -> PathBuf {
    let cap = dir.join("cap");
    util::run(&["simulate", "--out", &cap.display().to_string(), "--gpus", gpus, "--days", "1", "--seed", "11", "--scrape-interval", interval], 0);
    cap
}

fn read_objects(path: &Path) -> Vec<(String, Value)> {
    let bytes = std::fs::read(path).unwrap();
    let mut diags = gpuledger_collector::Diagnostics::new();
    let out = gpuledger_collector::sources::kubernetes_file::read_objects(path, &bytes, 0, &mut diags);
    assert!(diags.errors.is_empty(), "{:?}", diags.errors);
    out.into_iter().map(|v| (v.event_type, v.object)).collect()
}

/// Which API versions the replay server serves.
struct Flavour {
    kueue: &'static str,
    /// events.k8s.io/v1 when true, else only core v1 Events.
    events_v1: bool,
}

/// Loads the simulated cluster's objects into the replay server, the way an API server holds
/// them: lists for nodes, namespaces and Kueue's queues and flavors; watch streams for pods,
/// jobs, Workloads and Events. Returns the number of versions.
fn load_cluster(api: &ApiServer, cap: &Path, f: &Flavour) -> usize {
    let k = cap.join("kubernetes");
    let stream = |v: Vec<(String, Value)>| v.into_iter().map(|(t, o)| (if t == "SNAPSHOT" { "ADDED".to_owned() } else { t }, o)).collect::<Vec<_>>();
    let mut n = 0;
    let mut add = |path: &str, kind: &str, av: &str, mode: Mode, ev: Vec<(String, Value)>| {
        n += ev.len();
        api.add(path, kind, av, mode, ev);
    };
    add("/api/v1/pods", "Pod", "v1", Mode::Stream, stream(read_objects(&k.join("pods.watch.jsonl"))));
    add("/apis/batch/v1/jobs", "Job", "batch/v1", Mode::Stream, stream(read_objects(&k.join("jobs.watch.jsonl"))));
    let kv = format!("kueue.x-k8s.io/{}", f.kueue);
    add(&format!("/apis/kueue.x-k8s.io/{}/workloads", f.kueue), "Workload", &kv, Mode::Stream, stream(read_objects(&k.join("workloads.watch.json"))));
    if f.events_v1 {
        add("/apis/events.k8s.io/v1/events", "Event", "events.k8s.io/v1", Mode::Stream, stream(read_objects(&k.join("events-v1.jsonl"))));
    } else {
        add("/api/v1/events", "Event", "v1", Mode::Stream, stream(read_objects(&k.join("events.json"))));
    }
    add("/api/v1/nodes", "Node", "v1", Mode::Snapshot, read_objects(&k.join("nodes.json")));
    add("/api/v1/namespaces", "Namespace", "v1", Mode::Snapshot, read_objects(&k.join("namespaces.yaml")));
    let kueue = read_objects(&k.join("kueue.yaml"));
    for (kind, plural) in [("ResourceFlavor", "resourceflavors"), ("ClusterQueue", "clusterqueues"), ("LocalQueue", "localqueues")] {
        let objs: Vec<_> = kueue.iter().filter(|(_, o)| o["kind"] == kind).cloned().collect();
        assert!(!objs.is_empty(), "simulator wrote no {kind}");
        add(&format!("/apis/kueue.x-k8s.io/{}/{plural}", f.kueue), kind, &kv, Mode::Snapshot, objs);
    }
    n
}

/// Writes what the replay server serves as capture files (lists as kubectl Lists, streams as
/// watch-event lines), for offline ingest of the same facts.
fn write_served_capture(api: &ApiServer, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    api.with_resources(|rs| {
        for (i, (path, r)) in rs.iter().enumerate() {
            let name = path.rsplit('/').next().unwrap();
            let text = match r.mode {
                Mode::Snapshot => json!({"apiVersion": "v1", "kind": "List", "items": r.events.iter().map(|(_, o, _)| o.clone()).collect::<Vec<_>>()}).to_string(),
                Mode::Stream => r.events.iter().map(|(t, o, _)| format!("{}\n", json!({"type": t, "object": o}))).collect(),
            };
            let ext = if r.mode == Mode::Snapshot { "json" } else { "watch.jsonl" };
            std::fs::write(dir.join(format!("{i:02}-{name}.{ext}")), text).unwrap();
        }
    });
}

/// Every DCGM sample of the capture, per host, as timestamped lines grouped by sample time.
fn dcgm_bodies(cap: &Path) -> BTreeMap<String, Vec<(i64, String)>> {
    let mut out = BTreeMap::new();
    for host in std::fs::read_dir(cap.join("dcgm")).unwrap() {
        let host = host.unwrap().path();
        let mut by_ts: BTreeMap<i64, String> = BTreeMap::new();
        for f in std::fs::read_dir(&host).unwrap() {
            let f = f.unwrap().path();
            let file_ts: Option<i64> = f.file_stem().and_then(|s| s.to_str()).and_then(|s| s.parse().ok());
            for line in std::fs::read_to_string(&f).unwrap().lines() {
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let (l, ts) = match file_ts {
                    Some(ts) => (format!("{line} {ts}"), ts),
                    None => (line.to_owned(), line.rsplit(' ').next().unwrap().parse().unwrap()),
                };
                let body = by_ts.entry(ts).or_default();
                body.push_str(&l);
                body.push('\n');
            }
        }
        out.insert(host.file_name().unwrap().to_string_lossy().into_owned(), by_ts.into_iter().collect());
    }
    out
}

fn config(dir: &Path, extra: &str) -> PathBuf {
    let p = dir.join("gpuledger.toml");
    // Defaults for these tests unless `extra` sets them.
    let mut text = String::from("[prices]\ndefault = 2.0\n\n[collector]\n");
    for (key, line) in [("flush_interval", "flush_interval = \"1s\"\n"), ("dcgm_discovery", "dcgm_discovery = false\n")] {
        if !extra.contains(key) {
            text.push_str(line);
        }
    }
    text.push_str(extra);
    std::fs::write(&p, text).unwrap();
    p
}

/// Rows of a table as sorted JSON strings, without `seq` (a per-stream position offline, a
/// per-run counter live: compared separately, by the order it gives).
fn table_rows(store: &Path, table: &gpuledger_schemas::Table) -> Vec<String> {
    let cols: Vec<&str> = table.columns.iter().map(|c| c.name).filter(|c| *c != "seq").collect();
    let rows = util::query(store, &format!("SELECT {} FROM {}", cols.join(", "), table.name));
    let mut out: Vec<String> = rows.iter().map(|r| r.to_string()).collect();
    out.sort();
    out
}

/// Per kind, the (uid, resource_version, event_type) sequence in (observed_at, seq) order.
fn version_order(store: &Path) -> Vec<Value> {
    util::query(store, "SELECT kind, uid, resource_version, event_type FROM k8s_objects ORDER BY kind, observed_at, seq")
}

#[test]
fn live_collection_equals_offline_ingest_of_the_same_capture() {
    let dir = tempfile::tempdir().unwrap();
    let cap = simulate(dir.path(), "8", "300s");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = ApiServer::start(&rt, 40);
    let versions = load_cluster(&api, &cap, &Flavour { kueue: "v1beta2", events_v1: true });
    let served_cap = dir.path().join("served");
    write_served_capture(&api, &served_cap.join("kubernetes"));

    // One exporter per host, answering a few sample times per scrape, with their timestamps.
    let dcgm = DcgmServer::start(&rt);
    let bodies = dcgm_bodies(&cap);
    let mut endpoints = Vec::new();
    let mut n_bodies = BTreeMap::new();
    std::fs::create_dir_all(served_cap.join("dcgm")).unwrap();
    for (host, times) in &bodies {
        let chunks: Vec<String> = times.chunks(12).map(|c| c.iter().map(|(_, b)| b.as_str()).collect()).collect();
        std::fs::write(served_cap.join("dcgm").join(format!("{host}.prom")), chunks.concat()).unwrap();
        n_bodies.insert(host.clone(), chunks.len());
        endpoints.push(dcgm.add(host, Behaviour::Body(Box::new(move |n| chunks.get(n).cloned()))));
    }
    assert!(bodies.len() >= 2 && versions > 1000, "{} hosts, {versions} versions", bodies.len());

    let cfg = config(dir.path(), &format!("scrape_interval = \"500ms\"\ndcgm_endpoints = {}\n", serde_json::to_string(&endpoints).unwrap()));
    let live = dir.path().join("live");
    let kube = api.kubeconfig(dir.path());
    let c = Collector::start(&cfg, &live, Some(&kube), &dir.path().join("collect.log"));
    wait_until("every object version and DCGM body served", Duration::from_secs(120), || {
        let served = api.served().len();
        let behind: Vec<String> = n_bodies.iter().filter(|(h, n)| dcgm.log(h).len() < **n).map(|(h, n)| format!("{h} {}/{n}", dcgm.log(h).len())).collect();
        if served == versions && behind.is_empty() { Ok(()) } else { Err(format!("{served}/{versions} versions served ({}); exporters behind: {behind:?}; log:\n{}", api.progress(), std::fs::read_to_string(dir.path().join("collect.log")).unwrap_or_default())) }
    });
    wait_for("every version recorded", Duration::from_secs(30), || c.metric("gpuledger_watch_object_versions_total") as usize == versions);
    c.stop();

    let offline = dir.path().join("offline");
    util::ingest(&[&served_cap], &offline);
    for table in gpuledger_schemas::TABLES {
        let (a, b) = (table_rows(&live, table), table_rows(&offline, table));
        assert!(!b.is_empty() || table.name == "metric_samples", "offline {} is empty", table.name);
        assert_eq!(a.len(), b.len(), "{}: live {} rows, offline {}", table.name, a.len(), b.len());
        if let Some(i) = a.iter().zip(&b).position(|(x, y)| x != y) {
            panic!("{}: first difference\n live    {}\n offline {}", table.name, a[i], b[i]);
        }
    }
    assert_eq!(version_order(&live), version_order(&offline), "versions are ordered alike");
    // Nothing is left in the WAL after a clean stop.
    let wal: Vec<_> = std::fs::read_dir(live.join("wal")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).filter(|n| n.ends_with(".wal")).collect();
    assert!(wal.is_empty(), "segments left: {wal:?}");
}

/// Store rows of `k8s_objects` as served tuples (path comes from the kind).
fn stored_versions(store: &Path, path_of_kind: &BTreeMap<String, String>) -> Vec<Served> {
    util::query(store, "SELECT kind, uid, namespace, name, resource_version, event_type FROM k8s_objects")
        .into_iter()
        .map(|r| {
            let kind = r["kind"].as_str().unwrap();
            let key = r["uid"].as_str().map(str::to_owned).unwrap_or_else(|| format!("{}/{}", r["namespace"].as_str().unwrap_or(""), r["name"].as_str().unwrap()));
            (path_of_kind[kind].clone(), key, r["resource_version"].as_str().unwrap().to_owned(), r["event_type"] == "DELETED")
        })
        .collect()
}

/// The collector's name for the resource served at `path` (its key in the WAL's positions).
fn resource_id(path: &str) -> String {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match parts.as_slice() {
        // Core Events stand in for events.k8s.io ones: same watch, same position.
        ["api", _, "events"] => "events.k8s.io/events".to_owned(),
        ["api", _, plural] => (*plural).to_owned(),
        ["apis", group, _, plural] => format!("{group}/{plural}"),
        _ => panic!("unexpected path {path}"),
    }
}

/// Every version served up to the position the collector saved (durable in the store after
/// its clean stop) is stored exactly once, and nothing stored was never served. Versions
/// served after that position were still on their way when the collector stopped: the next
/// start resumes from the position and is served them again.
fn assert_exactly_once(store: &Path, api: &ApiServer) -> BTreeMap<String, u64> {
    let positions: BTreeMap<String, String> = serde_json::from_slice(&std::fs::read(store.join("wal/positions.json")).unwrap()).unwrap();
    let positions: BTreeMap<String, u64> = positions.into_iter().map(|(k, v)| (k, v.parse().unwrap())).collect();
    let path_of_kind: BTreeMap<String, String> = api.with_resources(|rs| rs.iter().map(|(p, r)| (r.kind.clone(), p.clone())).collect());
    let stored = stored_versions(store, &path_of_kind);
    let mut seen = BTreeSet::new();
    let dups: Vec<&Served> = stored.iter().filter(|v| !seen.insert((*v).clone())).collect();
    assert!(dups.is_empty(), "{} versions stored twice, e.g. {:?}", dups.len(), &dups[..dups.len().min(3)]);
    let served = api.served();
    let required: BTreeSet<Served> = served.iter().filter(|v| v.2.parse::<u64>().unwrap() <= positions.get(&resource_id(&v.0)).copied().unwrap_or(0)).cloned().collect();
    let missing: Vec<&Served> = required.difference(&seen).collect();
    let extra: Vec<&Served> = seen.difference(&served).collect();
    assert!(missing.is_empty(), "{} served versions not stored, e.g. {:?}", missing.len(), &missing[..missing.len().min(3)]);
    assert!(extra.is_empty(), "{} stored versions never served, e.g. {:?}", extra.len(), &extra[..extra.len().min(3)]);
    assert!(required.len() * 10 >= served.len() * 9, "only {} of {} served versions lie before the saved positions {positions:?}", required.len(), served.len());
    positions
}

/// Waits until the collector records nothing new for a second.
fn wait_quiet(c: &Collector) {
    let mut last = -1.0;
    wait_for("the collector to go quiet", Duration::from_secs(120), || {
        let now = c.metric("gpuledger_watch_object_versions_total");
        let quiet = now == last;
        last = now;
        if !quiet {
            std::thread::sleep(Duration::from_millis(950));
        }
        quiet
    });
}

#[test]
fn watches_recover_from_drops_gone_malformed_events_and_an_outage() {
    let dir = tempfile::tempdir().unwrap();
    let cap = simulate(dir.path(), "8", "300s");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = ApiServer::start(&rt, 15);
    // The older Kueue API and core Events only: both fallbacks are taken.
    load_cluster(&api, &cap, &Flavour { kueue: "v1beta1", events_v1: false });
    let cfg = config(dir.path(), "kubernetes = true\ndcgm_endpoints = [\"http://127.0.0.1:1/metrics\"]\n");
    let store = dir.path().join("store");
    let kube = api.kubeconfig(dir.path());
    let c = Collector::start(&cfg, &store, Some(&kube), &dir.path().join("collect.log"));
    let pods = "/api/v1/pods";
    let workloads = "/apis/kueue.x-k8s.io/v1beta1/workloads";
    std::thread::sleep(Duration::from_millis(400));
    api.inject_drop(pods);
    api.inject_malformed("/apis/batch/v1/jobs");
    std::thread::sleep(Duration::from_millis(400));
    api.inject_gone(workloads);
    std::thread::sleep(Duration::from_millis(400));
    api.set_outage(true);
    std::thread::sleep(Duration::from_millis(1500));
    api.set_outage(false);
    wait_until("the collector to catch up", Duration::from_secs(180), || if api.caught_up() { Ok(()) } else { Err(api.progress()) });
    wait_quiet(&c);
    let restarts = c.metric("gpuledger_watch_restarts_total{resource=\"pods\",reason=\"resumed\"}");
    let relisted = c.metric("gpuledger_watch_restarts_total{resource=\"kueue.x-k8s.io/workloads\",reason=\"relisted\"}");
    let failed = c.metric("gpuledger_watch_restarts_total{resource=\"pods\",reason=\"failed\"}");
    let malformed = c.metric("gpuledger_rejected_total{source=\"batch/jobs\"");
    let text = c.get("/metrics").unwrap().1;
    c.stop();
    let text: String = text.lines().filter(|l| l.contains("watch_restarts") || l.contains("rejected")).map(|l| format!("{l}\n")).collect();
    let text = format!("{text}\n{}", std::fs::read_to_string(dir.path().join("collect.log")).unwrap());
    assert!(restarts >= 1.0, "the dropped pods watch was resumed ({restarts})\n{text}");
    assert!(relisted >= 1.0, "410 Gone made the workloads watch list again ({relisted})\n{text}");
    assert!(failed >= 1.0, "the outage made the pods watch back off ({failed})\n{text}");
    assert_eq!(malformed, 2.0, "two malformed job events counted\n{text}");
    assert!(api.requests("LIST /apis/kueue.x-k8s.io/v1beta2/workloads") >= 1, "v1beta2 was tried first");
    assert!(api.requests("LIST /apis/events.k8s.io/v1/events") >= 1, "events.k8s.io was tried first");
    assert!(api.requests("WATCH /api/v1/events") >= 1, "core events are watched instead");
    // A resume after a drop or an outage asks for the versions after the last one seen: the
    // server never has to list pods again for them.
    assert_eq!(api.requests("LIST /api/v1/pods"), 2, "pods: one probe, one list, then only watches");
    let positions = assert_exactly_once(&store, &api);
    // The collector got everything: each stream's saved position is its last event.
    api.with_resources(|rs| {
        for (path, r) in rs {
            if r.mode == Mode::Stream {
                assert_eq!(positions.get(&resource_id(path)).copied(), r.events.last().map(|e| e.2), "{path}");
            }
        }
    });
    let log = std::fs::read_to_string(dir.path().join("collect.log")).unwrap();
    assert!(log.contains("410 Gone"), "{log}");
}

/// An exporter body of `gpus` GPUs whose utilisation is the request number: which scrapes landed
/// can be read back from the store.
fn marked_body(host: &str, gpus: usize, n: usize) -> String {
    let mut s = String::from("# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n");
    for g in 0..gpus {
        s.push_str(&format!("DCGM_FI_DEV_GPU_UTIL{{gpu=\"{g}\",UUID=\"GPU-{host}-{g}\",device=\"nvidia{g}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"{host}\"}} {n}\n"));
        s.push_str(&format!("DCGM_FI_DEV_FB_USED{{gpu=\"{g}\",UUID=\"GPU-{host}-{g}\",device=\"nvidia{g}\",modelName=\"NVIDIA H100 80GB HBM3\",Hostname=\"{host}\"}} {}\n", 1000 + g));
    }
    s
}

#[test]
fn kill_9_at_random_moments_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cap = simulate(dir.path(), "8", "300s");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = ApiServer::start(&rt, 10);
    load_cluster(&api, &cap, &Flavour { kueue: "v1beta2", events_v1: true });
    // The exporters get their own runtime: the API server's streaming must not delay them.
    let rt2 = tokio::runtime::Runtime::new().unwrap();
    let dcgm = DcgmServer::start(&rt2);
    let hosts = ["node-a", "node-b", "node-c"];
    let endpoints: Vec<String> = hosts.iter().map(|h| {
        let host = h.to_string();
        dcgm.add(h, Behaviour::Body(Box::new(move |n| Some(marked_body(&host, 4, n)))))
    }).collect();
    let cfg = config(dir.path(), &format!("scrape_interval = \"300ms\"\nflush_interval = \"300ms\"\ndcgm_endpoints = {}\n", serde_json::to_string(&endpoints).unwrap()));
    let store = dir.path().join("store");
    let kube = api.kubeconfig(dir.path());
    let log = dir.path().join("collect.log");
    // Kill times from a fixed seed: varied, repeatable.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut kills = Vec::new();
    for _ in 0..5 {
        let c = Collector::start(&cfg, &store, Some(&kube), &log);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let wait = 300 + x % 1200;
        std::thread::sleep(Duration::from_millis(wait));
        kills.push(now_ms());
        c.kill9();
    }
    let c = Collector::start(&cfg, &store, Some(&kube), &log);
    wait_until("the collector to catch up", Duration::from_secs(180), || if api.caught_up() { Ok(()) } else { Err(api.progress()) });
    wait_quiet(&c);
    c.stop();
    let replays = std::fs::read_to_string(&log).unwrap().matches("replaying").count();
    assert!(replays >= 3, "most kills left a WAL to replay ({replays} replays)");

    assert_exactly_once(&store, &api);

    // Samples: each answered scrape is stored once per GPU, except scrapes received shortly
    // before a kill: still queued for the WAL (the queue can be a second deep in a debug build
    // while the first lists are written). Nothing answered after the last start is lost: that
    // run ends with SIGTERM, which flushes everything.
    let last_start = *kills.last().unwrap();
    for h in hosts {
        let rows = util::query(&store, &format!("SELECT gpu_util AS n, count(*) AS gpus FROM gpu_samples WHERE hostname = '{h}' GROUP BY gpu_util"));
        let stored: BTreeMap<usize, i64> = rows.iter().map(|r| (r["n"].as_f64().unwrap() as usize, r["gpus"].as_i64().unwrap())).collect();
        assert!(stored.values().all(|g| *g == 4), "{h}: a scrape stored twice or partly: {stored:?}");
        let answered = dcgm.log(h);
        let mut lost = 0;
        for (_, end, n) in &answered {
            if stored.contains_key(n) {
                continue;
            }
            lost += 1;
            assert!(*end < last_start, "{h}: scrape {n} answered at {end}, after the last restart, is lost");
            let queued = kills.iter().any(|k| *end <= *k + 50 && *k - *end < 2_000);
            assert!(queued, "{h}: scrape {n} answered at {end} is lost though no kill followed within 2 s (kills {kills:?})");
        }
        let invented: Vec<_> = stored.keys().filter(|n| !answered.iter().any(|(_, _, m)| m == *n)).collect();
        assert!(invented.is_empty(), "{h}: stored scrapes never answered: {invented:?}");
        assert!(answered.len() > 20 && lost * 4 < answered.len(), "{h}: {lost} of {} answered scrapes lost", answered.len());
        eprintln!("{h}: {} scrapes answered, {lost} lost in the queue at {} kills", answered.len(), kills.len());
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

#[test]
fn a_slow_a_garbage_and_a_dead_exporter_never_hold_up_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dcgm = DcgmServer::start(&rt);
    let real = std::fs::read_to_string(util::fixture("dcgm-metrics/h100-8gpu-sampled-with-pod-uid-label.prom")).unwrap();
    let real_rows = {
        // GPU rows of one scrape, counted by ingesting the same body offline.
        let f = dir.path().join("one").join("1790000000000.prom");
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(&f, &real).unwrap();
        let s = dir.path().join("one-store");
        util::ingest(&[f.parent().unwrap()], &s);
        util::count(&s, "SELECT count(*) AS n FROM gpu_samples")
    };
    assert!(real_rows > 0);
    let real_url = dcgm.add("real", Behaviour::Body(Box::new(move |_| Some(real.clone()))));
    let sim_url = dcgm.add("sim", Behaviour::Body(Box::new(|n| Some(marked_body("sim-node", 2, n)))));
    let slow_url = dcgm.add("slow", Behaviour::Slow(Duration::from_secs(5), marked_body("slow-node", 1, 0)));
    let garbage_url = dcgm.add("garbage", Behaviour::Garbage);
    let dead_url = format!("http://127.0.0.1:{}/metrics", crate::replay::free_port());
    let all = [&real_url, &sim_url, &slow_url, &garbage_url, &dead_url];
    let cfg = config(dir.path(), &format!("kubernetes = false\nscrape_interval = \"100ms\"\nscrape_timeout = \"300ms\"\ndcgm_endpoints = {}\n", serde_json::to_string(&all).unwrap()));
    let store = dir.path().join("store");
    let c = Collector::start(&cfg, &store, None, &dir.path().join("collect.log"));
    std::thread::sleep(Duration::from_millis(2500));
    let metrics = c.get("/metrics").unwrap().1;
    c.stop();

    let ok = |u: &str| crate::replay::metric_in(&metrics, &format!("gpuledger_scrapes_total{{endpoint=\"{u}\",result=\"ok\"}}"));
    let failed = |u: &str| crate::replay::metric_in(&metrics, &format!("gpuledger_scrapes_total{{endpoint=\"{u}\",result=\"failed\"}}"));
    // 2.5 s at 100 ms is 25 slots: the healthy endpoints kept (most of) their pace while the
    // slow one took 300 ms per try (a debug build on a shared machine misses a few slots).
    assert!(ok(&real_url) >= 10.0 && ok(&sim_url) >= 10.0, "real {} sim {}\n{metrics}", ok(&real_url), ok(&sim_url));
    assert_eq!(ok(&slow_url), 0.0);
    assert!(failed(&slow_url) >= 2.0, "the slow endpoint times out at 300 ms, over and over");
    assert!(failed(&garbage_url) >= 8.0 && failed(&dead_url) >= 8.0, "garbage {} dead {}", failed(&garbage_url), failed(&dead_url));
    assert!(metrics.contains("gpuledger_rejected_total{source=\"") && metrics.contains("/garbage/metrics\""), "garbage lines are counted");

    // Every answered scrape of the healthy endpoints is in the store, stamped with a time
    // between the request's start and the answer (the scrape time is taken when sending).
    for (name, gpus) in [("sim", 2i64)] {
        let log = dcgm.log(name);
        let rows = util::query(&store, "SELECT gpu_util AS n, count(*) AS g, min(epoch_ms(ts)) AS t FROM gpu_samples WHERE hostname = 'sim-node' GROUP BY gpu_util");
        assert_eq!(rows.len(), log.len(), "{name}: one stored scrape per answered request");
        for r in rows {
            let n = r["n"].as_f64().unwrap() as usize;
            let (start, end, _) = log.iter().find(|(_, _, m)| *m == n).unwrap();
            let t = r["t"].as_i64().unwrap();
            assert_eq!(r["g"].as_i64().unwrap(), gpus);
            assert!(*start - 50 <= t && t <= *end, "{name}: scrape {n} stamped {t}, answered between {start} and {end}");
        }
    }
    let real_log = dcgm.log("real");
    let real_stored = util::count(&store, "SELECT count(*) AS n FROM gpu_samples WHERE hostname NOT IN ('sim-node', 'slow-node')");
    assert_eq!(real_stored, real_rows * real_log.len() as i64, "every real-fixture scrape landed whole");
    assert_eq!(util::count(&store, "SELECT count(*) AS n FROM gpu_samples WHERE hostname = 'slow-node'"), 0);
}

#[test]
fn the_example_configuration_has_a_valid_collector_section() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/gpuledger.toml");
    let c = gpuledger_collector::live::CollectorConfig::load(&path).unwrap();
    // The documented defaults are the real ones.
    let d = gpuledger_collector::live::CollectorConfig::default();
    assert_eq!((c.scrape_interval, c.scrape_timeout, c.flush_interval, c.flush_rows), (d.scrape_interval, d.scrape_timeout, d.flush_interval, d.flush_rows));
    assert_eq!((c.dcgm_selector.as_str(), c.dcgm_port, c.listen, c.wal_dir.clone()), (d.dcgm_selector.as_str(), d.dcgm_port, d.listen, d.wal_dir.clone()));
    assert_eq!(c.dcgm_endpoints, ["http://10.0.0.5:9400/metrics"]);
    // And the ledger still accepts the file with the section in it.
    gpuledger_ledger::config::Config::load(&path).unwrap();
}

#[test]
fn collect_refuses_a_bad_config_and_missing_cluster_access_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[collector]\n\nscrape_interval = \"30\"\n").unwrap();
    let out = util::run(&["collect", "--config", &bad.display().to_string(), "--store", &dir.path().join("s").display().to_string()], 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.toml:3: collector.scrape_interval: \"30\" is not a duration"), "{err}");
    // kubernetes = true (the default) without any way to reach a cluster: a clear refusal,
    // before the store is created.
    let out = util::bin()
        .args(["collect", "--store", &dir.path().join("s").display().to_string(), "--listen", &format!("127.0.0.1:{}", crate::replay::free_port())])
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no Kubernetes API access") && err.contains("kubernetes = false"), "{err}");
    assert!(!dir.path().join("s").exists(), "the store was created anyway");
}

fn exporter_pod(name: &str, app: &str, phase: &str) -> Value {
    json!({"kind": "Pod", "metadata": {"name": name, "namespace": "gpu-operator", "uid": format!("uid-{name}"), "labels": {"app": app},
           "creationTimestamp": "2026-11-01T00:00:00Z"}, "status": {"phase": phase, "podIP": "127.0.0.1"}})
}

#[test]
fn exporters_are_discovered_through_the_api_server_and_dropped_when_their_pod_goes() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = ApiServer::start(&rt, 10);
    for (path, kind, av) in [("/api/v1/namespaces", "Namespace", "v1"), ("/api/v1/nodes", "Node", "v1"), ("/apis/batch/v1/jobs", "Job", "batch/v1"), ("/apis/events.k8s.io/v1/events", "Event", "events.k8s.io/v1")] {
        api.add(path, kind, av, Mode::Snapshot, Vec::new());
    }
    // One exporter pod, one pod that only looks like one, one exporter still starting.
    let pods = vec![
        ("SNAPSHOT".to_owned(), exporter_pod("nvidia-dcgm-exporter-abcde", "nvidia-dcgm-exporter", "Running")),
        ("SNAPSHOT".to_owned(), exporter_pod("dcgm-lookalike", "something-else", "Running")),
        ("SNAPSHOT".to_owned(), exporter_pod("nvidia-dcgm-exporter-pending", "nvidia-dcgm-exporter", "Pending")),
    ];
    api.add("/api/v1/pods", "Pod", "v1", Mode::Snapshot, pods);
    let dcgm = DcgmServer::start(&rt);
    dcgm.add("", Behaviour::Body(Box::new(|n| Some(marked_body("discovered-node", 2, n)))));
    let port = dcgm.addr.port();
    let cfg = config(dir.path(), &format!("dcgm_discovery = true\ndiscovery_interval = \"200ms\"\ndcgm_port = {port}\nscrape_interval = \"100ms\"\n"));
    let store = dir.path().join("store");
    let kube = api.kubeconfig(dir.path());
    let c = Collector::start(&cfg, &store, Some(&kube), &dir.path().join("collect.log"));
    let url = format!("http://127.0.0.1:{port}/metrics");
    wait_for("the discovered exporter to be scraped", Duration::from_secs(30), || c.metric(&format!("gpuledger_scrapes_total{{endpoint=\"{url}\",result=\"ok\"}}")) >= 3.0);
    assert_eq!(c.metric("gpuledger_endpoint_up{"), 1.0, "only the running exporter pod is scraped");
    assert!(api.requests("LIST /api/v1/pods") >= 2, "the pods list is asked again");
    // The pod goes away: its endpoint stops being scraped.
    let mut gone = exporter_pod("nvidia-dcgm-exporter-abcde", "nvidia-dcgm-exporter", "Running");
    gone["metadata"]["deletionTimestamp"] = json!("2026-11-01T01:00:00Z");
    api.add_event("/api/v1/pods", "DELETED", gone);
    wait_for("the endpoint to be dropped", Duration::from_secs(30), || c.metric(&format!("gpuledger_endpoint_up{{endpoint=\"{url}\"}}")) == 0.0);
    let scraped = dcgm.log("").len();
    std::thread::sleep(Duration::from_millis(600));
    assert!(dcgm.log("").len() <= scraped + 1, "still scraped after its pod went away");
    c.stop();
    let stored = util::count(&store, "SELECT count(DISTINCT gpu_util) AS n FROM gpu_samples WHERE hostname = 'discovered-node'");
    assert!(stored >= 3 && stored as usize <= dcgm.log("").len(), "{stored} scrapes stored, {} answered", dcgm.log("").len());
}
