//! Cursors whose columns are described before their rows are fetched.
//!
//! datafusion-postgres runs `DECLARE name CURSOR FOR query` and keeps its rows as a portal, but
//! without the query's plan: a client that describes the cursor's portal, or the `FETCH`
//! statement it then prepares (psycopg's named cursors do both), was told there were no
//! columns and then sent rows, and psycopg crashed. Here `DECLARE` keeps the plan with the
//! portal and notes the cursor's columns for its connection, so a `FETCH` is planned with them
//! and Describe answers what Execute sends; a FETCH past the end still names the columns (with
//! none, psycopg read no columns). `DECLARE` takes parameters on the extended protocol, typed
//! as any statement's ([`crate::wire`]). Reading and closing the portal stay
//! datafusion-postgres' (its cursor hook).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use datafusion::common::{DFSchema, DFSchemaRef, ParamValues};
use datafusion::logical_expr::{EmptyRelation, LogicalPlan, Projection};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{CloseCursor, Declare, DeclareType, Query, Statement};
use datafusion_postgres::QueryHook;
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::hooks::cursor::CursorStatementHook;
use datafusion_postgres::pgwire;
use pgwire::api::ClientInfo;
use pgwire::api::portal::Portal;
use pgwire::api::results::{FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::stmt::StoredStatement;
use pgwire::api::store::PortalStore;
use pgwire::error::PgWireResult;

use crate::pg::{CancelKey, connection_key, sql_error};
use crate::wire::{Queries, api, rows};

/// A cursor's columns: as planned (for a FETCH's plan) and as sent (for its rows).
type Columns = (DFSchemaRef, Arc<Vec<FieldInfo>>);

/// The columns of each connection's open cursors, by cursor name.
#[derive(Debug, Default)]
pub struct DeclaredCursors {
    connections: Mutex<HashMap<CancelKey, HashMap<String, Columns>>>,
}

impl DeclaredCursors {
    fn lock(&self) -> MutexGuard<'_, HashMap<CancelKey, HashMap<String, Columns>>> {
        self.connections.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn columns(&self, connection: &CancelKey, name: &str) -> Option<Columns> {
        self.lock().get(connection)?.get(name).cloned()
    }

    /// Forgets a connection's cursors when it ends.
    pub fn forget(&self, connection: &CancelKey) {
        self.lock().remove(connection);
    }
}

/// The hook that declares cursors and plans their `FETCH`es.
pub struct Cursors {
    pub declared: Arc<DeclaredCursors>,
}

impl Cursors {
    /// Runs the cursor's query (already planned, parameters bound) and keeps its rows as the
    /// portal `FETCH` reads, with the plan that describes them.
    async fn declare(&self, declare: &Declare, plan: LogicalPlan, ctx: &SessionContext, client: &mut dyn HookClient) -> PgWireResult<Response> {
        let name = cursor_name(declare)?;
        let query = for_query(declare)?;
        let schema = plan.schema().clone();
        let answer = rows(plan.clone(), ctx, client, None).await?;
        let fields = answer.row_schema.clone();
        let statement = StoredStatement::new(name.clone(), (query.to_string(), Some((Statement::Query(query), plan))), vec![]);
        let portal = Portal::new_cursor(name.clone(), Arc::new(statement));
        portal.start(answer).await;
        client.portal_store().put_portal(Arc::new(portal));
        self.declared.lock().entry(connection_key(&*client)).or_default().insert(name, (schema, fields));
        Ok(Response::Execution(Tag::new("DECLARE CURSOR")))
    }

    /// datafusion-postgres' answer to a FETCH, with the cursor's columns where it has none (a
    /// cursor read to its end answers with no columns at all, and psycopg then reads no
    /// columns) and PostgreSQL's command tag.
    fn described(&self, client: &dyn HookClient, name: &str, response: Response) -> Response {
        match response {
            Response::Query(q) => {
                let fields = match self.declared.columns(&connection_key(client), name) {
                    Some((_, fields)) if q.row_schema.is_empty() => fields,
                    _ => q.row_schema.clone(),
                };
                let mut fetched = QueryResponse::new(fields, q.data_rows);
                fetched.set_command_tag("FETCH");
                Response::Query(fetched)
            }
            other => other,
        }
    }

    fn close(&self, client: &dyn HookClient, cursor: &CloseCursor) {
        let key = connection_key(client);
        match cursor {
            CloseCursor::All => self.declared.forget(&key),
            CloseCursor::Specific { name } => {
                if let Some(open) = self.declared.lock().get_mut(&key) {
                    open.remove(&name.value);
                }
            }
        }
    }
}

/// The one cursor a `DECLARE` names (PostgreSQL declares one at a time).
fn declared(stmts: &[Declare]) -> PgWireResult<&Declare> {
    match stmts {
        [one] if one.declare_type == Some(DeclareType::Cursor) => Ok(one),
        [_] => Err(sql_error("0A000", "only DECLARE ... CURSOR FOR is supported")),
        _ => Err(sql_error("42601", "DECLARE declares one cursor at a time")),
    }
}

fn cursor_name(declare: &Declare) -> PgWireResult<String> {
    declare.names.first().map(|n| n.value.clone()).ok_or_else(|| sql_error("42601", "DECLARE needs a cursor name"))
}

/// The query a cursor is declared for.
fn for_query(declare: &Declare) -> PgWireResult<Box<Query>> {
    declare.for_query.clone().ok_or_else(|| sql_error("42601", "DECLARE CURSOR needs a FOR query"))
}

/// The cursor's query, planned as any statement is.
async fn query_plan(declare: &Declare, ctx: &SessionContext) -> PgWireResult<LogicalPlan> {
    Queries::plan(&Statement::Query(for_query(declare)?), ctx).await.map_err(api)
}

#[async_trait]
impl QueryHook for Cursors {
    async fn handle_simple_query(&self, statement: &Statement, ctx: &SessionContext, client: &mut dyn HookClient) -> Option<PgWireResult<Response>> {
        match statement {
            Statement::Declare { stmts } => Some(
                async {
                    let declare = declared(stmts)?;
                    let plan = query_plan(declare, ctx).await?;
                    self.declare(declare, plan, ctx, client).await
                }
                .await,
            ),
            Statement::Fetch { name, .. } => {
                let answer = CursorStatementHook.handle_simple_query(statement, ctx, client).await?;
                Some(answer.map(|r| self.described(client, &name.value, r)))
            }
            Statement::Close { cursor } => {
                self.close(client, cursor);
                None
            }
            _ => None,
        }
    }

    async fn handle_extended_parse_query(&self, statement: &Statement, ctx: &SessionContext, client: &(dyn ClientInfo + Send + Sync)) -> Option<PgWireResult<LogicalPlan>> {
        match statement {
            // The query under a projection of no columns: its parameters are the statement's,
            // and DECLARE itself returns no rows.
            Statement::Declare { stmts } => Some(
                async {
                    let query = query_plan(declared(stmts)?, ctx).await?;
                    Ok(LogicalPlan::Projection(Projection::try_new_with_schema(vec![], Arc::new(query), Arc::new(DFSchema::empty())).map_err(api)?))
                }
                .await,
            ),
            // An unknown cursor is left to FETCH, which names it in its error.
            Statement::Fetch { name, .. } => {
                let (schema, _) = self.declared.columns(&connection_key(client), &name.value)?;
                Some(Ok(LogicalPlan::EmptyRelation(EmptyRelation { produce_one_row: false, schema })))
            }
            _ => None,
        }
    }

    async fn handle_extended_query(&self, statement: &Statement, plan: &LogicalPlan, params: &ParamValues, ctx: &SessionContext, client: &mut dyn HookClient) -> Option<PgWireResult<Response>> {
        match statement {
            Statement::Declare { stmts } => Some(
                async {
                    let declare = declared(stmts)?;
                    let bound = plan.clone().replace_params_with_values(params).map_err(api)?;
                    let query = match bound {
                        LogicalPlan::Projection(p) => Arc::unwrap_or_clone(p.input),
                        other => other,
                    };
                    self.declare(declare, query, ctx, client).await
                }
                .await,
            ),
            Statement::Fetch { name, .. } => {
                let answer = CursorStatementHook.handle_extended_query(statement, plan, params, ctx, client).await?;
                Some(answer.map(|r| self.described(client, &name.value, r)))
            }
            Statement::Close { cursor } => {
                self.close(client, cursor);
                None
            }
            _ => None,
        }
    }
}
