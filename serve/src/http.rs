//! The HTTP API: the month's chargeback (JSON or CSV, the same as `gpuledger report`), GPU-hours
//! by state over time, queue waits, failure causes, the HTML report, `/metrics` and `/healthz`.
//!
//! Everything but `/healthz` and the OpenAPI document needs `Authorization: Bearer <token>`.
//! Handlers read the stored ledger (`<store>/ledger/*.parquet`) through the shared session, each
//! query (and each report, all its queries together) under the same time and memory limits as
//! the SQL endpoint. Bad parameters are 400 with
//! a JSON `{"error": ...}`; a month without data is 404; a query over its limits is 503/504.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use arrow::record_batch::RecordBatch;
use axum::Router;
use axum::extract::{FromRequestParts, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use chrono::{DateTime, NaiveDate, Utc};
use datafusion::error::DataFusionError;
use datafusion::execution::context::SQLOptions;
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;
use gpuledger_ledger::Ledger;
use gpuledger_ledger::config::IdlePolicy;
use gpuledger_engine::exec::rows;
use gpuledger_ledger::monthly::{ANOMALIES_SQL, ANOMALY_DRIVERS_SQL, BUDGETS_SQL, QUOTA_SQL, FAILURE_CAUSES_SQL, IDLE_REASONS_SQL, QUEUE_WAITS_SQL, STRANDED_SQL, stored_months, stored_report};
use gpuledger_ledger::types::Month;
use gpuledger_ledger::report::html;
use gpuledger_ledger::report::text::{TextFormat, render};
use gpuledger_schemas::units::parse_duration;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::Secret;
use crate::limits::Limits;
use crate::stop::{Stop, TimeLimit};
use crate::workers;
use crate::metrics::{self, Stats};

/// The OpenAPI 3 description of this API, served at `/api/v1/openapi.json`.
pub const OPENAPI: &str = include_str!("openapi.json");

/// What the handlers share.
pub struct Api {
    pub ledger: Arc<Ledger>,
    /// The store: its ledger run record names the settings the stored figures were computed with.
    pub store: gpuledger_store::StoreLocation,
    pub limits: Limits,
    /// The statements' runtime (see [`crate::workers`]).
    pub workers: tokio::runtime::Handle,
    pub token: Option<Secret>,
    /// This server's configuration's currency and idle policy: the labels only while no ledger
    /// run has recorded its own.
    pub currency: String,
    pub idle_policy: IdlePolicy,
    pub stats: Arc<Stats>,
    /// How the stored figures' settings differ from this server's configuration, when they do
    /// (shown on `/healthz`, logged once per difference).
    pub differs: std::sync::Mutex<Option<String>>,
}

impl Api {
    /// The currency and idle policy of the stored figures: those the last ledger run recorded
    /// (`ledger/run.json`), else this server's configuration's. Reports are labelled with these,
    /// never with a configuration the figures were not computed with.
    async fn labels(&self) -> (String, IdlePolicy) {
        let configured = (self.currency.clone(), self.idle_policy);
        let recorded = match gpuledger_ledger::record::read(&self.store).await {
            Ok(Some(r)) => match r.idle_policy.parse::<IdlePolicy>() {
                Ok(policy) => (r.currency, policy),
                Err(_) => return configured,
            },
            Ok(None) => return configured,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the ledger's run record: reports are labelled with this server's configuration");
                return configured;
            }
        };
        let differs = (recorded != configured).then(|| {
            format!(
                "the stored figures were computed with idle policy {} and currency {}; this server's configuration says {} and {}: reports carry the stored figures' settings (run `gpuledger ledger` with this configuration to change them)",
                recorded.1, recorded.0, configured.1, configured.0
            )
        });
        let mut last = self.differs.lock().unwrap_or_else(|p| p.into_inner());
        if differs.is_some() && *last != differs {
            tracing::warn!("{}", differs.as_deref().unwrap_or_default());
        }
        *last = differs;
        recorded
    }
}

/// `/healthz`: `ok`, and a second line when the stored figures' settings differ from this
/// server's configuration.
async fn healthz(State(api): State<Arc<Api>>) -> String {
    let _ = api.labels().await;
    match api.differs.lock().unwrap_or_else(|p| p.into_inner()).as_deref() {
        Some(note) => format!("ok\nnote: {note}\n"),
        None => "ok\n".to_string(),
    }
}

pub fn router(api: Arc<Api>) -> Router {
    let protected = Router::new()
        .route("/api/v1/chargeback", get(chargeback))
        .route("/api/v1/states", get(states))
        .route("/api/v1/fleet", get(fleet))
        .route("/api/v1/queue", get(queue))
        .route("/api/v1/failures", get(failures))
        .route("/api/v1/budgets", get(budgets))
        .route("/api/v1/idle", get(idle))
        .route("/api/v1/anomalies", get(anomalies))
        .route("/api/v1/quota", get(quota))
        .route("/api/v1/report.html", get(report_html))
        .route("/api/v1/months", get(months))
        .route("/metrics", get(prometheus))
        .route_layer(middleware::from_fn_with_state(api.clone(), require_token));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/api/v1/openapi.json", get(|| async { ([(header::CONTENT_TYPE, "application/json")], OPENAPI) }))
        .merge(protected)
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint (see /api/v1/openapi.json)") })
        .method_not_allowed_fallback(|| async { ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "only GET is served") })
        .with_state(api)
}

/// An error answered as JSON `{"error": message}`.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, message: impl Into<String>) -> ApiError {
        ApiError { status, message: message.into() }
    }

    fn bad(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(json!({ "error": self.message }))).into_response()
    }
}

impl From<gpuledger_ledger::Error> for ApiError {
    fn from(e: gpuledger_ledger::Error) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
    }
}

/// Query parameters whose parse errors (a repeated key, say) are answered like every other bad
/// parameter: 400 with a JSON `error`, not axum's plain-text rejection.
struct Params<T>(T);

impl<T, S> FromRequestParts<S> for Params<T>
where
    T: serde::de::DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state).await.map(|Query(t)| Params(t)).map_err(|e| ApiError::bad(e.body_text()))
    }
}

async fn require_token(State(api): State<Arc<Api>>, request: Request, next: Next) -> Response {
    api.stats.http_requests.fetch_add(1, Ordering::Relaxed);
    let Some(token) = &api.token else {
        api.stats.http_unauthorized.fetch_add(1, Ordering::Relaxed);
        return ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "no API token is configured: set the variable named by serve.http_token_env").into_response();
    };
    // The scheme name is case-insensitive (RFC 9110); the token is not.
    let given = request.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.split_once(' ')).filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer")).map(|(_, t)| t);
    if given.is_some_and(|g| constant_time_eq(g.trim().as_bytes(), token.expose().as_bytes())) {
        return next.run(request).await;
    }
    api.stats.http_unauthorized.fetch_add(1, Ordering::Relaxed);
    let mut response = ApiError::new(StatusCode::UNAUTHORIZED, "missing or wrong bearer token").into_response();
    response.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer realm=\"gpuledger\""));
    response
}

/// Compares without an early exit, so the time taken does not tell how much of a guess matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Api {
    fn ctx(&self) -> &SessionContext {
        self.ledger.context()
    }

    /// Runs one read-only statement under the limits; `$1`, `$2`... take `params`.
    async fn run(&self, sql: &str, params: Vec<ScalarValue>) -> Result<Vec<RecordBatch>, ApiError> {
        let read_only = SQLOptions::new().with_allow_ddl(false).with_allow_dml(false).with_allow_statements(false);
        let sql = sql.to_owned();
        self.limited(move |ctx| async move {
            let df = ctx.sql_with_options(&sql, read_only).await?;
            let df = if params.is_empty() { df } else { df.with_param_values(params)? };
            df.collect().await
        })
        .await
    }

    /// Runs `work` (one statement, or the several of a report) in a session of its own on the
    /// statements' threads, under the per-statement time limit and memory pool (504 past the
    /// time, 503 past the memory), in one of the HTTP API's turns (it counts as one user).
    async fn limited<T, E, W, F>(&self, work: W) -> Result<T, ApiError>
    where
        W: FnOnce(SessionContext) -> F,
        F: Future<Output = Result<T, E>> + Send + 'static,
        T: Send + 'static,
        E: Into<Limited> + Send + 'static,
    {
        let stop = Stop::new(TimeLimit::of(self.limits.timeout, None));
        let timed_out = |waiting: &str| ApiError::new(StatusCode::GATEWAY_TIMEOUT, format!("the query ran longer than query_timeout ({}){waiting}", gpuledger_schemas::units::format_duration(self.limits.timeout)));
        let Some(_turn) = self.limits.turns.wait(HTTP_USER, stop.deadline()).await else {
            return Err(timed_out(&format!(", waiting for a turn: the HTTP API already runs max_statements_per_user ({}) statements", self.limits.turns.per_user())));
        };
        let ctx = self.limits.session(self.ctx(), &stop).map_err(internal)?;
        match tokio::time::timeout_at(stop.deadline(), workers::run_on(&self.workers, work(ctx))).await {
            Err(_) => Err(timed_out("")),
            Ok(Err(join)) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("the query's task ended: {join}"))),
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(_))) if stop.stopped().is_some() => Err(timed_out("")),
            Ok(Ok(Err(e))) => Err(match e.into() {
                Limited::Query(e) if is_resources_exhausted(&e) => ApiError::new(StatusCode::SERVICE_UNAVAILABLE, format!("the query needed more than memory_limit: {e}")),
                Limited::Query(e) => internal(e),
                Limited::Ledger(e) => e.into(),
            }),
        }
    }

    /// Fails with 503 until a `gpuledger ledger` run has written the derived tables (the
    /// server's refresher registers them within `refresh_interval`).
    async fn need_ledger(&self) -> Result<(), ApiError> {
        if self.ctx().table_exist("chargeback_monthly").unwrap_or(false) {
            Ok(())
        } else {
            Err(ApiError::new(StatusCode::SERVICE_UNAVAILABLE, format!("the store has no ledger yet: run `gpuledger ledger --store {}`", self.ledger.location())))
        }
    }

    /// The month asked for, checked against the months with data; the busiest when absent.
    async fn month(&self, asked: Option<&str>) -> Result<Month, ApiError> {
        // A malformed month is the request's fault whether or not a ledger exists.
        let asked = asked.map(|m| m.parse::<Month>().map_err(|e| ApiError::bad(e.to_string()))).transpose()?;
        self.need_ledger().await?;
        let (months, busiest) = self.limited(|ctx| async move { stored_months(&ctx).await }).await?;
        match asked {
            Some(m) if months.contains(&m) => Ok(m),
            Some(m) => {
                let have = if months.is_empty() { "none".into() } else { months.iter().map(Month::as_str).collect::<Vec<_>>().join(", ") };
                Err(ApiError::new(StatusCode::NOT_FOUND, format!("no data for month {m} (months with data: {have})")))
            }
            None => busiest.ok_or_else(|| ApiError::new(StatusCode::NOT_FOUND, "the ledger holds no month yet")),
        }
    }
}

/// What limited work fails with: a statement's error, or the ledger's (whose query error is
/// looked into for a memory limit).
enum Limited {
    Query(DataFusionError),
    Ledger(gpuledger_ledger::Error),
}

impl From<DataFusionError> for Limited {
    fn from(e: DataFusionError) -> Limited {
        Limited::Query(e)
    }
}

impl From<gpuledger_ledger::Error> for Limited {
    fn from(e: gpuledger_ledger::Error) -> Limited {
        match e {
            gpuledger_ledger::Error::Query { source, .. } => Limited::Query(source),
            other => Limited::Ledger(other),
        }
    }
}

/// The name the HTTP API's statements take their turns under.
const HTTP_USER: &str = "(http api)";

fn internal(e: DataFusionError) -> ApiError {
    ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

fn is_resources_exhausted(e: &DataFusionError) -> bool {
    matches!(e.find_root(), DataFusionError::ResourcesExhausted(_))
}

#[derive(Debug, Deserialize)]
struct MonthParams {
    month: Option<String>,
    format: Option<String>,
}

/// `GET /api/v1/chargeback?month=YYYY-MM&format=json|csv`: the same document as
/// `gpuledger report --format json|csv` for that month.
async fn chargeback(State(api): State<Arc<Api>>, Params(p): Params<MonthParams>) -> Result<Response, ApiError> {
    let format = match p.format.as_deref() {
        None | Some("json") => TextFormat::Json,
        Some("csv") => TextFormat::Csv,
        Some(other) => return Err(ApiError::bad(format!("format {other:?} is not json or csv"))),
    };
    let month = api.month(p.month.as_deref()).await?;
    let (currency, idle_policy) = api.labels().await;
    let report = api.limited(move |ctx| async move { stored_report(&ctx, &month, &currency, idle_policy).await }).await?;
    let body = render(&report, format);
    let content_type = if matches!(format, TextFormat::Csv) { "text/csv; charset=utf-8" } else { "application/json" };
    Ok(([(header::CONTENT_TYPE, content_type)], body).into_response())
}

/// `GET /api/v1/report.html?month=YYYY-MM`: the self-contained HTML report.
async fn report_html(State(api): State<Arc<Api>>, Params(p): Params<MonthParams>) -> Result<Response, ApiError> {
    if p.format.is_some() {
        return Err(ApiError::bad("report.html takes no format"));
    }
    let month = api.month(p.month.as_deref()).await?;
    let (currency, idle_policy) = api.labels().await;
    let report = api.limited(move |ctx| async move { stored_report(&ctx, &month, &currency, idle_policy).await }).await?;
    Ok(([(header::CONTENT_TYPE, "text/html; charset=utf-8")], html::render(&report)).into_response())
}

/// `GET /api/v1/months`: months with data and the busiest one.
async fn months(State(api): State<Arc<Api>>) -> Result<Response, ApiError> {
    api.need_ledger().await?;
    let (months, busiest) = api.limited(|ctx| async move { stored_months(&ctx).await }).await?;
    Ok(axum::Json(json!({ "months": months, "busiest": busiest })).into_response())
}

#[derive(Debug, Deserialize)]
struct StateParams {
    from: Option<String>,
    to: Option<String>,
    team: Option<String>,
    step: Option<String>,
}

/// An instant from a date (`2026-10-01`: its midnight, UTC) or an RFC 3339 time.
fn instant(value: &str, name: &str) -> Result<DateTime<Utc>, ApiError> {
    if let Ok(d) = NaiveDate::parse_from_str(value, "%Y-%m-%d") {
        return Ok(d.and_time(chrono::NaiveTime::MIN).and_utc());
    }
    DateTime::parse_from_rfc3339(value).map(|t| t.with_timezone(&Utc)).map_err(|_| ApiError::bad(format!("{name} {value:?} is not a date (2026-10-01) or an RFC 3339 time")))
}

/// An instant as the ledger's `hour` column writes hours (`2026-10-01T13:00:00Z`): the text
/// order of the two is their time order.
fn hour_text(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The time range and step of a time-series request: the hours starting in [from, to) count,
/// grouped in steps of whole hours (`1h`, `6h`, `1d` by default, `7d`...) counted from 1970-01-01.
struct Range {
    step_hours: u64,
    from: Option<DateTime<Utc>>,
    to: Option<DateTime<Utc>>,
}

impl Range {
    fn parse(from: Option<&str>, to: Option<&str>, step: Option<&str>) -> Result<Range, ApiError> {
        let step_hours = match step {
            None => 24,
            Some(s) => {
                let d = parse_duration(s).map_err(ApiError::bad)?;
                let secs = d.as_secs();
                if d.subsec_nanos() != 0 || secs == 0 || !secs.is_multiple_of(3_600) || secs / 86_400 > 366 {
                    return Err(ApiError::bad(format!("step {s:?} must be whole hours between 1h and 366d: the ledger keeps hours")));
                }
                secs / 3_600
            }
        };
        let from = from.map(|v| instant(v, "from")).transpose()?;
        let to = to.map(|v| instant(v, "to")).transpose()?;
        if let (Some(f), Some(t)) = (from, to)
            && f >= t
        {
            return Err(ApiError::bad("from must be before to"));
        }
        Ok(Range { step_hours, from, to })
    }

    /// The parameters and `WHERE` clause of a query over a table with an `hour` column: `$1` is
    /// the step in hours, the range's bounds and each `column = value` given bind `$2` on.
    fn filter(&self, equal: &[(&str, Option<&String>)]) -> (Vec<ScalarValue>, String) {
        let mut params = vec![ScalarValue::Int64(Some(self.step_hours as i64))];
        let mut filters = Vec::new();
        let bounds = [(">=", self.from), ("<", self.to)];
        let bounds = bounds.iter().filter_map(|(op, t)| t.map(|t| (format!("hour {op}"), hour_text(t))));
        let equal = equal.iter().filter_map(|(c, v)| v.map(|v| (format!("{c} ="), v.clone())));
        for (test, value) in bounds.chain(equal) {
            params.push(ScalarValue::Utf8(Some(value)));
            filters.push(format!("{test} ${}", params.len()));
        }
        let clause = if filters.is_empty() { String::new() } else { format!("WHERE {}", filters.join(" AND ")) };
        (params, clause)
    }
}

/// A time series point's `time`, as RFC 3339 in UTC (`2026-10-01T00:00:00Z`).
fn point_time(row: &std::collections::BTreeMap<String, Value>) -> String {
    row.get("time").and_then(Value::as_str).map(|t| format!("{}Z", t.trim_end_matches('Z'))).unwrap_or_default()
}

/// `GET /api/v1/states?from=&to=&team=&step=`: GPU-hours and cost by state per step (see
/// [`Range`]).
async fn states(State(api): State<Arc<Api>>, Params(p): Params<StateParams>) -> Result<Response, ApiError> {
    let range = Range::parse(p.from.as_deref(), p.to.as_deref(), p.step.as_deref())?;
    let step = range.step_hours;
    api.need_ledger().await?;
    let (params, filter) = range.filter(&[("team", p.team.as_ref())]);
    // Steps are counted from 1970-01-01, as date_bin does: the same hour always opens a step.
    // GPU time is summed as nanoseconds and cost as exact decimals: a step's figures do not
    // depend on the order its hours are added in.
    let sql = format!(
        "SELECT to_timestamp_seconds((hour_number / $1) * $1 * 3600) AS time, state, \
                CAST(SUM(gpu_ns) AS DOUBLE) / 3600000000000.0 AS gpu_hours, SUM(cost) AS cost \
         FROM report_state_hours {filter} GROUP BY 1, state ORDER BY 1, state"
    );
    let batches = api.run(&sql, params).await?;
    let points: Vec<Value> = rows(&batches)?
        .into_iter()
        .map(|r| {
            let time = point_time(&r);
            json!({ "time": time, "state": r.get("state"), "gpu_hours": r.get("gpu_hours"), "cost": r.get("cost") })
        })
        .collect();
    Ok(axum::Json(json!({ "step_hours": step, "team": p.team, "currency": api.currency, "points": points })).into_response())
}

#[derive(Debug, Deserialize)]
struct FleetParams {
    from: Option<String>,
    to: Option<String>,
    node: Option<String>,
    step: Option<String>,
}

/// `GET /api/v1/fleet?from=&to=&node=&step=`: what the GPUs of each node reported per step (see
/// [`Range`]), from the ledger's hourly rollups (`node_hourly`), never the raw samples: mean
/// activity (over the step's hours), mean power draw of the node's GPUs together, the hottest
/// reading, the XID samples and the most GPUs seen in one hour.
async fn fleet(State(api): State<Arc<Api>>, Params(p): Params<FleetParams>) -> Result<Response, ApiError> {
    let range = Range::parse(p.from.as_deref(), p.to.as_deref(), p.step.as_deref())?;
    let step = range.step_hours;
    api.need_ledger().await?;
    if !api.ctx().table_exist("node_hourly").unwrap_or(false) {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the store's ledger predates the hourly rollups: run `gpuledger ledger --store {}`", api.ledger.location()),
        ));
    }
    let (params, filter) = range.filter(&[("hostname", p.node.as_ref())]);
    let sql = format!(
        "SELECT to_timestamp_seconds((CAST(date_part('epoch', to_timestamp(hour)) AS BIGINT) / 3600 / $1) * $1 * 3600) AS time, \
                hostname AS node, MAX(gpus) AS gpus, AVG(activity) AS activity, AVG(power_w) AS power_w, \
                MAX(max_temp_c) AS max_temp_c, SUM(xid_samples) AS xid_samples \
         FROM node_hourly {filter} GROUP BY 1, hostname ORDER BY 1, hostname"
    );
    let batches = api.run(&sql, params).await?;
    let points: Vec<Value> = rows(&batches)?
        .into_iter()
        .map(|r| {
            let time = point_time(&r);
            json!({
                "time": time, "node": r.get("node"), "gpus": r.get("gpus"), "activity": r.get("activity"),
                "power_w": r.get("power_w"), "max_temp_c": r.get("max_temp_c"), "xid_samples": r.get("xid_samples"),
            })
        })
        .collect();
    Ok(axum::Json(json!({ "step_hours": step, "node": p.node, "points": points })).into_response())
}

#[derive(Debug, Deserialize)]
struct OptionalMonth {
    month: Option<String>,
}

/// `GET /api/v1/queue[?month=]`: admission waits and evictions per team and ClusterQueue, over
/// the whole data or one month of admissions.
async fn queue(State(api): State<Arc<Api>>, Params(p): Params<OptionalMonth>) -> Result<Response, ApiError> {
    let (sql, params) = match &p.month {
        None => {
            api.need_ledger().await?;
            ("SELECT * FROM queue_wait_summary ORDER BY team, cluster_queue".to_owned(), vec![])
        }
        Some(m) => {
            let month = api.month(Some(m)).await?;
            (QUEUE_WAITS_SQL.to_owned(), vec![ScalarValue::Utf8(Some(month.to_string()))])
        }
    };
    let rows = rows(&api.run(&sql, params).await?)?;
    Ok(axum::Json(json!({ "month": p.month, "queues": rows })).into_response())
}

#[derive(Debug, Deserialize)]
struct FailureParams {
    month: Option<String>,
    limit: Option<String>,
}

/// `GET /api/v1/failures?month=&limit=`: failure causes ranked by cost, and the costliest failed
/// or preempted runs with their cause.
async fn failures(State(api): State<Arc<Api>>, Params(p): Params<FailureParams>) -> Result<Response, ApiError> {
    let limit: u32 = match p.limit.as_deref() {
        None => 20,
        Some(l) => l.parse().ok().filter(|n| (1..=1000).contains(n)).ok_or_else(|| ApiError::bad(format!("limit {l:?} is not a number from 1 to 1000")))?,
    };
    let month = api.month(p.month.as_deref()).await?;
    let params = || vec![ScalarValue::Utf8(Some(month.to_string()))];
    let causes = rows(&api.run(FAILURE_CAUSES_SQL, params()).await?)?;
    let limited = vec![ScalarValue::Utf8(Some(month.to_string())), ScalarValue::Int64(Some(i64::from(limit)))];
    let runs = rows(&api.run("SELECT * FROM run_failures WHERE to_char(ended_at, '%Y-%m') = $1 ORDER BY cost DESC LIMIT $2", limited).await?)?;
    Ok(axum::Json(json!({ "month": month, "currency": api.currency, "causes": causes, "runs": runs })).into_response())
}

/// `GET /api/v1/budgets?month=`: each budgeted team's spend to date and month-end forecast
/// against its budget, the team furthest over first.
async fn budgets(State(api): State<Arc<Api>>, Params(p): Params<MonthParams>) -> Result<Response, ApiError> {
    month_lists(&api, p.month.as_deref(), &[("budgets", BUDGETS_SQL)]).await
}

/// `GET /api/v1/idle?month=`: why GPUs were idle (the costliest team, state and reason first)
/// and the unallocated capacity per node pool with its stranded and cordoned hours.
async fn idle(State(api): State<Arc<Api>>, Params(p): Params<MonthParams>) -> Result<Response, ApiError> {
    month_lists(&api, p.month.as_deref(), &[("idle_reasons", IDLE_REASONS_SQL), ("stranded", STRANDED_SQL)]).await
}

/// `GET /api/v1/anomalies?month=`: each team's complete days of the month against its own
/// recent days (`anomalies_daily`), and the GPUs and runs behind the flagged ones.
async fn anomalies(State(api): State<Arc<Api>>, Params(p): Params<MonthParams>) -> Result<Response, ApiError> {
    month_lists(&api, p.month.as_deref(), &[("days", ANOMALIES_SQL), ("drivers", ANOMALY_DRIVERS_SQL)]).await
}

/// `GET /api/v1/quota?month=`: each ClusterQueue's nominal GPU quota per flavor, as GPU-hours
/// used, borrowed and unused, its owner and the unallocated cost charged for the unused part.
async fn quota(State(api): State<Arc<Api>>, Params(p): Params<MonthParams>) -> Result<Response, ApiError> {
    month_lists(&api, p.month.as_deref(), &[("quota", QUOTA_SQL)]).await
}

/// One month's report lists as JSON, `{month, currency, <key>: [rows], ...}`: each `(key, sql)`
/// is run with `$1` bound to the month asked for (the busiest without one), in the report's order.
async fn month_lists(api: &Api, asked: Option<&str>, lists: &[(&str, &str)]) -> Result<Response, ApiError> {
    let month = api.month(asked).await?;
    let mut body = serde_json::Map::new();
    body.insert("month".into(), json!(month));
    body.insert("currency".into(), json!(api.currency));
    for (key, sql) in lists {
        let listed = rows(&api.run(sql, vec![ScalarValue::Utf8(Some(month.to_string()))]).await?)?;
        body.insert((*key).into(), json!(listed));
    }
    Ok(axum::Json(serde_json::Value::Object(body)).into_response())
}

/// `GET /metrics`: the ledger as gauges, plus the server's counters.
async fn prometheus(State(api): State<Arc<Api>>) -> Result<Response, ApiError> {
    let gauges = if api.ctx().table_exist("report_gauges").unwrap_or(false) { Some(metrics::decode_gauges(&api.run(metrics::GAUGES_SQL, vec![]).await?)?) } else { None };
    let text = metrics::render(gauges.as_deref(), &api.currency, &api.stats);
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}


#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(!constant_time_eq(b"", b"a"));
    }

    #[test]
    fn instants_take_dates_and_rfc3339_and_compare_with_hours() {
        assert_eq!(hour_text(instant("2026-10-01", "from").unwrap()), "2026-10-01T00:00:00Z");
        assert_eq!(hour_text(instant("2026-10-01T23:30:00-02:00", "from").unwrap()), "2026-10-02T01:30:00Z");
        assert!(instant("yesterday", "from").unwrap_err().message.contains("not a date"));
        // The hour starting at 01:00 began before 01:30; the one at 02:00 after it.
        let from = hour_text(instant("2026-10-02T01:30:00Z", "from").unwrap());
        assert!("2026-10-02T01:00:00Z" < from.as_str() && "2026-10-02T02:00:00Z" > from.as_str());
    }

    #[test]
    fn the_openapi_document_names_every_route() {
        let doc: Value = serde_json::from_str(OPENAPI).unwrap();
        let paths: Vec<&String> = doc["paths"].as_object().unwrap().keys().collect();
        for route in ["/api/v1/chargeback", "/api/v1/states", "/api/v1/fleet", "/api/v1/queue", "/api/v1/failures", "/api/v1/budgets", "/api/v1/idle", "/api/v1/report.html", "/api/v1/months", "/metrics", "/healthz"] {
            assert!(paths.iter().any(|p| *p == route), "{route} missing from openapi.json");
        }
    }
}
