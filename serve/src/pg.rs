//! The PostgreSQL wire endpoint, for Grafana's PostgreSQL data source, psql and any other
//! PostgreSQL client.
//!
//! datafusion-postgres supplies the protocol (pgwire), the `pg_catalog` tables clients query and
//! the session chatter (SET/SHOW, transactions, cursors). gpuledger adds what a shared ledger
//! needs around it: SCRAM-SHA-256 logins from `[serve.users]`, the read-only [`crate::guard`]
//! in front of every statement, per-statement time and memory limits, TLS that fails loudly, a
//! connection limit, and counters for `/metrics`.

use std::collections::HashMap;
use std::fmt::Debug;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::Statement;
use datafusion_postgres::hooks::cursor::CursorStatementHook;
use datafusion_postgres::hooks::set_show::SetShowHook;
use datafusion_postgres::hooks::transactions::TransactionStatementHook;
use datafusion_postgres::hooks::{HookClient, QueryHook};
use datafusion_postgres::pgwire;
use datafusion_postgres::DfSessionService;
use futures::{Sink, StreamExt};
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::sasl::scram::{ScramAuth, gen_salted_password, random_nonce};
use pgwire::api::auth::{AuthSource, DefaultServerParameterProvider, LoginInfo, Password, StartupHandler};
use pgwire::api::cancel::{CancelHandler, DefaultCancelHandler};
use pgwire::api::portal::Portal;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{QueryResponse, Response};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, ConnectionManager, PgWireServerHandlers};
use pgwire::messages::cancel::CancelRequest;
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::PgWireBackendMessage;
use pgwire::tokio::TlsAcceptor;
use pgwire::tokio::tokio_rustls::rustls;
use tokio::net::TcpListener;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::config::User;
use crate::limits::{Deadline, Limits};
use crate::stop::{Stop, TimeLimit, Why};
use crate::metrics::Stats;
use crate::cursor::{Cursors, DeclaredCursors};
use crate::parse::{PlannedStatement, SqlParser, StatementParser};
use crate::results::ResultCache;
use crate::wire::Queries;
use crate::{ServeError, guard, session};

/// SCRAM's PBKDF2 rounds: PostgreSQL's default, and what pgwire tells clients.
const SCRAM_ITERATIONS: usize = 4096;

/// The endpoint's shared parts; one per server, handed to every connection.
pub struct PgEndpoint {
    queries: Arc<QueryService>,
    failures: Arc<LoginFailures>,
    users: Arc<UserDb>,
    connections: Arc<ConnectionManager>,
    parameters: Arc<DefaultServerParameterProvider>,
    cursors: Arc<DeclaredCursors>,
}

impl PgEndpoint {
    pub fn new(base: Arc<SessionContext>, users: &[User], limits: Limits, stats: Arc<Stats>, results: Option<Arc<ResultCache>>) -> PgEndpoint {
        let cursors = Arc::new(DeclaredCursors::default());
        // In order: writes refused first; cursors declared with their columns, then fetched and
        // closed by datafusion-postgres; session chatter; and every other statement planned
        // with the types its parameters and results have on the wire (`Queries`, last).
        let hooks: Vec<Arc<dyn QueryHook>> = vec![
            Arc::new(ReadOnly { stats: stats.clone() }),
            Arc::new(Cursors { declared: cursors.clone() }),
            Arc::new(CursorStatementHook),
            Arc::new(session::SessionNoOps),
            Arc::new(session::ShowSettings),
            Arc::new(SetShowHook),
            Arc::new(TransactionStatementHook),
            Arc::new(Queries { results }),
        ];
        // Statements are planned at Parse time by one long-lived parser over the shared session;
        // they run in a per-statement session (see `QueryService::session`).
        let sql = Arc::new(SqlParser::default());
        let types = DfSessionService::new_with_hooks(base.clone(), hooks.clone()).query_parser();
        let parser = Arc::new(StatementParser { sql: sql.clone(), ctx: base.clone(), hooks: hooks.clone(), types });
        PgEndpoint {
            failures: Arc::new(LoginFailures::default()),
            queries: Arc::new(QueryService { base, sql, parser, hooks, limits, stats, cancels: Arc::new(Cancels::default()) }),
            cursors,
            users: Arc::new(UserDb::new(users)),
            connections: Arc::new(ConnectionManager::new()),
            parameters: Arc::new(DefaultServerParameterProvider::default()),
        }
    }

    /// Accepts connections until `shutdown` resolves. A connection holds a place among the
    /// `max_unauthenticated` until it has logged in, and is closed if it has not within
    /// `startup_timeout`; only then does it take one of the `max_connections`: sockets that
    /// never finish a login can no longer lock the users out.
    ///
    /// Each connection runs on `workers`, the statements' runtime (see [`crate::workers`]).
    pub async fn serve(self: Arc<Self>, listener: TcpListener, tls: Option<TlsAcceptor>, admission: Admission, workers: tokio::runtime::Handle, shutdown: impl Future<Output = ()>) {
        let logged_in_places = Arc::new(Semaphore::new(admission.max_connections));
        let login_places = Arc::new(Semaphore::new(admission.max_unauthenticated));
        tokio::pin!(shutdown);
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                () = &mut shutdown => return,
            };
            let (socket, peer) = match accepted {
                Ok(x) => x,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "sql: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(logging_in) = login_places.clone().try_acquire_owned() else {
                self.queries.stats.pg_connections_refused.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%peer, max_unauthenticated = admission.max_unauthenticated, "sql: refused a connection: too many connections are logging in");
                drop(socket);
                continue;
            };
            self.queries.stats.pg_connections.fetch_add(1, Ordering::Relaxed);
            let endpoint = self.clone();
            let tls = tls.clone();
            let logged_in_places = logged_in_places.clone();
            workers.spawn(async move {
                let logged_in = Arc::new(tokio::sync::Notify::new());
                let key = Arc::new(std::sync::OnceLock::new());
                let connection = Connection { endpoint: endpoint.clone(), logged_in: logged_in.clone(), key: key.clone(), require_tls: admission.require_tls, peer };
                let session = pgwire::tokio::process_socket(socket, tls, connection);
                tokio::pin!(session);
                let in_time = tokio::select! {
                    ended = &mut session => {
                        if let Err(e) = ended {
                            tracing::info!(%peer, error = %e, "sql: connection ended");
                        }
                        return;
                    }
                    () = logged_in.notified() => true,
                    () = tokio::time::sleep(admission.startup_timeout) => false,
                };
                drop(logging_in);
                if !in_time {
                    tracing::info!(%peer, startup_timeout = ?admission.startup_timeout, "sql: closed a connection that did not log in in time");
                    return;
                }
                let Ok(place) = logged_in_places.try_acquire_owned() else {
                    endpoint.queries.stats.pg_connections_refused.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(%peer, max_connections = admission.max_connections, "sql: refused a connection: max_connections reached");
                    return;
                };
                if let Err(e) = session.await {
                    tracing::info!(%peer, error = %e, "sql: connection ended");
                }
                if let Some(key) = key.get() {
                    endpoint.cursors.forget(key);
                }
                drop(place);
            });
        }
    }
}

/// How the SQL endpoint lets connections in (`[serve]` settings).
#[derive(Debug, Clone, Copy)]
pub struct Admission {
    /// Logged-in connections at once.
    pub max_connections: usize,
    /// Connections at once that have not logged in yet.
    pub max_unauthenticated: usize,
    /// How long a connection may take to log in.
    pub startup_timeout: Duration,
    /// Refuse connections that did not negotiate TLS.
    pub require_tls: bool,
}

/// The handlers of one connection: the endpoint's, with its startup handler watched so that
/// the accept loop learns when the client has logged in.
struct Connection {
    endpoint: Arc<PgEndpoint>,
    logged_in: Arc<tokio::sync::Notify>,
    /// The connection's cancel key, known once it has logged in.
    key: Arc<std::sync::OnceLock<CancelKey>>,
    require_tls: bool,
    peer: SocketAddr,
}

impl PgWireServerHandlers for Connection {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.endpoint.simple_query_handler()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.endpoint.extended_query_handler()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::new(WatchedStartup {
            inner: self.endpoint.startup_handler(),
            logged_in: self.logged_in.clone(),
            key: self.key.clone(),
            require_tls: self.require_tls,
            peer: self.peer,
            failures: self.endpoint.failures.clone(),
            stats: self.endpoint.queries.stats.clone(),
        })
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        self.endpoint.cancel_handler()
    }
}

/// A startup handler around pgwire's SCRAM login that tells the accept loop when the login has
/// succeeded, refuses plain connections under `require_tls`, and turns every failed login into
/// the one message PostgreSQL writes (`password authentication failed for user "<name>"`, for
/// unknown users too), counted, logged with the peer, slowed down for a peer that keeps failing,
/// and followed by the end of the connection (no ReadyForQuery after a FATAL error).
struct WatchedStartup<S> {
    inner: Arc<S>,
    logged_in: Arc<tokio::sync::Notify>,
    key: Arc<std::sync::OnceLock<CancelKey>>,
    require_tls: bool,
    peer: SocketAddr,
    failures: Arc<LoginFailures>,
    stats: Arc<Stats>,
}

#[async_trait]
impl<S: StartupHandler> StartupHandler for WatchedStartup<S> {
    async fn on_startup<C>(&self, client: &mut C, message: pgwire::messages::PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if self.require_tls && !client.is_secure() && matches!(message, pgwire::messages::PgWireFrontendMessage::Startup(_)) {
            tracing::warn!(peer = %self.peer, "sql: refused a plain-text connection (require_tls)");
            return refuse(client, "28000", "this server accepts TLS connections only (require_tls): connect with sslmode=require".into()).await;
        }
        let done = self.inner.on_startup(client, message).await;
        if matches!(client.state(), pgwire::api::PgWireConnectionState::ReadyForQuery) {
            let _ = self.key.set(connection_key(client));
            self.logged_in.notify_one();
        }
        match done {
            Err(e) if is_login_failure(&e) => {
                let user = client_user(client);
                self.stats.pg_logins_failed.fetch_add(1, Ordering::Relaxed);
                let delay = self.failures.failed(self.peer.ip());
                tracing::warn!(peer = %self.peer, user = %user, delay_ms = delay.as_millis() as u64, "sql: login failed");
                tokio::time::sleep(delay).await;
                refuse(client, "28P01", format!("password authentication failed for user \"{user}\"")).await
            }
            other => other,
        }
    }
}

/// A failed password check: pgwire's own error (a wrong SCRAM proof) or ours.
fn is_login_failure(e: &PgWireError) -> bool {
    match e {
        PgWireError::InvalidPassword(_) => true,
        PgWireError::UserError(info) => info.code == "28P01",
        _ => false,
    }
}

/// Sends one FATAL error and closes the connection. The error is returned too, for pgwire,
/// whose own answer then finds the connection closed: the client reads the error, then the end.
async fn refuse<C>(client: &mut C, code: &str, message: String) -> PgWireResult<()>
where
    C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    use futures::SinkExt;
    let info = ErrorInfo::new("FATAL".into(), code.into(), message.clone());
    client.send(PgWireBackendMessage::ErrorResponse(info.into())).await?;
    let _ = client.close().await;
    Err(PgWireError::UserError(Box::new(ErrorInfo::new("FATAL".into(), code.into(), message))))
}

/// Failed logins per peer address: each one within [`FAILURE_MEMORY`] of the last doubles the
/// wait before the next failure is answered (100 ms, 200 ms... at most 5 s), so guessing
/// passwords from one address is slow while a user's typo costs nothing noticeable.
#[derive(Debug, Default)]
pub struct LoginFailures {
    peers: std::sync::Mutex<HashMap<std::net::IpAddr, (u32, std::time::Instant)>>,
}

const FAILURE_MEMORY: Duration = Duration::from_secs(600);

impl LoginFailures {
    /// Records a failure from `peer`; returns how long to wait before answering it.
    fn failed(&self, peer: std::net::IpAddr) -> Duration {
        let now = std::time::Instant::now();
        let mut peers = self.peers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Bounded: addresses that stopped failing are forgotten first, then all.
        if peers.len() > 10_000 {
            peers.retain(|_, (_, last)| now.duration_since(*last) < FAILURE_MEMORY);
            if peers.len() > 10_000 {
                peers.clear();
            }
        }
        let entry = peers.entry(peer).or_insert((0, now));
        if now.duration_since(entry.1) >= FAILURE_MEMORY {
            entry.0 = 0;
        }
        let earlier = entry.0;
        *entry = (earlier.saturating_add(1), now);
        if earlier == 0 { Duration::ZERO } else { (Duration::from_millis(100) * 2u32.saturating_pow(earlier - 1)).min(Duration::from_secs(5)) }
    }
}

impl PgWireServerHandlers for PgEndpoint {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        self.queries.clone()
    }

    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        self.queries.clone()
    }

    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        // The SASL exchange keeps state, so each connection gets its own handler.
        let scram = ScramAuth::new(self.users.clone());
        Arc::new(SASLAuthStartupHandler::new(self.parameters.clone()).with_scram(scram).with_connection_manager(self.connections.clone()))
    }

    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        Arc::new(CancelStatements { cancels: self.queries.cancels.clone(), stats: self.queries.stats.clone(), inner: DefaultCancelHandler::new(self.connections.clone()) })
    }
}

/// Reads the TLS certificate chain and key; a bad file is an error, never a silent fallback to
/// plain text.
pub fn tls_acceptor(cert: &std::path::Path, key: &std::path::Path) -> Result<TlsAcceptor, ServeError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let bad = |path: &std::path::Path, reason: String| ServeError::Tls { path: path.to_path_buf(), reason };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert).map_err(|e| bad(cert, e.to_string()))?.collect::<Result<_, _>>().map_err(|e| bad(cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(bad(cert, "no PEM certificate in it".into()));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| bad(key, format!("no usable PEM private key: {e}")))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .and_then(|b| b.with_no_client_auth().with_single_cert(certs, key_der))
        .map_err(|e| bad(cert, e.to_string()))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// A SCRAM salt and the password salted with it.
type Credentials = (Vec<u8>, Vec<u8>);

/// The users of `[serve.users]`, with SCRAM-salted passwords: the plain text is dropped once
/// hashed.
struct UserDb {
    users: Vec<(String, Credentials)>,
    /// Made-up credentials for names that are not users, one per name asked for.
    decoys: std::sync::Mutex<HashMap<String, Credentials>>,
}

impl Debug for UserDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserDb").field("users", &self.users.iter().map(|u| &u.0).collect::<Vec<_>>()).finish()
    }
}

impl UserDb {
    fn new(users: &[User]) -> UserDb {
        let users = users
            .iter()
            .map(|u| {
                let salt = random_nonce().into_bytes();
                let salted = gen_salted_password(u.password.expose(), &salt, SCRAM_ITERATIONS);
                (u.name.clone(), (salt, salted))
            })
            .collect();
        UserDb { users, decoys: std::sync::Mutex::new(HashMap::new()) }
    }
}

#[async_trait]
impl AuthSource for UserDb {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let name = login.user().unwrap_or_default();
        if let Some((_, (salt, salted))) = self.users.iter().find(|(n, _)| n == name) {
            return Ok(Password::new(Some(salt.clone()), salted.clone()));
        }
        // An unknown user goes through the same exchange as a known one with a wrong password,
        // with a salt that stays the same across attempts: the answers do not tell them apart.
        let mut decoys = self.decoys.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if decoys.len() > 10_000 {
            decoys.clear();
        }
        let (salt, salted) = decoys
            .entry(name.to_owned())
            .or_insert_with(|| {
                let salt = random_nonce().into_bytes();
                let salted = gen_salted_password(&random_nonce(), &salt, SCRAM_ITERATIONS);
                (salt, salted)
            })
            .clone();
        Ok(Password::new(Some(salt), salted))
    }
}

/// Refuses what [`guard::check`] refuses, on both the simple and the extended protocol.
struct ReadOnly {
    stats: Arc<Stats>,
}

impl ReadOnly {
    fn verdict<T>(&self, statement: &Statement) -> Option<PgWireResult<T>> {
        let refusal = guard::check(statement).err()?;
        self.stats.queries_refused.fetch_add(1, Ordering::Relaxed);
        Some(Err(sql_error("42501", refusal.0)))
    }
}

#[async_trait]
impl QueryHook for ReadOnly {
    async fn handle_simple_query(&self, statement: &Statement, _ctx: &SessionContext, _client: &mut dyn HookClient) -> Option<PgWireResult<Response>> {
        self.verdict(statement)
    }

    async fn handle_extended_parse_query(&self, statement: &Statement, _ctx: &SessionContext, _client: &(dyn ClientInfo + Send + Sync)) -> Option<PgWireResult<LogicalPlan>> {
        self.verdict(statement)
    }

    async fn handle_extended_query(&self, statement: &Statement, _plan: &LogicalPlan, _params: &ParamValues, _ctx: &SessionContext, _client: &mut dyn HookClient) -> Option<PgWireResult<Response>> {
        self.verdict(statement)
    }
}

/// Runs statements, each in its own limited session (see [`crate::limits`]) that stops at its
/// deadline or a cancel request (see [`crate::stop`]).
struct QueryService {
    base: Arc<SessionContext>,
    sql: Arc<SqlParser>,
    parser: Arc<StatementParser>,
    hooks: Vec<Arc<dyn QueryHook>>,
    limits: Limits,
    stats: Arc<Stats>,
    cancels: Arc<Cancels>,
}


/// One statement under way: its stop signal, its user, and what it holds until its last row
/// is sent (its turn, its place among the statements a cancel request can reach).
struct Running {
    stop: Arc<Stop>,
    user: String,
    held: Arc<(Option<OwnedSemaphorePermit>, CancelSlot, Counted)>,
}

/// Counts a statement in `statements_running` while it lives.
struct Counted(Arc<Stats>);

impl Counted {
    fn new(stats: &Arc<Stats>) -> Counted {
        stats.statements_running.fetch_add(1, Ordering::Relaxed);
        Counted(stats.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.statements_running.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a cancel request names a connection by: its process id and secret key (as bytes).
pub(crate) type CancelKey = (i32, Vec<u8>);

/// The key of `client`'s connection. As bytes: a cancel request does not say whether its key
/// is the 4-byte integer of protocol 3.0 or the byte string of 3.2, so it is decoded as bytes.
pub(crate) fn connection_key<C: ClientInfo + ?Sized>(client: &C) -> CancelKey {
    let (pid, secret) = client.pid_and_secret_key();
    (pid, secret.to_bytes().to_vec())
}

/// The statement each connection is running, by the key its client sends in a cancel request.
#[derive(Debug, Default)]
struct Cancels {
    running: std::sync::Mutex<HashMap<CancelKey, Arc<Stop>>>,
}

impl Cancels {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<CancelKey, Arc<Stop>>> {
        self.running.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A statement's entry in [`Cancels`], removed when the statement ends.
#[derive(Debug)]
struct CancelSlot {
    cancels: Arc<Cancels>,
    key: CancelKey,
    stop: Arc<Stop>,
}

impl CancelSlot {
    fn register(cancels: &Arc<Cancels>, key: CancelKey, stop: &Arc<Stop>) -> CancelSlot {
        cancels.lock().insert(key.clone(), stop.clone());
        CancelSlot { cancels: cancels.clone(), key, stop: stop.clone() }
    }
}

impl Drop for CancelSlot {
    fn drop(&mut self) {
        let mut running = self.cancels.lock();
        // The connection's next statement may have taken the place already.
        if running.get(&self.key).is_some_and(|s| Arc::ptr_eq(s, &self.stop)) {
            running.remove(&self.key);
        }
    }
}

/// Answers a cancel request: the statement the connection runs stops at its next batch,
/// whether it is still being planned or its rows are being sent; pgwire's own handling (which
/// covers the planning only) goes on too.
struct CancelStatements {
    cancels: Arc<Cancels>,
    stats: Arc<Stats>,
    inner: DefaultCancelHandler,
}

#[async_trait]
impl CancelHandler for CancelStatements {
    async fn on_cancel_request(&self, request: CancelRequest) {
        let stop = self.cancels.lock().get(&(request.pid, request.secret_key.to_bytes().to_vec())).cloned();
        if let Some(stop) = stop {
            stop.cancel();
            self.stats.queries_cancelled.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.on_cancel_request(request).await;
    }
}

impl QueryService {
    /// Starts the statement `sql`: its time limit (the client's `statement_timeout` when
    /// shorter), its place where the client's cancel request finds it, and one of the user's
    /// turns.
    async fn begin<C: ClientInfo + ?Sized>(&self, client: &C, sql: &str) -> PgWireResult<Running> {
        let stop = Stop::new(TimeLimit::of(self.limits.timeout, datafusion_postgres_timeout(client)));
        let cancel = CancelSlot::register(&self.cancels, connection_key(client), &stop);
        let user = client_user(client);
        // Session statements (SET, SHOW, BEGIN...) read no data: they answer at once, in no turn.
        if session::is_session_statement(sql) {
            return Ok(Running { stop, user, held: Arc::new((None, cancel, Counted::new(&self.stats))) });
        }
        let Some(turn) = self.limits.turns.wait(&user, stop.deadline()).await else {
            self.stats.queries_timed_out.fetch_add(1, Ordering::Relaxed);
            let why = format!("{}, waiting for a turn: user {user:?} already runs max_statements_per_user ({}) statements", stop.message(Why::TimedOut), self.limits.turns.per_user());
            return Err(sql_error(QUERY_CANCELED, why));
        };
        Ok(Running { stop, user, held: Arc::new((Some(turn), cancel, Counted::new(&self.stats))) })
    }

    /// A fresh per-statement session: the statement's limits and stop checks.
    fn session(&self, stop: &Arc<Stop>) -> PgWireResult<Arc<SessionContext>> {
        Ok(Arc::new(self.limits.session(&self.base, stop).map_err(|e| PgWireError::ApiError(Box::new(e)))?))
    }

    /// Answers each statement of `query` by the first hook that claims it (the last one,
    /// [`Queries`], claims every statement).
    async fn answer<C>(&self, client: &mut C, query: &str, ctx: &SessionContext) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let statements = self.sql.parse(query).map_err(|e| sql_error("42601", e.to_string()))?;
        if statements.is_empty() {
            return Ok(vec![Response::EmptyQuery]);
        }
        let mut responses = Vec::with_capacity(statements.len());
        'statements: for statement in &statements {
            for hook in &self.hooks {
                if let Some(answer) = hook.handle_simple_query(statement, ctx, client).await {
                    responses.push(answer?);
                    continue 'statements;
                }
            }
            return Err(sql_error("XX000", gpuledger_store::Bug::new(format!("no hook answered the statement {statement}")).to_string()));
        }
        Ok(responses)
    }

    /// Makes a response's rows stop at the deadline too, report a stop as such, and hold the
    /// user's turn until the last row is sent.
    fn bound(&self, response: Response, running: &Running) -> Response {
        match response {
            Response::Query(q) => {
                let (stats, stop, held) = (self.stats.clone(), running.stop.clone(), running.held.clone());
                let on_timeout = {
                    let (stats, stop) = (stats.clone(), stop.clone());
                    move || stopped(&stats, &stop, stop.expire())
                };
                let rows = Deadline::new(q.data_rows, running.stop.deadline(), on_timeout).map(move |row| {
                    let _held = &held;
                    row.map_err(|e| match stop.stopped() {
                        Some(why) if !is_stop_error(&e) => stopped(&stats, &stop, why),
                        _ => e,
                    })
                });
                let mut bounded = QueryResponse::new(q.row_schema, rows);
                bounded.set_command_tag(&q.command_tag);
                Response::Query(bounded)
            }
            other => other,
        }
    }

    /// Runs `work` until the deadline, bounds what it returns (its rows stop at the deadline
    /// too), gives its errors SQLSTATE codes, and counts and logs it.
    async fn limited<T>(&self, running: &Running, what: &str, work: impl Future<Output = PgWireResult<T>>, bound: impl FnOnce(T) -> T) -> PgWireResult<T> {
        let started = std::time::Instant::now();
        let result = match tokio::time::timeout_at(running.stop.deadline(), work).await {
            Ok(Ok(r)) => Ok(bound(r)),
            Ok(Err(e)) => Err(match running.stop.stopped() {
                Some(why) => stopped(&self.stats, &running.stop, why),
                None => classify(e),
            }),
            Err(_) => Err(stopped(&self.stats, &running.stop, running.stop.expire())),
        };
        self.finish(&running.user, what, started, &result);
        result
    }

    fn finish<T>(&self, user: &str, what: &str, started: std::time::Instant, result: &PgWireResult<T>) {
        self.stats.queries.fetch_add(1, Ordering::Relaxed);
        self.stats.query_micros.fetch_add(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX), Ordering::Relaxed);
        if let Err(e) = result {
            self.stats.query_errors.fetch_add(1, Ordering::Relaxed);
            let line = what.split_whitespace().collect::<Vec<_>>().join(" ");
            let shown: String = line.chars().take(120).collect();
            tracing::info!(%user, error = %e, statement = %shown, "sql: statement failed");
        }
    }
}

/// The error of a stopped statement (PostgreSQL's query_canceled, 57014) naming why; a timeout
/// is counted here, a cancel where the request arrives.
fn stopped(stats: &Stats, stop: &Stop, why: Why) -> PgWireError {
    if why == Why::TimedOut {
        stats.queries_timed_out.fetch_add(1, Ordering::Relaxed);
    }
    sql_error(QUERY_CANCELED, stop.message(why))
}

const QUERY_CANCELED: &str = "57014";

/// An error the client gets with SQLSTATE `code` (severity ERROR: the session goes on).
pub(crate) fn sql_error(code: &str, message: impl Into<String>) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new("ERROR".into(), code.into(), message.into())))
}

fn is_stop_error(e: &PgWireError) -> bool {
    matches!(e, PgWireError::UserError(info) if info.code == QUERY_CANCELED)
}

/// Gives DataFusion's errors PostgreSQL's SQLSTATE codes, so clients tell a typo in a column
/// (42703) or table (42P01) from a query over its memory (53200) instead of seeing every error
/// as an internal one (XX000).
fn classify(error: PgWireError) -> PgWireError {
    use datafusion::common::SchemaError;
    use datafusion::error::DataFusionError;
    let PgWireError::ApiError(inner) = &error else { return error };
    let Some(df) = inner.downcast_ref::<DataFusionError>() else { return error };
    let root = df.find_root();
    let code = match root {
        DataFusionError::SchemaError(e, _) if matches!(**e, SchemaError::FieldNotFound { .. }) => "42703",
        DataFusionError::SchemaError(..) => "42P01",
        DataFusionError::Plan(m) if m.contains("table") && m.contains("not found") => "42P01",
        DataFusionError::Plan(m) if m.contains("Invalid function") => "42883",
        DataFusionError::Plan(_) | DataFusionError::SQL(..) => "42601",
        DataFusionError::ResourcesExhausted(_) => "53200",
        DataFusionError::NotImplemented(_) => "0A000",
        DataFusionError::Execution(_) | DataFusionError::ArrowError(..) => "22000",
        _ => return error,
    };
    sql_error(code, root.to_string())
}

fn client_user<C: ClientInfo + ?Sized>(client: &C) -> String {
    client.metadata().get(pgwire::api::METADATA_USER).cloned().unwrap_or_default()
}

#[async_trait]
impl SimpleQueryHandler for QueryService {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let Some(answer) = session::rollback_out_of_an_aborted_transaction(query, client.transaction_status()) {
            return Ok(answer);
        }
        let running = self.begin(client, query).await?;
        let ctx = self.session(&running.stop)?;
        let work = self.answer(client, query, &ctx);
        self.limited(&running, query, work, |responses| responses.into_iter().map(|r| self.bound(r, &running)).collect()).await
    }
}

#[async_trait]
impl ExtendedQueryHandler for QueryService {
    type Statement = PlannedStatement;
    type QueryParser = StatementParser;

    fn query_parser(&self) -> Arc<Self::QueryParser> {
        self.parser.clone()
    }

    async fn do_query<C>(&self, client: &mut C, portal: &Portal<Self::Statement>, max_rows: usize) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Self::Statement>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let what = portal.statement.statement.0.clone();
        let running = self.begin(client, &what).await?;
        let service = DfSessionService::new_with_hooks(self.session(&running.stop)?, self.hooks.clone());
        let work = ExtendedQueryHandler::do_query(&service, client, portal, max_rows);
        self.limited(&running, &what, work, |response| self.bound(response, &running)).await
    }
}

/// The client's `SET statement_timeout`, which datafusion-postgres keeps in the connection's
/// metadata in milliseconds.
fn datafusion_postgres_timeout<C: ClientInfo + ?Sized>(client: &C) -> Option<Duration> {
    client.metadata().get("statement_timeout_ms").and_then(|s| s.parse::<u64>().ok()).map(Duration::from_millis)
}

/// Where the SQL endpoint listens, for messages.
pub fn describe(addr: SocketAddr, tls: bool) -> String {
    format!("postgresql://{addr} ({})", if tls { "TLS" } else { "plain text: set tls_cert and tls_key for TLS" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_that_keeps_failing_waits_longer_each_time_up_to_five_seconds() {
        let failures = LoginFailures::default();
        let peer: std::net::IpAddr = [10, 0, 0, 7].into();
        let waits: Vec<u64> = (0..9).map(|_| failures.failed(peer).as_millis() as u64).collect();
        assert_eq!(waits, [0, 100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        // Another address starts afresh.
        assert_eq!(failures.failed([10, 0, 0, 8].into()), Duration::ZERO);
    }
}
