//! Kubernetes and Kueue watches: list, then watch from the list's resourceVersion, resume from
//! the last version seen when a connection drops, list again on 410 Gone, back off on errors.
//!
//! Why not `kube::runtime::watcher`: it always starts with a list and reports only "applied" or
//! "deleted". The ledger needs every version with its event type, and after a crash the collector
//! resumes from the position saved in its WAL, so the API server replays the versions the crash
//! cut off instead of only showing the latest state. The HTTP, auth and TLS parts are kube's
//! (`kube::Client`, `kube::core::Request`); only the state machine lives here.
//!
//! Every version is recorded once: a version already recorded (same object, same
//! resourceVersion, same deletedness), seen again after a resume or a re-list, is skipped. The
//! versions already in the store are loaded at start for that (see [`crate::store::object_heads`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use kube::api::{ListParams, WatchParams};
use kube::core::{Request, WatchEvent};
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use super::log;
use super::metrics::{Metrics, restart};
use super::resources::Resource;
use super::writer::Msg;
use crate::diag::Diagnostics;
use crate::sources::kubernetes_file::received_version;
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

/// How one watch connection ended.
enum End {
    /// Closed by the server or the network: resume from the last position.
    Closed,
    /// The position is too old: list again.
    Gone,
    Failed(String),
    Stopped,
}

/// One resource's watch. `fallback` is used when the server does not serve `res` at all.
pub struct ResourceWatch {
    res: &'static Resource,
    fallback: Option<&'static Resource>,
    ctx: WatchContext,
    id: String,
    /// The served resource and version (after negotiation).
    active: Option<(&'static Resource, &'static str)>,
    rv: Option<String>,
    heads: Heads,
    tombstones: Vec<(Instant, String)>,
    last_ms: Option<i64>,
    source: PathBuf,
    failures: u32,
}

impl ResourceWatch {
    pub fn new(res: &'static Resource, fallback: Option<&'static Resource>, ctx: WatchContext, start_rv: Option<String>, heads: Heads) -> Self {
        let id = res.id();
        let source = PathBuf::from(format!("watch {id}"));
        ResourceWatch { res, fallback, ctx, id, active: None, rv: start_rv, heads, tombstones: Vec::new(), last_ms: None, source, failures: 0 }
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
            if self.rv.is_none() {
                self.ctx.metrics.watch_state(&self.id, "listing");
                match self.list().await {
                    Ok(()) => {}
                    Err(e) => {
                        if self.fail(e).await {
                            return;
                        }
                        continue;
                    }
                }
            }
            self.ctx.metrics.watch_state(&self.id, "watching");
            match self.watch().await {
                End::Stopped => return,
                End::Closed => {
                    self.ctx.metrics.watch_restart(&self.id, restart::RESUMED);
                    // A server that closes at once would otherwise be hammered.
                    if self.failures > 0 && self.sleep(backoff(self.failures)).await {
                        return;
                    }
                }
                End::Gone => {
                    log::info(format!("{}: position {} expired (410 Gone), listing again", self.id, self.rv.as_deref().unwrap_or("")));
                    self.ctx.metrics.watch_restart(&self.id, restart::RELISTED);
                    self.rv = None;
                }
                End::Failed(e) => {
                    if self.fail(e).await {
                        return;
                    }
                }
            }
        }
    }

    /// Logs, counts and waits after a failure. True when stopped meanwhile.
    async fn fail(&mut self, e: String) -> bool {
        self.failures = self.failures.saturating_add(1);
        let wait = backoff(self.failures);
        if self.failures <= 3 || self.failures.is_power_of_two() {
            log::warn(format!("{}: {e}; retrying in {:.1}s (attempt {})", self.id, wait.as_secs_f64(), self.failures));
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
                            log::info(format!("{}: using {}", self.id, res.path(version)));
                        }
                        self.active = Some((res, version));
                        return Ok(true);
                    }
                    Err(kube::Error::Api(s)) if s.code == 404 => continue,
                    Err(e) => return Err(format!("cannot reach {}: {}", res.path(version), error_text(&e))),
                }
            }
        }
        if self.res.optional {
            log::info(format!("{}: not served by this cluster; looking again every {} min", self.id, ABSENT_RECHECK.as_secs() / 60));
            Ok(false)
        } else {
            Err(format!("{} is not served by the API server", self.res.path(self.res.versions[0])))
        }
    }

    /// Lists every object (paged) and records the versions not yet recorded as SNAPSHOT.
    async fn list(&mut self) -> Result<(), String> {
        let (res, version) = self.active.ok_or("no version negotiated")?;
        let mut token: Option<String> = None;
        let mut items = Vec::new();
        let list_rv = loop {
            let lp = ListParams { limit: Some(PAGE), continue_token: token.clone(), ..ListParams::default() };
            let req = Request::new(res.path(version)).list(&lp).map_err(|e| e.to_string())?;
            let text = match self.ctx.client.request_text(req).await {
                Ok(t) => t,
                Err(kube::Error::Api(s)) if s.code == 410 && token.is_some() => {
                    // The continue token expired mid-list: start the list over.
                    token = None;
                    items.clear();
                    continue;
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    self.active = None;
                    return Err(format!("{} disappeared", res.path(version)));
                }
                Err(e) => return Err(format!("list {}: {}", res.path(version), error_text(&e))),
            };
            let page: Value = tokio::task::block_in_place(|| serde_json::from_str(&text)).map_err(|e| format!("list {}: response is not JSON: {e}", res.path(version)))?;
            match page.get("items") {
                Some(Value::Array(a)) => items.extend(a.iter().cloned()),
                Some(Value::Null) | None => {}
                Some(_) => return Err(format!("list {}: `items` is not an array", res.path(version))),
            }
            let meta = page.get("metadata");
            token = meta.and_then(|m| m.get("continue")).and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_owned);
            if token.is_none() {
                break meta.and_then(|m| m.get("resourceVersion")).and_then(Value::as_str).unwrap_or("").to_owned();
            }
        };
        let mut tables = K8sTables::new();
        let mut diags = Diagnostics::new();
        let mut recorded = 0u64;
        // Building rows is CPU work: keep it off the threads the scrapes' timers run on.
        tokio::task::block_in_place(|| {
            for mut obj in items {
                if let Value::Object(map) = &mut obj {
                    // List items leave out their kind; the list's kind says it.
                    map.entry("apiVersion").or_insert_with(|| Value::String(res.api_version(version)));
                    map.entry("kind").or_insert_with(|| Value::String(res.kind.to_owned()));
                }
                recorded += u64::from(self.record(obj, "SNAPSHOT", &mut tables, &mut diags));
            }
        });
        self.failures = 0;
        self.rv = (!list_rv.is_empty()).then_some(list_rv.clone());
        // Watch only once the list and its position are durable: every version the watch then
        // receives lies after a saved position, so a crash at any later moment can be made good
        // by resuming there (a list would only show the latest state).
        if !self.send_with(tables, diags, recorded, Some(list_rv), true).await {
            return Err("the writer stopped".into());
        }
        Ok(())
    }

    /// Follows one watch connection until it ends.
    async fn watch(&mut self) -> End {
        let Some((res, version)) = self.active else { return End::Failed("no version negotiated".into()) };
        let Some(rv) = self.rv.clone() else { return End::Gone };
        let wp = WatchParams { timeout: Some(WATCH_TIMEOUT_S), bookmarks: true, ..WatchParams::default() };
        let req = match Request::new(res.path(version)).watch(&wp, &rv) {
            Ok(r) => r,
            Err(e) => return End::Failed(e.to_string()),
        };
        let stream = match self.ctx.client.request_events::<Value>(req).await {
            Ok(s) => s,
            Err(kube::Error::Api(s)) if s.code == 410 => return End::Gone,
            Err(e) => return End::Failed(format!("watch {}: {}", res.path(version), error_text(&e))),
        };
        let mut stream = std::pin::pin!(stream);
        loop {
            let first = tokio::select! {
                item = stream.next() => item,
                _ = self.ctx.stop.changed() => return End::Stopped,
            };
            let Some(first) = first else { return End::Closed };
            // Take what else has already arrived, so a burst becomes one WAL append.
            let mut items = vec![first];
            while items.len() < MAX_BATCH {
                match stream.next().now_or_never() {
                    Some(Some(item)) => items.push(item),
                    _ => break,
                }
            }
            let mut tables = K8sTables::new();
            let mut diags = Diagnostics::new();
            let mut recorded = 0u64;
            let mut end = None;
            tokio::task::block_in_place(|| {
                for item in items {
                    match item {
                        Ok(WatchEvent::Added(o)) => recorded += u64::from(self.event(o, "ADDED", &mut tables, &mut diags)),
                        Ok(WatchEvent::Modified(o)) => recorded += u64::from(self.event(o, "MODIFIED", &mut tables, &mut diags)),
                        Ok(WatchEvent::Deleted(o)) => recorded += u64::from(self.event(o, "DELETED", &mut tables, &mut diags)),
                        Ok(WatchEvent::Bookmark(b)) => {
                            self.rv = Some(b.metadata.resource_version);
                        }
                        Ok(WatchEvent::Error(s)) if s.code == 410 => {
                            end = Some(End::Gone);
                            break;
                        }
                        Ok(WatchEvent::Error(s)) => {
                            end = Some(End::Failed(format!("watch {} answered an error: {} ({})", res.path(version), s.message, s.code)));
                            break;
                        }
                        Err(kube::Error::SerdeError(e)) => {
                            // One unreadable event costs that event; the stream goes on.
                            diags.error(&self.source, crate::diag::Position::File, "malformed_event", format!("unreadable watch event: {e}"));
                        }
                        Err(e) => {
                            end = Some(End::Closed);
                            log::info(format!("{}: watch connection ended: {}", self.id, error_text(&e)));
                            break;
                        }
                    }
                }
            });
            let position = self.rv.clone();
            if recorded > 0 {
                self.failures = 0;
            }
            self.send(tables, diags, recorded, position).await;
            self.prune_tombstones();
            if let Some(end) = end {
                return end;
            }
        }
    }

    /// Records one watch event; moves the position to its resourceVersion.
    fn event(&mut self, obj: Value, event_type: &str, tables: &mut K8sTables, diags: &mut Diagnostics) -> bool {
        if let Some(rv) = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).filter(|s| !s.is_empty()) {
            self.rv = Some(rv.to_owned());
        }
        self.record(obj, event_type, tables, diags)
    }

    /// Adds one version unless it is the one already recorded for its object.
    fn record(&mut self, obj: Value, event_type: &str, tables: &mut K8sTables, diags: &mut Diagnostics) -> bool {
        let deleted = event_type == "DELETED";
        let key = object_key(&obj);
        let rv = obj.pointer("/metadata/resourceVersion").and_then(Value::as_str).unwrap_or("").to_owned();
        if let Some(h) = key.as_ref().and_then(|k| self.heads.get(k)) {
            let same = h.resource_version == rv && !rv.is_empty();
            // A list shows what exists: an object it lists at the recorded version is not news.
            if same && (h.deleted == deleted || event_type == "SNAPSHOT") {
                return false;
            }
        }
        let seq = self.ctx.seq.fetch_add(1, Ordering::Relaxed);
        // As in files: watch events keep their stream's time order; list items stand alone.
        let mut alone = None;
        let last_ms = if event_type == "SNAPSHOT" { &mut alone } else { &mut self.last_ms };
        let version = received_version(obj, event_type, super::now_ms(), last_ms, seq);
        let before = tables.len();
        tables.push(&self.source, &version, diags);
        if let Some(k) = key {
            if deleted {
                self.tombstones.push((Instant::now(), k.clone()));
            }
            self.heads.insert(k, Head { resource_version: rv, deleted });
        }
        tables.len() > before
    }

    fn prune_tombstones(&mut self) {
        let cut = self.tombstones.partition_point(|(t, _)| t.elapsed() > TOMBSTONE_TTL);
        for (_, k) in self.tombstones.drain(..cut) {
            if self.heads.get(&k).is_some_and(|h| h.deleted) {
                self.heads.remove(&k);
            }
        }
    }

    /// Hands rows and the position after them to the writer. With `durable`, returns only once
    /// they are fsynced (false if the writer is gone or the collector stops meanwhile).
    async fn send(&mut self, tables: K8sTables, diags: Diagnostics, recorded: u64, position: Option<String>) {
        self.send_with(tables, diags, recorded, position, false).await;
    }

    async fn send_with(&mut self, tables: K8sTables, diags: Diagnostics, recorded: u64, position: Option<String>, durable: bool) -> bool {
        for d in diags.errors.iter().take(5) {
            log::warn(d.to_string());
        }
        for (t, n) in diags.error_counts() {
            self.ctx.metrics.rejected(&self.id, t, n);
        }
        let batches = match tokio::task::block_in_place(|| tables.finish()) {
            Ok(b) => b,
            Err(e) => {
                log::error(format!("{}: {e}", self.id));
                return false;
            }
        };
        if batches.is_empty() && position.is_none() {
            return true;
        }
        let position = position.filter(|p| !p.is_empty()).map(|p| (self.id.clone(), p));
        let (ack, acked) = if durable { let (a, b) = tokio::sync::oneshot::channel(); (Some(a), Some(b)) } else { (None, None) };
        if self.ctx.tx.send(Msg::Data { batches, position, durable: ack }).await.is_err() {
            return false;
        }
        self.ctx.metrics.watch_versions(&self.id, recorded);
        match acked {
            None => true,
            Some(rx) => tokio::select! {
                r = rx => r.is_ok(),
                _ = self.ctx.stop.changed() => false,
            },
        }
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
fn backoff(failures: u32) -> Duration {
    let base = 0.5 * 2f64.powi(failures.saturating_sub(1).min(7) as i32);
    let jitter = (super::now_ms() % 250) as f64 / 1000.0;
    Duration::from_secs_f64(base.min(60.0) * (1.0 + jitter))
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

    #[test]
    fn objects_are_keyed_by_uid_else_by_name() {
        assert_eq!(object_key(&serde_json::json!({"metadata": {"uid": "u1", "name": "a"}})).as_deref(), Some("u1"));
        assert_eq!(object_key(&serde_json::json!({"metadata": {"name": "a", "namespace": "ns"}})).as_deref(), Some("ns/a"));
        assert_eq!(object_key(&serde_json::json!({"spec": {}})), None);
    }
}
