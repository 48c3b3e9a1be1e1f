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

    /// True while an injected fault (drop, 410 Gone, malformed events) waits for an open watch
    /// on its path to deliver it: the server's own record that a fault has happened.
    pub fn faults_pending(&self) -> bool {
        let g = self.inner.lock().unwrap();
        !(g.drop.is_empty() && g.gone.is_empty() && g.malformed.is_empty())
    }

    /// The highest resourceVersion held for each path: where a collector that recorded
    /// everything stands.
    pub fn last_versions(&self) -> BTreeMap<String, u64> {
        self.inner.lock().unwrap().resources.iter().filter_map(|(p, r)| Some((p.clone(), r.events.iter().map(|e| e.2).max()?))).collect()
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
                        assert!(t0.elapsed() < crate::util::PATIENCE, "cannot listen on {} again: {e}", self.addr);
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
    /// Answers `body(n)` for the n-th request (0-based) until one is delivered; `None` answers
    /// an empty body.
    Body(Box<dyn Fn(usize) -> Option<String> + Send + Sync>),
    /// Answers `body(run, n)`, where `n` is how many scrapes of this endpoint the collector named
    /// by [`DcgmServer::ack_from`] counts as accepted on its own `/metrics` when the request
    /// arrives. The collector scrapes an endpoint one request at a time and counts a scrape
    /// before it sends the next, so a body it gave up on (a timeout on a busy machine) is simply
    /// answered again: what it stores is body 0, 1, 2, ... without a gap however slow it is.
    /// Answers 503 while no collector is named or its `/metrics` does not answer.
    Acked(Box<dyn Fn(usize, usize) -> Option<String> + Send + Sync>),
    /// Never answers: the collector has to give up on its own (its scrape timeout).
    Hang,
    /// Answers bytes that are not Prometheus text.
    Garbage,
}

/// An answer an endpoint delivered whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivery {
    /// When the request reached the handler (ms since the epoch, this process's clock).
    pub start_ms: i64,
    /// When the body had been written, before the end of the response: a client cannot have
    /// read the whole answer before this time.
    pub end_ms: i64,
    /// The collector run it was answered for ([`Behaviour::Acked`]; 0 otherwise) and the body number.
    pub run: usize,
    pub n: usize,
}

struct Endpoint {
    behaviour: Behaviour,
    log: Vec<Delivery>,
}

#[derive(Clone)]
pub struct DcgmServer {
    endpoints: Arc<Mutex<BTreeMap<String, Endpoint>>>,
    /// Every request to a known endpoint, by endpoint name, in the order the handlers saw them.
    arrivals: Arc<Mutex<Vec<String>>>,
    /// The collector whose `/metrics` [`Behaviour::Acked`] endpoints follow, and its run number.
    ack: Arc<Mutex<Option<(SocketAddr, usize)>>>,
    pub addr: SocketAddr,
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64
}

impl DcgmServer {
    pub fn start(rt: &tokio::runtime::Runtime) -> DcgmServer {
        let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        let server = DcgmServer { endpoints: Arc::default(), arrivals: Arc::default(), ack: Arc::default(), addr };
        let app = axum::Router::new().fallback(exporter).with_state(server.clone());
        rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
        server
    }

    /// Adds `/<name>/metrics` and returns its URL.
    pub fn add(&self, name: &str, behaviour: Behaviour) -> String {
        self.endpoints.lock().unwrap().insert(name.to_owned(), Endpoint { behaviour, log: Vec::new() });
        self.url(name)
    }

    /// The URL of endpoint `name`, as the collector scrapes it.
    pub fn url(&self, name: &str) -> String {
        if name.is_empty() { format!("http://{}/metrics", self.addr) } else { format!("http://{}/{name}/metrics", self.addr) }
    }

    /// [`Behaviour::Acked`] endpoints follow the collector listening on `listen`, as run `run`.
    pub fn ack_from(&self, listen: SocketAddr, run: usize) {
        *self.ack.lock().unwrap() = Some((listen, run));
    }

    /// [`Behaviour::Acked`] endpoints answer 503 until [`DcgmServer::ack_from`] names a collector.
    pub fn ack_from_none(&self) {
        *self.ack.lock().unwrap() = None;
    }

    /// Every answer `name` delivered whole, in order.
    pub fn log(&self, name: &str) -> Vec<Delivery> {
        self.endpoints.lock().unwrap()[name].log.clone()
    }

    /// Endpoint names of every request so far, in arrival order (answered or not).
    pub fn arrivals(&self) -> Vec<String> {
        self.arrivals.lock().unwrap().clone()
    }

    /// Requests `name` received so far (answered or not).
    pub fn arrivals_of(&self, name: &str) -> usize {
        self.arrivals.lock().unwrap().iter().filter(|n| *n == name).count()
    }
}

fn unavailable(why: &str) -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, why.to_owned()).into_response()
}

async fn exporter(State(s): State<DcgmServer>, uri: Uri) -> Response {
    let start = now_ms();
    // `/<name>/metrics`, or `/metrics` for the endpoint named "" (as a discovered pod serves it).
    let name = uri.path().trim_start_matches('/').trim_end_matches("metrics").trim_end_matches('/').to_owned();
    enum Plan {
        Answer(String, usize, usize),
        Acked,
        Hang,
    }
    let plan = {
        let mut g = s.endpoints.lock().unwrap();
        let Some(e) = g.get_mut(&name) else { return (StatusCode::NOT_FOUND, "no such exporter").into_response() };
        s.arrivals.lock().unwrap().push(name.clone());
        match &e.behaviour {
            // The n-th body is answered until one is delivered: a scrape the collector gave up
            // on is asked again, like a real exporter that still shows the same values.
            Behaviour::Body(f) => {
                let n = e.log.len();
                Plan::Answer(f(n).unwrap_or_default(), 0, n)
            }
            Behaviour::Acked(_) => Plan::Acked,
            Behaviour::Hang => Plan::Hang,
            Behaviour::Garbage => Plan::Answer("<html><body>\u{0}\u{1}garbage {{{ = ,\n\x07not metrics</body></html>\n".to_owned(), 0, e.log.len()),
        }
    };
    let (body, run, n) = match plan {
        Plan::Answer(body, run, n) => (body, run, n),
        Plan::Hang => std::future::pending().await,
        Plan::Acked => {
            let Some((listen, run)) = *s.ack.lock().unwrap() else { return unavailable("no collector to follow yet") };
            let url = s.url(&name);
            let Ok(Some((200, text))) = tokio::task::spawn_blocking(move || http_get(listen, "/metrics")).await else {
                return unavailable("the collector's /metrics does not answer");
            };
            let n = metric_in(&text, &format!("gpuledger_scrapes_total{{endpoint=\"{url}\",result=\"ok\"}}")) as usize;
            let g = s.endpoints.lock().unwrap();
            let Behaviour::Acked(f) = &g[&name].behaviour else { unreachable!("behaviours do not change") };
            (f(run, n).unwrap_or_default(), run, n)
        }
    };
    // The body is one chunk of a chunked response; hyper asks for the next one only after
    // writing it, and the client cannot see the end of the response before that. A scrape the
    // collector gave up on before the body was written is therefore never logged as delivered.
    let mut chunk = Some(Bytes::from(body));
    let stream = futures::stream::poll_fn(move |_| {
        if let Some(c) = chunk.take() {
            return std::task::Poll::Ready(Some(Ok::<_, std::io::Error>(c)));
        }
        let mut g = s.endpoints.lock().unwrap();
        let e = g.get_mut(&name).unwrap();
        let delivery = Delivery { start_ms: start, end_ms: now_ms(), run, n };
        match e.behaviour {
            // Every delivery of an acked body counts: the last one of each `n` is the one kept.
            Behaviour::Acked(_) => e.log.push(delivery),
            // Two requests racing for the same body: only the first delivery counts.
            _ if e.log.last().is_none_or(|d| d.n < n) => e.log.push(delivery),
            _ => {}
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
    /// Starts `gpuledger collect` on a port of its own choosing (read back from its log, so no
    /// other process can take the port in between) and waits until `/readyz` answers 200.
    pub fn start(config: &Path, store: &Path, kubeconfig: Option<&Path>, log: &Path) -> Collector {
        let logf = std::fs::OpenOptions::new().create(true).append(true).open(log).unwrap();
        let offset = logf.metadata().unwrap().len() as usize;
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gpuledger"));
        cmd.args(["collect", "--config", &config.display().to_string(), "--store", &store.display().to_string(), "--listen", "127.0.0.1:0"]);
        cmd.env_remove("KUBECONFIG");
        if let Some(k) = kubeconfig {
            cmd.env("KUBECONFIG", k);
        }
        cmd.stdout(Stdio::null()).stderr(logf);
        let mut child = cmd.spawn().unwrap();
        let text = || std::fs::read(log).map(|b| String::from_utf8_lossy(&b[offset.min(b.len())..]).into_owned()).unwrap_or_default();
        let mut listen = None;
        wait_until("the collector to listen", || {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("collector exited early with {st}:\n{}", text());
            }
            listen = text().lines().find_map(|l| l.split_once("serving /metrics, /healthz and /readyz on http://")?.1.split_whitespace().next()?.parse::<SocketAddr>().ok());
            listen.map(|_| ()).ok_or_else(text)
        });
        let c = Collector { child, listen: listen.unwrap(), log: log.to_path_buf() };
        wait_until("the collector to be ready", || {
            if c.get("/readyz").is_some_and(|(code, _)| code == 200) { Ok(()) } else { Err(text()) }
        });
        c
    }

    /// A plain HTTP GET against the collector: (status, body), `None` when it does not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.listen, path)
    }

    /// The collector's `/metrics`, asked until it answers (a busy machine may miss a read timeout).
    pub fn metrics(&self) -> String {
        let mut text = String::new();
        wait_until("the collector's /metrics", || match self.get("/metrics") {
            Some((200, body)) => {
                text = body;
                Ok(())
            }
            other => Err(format!("{other:?}")),
        });
        text
    }

    /// The value of one sample of `/metrics` (the sum when several series match `prefix`; 0
    /// when none does). Never 0 for want of an answer: see [`Collector::metrics`].
    pub fn metric(&self, prefix: &str) -> f64 {
        metric_in(&self.metrics(), prefix)
    }

    /// Sends `signal` (STOP, CONT, TERM) to the collector.
    fn signal(&self, signal: &str) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill").args([&format!("-{signal}"), &pid]).status().unwrap().success(), "kill -{signal} {pid}");
    }

    /// SIGSTOP: the collector does nothing until [`Collector::thaw`] or a kill, so its files can
    /// be read as they are at that instant.
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    pub fn thaw(&self) {
        self.signal("CONT");
    }

    /// SIGTERM, then waits for a clean exit (status 0).
    pub fn stop(mut self) {
        self.signal("TERM");
        let t0 = Instant::now();
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "collector exited with {st} after SIGTERM:\n{}", std::fs::read_to_string(&self.log).unwrap_or_default());
                return;
            }
            assert!(t0.elapsed() < crate::util::PATIENCE, "collector did not stop within {:?} of SIGTERM", crate::util::PATIENCE);
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

/// A plain HTTP/1.1 GET: (status, body with any chunked framing removed), `None` when the
/// server does not answer in time.
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let code = text.split(' ').nth(1)?.parse().ok()?;
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
    Some((code, if chunked { crate::serving::dechunk(body) } else { body.to_owned() }))
}

/// Polls `cond` every 50 ms until it holds; panics with `what` after [`crate::util::PATIENCE`]
/// (a hang guard: the condition is something the system will do, however slowly).
pub fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    wait_until(what, || if cond() { Ok(()) } else { Err(String::new()) });
}

/// Like [`wait_for`], with the last reason the condition gave in the panic message.
pub fn wait_until(what: &str, mut cond: impl FnMut() -> Result<(), String>) {
    let t0 = Instant::now();
    loop {
        match cond() {
            Ok(()) => return,
            Err(why) => assert!(t0.elapsed() < crate::util::PATIENCE, "no sign after {:?} of {what}: {why}", crate::util::PATIENCE),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
