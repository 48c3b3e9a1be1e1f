//! Loopback servers for the live collector's tests, and a handle on a running collector.
//!
//! - [`ApiServer`]: a Kubernetes API server stand-in (axum) that replays recorded objects to the
//!   real `kube` client: LIST (paged, items without kind, like the real server) and WATCH (one
//!   JSON event per line, chunked), with faults on demand: a dropped watch, 410 Gone, malformed
//!   events, and an outage. It records every object version it served.
//! - [`DcgmServer`]: exporter endpoints on one port (`/<name>/metrics`), each answering with
//!   a body function, plus slow / garbage / down behaviours.
//! - [`Collector`]: `gpuledger collect` as a child process.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// How a resource is served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// All objects exist from the start: served by LIST; watches see nothing new.
    Snapshot,
    /// Objects appear as watch events, released a few at a time once the resource is first watched.
    Stream,
}

/// One served resource.
pub struct Res {
    pub kind: String,
    pub api_version: String,
    pub mode: Mode,
    /// (event type, object with its server-assigned resourceVersion, that version).
    pub events: Vec<(String, Value, u64)>,
    released: usize,
    started: bool,
}

/// A version the server handed out: (URL path, object key, resourceVersion, deleted).
pub type Served = (String, String, String, bool);

#[derive(Default)]
struct Inner {
    resources: BTreeMap<String, Res>,
    next_rv: u64,
    /// While set, every request gets 503 and open watches are cut.
    outage: bool,
    /// Bumped to cut every open watch (outage).
    generation: u64,
    served: BTreeSet<Served>,
    gone: BTreeSet<String>,
    drop: BTreeSet<String>,
    malformed: BTreeSet<String>,
    requests: BTreeMap<String, u64>,
}

#[derive(Clone)]
pub struct ApiServer {
    inner: Arc<Mutex<Inner>>,
    pub addr: SocketAddr,
    /// Events released per resource every 20 ms.
    pub rate: usize,
    rt: tokio::runtime::Handle,
    /// Stops the listener (an outage: connections are refused until it is started again).
    down: Arc<Mutex<Option<tokio::sync::oneshot::Sender<()>>>>,
}

fn key_of(obj: &Value) -> String {
    let m = &obj["metadata"];
    m["uid"].as_str().map(str::to_owned).unwrap_or_else(|| format!("{}/{}", m["namespace"].as_str().unwrap_or(""), m["name"].as_str().unwrap_or("")))
}

impl ApiServer {
    /// Starts serving on a free loopback port, on `rt`.
    pub fn start(rt: &tokio::runtime::Runtime, rate: usize) -> ApiServer {
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let server = ApiServer { inner: Arc::new(Mutex::new(Inner { next_rv: 1000, ..Inner::default() })), addr, rate, rt: rt.handle().clone(), down: Arc::default() };
        server.serve(listener);
        let s = server.clone();
        rt.spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let mut g = s.inner.lock().unwrap();
                for r in g.resources.values_mut() {
                    if r.started {
                        r.released = (r.released + s.rate).min(r.events.len());
                    }
                }
            }
        });
        server
    }

    fn serve(&self, listener: tokio::net::TcpListener) {
        let app = axum::Router::new().fallback(handle).with_state(self.clone());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        *self.down.lock().unwrap() = Some(tx);
        self.rt.spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await
                .unwrap()
        });
    }

    /// Adds objects under `path` (e.g. `/api/v1/pods`). Each gets the next resourceVersion.
    pub fn add(&self, path: &str, kind: &str, api_version: &str, mode: Mode, events: Vec<(String, Value)>) {
        let mut g = self.inner.lock().unwrap();
        let mut out = Vec::new();
        for (ty, mut obj) in events {
            g.next_rv += 1;
            let rv = g.next_rv;
            obj["metadata"]["resourceVersion"] = json!(rv.to_string());
            obj["apiVersion"] = json!(api_version);
            out.push((ty, obj, rv));
        }
        let released = if mode == Mode::Snapshot { out.len() } else { 0 };
        g.resources.insert(path.to_owned(), Res { kind: kind.into(), api_version: api_version.into(), mode, events: out, released, started: mode == Mode::Snapshot });
    }

    /// Appends one event to a resource (released at once for snapshot resources).
    pub fn add_event(&self, path: &str, ty: &str, mut obj: Value) {
        let mut g = self.inner.lock().unwrap();
        g.next_rv += 1;
        let rv = g.next_rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        let r = g.resources.get_mut(path).unwrap();
        obj["apiVersion"] = json!(r.api_version.clone());
        r.events.push((ty.to_owned(), obj, rv));
        if r.mode == Mode::Snapshot {
            r.released = r.events.len();
        }
    }

    /// The objects of every resource, as served (for writing the same facts as files).
    pub fn with_resources<R>(&self, f: impl FnOnce(&BTreeMap<String, Res>) -> R) -> R {
        f(&self.inner.lock().unwrap().resources)
    }

    /// Every version served so far.
    pub fn served(&self) -> BTreeSet<Served> {
        self.inner.lock().unwrap().served.clone()
    }

    /// Per path: (versions served, versions held, events released), for failure messages.
    pub fn progress(&self) -> String {
        let g = self.inner.lock().unwrap();
        g.resources
            .iter()
            .map(|(p, r)| format!("{p}: {}/{} served, {} released", g.served.iter().filter(|s| &s.0 == p).count(), r.events.len(), r.released))
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// True once every event is released and the newest version of every resource was served:
    /// a watcher has caught up (versions skipped by a re-list after 410 Gone are never served).
    pub fn caught_up(&self) -> bool {
        let g = self.inner.lock().unwrap();
        g.resources.iter().all(|(p, r)| {
            r.released == r.events.len()
                && r.events.last().is_none_or(|(ty, o, rv)| g.served.contains(&(p.clone(), key_of(o), rv.to_string(), ty == "DELETED")))
        })
    }

    pub fn requests(&self, what: &str) -> u64 {
        self.inner.lock().unwrap().requests.get(what).copied().unwrap_or(0)
    }

    /// The open watch on `path` answers an in-stream 410 Gone ERROR event and ends.
    pub fn inject_gone(&self, path: &str) {
        self.inner.lock().unwrap().gone.insert(path.to_owned());
    }

    /// The open watch on `path` is cut mid-stream (no clean end of the chunked body).
    pub fn inject_drop(&self, path: &str) {
        self.inner.lock().unwrap().drop.insert(path.to_owned());
    }

    /// The open watch on `path` sends two malformed events: one not JSON, one whose object is not an object.
    pub fn inject_malformed(&self, path: &str) {
        self.inner.lock().unwrap().malformed.insert(path.to_owned());
    }

    /// Takes the server away (open watches cut, new connections refused), or brings it back
    /// on the same port.
    pub fn set_outage(&self, on: bool) {
        {
            let mut g = self.inner.lock().unwrap();
            g.outage = on;
            g.generation += 1;
        }
        if on {
            if let Some(tx) = self.down.lock().unwrap().take() {
                let _ = tx.send(());
            }
        } else {
            // The old listener may take a moment to close: retry the bind briefly.
            let t0 = Instant::now();
            let listener = loop {
                match self.rt.block_on(tokio::net::TcpListener::bind(self.addr)) {
                    Ok(l) => break l,
                    Err(e) => {
                        assert!(t0.elapsed() < Duration::from_secs(5), "cannot listen on {} again: {e}", self.addr);
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            };
            self.serve(listener);
        }
    }

    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        let p = dir.join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: replay\n  cluster:\n    server: http://{}\ncontexts:\n- name: replay\n  context:\n    cluster: replay\n    user: nobody\ncurrent-context: replay\nusers:\n- name: nobody\n  user: {{}}\n",
            self.addr
        );
        std::fs::write(&p, text).unwrap();
        p
    }
}

fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code})
}

fn json_response(code: StatusCode, v: &Value) -> Response {
    (code, [("content-type", "application/json")], v.to_string()).into_response()
}

async fn handle(State(s): State<ApiServer>, uri: Uri, Query(q): Query<BTreeMap<String, String>>) -> Response {
    let path = uri.path().to_owned();
    let watch = q.get("watch").is_some_and(|v| v == "true" || v == "1");
    let mut g = s.inner.lock().unwrap();
    *g.requests.entry(format!("{} {path}", if watch { "WATCH" } else { "LIST" })).or_default() += 1;
    if g.outage {
        return json_response(StatusCode::SERVICE_UNAVAILABLE, &status(503, "ServiceUnavailable", "the replay server is in an outage"));
    }
    if !g.resources.contains_key(&path) {
        return json_response(StatusCode::NOT_FOUND, &status(404, "NotFound", &format!("the server could not find the requested resource {path}")));
    }
    if !watch {
        let r = g.resources.get_mut(&path).unwrap();
        // The current state: the latest released version of each live object.
        let mut state: BTreeMap<String, (Value, u64)> = BTreeMap::new();
        let mut list_rv = 1000;
        for (ty, obj, rv) in &r.events[..r.released] {
            list_rv = list_rv.max(*rv);
            if ty == "DELETED" {
                state.remove(&key_of(obj));
            } else {
                state.insert(key_of(obj), (obj.clone(), *rv));
            }
        }
        let mut items: Vec<(Value, u64)> = state.into_values().collect();
        // Equality selectors only (`k=v,k2=v2`): what the collector's exporter discovery sends.
        if let Some(sel) = q.get("labelSelector") {
            let terms: Vec<(&str, &str)> = sel.split(',').filter_map(|t| t.split_once('=')).collect();
            items.retain(|(o, _)| terms.iter().all(|(k, v)| o["metadata"]["labels"][*k].as_str() == Some(*v)));
        }
        items.sort_by_key(|(_, rv)| *rv);
        let limit: usize = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(usize::MAX);
        let offset: usize = q.get("continue").and_then(|c| c.parse().ok()).unwrap_or(0);
        let end = offset.saturating_add(limit).min(items.len());
        let page: Vec<Value> = items[offset.min(end)..end]
            .iter()
            .map(|(o, _)| {
                let mut o = o.clone();
                // Real list responses leave kind and apiVersion out of items.
                if let Value::Object(m) = &mut o {
                    m.remove("kind");
                    m.remove("apiVersion");
                }
                o
            })
            .collect();
        let kind = format!("{}List", r.kind);
        let api_version = r.api_version.clone();
        let more = end < items.len();
        // A limit=1 probe (version negotiation) is not counted as serving.
        if limit > 1 {
            for (o, rv) in &items[offset.min(end)..end] {
                let served = (path.clone(), key_of(o), rv.to_string(), false);
                g.served.insert(served);
            }
        }
        let mut meta = json!({"resourceVersion": list_rv.to_string()});
        if more {
            meta["continue"] = json!(end.to_string());
        }
        return json_response(StatusCode::OK, &json!({"kind": kind, "apiVersion": api_version, "metadata": meta, "items": page}));
    }
    let from: u64 = q.get("resourceVersion").and_then(|v| v.parse().ok()).unwrap_or(0);
    let timeout = Duration::from_secs(q.get("timeoutSeconds").and_then(|v| v.parse().ok()).unwrap_or(290));
    let generation = g.generation;
    // Events start to appear once someone watches, so that a first watcher sees every one.
    g.resources.get_mut(&path).unwrap().started = true;
    drop(g);
    let (mut tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, std::io::Error>>(64);
    let s2 = s.clone();
    tokio::spawn(async move {
        use futures::SinkExt;
        let started = Instant::now();
        let mut pos: Option<usize> = None;
        loop {
            let mut lines: Vec<Result<Bytes, std::io::Error>> = Vec::new();
            let mut finish = false;
            {
                let mut g = s2.inner.lock().unwrap();
                if g.generation != generation {
                    lines.push(Err(std::io::Error::other("outage")));
                    finish = true;
                } else if g.gone.remove(&path) {
                    lines.push(Ok(Bytes::from(format!("{}\n", json!({"type": "ERROR", "object": status(410, "Expired", "too old resource version")})))));
                    finish = true;
                } else if g.drop.remove(&path) {
                    lines.push(Ok(Bytes::from_static(b"{\"type\":\"MODIFIED\",\"object\":{\"apiVer")));
                    lines.push(Err(std::io::Error::other("dropped")));
                    finish = true;
                } else {
                    if g.malformed.remove(&path) {
                        lines.push(Ok(Bytes::from_static(b"{this is not json}\n")));
                        lines.push(Ok(Bytes::from_static(b"{\"type\":\"ADDED\",\"object\":\"not an object\"}\n")));
                    }
                    let Inner { resources, served, .. } = &mut *g;
                    let r = resources.get(&path).unwrap();
                    let p = pos.get_or_insert_with(|| r.events.partition_point(|(_, _, rv)| *rv <= from));
                    while *p < r.released && lines.len() < 64 {
                        let (ty, obj, rv) = &r.events[*p];
                        served.insert((path.clone(), key_of(obj), rv.to_string(), ty == "DELETED"));
                        lines.push(Ok(Bytes::from(format!("{}\n", json!({"type": ty, "object": obj})))));
                        *p += 1;
                    }
                    if started.elapsed() >= timeout {
                        finish = true;
                    }
                }
            }
            let idle = lines.is_empty();
            for l in lines {
                if tx.send(l).await.is_err() {
                    return;
                }
            }
            if finish {
                return;
            }
            if idle {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    });
    Response::builder().status(200).header("content-type", "application/json").body(Body::from_stream(rx)).unwrap()
}

/// What an exporter endpoint does when asked.
pub enum Behaviour {
    /// Answers `body(n)` for the n-th request (0-based); `None` answers an empty body.
    Body(Box<dyn Fn(usize) -> Option<String> + Send + Sync>),
    /// Answers after this delay (longer than the collector's timeout).
    Slow(Duration, String),
    /// Answers bytes that are not Prometheus text.
    Garbage,
}

struct Endpoint {
    behaviour: Behaviour,
    /// Per delivered body: (request start ms, delivery ms, n).
    log: Vec<(i64, i64, usize)>,
}

#[derive(Clone)]
pub struct DcgmServer {
    endpoints: Arc<Mutex<BTreeMap<String, Endpoint>>>,
    pub addr: SocketAddr,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

impl DcgmServer {
    pub fn start(rt: &tokio::runtime::Runtime) -> DcgmServer {
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let server = DcgmServer { endpoints: Arc::new(Mutex::new(BTreeMap::new())), addr };
        let app = axum::Router::new().fallback(exporter).with_state(server.clone());
        rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
        server
    }

    /// Adds `/<name>/metrics` and returns its URL.
    pub fn add(&self, name: &str, behaviour: Behaviour) -> String {
        self.endpoints.lock().unwrap().insert(name.to_owned(), Endpoint { behaviour, log: Vec::new() });
        format!("http://{}/{name}/metrics", self.addr)
    }

    /// (request start ms, answer end ms, n) of every answered request of `name`.
    pub fn log(&self, name: &str) -> Vec<(i64, i64, usize)> {
        self.endpoints.lock().unwrap()[name].log.clone()
    }
}

async fn exporter(State(s): State<DcgmServer>, uri: Uri) -> Response {
    let start = now_ms();
    // `/<name>/metrics`, or `/metrics` for the endpoint named "" (as a discovered pod serves it).
    let name = uri.path().trim_start_matches('/').trim_end_matches("metrics").trim_end_matches('/').to_owned();
    let (body, delay, n) = {
        let mut g = s.endpoints.lock().unwrap();
        let Some(e) = g.get_mut(&name) else { return (StatusCode::NOT_FOUND, "no such exporter").into_response() };
        // The n-th body is answered until one is delivered: a scrape the collector gave up
        // on is asked again, like a real exporter that still shows the same values.
        let n = e.log.len();
        match &e.behaviour {
            Behaviour::Body(f) => (f(n).unwrap_or_default(), None, n),
            Behaviour::Slow(d, b) => (b.clone(), Some(*d), n),
            Behaviour::Garbage => ("<html><body>\u{0}\u{1}garbage {{{ = ,\n\x07not metrics</body></html>\n".to_owned(), None, n),
        }
    };
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    // The body is one chunk; hyper asks for the next one only after writing it, and the client
    // cannot see the end of the response before that. A scrape the collector gave up on
    // (timeout) is therefore never logged as answered.
    let mut chunk = Some(Bytes::from(body));
    let stream = futures::stream::poll_fn(move |_| {
        if let Some(c) = chunk.take() {
            return std::task::Poll::Ready(Some(Ok::<_, std::io::Error>(c)));
        }
        let mut g = s.endpoints.lock().unwrap();
        let e = g.get_mut(&name).unwrap();
        // Two requests racing for the same body: only the first delivery counts.
        if e.log.last().is_none_or(|(_, _, m)| *m < n) {
            e.log.push((start, now_ms(), n));
        }
        std::task::Poll::Ready(None)
    });
    Response::builder().status(200).header("content-type", "text/plain; version=0.0.4").body(Body::from_stream(stream)).unwrap()
}

/// `gpuledger collect` running as a child process.
pub struct Collector {
    pub child: Child,
    pub listen: SocketAddr,
    pub log: PathBuf,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl Collector {
    /// Starts `gpuledger collect` and waits until `/readyz` answers 200.
    pub fn start(config: &Path, store: &Path, kubeconfig: Option<&Path>, log: &Path) -> Collector {
        let listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let logf = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpuledger"));
        cmd.args(["collect", "--config", &config.display().to_string(), "--store", &store.display().to_string(), "--listen", &listen.to_string()]);
        cmd.env_remove("KUBECONFIG");
        if let Some(k) = kubeconfig {
            cmd.env("KUBECONFIG", k);
        }
        cmd.stdout(Stdio::null()).stderr(logf);
        let child = cmd.spawn().unwrap();
        let mut c = Collector { child, listen, log: log.to_path_buf() };
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = c.child.try_wait() {
                panic!("collector exited early with {st}:\n{}", std::fs::read_to_string(log).unwrap_or_default());
            }
            if c.get("/readyz").is_some_and(|(code, _)| code == 200) {
                return c;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "collector not ready after 60 s:\n{}", std::fs::read_to_string(log).unwrap_or_default());
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A plain HTTP GET against the collector: (status, body).
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.listen, path)
    }

    /// The value of one sample of `/metrics` (the sum when several series match `prefix`).
    pub fn metric(&self, prefix: &str) -> f64 {
        metric_in(&self.get("/metrics").unwrap_or_default().1, prefix)
    }

    /// SIGTERM, then waits for a clean exit (status 0).
    pub fn stop(mut self) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "collector exited with {st} after SIGTERM:\n{}", std::fs::read_to_string(&self.log).unwrap_or_default());
                return;
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "collector did not stop within 60 s of SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL: no chance to flush anything.
    pub fn kill9(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

/// A test that fails midway must not leave a collector running.
impl Drop for Collector {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The sum of the samples in the exposition `text` whose line starts with `prefix`.
pub fn metric_in(text: &str, prefix: &str) -> f64 {
    text.lines().filter(|l| l.starts_with(prefix)).filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok()).sum()
}

pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    // Chunked bodies keep their size lines; callers only look for whole metric lines.
    Some((code, body))
}

/// Polls `cond` every 50 ms until it holds; panics with `what` after `limit`.
pub fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    wait_until(what, limit, || if cond() { Ok(()) } else { Err(String::new()) });
}

/// Like [`wait_for`], with the last reason the condition gave in the panic message.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> Result<(), String>) {
    let t0 = Instant::now();
    loop {
        match cond() {
            Ok(()) => return,
            Err(why) => assert!(t0.elapsed() < limit, "timed out after {limit:?} waiting for {what}: {why}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
