//! `gpuledger collect` against loopback servers: the replay API server (real `kube` client),
//! DCGM exporter endpoints, faults, `kill -9`, and live == offline.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::replay::{ApiServer, Behaviour, Collector, DcgmServer, Delivery, Mode, Served, metric_in, wait_for, wait_until};
use crate::util;

/// `gpuledger_scrapes_total` of one endpoint and result, as `/metrics` text names it.
fn scrapes(url: &str, result: &str) -> String {
    format!("gpuledger_scrapes_total{{endpoint=\"{url}\",result=\"{result}\"}}")
}

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
    out.into_iter().map(|v| (v.event_type.as_str().to_owned(), v.object)).collect()
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
    // The jobs capture also holds JobSets, TrainJobs, PyTorchJobs, RayJobs and RayClusters; the
    // batch API serves Jobs only (the collector watches batch Jobs).
    let jobs: Vec<(String, Value)> = stream(read_objects(&k.join("jobs.watch.jsonl"))).into_iter().filter(|(_, o)| o["kind"] == "Job").collect();
    add("/apis/batch/v1/jobs", "Job", "batch/v1", Mode::Stream, jobs);
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
    // DRA, where the simulated cluster has it: lists of classes, templates and slices, a watch
    // stream of claims.
    if has_dra(cap) {
        let dra = read_objects(&k.join("dra.yaml"));
        for (kind, plural) in [("DeviceClass", "deviceclasses"), ("ResourceClaimTemplate", "resourceclaimtemplates"), ("ResourceSlice", "resourceslices")] {
            let objs: Vec<_> = dra.iter().filter(|(_, o)| o["kind"] == kind).cloned().collect();
            add(&format!("/apis/resource.k8s.io/v1/{plural}"), kind, "resource.k8s.io/v1", Mode::Snapshot, objs);
        }
        let claims = stream(read_objects(&k.join("resourceclaims.watch.jsonl")));
        add("/apis/resource.k8s.io/v1/resourceclaims", "ResourceClaim", "resource.k8s.io/v1", Mode::Stream, claims);
    }
    n
}

/// Whether the simulator wrote DRA objects into the capture (the DRA tables stay empty otherwise).
fn has_dra(cap: &Path) -> bool {
    let k = cap.join("kubernetes");
    k.join("dra.yaml").exists() && k.join("resourceclaims.watch.jsonl").exists()
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
    // Acked: the next chunk only once the collector counts the last one as accepted, so a
    // scrape it gave up on (a timeout on a busy machine) is answered again, not lost.
    let dcgm = DcgmServer::start(&rt);
    let bodies = dcgm_bodies(&cap);
    let mut endpoints = Vec::new();
    let mut n_bodies = BTreeMap::new();
    std::fs::create_dir_all(served_cap.join("dcgm")).unwrap();
    for (host, times) in &bodies {
        let chunks: Vec<String> = times.chunks(12).map(|c| c.iter().map(|(_, b)| b.as_str()).collect()).collect();
        std::fs::write(served_cap.join("dcgm").join(format!("{host}.prom")), chunks.concat()).unwrap();
        let url = dcgm.add(host, Behaviour::Acked(Box::new(move |_, n| chunks.get(n).cloned())));
        n_bodies.insert(url.clone(), times.chunks(12).len());
        endpoints.push(url);
    }
    assert!(bodies.len() >= 2 && versions > 1000, "{} hosts, {versions} versions", bodies.len());

    let cfg = config(dir.path(), &format!("scrape_interval = \"500ms\"\ndcgm_endpoints = {}\n", serde_json::to_string(&endpoints).unwrap()));
    let live = dir.path().join("live");
    let kube = api.kubeconfig(dir.path());
    let c = Collector::start(&cfg, &live, Some(&kube), &dir.path().join("collect.log"));
    dcgm.ack_from(c.listen, 0);
    // Done when the collector's own counters say so: every version recorded, every chunk
    // accepted (what it counts is handed to its WAL, and a clean stop flushes all of it).
    wait_until("every object version recorded and every DCGM chunk accepted", || {
        let m = c.metrics();
        let recorded = metric_in(&m, "gpuledger_watch_object_versions_total") as usize;
        let behind: Vec<String> = n_bodies.iter().map(|(u, n)| (u, metric_in(&m, &scrapes(u, "ok")) as usize, n)).filter(|(_, ok, n)| ok < n).map(|(u, ok, n)| format!("{u} {ok}/{n}")).collect();
        if recorded == versions && behind.is_empty() { Ok(()) } else { Err(format!("{recorded}/{versions} versions recorded ({}); exporters behind: {behind:?}", api.progress())) }
    });
    c.stop();

    let offline = dir.path().join("offline");
    util::ingest(&[&served_cap], &offline);
    let dra_tables = [gpuledger_schemas::RESOURCE_CLAIMS.name, gpuledger_schemas::RESOURCE_CLAIM_TEMPLATES.name, gpuledger_schemas::RESOURCE_SLICES.name, gpuledger_schemas::DEVICE_CLASSES.name];
    let may_be_empty = |name: &str| name == "metric_samples" || (!has_dra(&cap) && dra_tables.contains(&name));
    for table in gpuledger_schemas::TABLES {
        let (a, b) = (util::table_rows(&live, table), util::table_rows(&offline, table));
        assert!(!b.is_empty() || may_be_empty(table.name), "offline {} is empty", table.name);
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

/// The watch positions saved in the collector's WAL directory (`wal/positions.json`, rewritten
/// once the events before them are in the store), as numbers.
fn saved_positions(store: &Path) -> BTreeMap<String, u64> {
    let Ok(bytes) = std::fs::read(store.join("wal/positions.json")) else { return BTreeMap::new() };
    let positions: BTreeMap<String, String> = serde_json::from_slice(&bytes).unwrap();
    positions.into_iter().map(|(k, v)| (k, v.parse().unwrap())).collect()
}

/// Waits until the saved positions reach the newest version the server holds for every
/// resource: the collector's own record that everything served is in the store. (Waiting for
/// it to "go quiet" for a while instead would stop it early on a busy machine.)
fn wait_until_all_saved(store: &Path, api: &ApiServer) -> BTreeMap<String, u64> {
    let newest: BTreeMap<String, u64> = api.last_versions().into_iter().map(|(path, rv)| (resource_id(&path), rv)).collect();
    let mut saved = BTreeMap::new();
    wait_until("the saved positions to reach the newest version of every resource", || {
        saved = saved_positions(store);
        let behind: Vec<String> = newest.iter().filter(|(r, rv)| saved.get(*r).is_none_or(|s| s < rv)).map(|(r, rv)| format!("{r} at {:?} of {rv}", saved.get(r))).collect();
        if behind.is_empty() { Ok(()) } else { Err(format!("{behind:?}; server: {}", api.progress())) }
    });
    saved
}

/// Once every position is saved ([`wait_until_all_saved`]): every version the server handed
/// out is stored exactly once, and nothing stored was never served.
fn assert_exactly_once(store: &Path, api: &ApiServer, positions: &BTreeMap<String, u64>) {
    let path_of_kind: BTreeMap<String, String> = api.with_resources(|rs| rs.iter().map(|(p, r)| (r.kind.clone(), p.clone())).collect());
    let stored = stored_versions(store, &path_of_kind);
    let mut seen = BTreeSet::new();
    let dups: Vec<&Served> = stored.iter().filter(|v| !seen.insert((*v).clone())).collect();
    assert!(dups.is_empty(), "{} versions stored twice, e.g. {:?}", dups.len(), &dups[..dups.len().min(3)]);
    let served = api.served();
    let beyond: Vec<&Served> = served.iter().filter(|v| v.2.parse::<u64>().unwrap() > positions.get(&resource_id(&v.0)).copied().unwrap_or(0)).collect();
    assert!(beyond.is_empty(), "served versions past the saved positions {positions:?}, e.g. {:?}", &beyond[..beyond.len().min(3)]);
    let missing: Vec<&Served> = served.difference(&seen).collect();
    let extra: Vec<&Served> = seen.difference(&served).collect();
    assert!(missing.is_empty(), "{} of {} served versions not stored, e.g. {:?}", missing.len(), served.len(), &missing[..missing.len().min(3)]);
    assert!(extra.is_empty(), "{} stored versions never served, e.g. {:?}", extra.len(), &extra[..extra.len().min(3)]);
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
    let (pods, jobs, workloads) = ("/api/v1/pods", "/apis/batch/v1/jobs", "/apis/kueue.x-k8s.io/v1beta1/workloads");
    let resumed = "gpuledger_watch_restarts_total{resource=\"pods\",reason=\"resumed\"}";
    let relisted = "gpuledger_watch_restarts_total{resource=\"kueue.x-k8s.io/workloads\",reason=\"relisted\"}";
    let failed = "gpuledger_watch_restarts_total{resource=\"pods\",reason=\"failed\"}";
    let malformed = "gpuledger_rejected_total{source=\"batch/jobs\"";
    // Each fault reaches the collector on its open watch. The steps go on by what the server
    // and the collector record (fault delivered, restart counted), never by a guessed sleep:
    // the outage below must not begin before the pods list is done, or it would be listed twice.
    api.inject_drop(pods);
    api.inject_malformed(jobs);
    api.inject_gone(workloads);
    wait_until("the server to deliver the injected faults", || if api.faults_pending() { Err(api.progress()) } else { Ok(()) });
    wait_for("the dropped pods watch to be resumed", || c.metric(resumed) >= 1.0);
    wait_for("410 Gone to make the workloads watch list again", || c.metric(relisted) >= 1.0);
    wait_for("the two malformed job events to be counted", || c.metric(malformed) >= 2.0);
    // The outage lasts until the collector has met it: its pods watch failed to reconnect and
    // backs off.
    api.set_outage(true);
    wait_for("the outage to make the pods watch fail", || c.metric(failed) >= 1.0);
    api.set_outage(false);
    wait_until("the collector to catch up", || if api.caught_up() { Ok(()) } else { Err(api.progress()) });
    // Every stream's saved position reaches its last event: the collector got everything.
    let positions = wait_until_all_saved(&store, &api);
    let text = c.metrics();
    c.stop();
    let log = std::fs::read_to_string(dir.path().join("collect.log")).unwrap();
    let report: String = text.lines().filter(|l| l.contains("watch_restarts") || l.contains("rejected")).map(|l| format!("{l}\n")).collect();
    let report = format!("{report}\n{log}");
    assert_eq!(metric_in(&text, malformed), 2.0, "exactly the two malformed job events counted\n{report}");
    assert!(api.requests("LIST /apis/kueue.x-k8s.io/v1beta2/workloads") >= 1, "v1beta2 was tried first");
    assert!(api.requests("LIST /apis/events.k8s.io/v1/events") >= 1, "events.k8s.io was tried first");
    assert!(api.requests("WATCH /api/v1/events") >= 1, "core events are watched instead");
    // A resume after a drop or an outage asks for the versions after the last one seen: the
    // server never has to list pods again for them.
    assert_eq!(api.requests("LIST /api/v1/pods"), 2, "pods: one probe, one list, then only watches\n{report}");
    assert_exactly_once(&store, &api, &positions);
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

/// Marks of one collector run are `run * RUN + n`, `n` the body number within the run.
const RUN: usize = 10_000;

/// The scrape marks (`gpu_util`) per host in the WAL segments as they are on disk now.
fn marks_in_wal(wal: &Path) -> BTreeMap<String, BTreeSet<usize>> {
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::{DataType, Float64Type};
    let mut out: BTreeMap<String, BTreeSet<usize>> = BTreeMap::new();
    for entry in std::fs::read_dir(wal).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "wal") {
            continue;
        }
        // A record cut short by the freeze is left out, as the replay leaves it out.
        let segment = gpuledger_collector::live::wal::read_segment(&path).unwrap();
        for (table, batch) in &segment.batches {
            if table.name != "gpu_samples" {
                continue;
            }
            let host = arrow::compute::cast(batch.column_by_name("hostname").unwrap(), &DataType::Utf8).unwrap();
            let util = arrow::compute::cast(batch.column_by_name("gpu_util").unwrap(), &DataType::Float64).unwrap();
            let (host, util) = (host.as_string::<i32>(), util.as_primitive::<Float64Type>());
            for i in 0..batch.num_rows() {
                if !host.is_null(i) && !util.is_null(i) {
                    out.entry(host.value(i).to_owned()).or_default().insert(util.value(i) as usize);
                }
            }
        }
    }
    out
}

#[test]
fn kill_9_at_random_moments_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cap = simulate(dir.path(), "8", "300s");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = ApiServer::start(&rt, 10);
    load_cluster(&api, &cap, &Flavour { kueue: "v1beta2", events_v1: true });
    // The exporters get their own runtime: the API server's streaming must not delay them.
    // Acked: body `n` of a run until the running collector counts `n` scrapes as accepted, so
    // the marks a run stores are 0, 1, 2, ... and a gap can only be a loss.
    let rt2 = tokio::runtime::Runtime::new().unwrap();
    let dcgm = DcgmServer::start(&rt2);
    let hosts = ["node-a", "node-b", "node-c"];
    let endpoints: Vec<String> = hosts
        .iter()
        .map(|h| {
            let host = h.to_string();
            dcgm.add(h, Behaviour::Acked(Box::new(move |run, n| Some(marked_body(&host, 4, run * RUN + n)))))
        })
        .collect();
    let cfg = config(dir.path(), &format!("scrape_interval = \"300ms\"\nflush_interval = \"300ms\"\ndcgm_endpoints = {}\n", serde_json::to_string(&endpoints).unwrap()));
    let store = dir.path().join("store");
    let kube = api.kubeconfig(dir.path());
    let log = dir.path().join("collect.log");
    let accepted = |c: &Collector| -> Vec<usize> {
        let m = c.metrics();
        endpoints.iter().map(|u| metric_in(&m, &scrapes(u, "ok")) as usize).collect()
    };
    // Kill moments from a fixed seed: varied, repeatable, and chosen by what the collector has
    // done (scrapes accepted), not by the clock.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    // Per kill: the marks the WAL held at that instant.
    let mut at_kill: Vec<BTreeMap<String, BTreeSet<usize>>> = Vec::new();
    for run in 0..5 {
        let c = Collector::start(&cfg, &store, Some(&kube), &log);
        dcgm.ack_from(c.listen, run);
        let k = 1 + (next() % 4) as usize;
        wait_for("each exporter's scrapes to be accepted", || accepted(&c).iter().all(|n| *n >= k));
        // Where the kill falls within the flush cycle varies; nothing below depends on it.
        std::thread::sleep(Duration::from_millis(next() % 300));
        // Frozen, the WAL on disk is exactly what the kill leaves. A moment when it happens to
        // hold no scrape (just flushed) is passed over: every kill must leave one to replay.
        let wal = loop {
            c.freeze();
            let wal = marks_in_wal(&store.join("wal"));
            if !wal.is_empty() {
                break wal;
            }
            c.thaw();
            let before: usize = accepted(&c).iter().sum();
            wait_for("one more accepted scrape", || accepted(&c).iter().sum::<usize>() > before);
        };
        c.kill9();
        // Until the next collector is named, nobody's count is followed (it may get this one's port).
        dcgm.ack_from_none();
        at_kill.push(wal);
    }
    let c = Collector::start(&cfg, &store, Some(&kube), &log);
    dcgm.ack_from(c.listen, 5);
    wait_until("the collector to catch up", || if api.caught_up() { Ok(()) } else { Err(api.progress()) });
    let positions = wait_until_all_saved(&store, &api);
    wait_for("each exporter's scrapes to be accepted in the last run", || accepted(&c).iter().all(|n| *n >= 1));
    let accepted_last = accepted(&c);
    c.stop();
    let replays = std::fs::read_to_string(&log).unwrap().matches("WAL segment(s) left by the previous run").count();
    assert_eq!(replays, 5, "every killed run left its WAL, replayed by the next start");

    assert_exactly_once(&store, &api, &positions);

    for (i, h) in hosts.iter().enumerate() {
        let rows = util::query(&store, &format!("SELECT gpu_util AS n, count(*) AS gpus FROM gpu_samples WHERE hostname = '{h}' GROUP BY gpu_util"));
        let stored: BTreeMap<usize, i64> = rows.iter().map(|r| (r["n"].as_f64().unwrap() as usize, r["gpus"].as_i64().unwrap())).collect();
        assert!(stored.values().all(|g| *g == 4), "{h}: a scrape stored twice or partly: {stored:?}");
        let delivered: BTreeSet<usize> = dcgm.log(h).iter().map(|d| d.run * RUN + d.n).collect();
        let invented: Vec<_> = stored.keys().filter(|m| !delivered.contains(m)).collect();
        assert!(invented.is_empty(), "{h}: stored scrapes never answered: {invented:?}");
        let mut summary = Vec::new();
        for run in 0..=5 {
            let marks: Vec<usize> = stored.keys().filter(|m| *m / RUN == run).map(|m| m % RUN).collect();
            // The WAL keeps a run's scrapes in the order they were accepted, and a crash can
            // only lose its tail: what a run stored is a prefix 0..m of what it accepted.
            assert!(marks.iter().enumerate().all(|(j, n)| j == *n), "{h}: run {run} stored {marks:?}, not a prefix of what it accepted");
            if let Some(killed) = at_kill.get(run) {
                // What the WAL held at the kill was replayed into the store.
                let wal = killed.get(*h).cloned().unwrap_or_default();
                let lost: Vec<&usize> = wal.iter().filter(|m| !stored.contains_key(m)).collect();
                assert!(lost.is_empty(), "{h}: run {run}: marks {lost:?} were in the WAL at the kill and are not stored");
                summary.push(format!("run {run}: {} stored, {} in the WAL at the kill", marks.len(), wal.len()));
            } else {
                // A clean stop flushes everything the collector accepted.
                assert!(marks.len() >= accepted_last[i], "{h}: the last run accepted {} scrapes and stored {}", accepted_last[i], marks.len());
                summary.push(format!("last run: {} stored", marks.len()));
            }
        }
        eprintln!("{h}: {}", summary.join("; "));
    }
    let held: usize = at_kill.iter().flat_map(|w| w.values()).map(BTreeSet::len).sum();
    assert!(held >= 5, "every kill left at least one scrape in the WAL ({held} in all)");
}

/// Intervals between two requests to the `slow` endpoint (the collector gave up on the first
/// before it sent the second) in which every one of `healthy` was asked at least twice. Only
/// the order the exporter saw requests in counts: a collector that waited for one exporter
/// before asking the others would never make one.
fn overlapping_intervals(arrivals: &[String], healthy: &[&str]) -> usize {
    let mut intervals = 0;
    let mut counts: Option<BTreeMap<&str, usize>> = None;
    for name in arrivals {
        if name == "slow" {
            if counts.take().is_some_and(|c| healthy.iter().all(|h| c.get(h).copied().unwrap_or(0) >= 2)) {
                intervals += 1;
            }
            counts = Some(BTreeMap::new());
        } else if let Some(c) = counts.as_mut() {
            *c.entry(name.as_str()).or_default() += 1;
        }
    }
    intervals
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
    // Acked: what the collector stores of `sim` is body 0, 1, 2, ... with no gap.
    let sim_url = dcgm.add("sim", Behaviour::Acked(Box::new(|_, n| Some(marked_body("sim-node", 2, n)))));
    let slow_url = dcgm.add("slow", Behaviour::Hang);
    let garbage_url = dcgm.add("garbage", Behaviour::Garbage);
    let dead_url = format!("http://127.0.0.1:{}/metrics", crate::replay::free_port());
    let all = [&real_url, &sim_url, &slow_url, &garbage_url, &dead_url];
    let cfg = config(dir.path(), &format!("kubernetes = false\nscrape_interval = \"100ms\"\nscrape_timeout = \"300ms\"\ndcgm_endpoints = {}\n", serde_json::to_string(&all).unwrap()));
    let store = dir.path().join("store");
    let c = Collector::start(&cfg, &store, None, &dir.path().join("collect.log"));
    dcgm.ack_from(c.listen, 0);
    // Pace as counts, not as scrapes per second: the run goes on until the collector has
    // given up on the hanging exporter three times, failed the garbage and the dead one eight
    // times, accepted ten scrapes of each healthy one, and the exporter has seen both healthy
    // ones asked twice or more while a request to the hanging one was open, three times over.
    let mut metrics = String::new();
    wait_until("every endpoint's scrapes to add up", || {
        metrics = c.metrics();
        let (ok, failed) = (|u: &str| metric_in(&metrics, &scrapes(u, "ok")), |u: &str| metric_in(&metrics, &scrapes(u, "failed")));
        let overlaps = overlapping_intervals(&dcgm.arrivals(), &["real", "sim"]);
        if ok(&real_url) >= 10.0 && ok(&sim_url) >= 10.0 && failed(&slow_url) >= 3.0 && failed(&garbage_url) >= 8.0 && failed(&dead_url) >= 8.0 && overlaps >= 3 {
            Ok(())
        } else {
            Err(format!("{overlaps} overlapping intervals\n{metrics}"))
        }
    });
    c.stop();

    let ok = |u: &str| metric_in(&metrics, &scrapes(u, "ok"));
    assert_eq!(ok(&slow_url), 0.0, "the hanging exporter never answered");
    assert!(metrics.contains("gpuledger_rejected_total{source=\"") && metrics.contains("/garbage/metrics\""), "garbage lines are counted");

    // Every scrape the collector accepted is stored, whole, once; stamped when it was sent:
    // after the previous answer had been written, before the request reached the exporter
    // (the same clock, in this order by cause and effect, whatever the load).
    let log = dcgm.log("sim");
    let rows = util::query(&store, "SELECT gpu_util AS n, count(*) AS g, min(epoch_ms(ts)) AS t FROM gpu_samples WHERE hostname = 'sim-node' GROUP BY gpu_util ORDER BY n");
    assert!(rows.len() >= ok(&sim_url) as usize, "sim: {} scrapes accepted, {} stored", ok(&sim_url), rows.len());
    let deliveries = |n: usize| -> Vec<&Delivery> { log.iter().filter(|d| d.n == n).collect() };
    for (i, r) in rows.iter().enumerate() {
        let n = r["n"].as_f64().unwrap() as usize;
        assert_eq!(n, i, "sim: stored scrapes are not body 0, 1, 2, ...: {rows:?}");
        assert_eq!(r["g"].as_i64().unwrap(), 2, "sim: scrape {n} stored twice or partly");
        let t = r["t"].as_i64().unwrap();
        let latest_start = deliveries(n).iter().map(|d| d.start_ms).max().unwrap_or_else(|| panic!("sim: scrape {n} stored, never delivered"));
        assert!(t <= latest_start, "sim: scrape {n} stamped {t}, after its request arrived at {latest_start}");
        if n > 0 {
            let first_end = deliveries(n - 1).iter().map(|d| d.end_ms).min().unwrap();
            assert!(first_end <= t, "sim: scrape {n} stamped {t}, before the previous answer was written at {first_end}");
        }
    }
    let real_scrapes = util::query(&store, "SELECT count(*) AS n FROM gpu_samples WHERE hostname NOT IN ('sim-node', 'slow-node') GROUP BY ts");
    assert!(real_scrapes.len() >= ok(&real_url) as usize, "real: {} scrapes accepted, {} stored", ok(&real_url), real_scrapes.len());
    assert!(real_scrapes.iter().all(|r| r["n"].as_i64() == Some(real_rows)), "every real-fixture scrape landed whole: {real_scrapes:?}");
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

/// A replay API server whose namespaces, nodes, jobs and events are empty lists: the tests that
/// use it add the pods they are about.
fn api_with_pods_only(rt: &tokio::runtime::Runtime) -> ApiServer {
    let api = ApiServer::start(rt, 10);
    for (path, kind, av) in [("/api/v1/namespaces", "Namespace", "v1"), ("/api/v1/nodes", "Node", "v1"), ("/apis/batch/v1/jobs", "Job", "batch/v1"), ("/apis/events.k8s.io/v1/events", "Event", "events.k8s.io/v1")] {
        api.add(path, kind, av, Mode::Snapshot, Vec::new());
    }
    api
}

fn exporter_pod(name: &str, app: &str, phase: &str) -> Value {
    json!({"kind": "Pod", "metadata": {"name": name, "namespace": "gpu-operator", "uid": format!("uid-{name}"), "labels": {"app": app},
           "creationTimestamp": "2026-11-01T00:00:00Z"}, "status": {"phase": phase, "podIP": "127.0.0.1"}})
}

#[test]
fn exporters_are_discovered_through_the_api_server_and_dropped_when_their_pod_goes() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = api_with_pods_only(&rt);
    // One exporter pod, one pod that only looks like one, one exporter still starting.
    let pods = vec![
        ("SNAPSHOT".to_owned(), exporter_pod("nvidia-dcgm-exporter-abcde", "nvidia-dcgm-exporter", "Running")),
        ("SNAPSHOT".to_owned(), exporter_pod("dcgm-lookalike", "something-else", "Running")),
        ("SNAPSHOT".to_owned(), exporter_pod("nvidia-dcgm-exporter-pending", "nvidia-dcgm-exporter", "Pending")),
    ];
    api.add("/api/v1/pods", "Pod", "v1", Mode::Snapshot, pods);
    let dcgm = DcgmServer::start(&rt);
    dcgm.add("", Behaviour::Body(Box::new(|n| Some(marked_body("discovered-node", 2, n)))));
    // A listed endpoint beside the discovered one: the yardstick for "no longer scraped".
    let control = dcgm.add("control", Behaviour::Body(Box::new(|n| Some(marked_body("control-node", 1, n)))));
    let port = dcgm.addr.port();
    let cfg = config(dir.path(), &format!("dcgm_discovery = true\ndiscovery_interval = \"200ms\"\ndcgm_port = {port}\nscrape_interval = \"100ms\"\ndcgm_endpoints = [\"{control}\"]\n"));
    let store = dir.path().join("store");
    let kube = api.kubeconfig(dir.path());
    let c = Collector::start(&cfg, &store, Some(&kube), &dir.path().join("collect.log"));
    let url = dcgm.url("");
    let up = |u: &str| format!("gpuledger_endpoint_up{{endpoint=\"{u}\"}}");
    wait_for("the discovered exporter to be scraped", || c.metric(&scrapes(&url, "ok")) >= 3.0);
    let m = c.metrics();
    assert_eq!((metric_in(&m, &up(&url)), metric_in(&m, &up(&control))), (1.0, 1.0), "{m}");
    assert_eq!(metric_in(&m, "gpuledger_endpoint_up{"), 2.0, "only the running exporter pod is scraped, beside the listed one\n{m}");
    assert!(api.requests("LIST /api/v1/pods") >= 2, "the pods list is asked again");
    // The pod goes away: its endpoint stops being scraped.
    let mut gone = exporter_pod("nvidia-dcgm-exporter-abcde", "nvidia-dcgm-exporter", "Running");
    gone["metadata"]["deletionTimestamp"] = json!("2026-11-01T01:00:00Z");
    api.add_event("/api/v1/pods", "DELETED", gone);
    wait_for("the endpoint to be dropped", || c.metric(&up(&url)) == 0.0);
    // From the moment the collector says so, the control endpoint is asked five more times
    // while the dropped one gets at most the request that may already have been on its way.
    let (asked, yardstick) = (dcgm.arrivals_of(""), dcgm.arrivals_of("control"));
    wait_for("five more scrapes of the listed endpoint", || dcgm.arrivals_of("control") >= yardstick + 5);
    assert!(dcgm.arrivals_of("") <= asked + 1, "still scraped after its pod went away: {} requests since, {} before", dcgm.arrivals_of("") - asked, asked);
    c.stop();
    let stored = util::count(&store, "SELECT count(DISTINCT gpu_util) AS n FROM gpu_samples WHERE hostname = 'discovered-node'");
    assert!(stored >= 3 && stored as usize <= dcgm.log("").len(), "{stored} scrapes stored, {} answered", dcgm.log("").len());
}

/// A vLLM server's pod, annotated for scraping on the loopback test server's port and path.
fn vllm_pod(name: &str, port: u16, path: &str, annotated: bool) -> Value {
    let annotations = if annotated { json!({"prometheus.io/scrape": "true", "prometheus.io/port": port.to_string(), "prometheus.io/path": path}) } else { json!({}) };
    json!({"kind": "Pod", "metadata": {"name": name, "namespace": "inference", "uid": format!("uid-{name}"), "annotations": annotations,
           "labels": {"team": "chat"}, "creationTimestamp": "2026-12-01T00:00:00Z"},
           "spec": {"nodeName": "gpu-1", "containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": 1}}}]},
           "status": {"phase": "Running", "podIP": "127.0.0.1", "startTime": "2026-12-01T00:00:05Z"}})
}

/// With `[[units.counters]]` configured, the collector finds the annotated vLLM pod through the
/// API server and scrapes the real vLLM exposition from it: only the two configured counters are
/// stored, with the pod's namespace and name, and the ledger counts them as the pod's run's
/// units: the last tokens value over a million and the requests finished on `stop` or `length`
/// (the server counted from zero while the collector watched: it started inside the capture).
#[test]
fn pods_exposing_unit_counters_are_discovered_scraped_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let api = api_with_pods_only(&rt);
    let server = DcgmServer::start(&rt);
    let port = server.addr.port();
    let real = std::fs::read_to_string(util::fixture("inference-metrics/vllm-v1-metrics-qwen2.5-0.5b-idle.prom")).unwrap();
    // Answer n (from 0): n x 1,000 tokens generated, n requests finished on stop, 2n on length,
    // n aborted; every other line as recorded.
    server.add("vllm", Behaviour::Body(Box::new(move |n| {
        let bump = |line: &str| -> String {
            let value = if line.starts_with("vllm:generation_tokens_total{") {
                Some(1000 * n)
            } else if line.starts_with("vllm:request_success_total{") {
                [("\"stop\"", n), ("\"length\"", 2 * n), ("\"abort\"", n)].iter().find(|(r, _)| line.contains(r)).map(|(_, v)| *v)
            } else {
                None
            };
            match value {
                Some(v) => format!("{} {v}", line.rsplit_once(' ').unwrap().0),
                None => line.to_string(),
            }
        };
        Some(real.lines().map(bump).collect::<Vec<_>>().join("\n") + "\n")
    })));
    // The same server behind a pod nobody annotated: never scraped.
    server.add("quiet", Behaviour::Body(Box::new(|_| Some("vllm:generation_tokens_total 5\n".into()))));
    let pods = vec![("SNAPSHOT".to_owned(), vllm_pod("vllm-0", port, "/vllm/metrics", true)), ("SNAPSHOT".to_owned(), vllm_pod("quiet-0", port, "/quiet/metrics", false))];
    api.add("/api/v1/pods", "Pod", "v1", Mode::Snapshot, pods);
    let cfg = config(
        dir.path(),
        "discovery_interval = \"200ms\"\nscrape_interval = \"100ms\"\n\n[[units.counters]]\nmetric = \"vllm:generation_tokens_total\"\nunit = \"1M-tokens\"\nscale = 1e-6\n\
         [[units.counters]]\nmetric = \"vllm:request_success_total\"\nunit = \"requests\"\nmatch = 'finished_reason=~\"stop|length\"'\n",
    );
    let store = dir.path().join("store");
    let kube = api.kubeconfig(dir.path());
    let c = Collector::start(&cfg, &store, Some(&kube), &dir.path().join("collect.log"));
    let url = server.url("vllm");
    wait_for("the vLLM pod to be scraped", || c.metric(&scrapes(&url, "ok")) >= 3.0);
    c.stop();
    assert_eq!(server.arrivals_of("quiet"), 0, "a pod without the annotation is not scraped");
    let metrics = util::query(&store, "SELECT DISTINCT metric FROM metric_samples ORDER BY metric");
    assert_eq!(metrics, vec![json!({"metric": "vllm:generation_tokens_total"}), json!({"metric": "vllm:request_success_total"})], "only the configured counters are kept");
    let foreign = util::count(&store, "SELECT count(*) AS n FROM metric_samples WHERE labels NOT LIKE '%\"namespace\":\"inference\"%' OR labels NOT LIKE '%\"pod\":\"vllm-0\"%'");
    assert_eq!(foreign, 0, "every sample carries the pod's namespace and name");
    let stored = util::query(&store, "SELECT count(*) AS n, max(value) AS top FROM metric_samples WHERE metric = 'vllm:generation_tokens_total'");
    let (n, top) = (stored[0]["n"].as_i64().unwrap(), stored[0]["top"].as_f64().unwrap());
    assert!(n >= 3 && n as usize <= server.log("vllm").len(), "{n} scrapes stored, {} answered", server.log("vllm").len());
    // The largest answer stored is answer k for some k >= 2: 1000 k tokens, 3 k requests counted.
    let answers = top / 1000.0;
    assert!(answers >= 2.0 && answers.fract() == 0.0, "{top}");
    let s = store.display().to_string();
    let cf = cfg.display().to_string();
    util::run(&["ledger", "--store", &s, "--config", &cf, "--progress", "off"], 0);
    let units = util::query(&store, "SELECT team, unit, accepted_units FROM accepted_units_monthly ORDER BY unit");
    assert_eq!(
        units,
        vec![json!({"team": "chat", "unit": "1M-tokens", "accepted_units": top / 1e6}), json!({"team": "chat", "unit": "requests", "accepted_units": 3.0 * answers})],
        "{units:?}"
    );
}
