//! Session chatter the SQL endpoint answers itself, as PostgreSQL would: what BI tools and
//! drivers send around their queries (savepoints, transaction modes, `SHOW` of server
//! settings). None of it changes what a statement may read or write: [`crate::guard`] still
//! refuses every write.

use std::sync::Arc;

use async_trait::async_trait;
use datafusion::common::ParamValues;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{Set, Statement};
use datafusion_postgres::QueryHook;
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::pgwire;
use pgwire::api::ClientInfo;
use pgwire::api::Type;
use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo, QueryResponse, Response, Tag};
use pgwire::error::PgWireResult;
use pgwire::messages::response::TransactionStatus;

use crate::pg::sql_error;

/// Statements tools send around their queries that change nothing on a read-only ledger, but
/// fail the tool when refused: savepoints (SQLAlchemy with psycopg 3 opens one per
/// connection), `SET [SESSION CHARACTERISTICS AS] TRANSACTION ...` (pgjdbc's `setReadOnly`,
/// Metabase). Accepted as PostgreSQL answers them; writes stay refused by [`crate::guard`].
pub struct SessionNoOps;

impl SessionNoOps {
    fn answer(statement: &Statement, status: TransactionStatus) -> Option<PgWireResult<Response>> {
        let aborted = || Err(sql_error("25P02", "current transaction is aborted, commands ignored until end of transaction block"));
        match statement {
            Statement::Savepoint { .. } if status == TransactionStatus::Error => Some(aborted()),
            Statement::ReleaseSavepoint { .. } if status == TransactionStatus::Error => Some(aborted()),
            Statement::Savepoint { .. } => Some(Ok(Response::Execution(Tag::new("SAVEPOINT")))),
            Statement::ReleaseSavepoint { .. } => Some(Ok(Response::Execution(Tag::new("RELEASE")))),
            // Back inside the transaction, its error forgotten, as after PostgreSQL's.
            Statement::Rollback { savepoint: Some(_), .. } => Some(Ok(Response::TransactionStart(Tag::new("ROLLBACK")))),
            Statement::Set(Set::SetTransaction { .. }) => Some(Ok(Response::Execution(Tag::new("SET")))),
            _ => None,
        }
    }

    /// Whether [`Self::answer`] answers `statement` (in some transaction state).
    fn handles(statement: &Statement) -> bool {
        Self::answer(statement, TransactionStatus::Idle).is_some()
    }
}

#[async_trait]
impl QueryHook for SessionNoOps {
    async fn handle_simple_query(&self, statement: &Statement, _ctx: &SessionContext, client: &mut dyn HookClient) -> Option<PgWireResult<Response>> {
        Self::answer(statement, client.transaction_status())
    }

    async fn handle_extended_parse_query(&self, statement: &Statement, _ctx: &SessionContext, _client: &(dyn ClientInfo + Send + Sync)) -> Option<PgWireResult<LogicalPlan>> {
        Self::handles(statement).then(|| Ok(LogicalPlan::EmptyRelation(datafusion::logical_expr::EmptyRelation { produce_one_row: false, schema: Arc::new(datafusion::common::DFSchema::empty()) })))
    }

    async fn handle_extended_query(&self, statement: &Statement, _plan: &LogicalPlan, _params: &ParamValues, _ctx: &SessionContext, client: &mut dyn HookClient) -> Option<PgWireResult<Response>> {
        Self::answer(statement, client.transaction_status())
    }
}

/// Whether `sql` is session chatter that reads no data (SET, SHOW, transaction control...).
pub fn is_session_statement(sql: &str) -> bool {
    const SESSION: &[&str] = &["set", "show", "reset", "begin", "start", "commit", "end", "rollback", "abort", "savepoint", "release", "discard", "deallocate", "close"];
    let first = sql.trim_start().split(|c: char| !c.is_ascii_alphabetic()).next().unwrap_or("");
    SESSION.iter().any(|k| first.eq_ignore_ascii_case(k))
}

/// `ROLLBACK TO SAVEPOINT` in a transaction a failed statement aborted: PostgreSQL leaves the
/// client back inside the transaction, usable again. A hook answers with one response, and
/// pgwire keeps an aborted transaction aborted whatever that response is, so the simple
/// protocol's handler answers it before the hooks: the transaction ends (leaving the error
/// state) and starts again, two completions for the one statement. On the extended protocol
/// the hook's answer stands and the transaction stays aborted until ROLLBACK.
pub fn rollback_out_of_an_aborted_transaction(sql: &str, status: TransactionStatus) -> Option<Vec<Response>> {
    if status != TransactionStatus::Error {
        return None;
    }
    let words: Vec<String> = sql.split_whitespace().take(3).map(|w| w.trim_end_matches(';').to_lowercase()).collect();
    let word = |i: usize, any: &[&str]| words.get(i).is_some_and(|w| any.contains(&w.as_str()));
    // ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name; a plain ROLLBACK is the hooks' to answer.
    let to_savepoint = word(0, &["rollback"]) && (word(1, &["to"]) || (word(1, &["work", "transaction"]) && word(2, &["to"])));
    to_savepoint.then(|| vec![Response::TransactionEnd(Tag::new("ROLLBACK")), Response::TransactionStart(Tag::new("ROLLBACK"))])
}

/// `SHOW` of the server settings drivers and tools ask for, answered as PostgreSQL does
/// (`SHOW TimeZone` named `TimeZone`, `server_version` a PostgreSQL version); the client
/// settings datafusion-postgres keeps are left to it; anything else is PostgreSQL's
/// "unrecognized configuration parameter" instead of an empty answer.
pub struct ShowSettings;

/// Settings datafusion-postgres answers from the connection.
const KEPT_BY_CONNECTION: &[&str] = &["statement_timeout", "transaction_isolation", "transaction isolation level", "catalogs", "bytea_output", "datestyle", "intervalstyle", "extra_float_digits", "application_name", "search_path"];

impl ShowSettings {
    fn answer(statement: &Statement, client: &(dyn ClientInfo + Send + Sync)) -> Option<PgWireResult<Response>> {
        let Statement::ShowVariable { variable } = statement else { return None };
        let name = variable.iter().map(|v| v.value.to_lowercase()).collect::<Vec<_>>().join(" ");
        if name == "timezone" || name == "time zone" {
            let zone = client.metadata().get("timezone").map_or("UTC", String::as_str);
            return Some(one_value("TimeZone", zone));
        }
        if KEPT_BY_CONNECTION.contains(&name.as_str()) || client.metadata().contains_key(&name) {
            return None;
        }
        // The same values `current_setting()` gives.
        if let Some(value) = crate::pgcompat::setting(&name) {
            return Some(one_value(&name, value));
        }
        Some(Err(sql_error("42704", format!("unrecognized configuration parameter \"{name}\""))))
    }
}

/// A one-row, one-column text answer.
fn one_value(name: &str, value: &str) -> PgWireResult<Response> {
    let fields = Arc::new(vec![FieldInfo::new(name.to_owned(), None, None, Type::TEXT, FieldFormat::Text)]);
    let mut encoder = DataRowEncoder::new(fields.clone());
    encoder.encode_field(&Some(value))?;
    let row = encoder.take_row();
    Ok(Response::Query(QueryResponse::new(fields, Box::pin(futures::stream::once(async move { Ok(row) })))))
}

#[async_trait]
impl QueryHook for ShowSettings {
    async fn handle_simple_query(&self, statement: &Statement, _ctx: &SessionContext, client: &mut dyn HookClient) -> Option<PgWireResult<Response>> {
        Self::answer(statement, &*client)
    }

    async fn handle_extended_parse_query(&self, _statement: &Statement, _ctx: &SessionContext, _client: &(dyn ClientInfo + Send + Sync)) -> Option<PgWireResult<LogicalPlan>> {
        // datafusion-postgres plans SHOW itself; the answer comes at execution.
        None
    }

    async fn handle_extended_query(&self, statement: &Statement, _plan: &LogicalPlan, _params: &ParamValues, _ctx: &SessionContext, client: &mut dyn HookClient) -> Option<PgWireResult<Response>> {
        Self::answer(statement, &*client)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_statements_are_told_from_queries() {
        for sql in ["SET statement_timeout = '1s'", "  show TimeZone", "BEGIN", "commit;", "ROLLBACK", "DISCARD ALL", "deallocate s1"] {
            assert!(is_session_statement(sql), "{sql}");
        }
        for sql in ["SELECT 1", "WITH s AS (SELECT 1) SELECT * FROM s", "settings_table", "EXPLAIN SELECT 1", "select_x", ""] {
            assert!(!is_session_statement(sql), "{sql}");
        }
    }

    #[test]
    fn only_a_rollback_to_a_savepoint_in_an_aborted_transaction_is_answered_early() {
        let early = |sql: &str, status| rollback_out_of_an_aborted_transaction(sql, status).map(|r| r.len());
        assert_eq!(early("ROLLBACK TO SAVEPOINT a", TransactionStatus::Error), Some(2));
        assert_eq!(early("rollback work to a;", TransactionStatus::Error), Some(2));
        assert_eq!(early("ROLLBACK TO SAVEPOINT a", TransactionStatus::Transaction), None);
        assert_eq!(early("ROLLBACK", TransactionStatus::Error), None);
        assert_eq!(early("ROLLBACK WORK", TransactionStatus::Error), None);
        assert_eq!(early("SELECT 1", TransactionStatus::Error), None);
    }
}
