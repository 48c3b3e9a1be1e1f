//! Kubernetes and Kueue watches: list, then watch from the list's resourceVersion, resume from
//! the last version seen when a connection drops, list again on 410 Gone, back off on errors.
//!
//! Why not `kube::runtime::watcher`: it always starts with a list and reports only "applied" or
//! "deleted". The ledger needs every version with its event type, and after a crash the collector
//! resumes from the position saved in its WAL, so the API server replays the versions the crash
//! cut off instead of only showing the latest state. The HTTP, auth and TLS parts are kube's
//! (`kube::Client`, `kube::core::Request`). The state machine ([`Tracker`]) never sees them: the
//! HTTP side turns each request's answer into a stream of [`Event`]s, and the tracker decides
//! from those what to record and what to ask next.
//!
//! Every version is recorded once: a version already recorded (same object, same
//! resourceVersion, same deletedness), seen again after a resume or a re-list, is skipped. The
//! versions already in the store are loaded at start for that (see [`crate::store::object_heads`]).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use futures::{FutureExt, Stream, StreamExt};
use kube::api::{ListParams, WatchParams};
use kube::core::{Request, WatchEvent};
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use super::metrics::{Metrics, restart};
use super::resources::Resource;
use super::writer::Msg;
use crate::backoff::Backoff;
use crate::diag::Diagnostics;
use crate::object::ObjectVersion;
use crate::sources::kubernetes_file::{EventType, received_version};
use crate::tables::k8s::K8sTables;

/// A watch asks the server to end it after this long (it is then resumed): keeps idle
/// connections from being cut silently by load balancers.
const WATCH_TIMEOUT_S: u32 = 290;
/// Page size of lists.
const PAGE: u32 = 500;
/// Events taken into one batch when they arrive together.
const MAX_BATCH: usize = 500;
/// How often an absent optional resource (Kueue not installed) is looked for again.
const ABSENT_RECHECK: Duration = Duration::from_secs(300);
/// Deleted objects are remembered this long, to skip their deletion when it is replayed.
const TOMBSTONE_TTL: Duration = Duration::from_secs(3600);

/// The last recorded version of one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub resource_version: String,
    pub deleted: bool,
}

/// Object key (uid, else namespace/name) -> last recorded version, for one kind.
pub type Heads = HashMap<String, Head>;

/// Shared by every watch.
#[derive(Clone)]
pub struct WatchContext {
    pub client: kube::Client,
    pub tx: mpsc::Sender<Msg>,
    pub metrics: Arc<Metrics>,
    /// Orders versions across watches and runs (see `received_version`).
    pub seq: Arc<AtomicI64>,
    pub stop: watch::Receiver<bool>,
}

/// First `seq` of this run: later runs start higher, so versions keep their order across
/// restarts (the counter has room for a billion versions per run).
pub fn first_seq() -> i64 {
    chrono::Utc::now().timestamp().saturating_mul(1_000_000_000)
}

/// What the API server said, as the state machine ([`Tracker`]) reads it: the HTTP side turns
/// responses and stream items into these, and nothing else of HTTP reaches the state machine.
#[derive(Debug)]
pub enum Event {
    /// One page of a list; `last` is the list's resourceVersion, on its last page only.
    Page { items: Vec<Value>, last: Option<String> },
    /// The continue token of a paged list expired: the pages so far are void, the list starts over.
    ListRestarted,
    Added(Value),
    Modified(Value),
    Deleted(Value),
    /// A BOOKMARK: the position moves on, nothing happened to any object.
    Bookmark(String),
    /// One event that could not be read: it costs that event, the stream goes on.
    Malformed(String),
    /// The position is too old (410 Gone), answered to the request or as an ERROR event.
    Gone,
    /// The request failed, or the server answered with an error.
    Failed(String),
    /// The resource is no longer served.
    Missing(String),
    /// The connection broke (network, server going away): resume, it is no error.
    Dropped(String),
}

/// What the watch asks the API server next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Next {
    /// List everything (no position to resume from).
    List,
    /// Watch from this resourceVersion.
    Watch { from: String },
}

/// How one request's events ended.
#[derive(Debug, PartialEq)]
enum End {
    /// The list's last page is recorded and durable.
    Listed,
    /// Closed by the server or the network: resume from the last position.
    Closed,
    /// The position (given) is too old: list again.
    Gone(Option<String>),
    Failed(String),
    /// The resource is no longer served: find it again.
    Missing(String),
    Stopped,
}

/// What the state machine hands on after a burst of events: the versions to record, in the
/// order they happened, and the position after them.
#[derive(Debug, Default)]
pub struct Flush {
    pub versions: Vec<ObjectVersion>,
    pub diags: Diagnostics,
    pub position: Option<String>,
    /// The position must be durable before the watch goes on (the end of a list).
    pub durable: bool,
}

/// What became of a [`Flush`].
#[derive(Debug, Clone, Copy)]
pub struct Sent {
    /// Versions that became rows.
    pub recorded: u64,
    /// False when the writer is gone (or, for a durable flush, the collector stopped first).
    pub ok: bool,
}

/// The list/watch/resume state of one resource: decides from the events what to record and what
/// to ask next. Knows nothing of HTTP; fed by a stream of [`Event`]s.
pub struct Tracker {
    id: String,
    source: PathBuf,
    /// The position to resume from; `None`: list first.
    rv: Option<String>,
    heads: Heads,
    tombstones: Vec<(Instant, String)>,
    last_ms: Option<i64>,
    /// Failures since the last success, for the backoff.
    failures: u32,
    seq: Arc<AtomicI64>,
    /// Items of the pages of a list not yet complete.
    pending: Vec<Value>,
    /// `apiVersion` and `kind` for list items, which leave them out.
    list_kind: Option<(String, String)>,
}

impl Tracker {
    pub fn new(id: String, start_rv: Option<String>, heads: Heads, seq: Arc<AtomicI64>) -> Self {
        let source = PathBuf::from(format!("watch {id}"));
        Tracker { id, source, rv: start_rv, heads, tombstones: Vec::new(), last_ms: None, failures: 0, seq, pending: Vec::new(), list_kind: None }
    }

    /// What to ask next.
    pub fn next_request(&self) -> Next {
        match &self.rv {
            None => Next::List,
            Some(rv) => Next::Watch { from: rv.clone() },
        }
    }

    /// The position a watch would resume from.
    pub fn resume_point(&self) -> Option<&str> {
        self.rv.as_deref()
    }

    /// Follows one request's events until they end, the state machine decides an end, or
    /// `stop` resolves. Each burst of events already arrived goes to `flush` as one [`Flush`].
    async fn follow<S, F, Fut>(&mut self, events: S, stop: impl Future<Output = ()>, mut flush: F) -> End
    where
        S: Stream<Item = Event>,
        F: FnMut(Flush) -> Fut,
        Fut: Future<Output = Sent>,
    {
        let mut events = std::pin::pin!(events);
        let mut stop = std::pin::pin!(stop);
        // Pages of a list cut short earlier are no part of this one.
        self.pending.clear();
        loop {
            let first = tokio::select! {
                item = events.next() => item,
                _ = &mut stop => return End::Stopped,
            };
            let Some(first) = first else { return End::Closed };
            // Take what else has already arrived, so a burst becomes one WAL append.
            let mut burst = vec![first];
            while burst.len() < MAX_BATCH {
                match events.next().now_or_never() {
                    Some(Some(item)) => burst.push(item),
                    _ => break,
                }
            }
            let mut out = Flush::default();
            // Building versions is CPU work: keep it off the threads the scrapes' timers run on.
            let end = tokio::task::block_in_place(|| burst.into_iter().find_map(|event| self.apply(event, &mut out)));
            if !out.durable {
                out.position = self.rv.clone();
            }
            let durable = out.durable;
            let sent = flush(out).await;
            if sent.recorded > 0 {
                self.failures = 0;
            }
            self.prune_tombstones();
            if durable && !sent.ok {
                return End::Failed("the writer stopped".into());
            }
            match end {
                Some(End::Gone(_)) => return End::Gone(self.rv.take()),
                Some(end) => return end,
                None => {}
            }
        }
    }

    /// Takes in one event; returns how the request ends, if this event ends it.
    fn apply(&mut self, event: Event, out: &mut Flush) -> Option<End> {
        match event {
            Event::Page { items, last } => {
                self.pending.extend(items);
                let list_rv = last?;
                for mut obj in std::mem::take(&mut self.pending) {
                    if let (Value::Object(map), Some((api_version, kind))) = (&mut obj, &self.list_kind) {
                        // List items leave out their kind; the list's kind says it.
                        map.entry("apiVersion").or_insert_with(|| Value::String(api_version.clone()));
                        map.entry("kind").or_insert_with(|| Value::String(kind.clone()));
                    }
                    self.record(obj, EventType::Snapshot, out);
                }
                self.failures = 0;
                self.rv = (!list_rv.is_empty()).then(|| list_rv.clone());
                // Watch only once the list and its position are durable: every version the watch
                // then receives lies after a saved position, so a crash at any later moment can be
                // made good by resuming there (a list would only show the latest state).
                out.position = Some(list_rv);
                out.durable = true;
                Some(End::Listed)
            }
            Event::ListRestarted => {
                self.pending.clear();
                None
            }
            Event::Added(o) => self.event(o, EventType::Added, out),
            Event::Modified(o) => self.event(o, EventType::Modified, out),
            Event::Deleted(o) => self.event(o, EventType::Deleted, out),
            Event::Bookmark(rv) => {
                self.rv = Some(rv);
                None
            }
            Event::Malformed(reason) => {
                out.diags.error(&self.source, crate::diag::Position::File, "malformed_event", reason);
                None
            }
            Event::Gone => Some(End::Gone(None)),
            Event::Failed(e) => Some(End::Failed(e)),
            Event::Missing(e) => Some(End::Missing(e)),
            Event::Dropped(reason) => {
                tracing::info!(resource = %self.id, reason = %reason, "watch connection ended");
                Some(End::Closed)
            }
        }
    }

    /// One watch event: moves the position to its resourceVersion and records it.
    fn event(&mut self, obj: Value, event_type: EventType, out: &mut Flush) -> Option<End> {
        if let Some(rv) = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            self.rv = Some(rv.to_owned());
        }
        self.record(obj, event_type, out);
        None
    }

    /// Adds one version unless it is the one already recorded for its object.
    fn record(&mut self, obj: Value, event_type: EventType, out: &mut Flush) {
        let deleted = event_type == EventType::Deleted;
        let key = object_key(&obj);
        let rv = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("").to_owned();
        if let Some(h) = key.as_ref().and_then(|k| self.heads.get(k)) {
            let same = h.resource_version == rv && !rv.is_empty();
            // A list shows what exists: an object it lists at the recorded version is not news.
            if same && (h.deleted == deleted || event_type == EventType::Snapshot) {
                return;
            }
        }
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        // As in files: watch events keep their stream's time order; list items stand alone.
        let mut alone = None;
        let last_ms = if event_type == EventType::Snapshot { &mut alone } else { &mut self.last_ms };
        out.versions.push(received_version(obj, event_type, super::now_ms(), last_ms, seq));
        if let Some(k) = key {
            if deleted {
                self.tombstones.push((Instant::now(), k.clone()));
            }
            self.heads.insert(k, Head { resource_version: rv, deleted });
        }
    }

    fn prune_tombstones(&mut self) {
        let cut = self.tombstones.partition_point(|(t, _)| t.elapsed() > TOMBSTONE_TTL);
        for (_, k) in self.tombstones.drain(..cut) {
            if self.heads.get(&k).is_some_and(|h| h.deleted) {
                self.heads.remove(&k);
            }
        }
    }
}

/// One resource's watch. `fallback` is used when the server does not serve `res` at all.
pub struct ResourceWatch {
    res: &'static Resource,
    fallback: Option<&'static Resource>,
    ctx: WatchContext,
    id: String,
    /// The served resource and version (after negotiation).
    active: Option<(&'static Resource, &'static str)>,
    tracker: Tracker,
    source: PathBuf,
}

impl ResourceWatch {
    pub fn new(res: &'static Resource, fallback: Option<&'static Resource>, ctx: WatchContext, start_rv: Option<String>, heads: Heads) -> Self {
        let id = res.id();
        let source = PathBuf::from(format!("watch {id}"));
        let tracker = Tracker::new(id.clone(), start_rv, heads, Arc::clone(&ctx.seq));
        ResourceWatch { res, fallback, ctx, id, active: None, tracker, source }
    }

    /// Runs until the stop signal.
    pub async fn run(mut self) {
        self.ctx.metrics.watch_state(&self.id, "listing");
        loop {
            if *self.ctx.stop.borrow() {
                return;
            }
            if self.active.is_none() {
                match self.negotiate().await {
                    Ok(true) => {}
                    Ok(false) => {
                        self.ctx.metrics.watch_state(&self.id, "absent");
                        if self.sleep(ABSENT_RECHECK).await {
                            return;
                        }
                        continue;
                    }
                    Err(e) => {
                        if self.fail(e).await {
                            return;
                        }
                        continue;
                    }
                }
            }
            let Some((res, version)) = self.active else { continue };
            if self.tracker.next_request() == Next::List {
                self.ctx.metrics.watch_state(&self.id, "listing");
                let events = list_events(self.ctx.client.clone(), res, version);
                let failed = match self.follow(events).await {
                    End::Listed => None,
                    End::Stopped => return,
                    End::Missing(e) => {
                        self.active = None;
                        Some(e)
                    }
                    End::Failed(e) => Some(e),
                    End::Closed | End::Gone(_) => Some(format!("list {}: ended before its last page", res.path(version))),
                };
                if let Some(e) = failed {
                    if self.fail(e).await {
                        return;
                    }
                    continue;
                }
            }
            self.ctx.metrics.watch_state(&self.id, "watching");
            let end = match self.tracker.next_request() {
                Next::Watch { from } => self.follow(watch_events(self.ctx.client.clone(), res, version, from)).await,
                // A list without a resourceVersion gives no position to watch from.
                Next::List => End::Gone(None),
            };
            match end {
                End::Stopped => return,
                End::Closed | End::Listed => {
                    self.ctx.metrics.watch_restart(&self.id, restart::RESUMED);
                    // A server that closes at once would otherwise be hammered.
                    if self.tracker.failures > 0 && self.sleep(backoff(self.tracker.failures)).await {
                        return;
                    }
                }
                End::Gone(expired) => {
                    tracing::info!(resource = %self.id, resource_version = expired.as_deref().unwrap_or(""), "position expired (410 Gone), listing again");
                    self.ctx.metrics.watch_restart(&self.id, restart::RELISTED);
                }
                End::Missing(e) => {
                    self.active = None;
                    if self.fail(e).await {
                        return;
                    }
                }
                End::Failed(e) => {
                    if self.fail(e).await {
                        return;
                    }
                }
            }
        }
    }

    /// Feeds one request's events to the tracker, handing what it decides to the writer.
    async fn follow(&mut self, events: impl Stream<Item = Event>) -> End {
        let (ctx, id, source) = (&self.ctx, self.id.as_str(), self.source.as_path());
        let mut stop = ctx.stop.clone();
        let stopped = async move {
            let _ = stop.changed().await;
        };
        self.tracker.follow(events, stopped, move |flush: Flush| send(ctx, id, source, flush)).await
    }

    /// Logs, counts and waits after a failure. True when stopped meanwhile.
    async fn fail(&mut self, e: String) -> bool {
        self.tracker.failures = self.tracker.failures.saturating_add(1);
        let failures = self.tracker.failures;
        let wait = backoff(failures);
        if failures <= 3 || failures.is_power_of_two() {
            tracing::warn!(resource = %self.id, error = %e, retry_in_s = wait.as_secs_f64(), attempt = failures, "watch failed; retrying");
        }
        self.ctx.metrics.watch_restart(&self.id, restart::FAILED);
        self.ctx.metrics.watch_state(&self.id, "waiting");
        self.sleep(wait).await
    }

    /// Sleeps unless stopped first (then true).
    async fn sleep(&mut self, d: Duration) -> bool {
        tokio::select! {
            _ = tokio::time::sleep(d) => false,
            _ = self.ctx.stop.changed() => true,
        }
    }

    /// Finds the first served version of the resource, else of its fallback. `Ok(false)`: served
    /// by neither (fine for optional resources).
    async fn negotiate(&mut self) -> Result<bool, String> {
        for res in std::iter::once(self.res).chain(self.fallback) {
            for version in res.versions {
                let req = Request::new(res.path(version)).list(&ListParams { limit: Some(1), ..ListParams::default() }).map_err(|e| e.to_string())?;
                match self.ctx.client.request_text(req).await {
                    Ok(_) => {
                        if !std::ptr::eq(res, self.res) || *version != self.res.versions[0] {
                            tracing::info!(resource = %self.id, path = %res.path(version), "using this API version");
                        }
                        self.active = Some((res, version));
                        self.tracker.list_kind = Some((res.api_version(version), res.kind.to_owned()));
                        return Ok(true);
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => continue,
                    Err(e) => return Err(format!("cannot reach {}: {}", res.path(version), error_text(&e))),
                }
            }
        }
        if self.res.optional {
            tracing::info!(resource = %self.id, every_min = ABSENT_RECHECK.as_secs() / 60, "not served by this cluster; looking again later");
            Ok(false)
        } else {
            Err(format!("{} is not served by the API server", self.res.path(self.res.versions[0])))
        }
    }
}

/// Builds the rows of a flush and hands them, with the position after them, to the writer. A
/// durable flush returns only once it is fsynced.
async fn send(ctx: &WatchContext, id: &str, source: &Path, flush: Flush) -> Sent {
    let Flush { versions, mut diags, position, durable } = flush;
    let (tables, recorded) = tokio::task::block_in_place(|| {
        let mut tables = K8sTables::new();
        let mut recorded = 0u64;
        for v in &versions {
            let before = tables.len();
            tables.push(source, v, &mut diags);
            recorded += u64::from(tables.len() > before);
        }
        (tables, recorded)
    });
    for d in diags.errors.iter().take(5) {
        tracing::warn!(source = "kubernetes_watch", resource = %id, "{d}");
    }
    for (t, n) in diags.error_counts() {
        ctx.metrics.rejected(id, t, n);
    }
    let batches = match tokio::task::block_in_place(|| tables.finish()) {
        Ok(b) => b,
        Err(e) => {
            tracing::error!(resource = %id, error = %e, "building the object rows failed");
            return Sent { recorded, ok: false };
        }
    };
    if batches.is_empty() && position.is_none() {
        return Sent { recorded, ok: true };
    }
    let position = position.filter(|p| !p.is_empty()).map(|p| (id.to_owned(), p));
    let (ack, acked) = if durable {
        let (a, b) = tokio::sync::oneshot::channel();
        (Some(a), Some(b))
    } else {
        (None, None)
    };
    if ctx.tx.send(Msg::Data { batches, position, durable: ack }).await.is_err() {
        return Sent { recorded, ok: false };
    }
    ctx.metrics.watch_versions(id, recorded);
    let ok = match acked {
        None => true,
        Some(rx) => {
            let mut stop = ctx.stop.clone();
            tokio::select! {
                r = rx => r.is_ok(),
                _ = stop.changed() => false,
            }
        }
    };
    Sent { recorded, ok }
}

/// The pages of a list of `res`, following continue tokens; a token that expired starts the
/// list over.
fn list_events(client: kube::Client, res: &'static Resource, version: &'static str) -> impl Stream<Item = Event> {
    // (continue token, done)
    futures::stream::unfold((client, None::<String>, false), move |(client, token, done)| async move {
        if done {
            return None;
        }
        let path = res.path(version);
        let lp = ListParams { limit: Some(PAGE), continue_token: token.clone(), ..ListParams::default() };
        let req = match Request::new(&path).list(&lp) {
            Ok(r) => r,
            Err(e) => return Some((Event::Failed(e.to_string()), (client, None, true))),
        };
        let text = match client.request_text(req).await {
            Ok(t) => t,
            // The continue token expired mid-list: start the list over.
            Err(kube::Error::Api(s)) if s.code == 410 && token.is_some() => return Some((Event::ListRestarted, (client, None, false))),
            Err(kube::Error::Api(s)) if s.code == 404 => return Some((Event::Missing(format!("{path} disappeared")), (client, None, true))),
            Err(e) => return Some((Event::Failed(format!("list {path}: {}", error_text(&e))), (client, None, true))),
        };
        let page: Value = match tokio::task::block_in_place(|| serde_json::from_str(&text)) {
            Ok(p) => p,
            Err(e) => return Some((Event::Failed(format!("list {path}: response is not JSON: {e}")), (client, None, true))),
        };
        let items = match page.get("items") {
            Some(Value::Array(a)) => a.clone(),
            Some(Value::Null) | None => Vec::new(),
            Some(_) => return Some((Event::Failed(format!("list {path}: `items` is not an array")), (client, None, true))),
        };
        let meta = page.get("metadata");
        let next = meta.and_then(|m| m.get("continue")).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
        let last = next.is_none().then(|| meta.and_then(|m| m.get("resourceVersion")).and_then(Value::as_str).unwrap_or("").to_owned());
        let done = next.is_none();
        Some((Event::Page { items, last }, (client, next, done)))
    })
}

/// The events of one watch connection of `res` from `rv`.
fn watch_events(client: kube::Client, res: &'static Resource, version: &'static str, rv: String) -> impl Stream<Item = Event> {
    let path = res.path(version);
    futures::stream::once(async move {
        let wp = WatchParams { timeout: Some(WATCH_TIMEOUT_S), bookmarks: true, ..WatchParams::default() };
        let one = |e: Event| futures::stream::iter([e]).left_stream();
        let req = match Request::new(&path).watch(&wp, &rv) {
            Ok(r) => r,
            Err(e) => return one(Event::Failed(e.to_string())),
        };
        match client.request_events::<Value>(req).await {
            Ok(stream) => stream.map(move |item| event_of(&path, item)).right_stream(),
            Err(kube::Error::Api(s)) if s.code == 410 => one(Event::Gone),
            Err(e) => one(Event::Failed(format!("watch {path}: {}", error_text(&e)))),
        }
    })
    .flatten()
}

/// One item of a watch stream as the tracker reads it.
fn event_of(path: &str, item: Result<WatchEvent<Value>, kube::Error>) -> Event {
    match item {
        Ok(WatchEvent::Added(o)) => Event::Added(o),
        Ok(WatchEvent::Modified(o)) => Event::Modified(o),
        Ok(WatchEvent::Deleted(o)) => Event::Deleted(o),
        Ok(WatchEvent::Bookmark(b)) => Event::Bookmark(b.metadata.resource_version),
        Ok(WatchEvent::Error(s)) if s.code == 410 => Event::Gone,
        Ok(WatchEvent::Error(s)) => Event::Failed(format!("watch {path} answered an error: {} ({})", s.message, s.code)),
        Err(kube::Error::SerdeError(e)) => Event::Malformed(format!("unreadable watch event: {e}")),
        Err(e) => Event::Dropped(error_text(&e)),
    }
}

/// uid, else namespace/name (objects from files may lack a uid).
pub fn object_key(obj: &Value) -> Option<String> {
    let meta = obj.get("metadata")?;
    if let Some(uid) = meta.get("uid").and_then(Value::as_str).filter(|s| !s.is_empty()) {
        return Some(uid.to_owned());
    }
    let name = meta.get("name").and_then(Value::as_str)?;
    let ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
    Some(format!("{ns}/{name}"))
}

/// 0.5 s doubling to 60 s, with up to 25% jitter so many collectors do not retry in step.
const RETRY: Backoff = Backoff::doubling(Duration::from_millis(500)).capped(Duration::from_secs(60)).jittered(0.25);

fn backoff(failures: u32) -> Duration {
    RETRY.delay(failures)
}

fn error_text(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("HTTP {}: {}", s.code, s.message.trim()),
        other => super::error_chain(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert!(backoff(1) >= Duration::from_millis(500) && backoff(1) < Duration::from_millis(700));
        assert!(backoff(4) >= Duration::from_secs(4));
        assert!(backoff(40) <= Duration::from_secs(75));
    }

    fn pod(uid: &str, rv: &str) -> Value {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"uid": uid, "name": uid, "namespace": "ns", "resourceVersion": rv}})
    }

    fn tracker(start: Option<&str>, heads: &[(&str, &str, bool)]) -> Tracker {
        let heads = heads.iter().map(|(k, rv, deleted)| (k.to_string(), Head { resource_version: rv.to_string(), deleted: *deleted })).collect();
        Tracker::new("pods".into(), start.map(str::to_owned), heads, Arc::new(AtomicI64::new(0)))
    }

    /// Feeds `events` as one connection; returns how it ended and what was flushed.
    async fn follow(t: &mut Tracker, events: Vec<Event>) -> (End, Vec<Flush>) {
        let mut flushes = Vec::new();
        let end = t
            .follow(futures::stream::iter(events), std::future::pending(), |f: Flush| {
                let recorded = f.versions.len() as u64;
                flushes.push(f);
                std::future::ready(Sent { recorded, ok: true })
            })
            .await;
        (end, flushes)
    }

    /// (event type, uid, resourceVersion) of every version flushed, in order.
    fn recorded(flushes: &[Flush]) -> Vec<(String, String, String)> {
        flushes
            .iter()
            .flat_map(|f| &f.versions)
            .map(|v| {
                let m = &v.object["metadata"];
                (v.event_type.as_str().to_owned(), m["uid"].as_str().unwrap_or("").to_owned(), m["resourceVersion"].as_str().unwrap_or("").to_owned())
            })
            .collect()
    }

    fn rec(t: &str, uid: &str, rv: &str) -> (String, String, String) {
        (t.to_owned(), uid.to_owned(), rv.to_owned())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_dropped_connection_resumes_from_the_last_version() {
        let mut t = tracker(Some("10"), &[]);
        assert_eq!(t.next_request(), Next::Watch { from: "10".into() });
        let (end, flushes) = follow(&mut t, vec![Event::Added(pod("a", "11")), Event::Modified(pod("a", "12")), Event::Dropped("connection reset".into())]).await;
        assert_eq!(end, End::Closed);
        assert_eq!(recorded(&flushes), [rec("ADDED", "a", "11"), rec("MODIFIED", "a", "12")]);
        assert_eq!(flushes.last().and_then(|f| f.position.as_deref()), Some("12"), "the position after the versions goes with them");
        assert_eq!(t.next_request(), Next::Watch { from: "12".into() });
        // The server replays the last version on the new connection: already recorded.
        let (end, flushes) = follow(&mut t, vec![Event::Modified(pod("a", "12")), Event::Added(pod("b", "13"))]).await;
        assert_eq!(end, End::Closed, "a stream that ends is a closed connection");
        assert_eq!(recorded(&flushes), [rec("ADDED", "b", "13")]);
        assert_eq!(t.resume_point(), Some("13"));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn gone_leads_to_a_relist_that_skips_what_is_recorded() {
        let mut t = tracker(Some("10"), &[]);
        t.list_kind = Some(("v1".into(), "Pod".into()));
        let (end, flushes) = follow(&mut t, vec![Event::Added(pod("a", "11")), Event::Gone, Event::Added(pod("z", "99"))]).await;
        assert_eq!(end, End::Gone(Some("11".into())), "the expired position is reported");
        assert_eq!(recorded(&flushes), [rec("ADDED", "a", "11")], "nothing after the 410 is taken");
        assert_eq!(t.next_request(), Next::List);
        let bare = |uid: &str, rv: &str| serde_json::json!({"metadata": {"uid": uid, "name": uid, "namespace": "ns", "resourceVersion": rv}});
        let (end, flushes) = follow(
            &mut t,
            vec![
                Event::Page { items: vec![bare("a", "11"), bare("stale", "5")], last: None },
                // The continue token expired: the first page is void.
                Event::ListRestarted,
                Event::Page { items: vec![bare("a", "11"), bare("b", "14")], last: None },
                Event::Page { items: vec![bare("c", "15")], last: Some("16".into()) },
            ],
        )
        .await;
        assert_eq!(end, End::Listed);
        assert_eq!(recorded(&flushes), [rec("SNAPSHOT", "b", "14"), rec("SNAPSHOT", "c", "15")]);
        let list = flushes.last().expect("a flush");
        assert!(list.durable, "the list's position must be durable before watching");
        assert_eq!(list.position.as_deref(), Some("16"));
        assert_eq!(list.versions[0].object["kind"], "Pod", "list items get the list's kind");
        assert_eq!(t.next_request(), Next::Watch { from: "16".into() });
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_bookmark_moves_the_position_and_records_nothing() {
        let mut t = tracker(Some("10"), &[]);
        let (end, flushes) = follow(&mut t, vec![Event::Bookmark("20".into())]).await;
        assert_eq!(end, End::Closed);
        assert!(recorded(&flushes).is_empty());
        assert_eq!(flushes[0].position.as_deref(), Some("20"));
        assert_eq!(t.next_request(), Next::Watch { from: "20".into() });
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn replayed_versions_and_deletions_are_recorded_once_in_order() {
        // Resuming from an older saved position: the server replays versions already stored.
        let mut t = tracker(Some("3"), &[("a", "5", true), ("b", "4", false)]);
        let events = vec![
            Event::Modified(pod("b", "4")),
            Event::Deleted(pod("a", "5")),
            Event::Added(pod("c", "6")),
            Event::Deleted(pod("c", "7")),
            Event::Added(pod("d", "8")),
            Event::Dropped("eof".into()),
        ];
        let (_, flushes) = follow(&mut t, events).await;
        assert_eq!(recorded(&flushes), [rec("ADDED", "c", "6"), rec("DELETED", "c", "7"), rec("ADDED", "d", "8")]);
        // The deletion of c, replayed after the resume, is not news.
        let (_, flushes) = follow(&mut t, vec![Event::Deleted(pod("c", "7")), Event::Modified(pod("d", "9"))]).await;
        assert_eq!(recorded(&flushes), [rec("MODIFIED", "d", "9")]);
        // A list that shows an object at its recorded version is no news either.
        let mut t = tracker(None, &[("b", "4", false)]);
        let (_, flushes) = follow(&mut t, vec![Event::Page { items: vec![pod("b", "4")], last: Some("9".into()) }]).await;
        assert!(recorded(&flushes).is_empty());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn errors_end_the_connection_and_bad_events_cost_themselves() {
        let mut t = tracker(Some("10"), &[]);
        let (end, flushes) = follow(&mut t, vec![Event::Malformed("unreadable watch event: x".into()), Event::Added(pod("a", "11")), Event::Failed("boom".into())]).await;
        assert_eq!(end, End::Failed("boom".into()));
        assert_eq!(recorded(&flushes), [rec("ADDED", "a", "11")]);
        assert_eq!(flushes[0].diags.errors[0].error_type, "malformed_event");
        let (end, _) = follow(&mut t, vec![Event::Missing("pods disappeared".into())]).await;
        assert_eq!(end, End::Missing("pods disappeared".into()));
        // A list whose position the writer could not make durable is a failure.
        let mut t = tracker(None, &[]);
        let end = t
            .follow(futures::stream::iter(vec![Event::Page { items: vec![], last: Some("5".into()) }]), std::future::pending(), |_: Flush| std::future::ready(Sent { recorded: 0, ok: false }))
            .await;
        assert_eq!(end, End::Failed("the writer stopped".into()));
        // Stopping ends a connection that has nothing to say.
        let end = t.follow(futures::stream::pending(), std::future::ready(()), |_: Flush| std::future::ready(Sent { recorded: 0, ok: true })).await;
        assert_eq!(end, End::Stopped);
    }

    #[test]
    fn objects_are_keyed_by_uid_else_by_name() {
        assert_eq!(object_key(&serde_json::json!({"metadata": {"uid": "u1", "name": "a"}})).as_deref(), Some("u1"));
        assert_eq!(object_key(&serde_json::json!({"metadata": {"name": "a", "namespace": "ns"}})).as_deref(), Some("ns/a"));
        assert_eq!(object_key(&serde_json::json!({"spec": {}})), None);
    }
}
