//! The types statements show on the wire: parameters typed as PostgreSQL types them, and
//! timestamps as the instants they are.
//!
//! DataFusion types a `$n` from what it is compared with. Clients also write `team = ANY($1)`
//! (an array), `LIMIT $1` (an integer), `$1::timestamptz` and parameters nothing types at all
//! (`$1 IS NULL`, `SELECT $1`), which PostgreSQL takes as text. Left untyped, a parameter is
//! announced as `unknown`: drivers refuse it, or send text that is then compared as text
//! (lib/pq returned no rows at all for `ANY($1)`), and an untyped NULL was dropped from the
//! list, shifting the values after it. So every placeholder gets a type when the statement is
//! planned, subqueries included, and the type the client is told is the one its value is
//! decoded with.
//!
//! DataFusion's `now()`, `to_timestamp()` and casts to `timestamptz` have no time zone while
//! the session has none; sent as `timestamp`, a client reads them as wall-clock times in its
//! own zone (pgjdbc in a Europe/Berlin JVM moved them by an hour). Every timestamp in a
//! gpuledger query is UTC, so results without a zone are labelled UTC and go out as
//! `timestamptz`, and timestamp parameters are `timestamptz` too: an offset the client sends is
//! honoured, a time without one is UTC.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::Arc;

use arrow::datatypes::{DataType, Field, FieldRef};
use async_trait::async_trait;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode, TreeNodeRecursion};
use datafusion::common::{Column, DFSchema, DFSchemaRef, ParamValues};
use datafusion::error::Result;
use datafusion::logical_expr::expr::{Cast, Placeholder, ScalarFunction, TryCast};
use datafusion::logical_expr::{BinaryExpr, Expr, ExprSchemable, LogicalPlan, LogicalPlanBuilder, TypeSignature};
use datafusion::prelude::SessionContext;
use datafusion::prelude::lit;
use datafusion::sql::sqlparser::ast::{self, Statement, visit_expressions};
use datafusion_postgres::QueryHook;
use datafusion_postgres::arrow_pg::datatypes::{arrow_schema_to_pg_fields, encode_recordbatch};
use futures::StreamExt;
use pgwire::messages::data::DataRow;

use crate::results::{Lookup, ResultCache};
use datafusion_postgres::hooks::HookClient;
use datafusion_postgres::pgwire;
use pgwire::api::ClientInfo;
use pgwire::api::portal::Format;
use pgwire::api::results::{QueryResponse, Response};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::types::format::FormatOptions;

/// The zone results and parameters without one are read in.
const UTC: &str = "UTC";

/// Plans the statements the hooks before it left: the last hook of the endpoint. On the
/// simple protocol it runs them; on the extended one it gives the plan its parameter and
/// result types, and datafusion-postgres binds and runs it.
pub struct Queries {
    /// Answers shared between clients, when the endpoint keeps them.
    pub results: Option<Arc<ResultCache>>,
}

impl Queries {
    /// `statement` planned (its catalog spellings rewritten, see [`crate::parse`]), its
    /// placeholders typed and its timestamps UTC.
    pub(crate) async fn plan(statement: &Statement, ctx: &SessionContext) -> Result<LogicalPlan> {
        let placeholders = placeholders(statement);
        let mut statement = statement.clone();
        crate::parse::rewrite(&mut statement, crate::pgcompat::SETTINGS);
        let plan = ctx.state().statement_to_plan(datafusion::sql::parser::Statement::Statement(Box::new(statement))).await?;
        utc_results(type_placeholders(keep_placeholders(plan, &placeholders, ctx)?)?)
    }
}

/// The `$n` placeholders `statement` holds, each with the cast around it where there is one
/// (`CAST($1 AS INTEGER)`), as SQL.
fn placeholders(statement: &Statement) -> BTreeMap<String, Option<String>> {
    let mut found = BTreeMap::new();
    let _ = visit_expressions(statement, |e: &ast::Expr| {
        let (placeholder, cast) = match e {
            ast::Expr::Cast { expr, .. } => (expr.as_ref(), Some(e.to_string())),
            e => (e, None),
        };
        if let ast::Expr::Value(v) = placeholder
            && let ast::Value::Placeholder(id) = &v.value
        {
            // Casts are visited before what they cast: a cast found first stays.
            found.entry(id.clone()).or_insert(cast);
        }
        ControlFlow::<()>::Continue(())
    });
    found
}

/// `plan` still holding every placeholder of `wanted`. A rewrite that answers a catalog lookup
/// with NULL drops the lookup's placeholders with it, and datafusion-postgres pairs the values
/// a client binds with the placeholders a plan holds, in order: each value after a dropped one
/// went to the wrong placeholder (SQLAlchemy's column reflection sent its collation filter
/// to the column-number comparison). A dropped placeholder is kept in an always-true filter on
/// top of the query, `CAST($n AS t) IS NULL OR true`, with the cast it had, so it is typed as
/// the client expects.
fn keep_placeholders(plan: LogicalPlan, wanted: &BTreeMap<String, Option<String>>, ctx: &SessionContext) -> Result<LogicalPlan> {
    let held = plan.get_parameter_types()?;
    if wanted.keys().all(|id| held.contains_key(id)) || matches!(plan, LogicalPlan::Statement(_) | LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) | LogicalPlan::Copy(_) | LogicalPlan::Explain(_)) {
        return Ok(plan);
    }
    let mut predicate = lit(true);
    for (id, cast) in wanted.iter().filter(|(id, _)| !held.contains_key(*id)) {
        let bare = || Expr::Placeholder(Placeholder { id: id.clone(), field: None });
        let value = cast.as_deref().and_then(|sql| ctx.parse_sql_expr(sql, &DFSchema::empty()).ok()).unwrap_or_else(bare);
        predicate = predicate.and(value.is_null().or(lit(true)));
    }
    LogicalPlanBuilder::from(plan).filter(predicate)?.build()
}

#[async_trait]
impl QueryHook for Queries {
    async fn handle_simple_query(&self, statement: &Statement, ctx: &SessionContext, client: &mut dyn HookClient) -> Option<PgWireResult<Response>> {
        let run = async {
            let plan = Self::plan(statement, ctx).await.map_err(api)?;
            Ok(Response::Query(rows(plan, ctx, client, self.results.as_ref()).await?))
        };
        Some(run.await)
    }

    async fn handle_extended_parse_query(&self, statement: &Statement, ctx: &SessionContext, _client: &(dyn ClientInfo + Send + Sync)) -> Option<PgWireResult<LogicalPlan>> {
        Some(Self::plan(statement, ctx).await.map_err(api))
    }

    async fn handle_extended_query(&self, _statement: &Statement, _plan: &LogicalPlan, _params: &ParamValues, _ctx: &SessionContext, _client: &mut dyn HookClient) -> Option<PgWireResult<Response>> {
        None
    }
}

/// Runs `plan` and encodes its rows as text the way `client` asked for (its DateStyle,
/// extra_float_digits...).
/// With `results`, rows another client's identical statement computed a moment ago are sent
/// instead (see [`crate::results`]).
pub(crate) async fn rows(plan: LogicalPlan, ctx: &SessionContext, client: &dyn HookClient, results: Option<&Arc<ResultCache>>) -> PgWireResult<QueryResponse> {
    let options = FormatOptions::from_client_metadata(client.metadata());
    let lookup = match results {
        Some(cache) => cache.lookup(&plan, &format!("{options:?}")).await,
        None => Lookup::Uncached,
    };
    if let Lookup::Hit(answer) = lookup {
        let fields = answer.fields.clone();
        let sent = (0..answer.rows.len()).map(move |i| Ok(answer.rows[i].clone()));
        return Ok(QueryResponse::new(fields, futures::stream::iter(sent)));
    }
    let stream = ctx.execute_logical_plan(plan).await.map_err(api)?.execute_stream().await.map_err(api)?;
    let fields = Arc::new(arrow_schema_to_pg_fields(stream.schema().as_ref(), &Format::UnifiedText, Some(Arc::new(options)))?);
    let encoding = fields.clone();
    let encoded = stream
        .map(move |batch| -> Box<dyn Iterator<Item = PgWireResult<DataRow>> + Send + Sync> {
            match batch {
                Ok(batch) => encode_recordbatch(encoding.clone(), batch),
                Err(e) => Box::new(std::iter::once(Err(api(e)))),
            }
        })
        .flat_map(futures::stream::iter);
    Ok(match lookup {
        Lookup::Compute(lease) => QueryResponse::new(fields.clone(), lease.gather(fields, Box::pin(encoded))),
        _ => QueryResponse::new(fields, encoded),
    })
}

pub(crate) fn api(e: datafusion::error::DataFusionError) -> PgWireError {
    PgWireError::ApiError(Box::new(e))
}

/// Gives every placeholder of `plan` (subqueries included) a type: DataFusion's own inference
/// from comparisons, BETWEEN, IN and LIKE first; then what its place says (an integer in LIMIT
/// and OFFSET, an array of the left side's type in `x = ANY($n)` and the other comparisons
/// with ANY, the target of a cast around it); text where nothing says anything, as in
/// PostgreSQL. Timestamps are typed UTC, so they are announced and decoded as `timestamptz`.
pub fn type_placeholders(plan: LogicalPlan) -> Result<LogicalPlan> {
    let plan = plan
        .transform_up_with_subqueries(|node| {
            let schema = input_schema(&node);
            node.map_expressions(|e| {
                let (e, placeholders) = e.infer_placeholder_types(&schema)?;
                Ok(if placeholders { Transformed::yes(e) } else { Transformed::no(e) })
            })
        })
        .data()?;

    // What each untyped placeholder's place says; a type DataFusion gave it anywhere wins.
    let mut inferred: HashMap<String, FieldRef> = HashMap::new();
    let mut guessed: HashMap<String, FieldRef> = HashMap::new();
    plan.apply_with_subqueries(|node| {
        let schema = input_schema(node);
        let in_limit = matches!(node, LogicalPlan::Limit(_));
        node.apply_expressions(|e| {
            e.apply(|e| {
                if let Expr::Placeholder(Placeholder { id, field: Some(field) }) = e {
                    inferred.entry(id.clone()).or_insert_with(|| field.clone());
                } else if let Some((id, data_type)) = guess(e, in_limit, &schema) {
                    guessed.entry(id).or_insert_with(|| Arc::new(Field::new("", data_type, true)));
                }
                Ok(TreeNodeRecursion::Continue)
            })
        })
    })?;

    plan.transform_up_with_subqueries(|node| {
        let typed = node.map_expressions(|e| {
            e.transform(|e| match e {
                Expr::Placeholder(Placeholder { id, field }) => {
                    let field = field.or_else(|| inferred.get(&id).or_else(|| guessed.get(&id)).cloned()).unwrap_or_else(|| Arc::new(Field::new("", DataType::Utf8, true)));
                    let field = utc_field(field);
                    Ok(Transformed::yes(Expr::Placeholder(Placeholder { id, field: Some(field) })))
                }
                other => Ok(Transformed::no(other)),
            })
        })?;
        if typed.transformed { typed.map_data(LogicalPlan::recompute_schema) } else { Ok(typed) }
    })
    .data()
}

/// The type an untyped placeholder at `e` takes from where it stands.
fn guess(e: &Expr, in_limit: bool, schema: &DFSchema) -> Option<(String, DataType)> {
    let untyped = |e: &Expr| match e {
        Expr::Placeholder(Placeholder { id, field: None }) => Some(id.clone()),
        _ => None,
    };
    let list_of = |other: &Expr| other.get_type(schema).ok().map(|t| DataType::List(Arc::new(Field::new_list_field(plain_text(t), true))));
    match e {
        Expr::Placeholder(Placeholder { id, field: None }) if in_limit => Some((id.clone(), DataType::Int64)),
        Expr::Cast(Cast { expr, field }) | Expr::TryCast(TryCast { expr, field }) => Some((untyped(expr)?, field.data_type().clone())),
        // `x = ANY($n)` is planned as array_has($n, x).
        Expr::ScalarFunction(ScalarFunction { func, args }) if func.name() == "array_has" => match args.as_slice() {
            [haystack, needle] => Some((untyped(haystack)?, list_of(needle)?)),
            _ => None,
        },
        // An argument of a function with fixed argument types (`pg_get_constraintdef(oid,
        // $1)`, SQLAlchemy's foreign keys): the type the function takes there.
        Expr::ScalarFunction(ScalarFunction { func, args }) => {
            let (at, id) = args.iter().enumerate().find_map(|(i, a)| Some((i, untyped(a)?)))?;
            let exact = |s: &TypeSignature| match s {
                TypeSignature::Exact(types) if types.len() == args.len() => Some(types[at].clone()),
                _ => None,
            };
            let taken = match &func.signature().type_signature {
                TypeSignature::OneOf(all) => all.iter().find_map(exact),
                one => exact(one),
            };
            Some((id, taken?))
        }
        // `x <> ANY($n)`, `x > ANY($n)`...: the array's smallest or largest element against x.
        Expr::BinaryExpr(BinaryExpr { left, right, .. }) => [(left, right), (right, left)].into_iter().find_map(|(bound, other)| match bound.as_ref() {
            Expr::ScalarFunction(ScalarFunction { func, args }) if matches!(func.name(), "array_min" | "array_max") => Some((untyped(args.first()?)?, list_of(other)?)),
            _ => None,
        }),
        _ => None,
    }
}

/// Text as plain `Utf8`: a parameter's value is decoded as that.
fn plain_text(t: DataType) -> DataType {
    match t {
        DataType::Utf8View | DataType::LargeUtf8 => DataType::Utf8,
        t => t,
    }
}

/// A timestamp field without a zone made UTC.
fn utc_field(field: FieldRef) -> FieldRef {
    match field.data_type() {
        DataType::Timestamp(unit, None) => Arc::new(field.as_ref().clone().with_data_type(DataType::Timestamp(*unit, Some(UTC.into())))),
        _ => field,
    }
}

/// The columns `node`'s expressions read: its inputs' (its own where it has none).
fn input_schema(node: &LogicalPlan) -> DFSchemaRef {
    match node.inputs().as_slice() {
        [] => node.schema().clone(),
        [one] => one.schema().clone(),
        many => {
            let mut merged = DFSchema::empty();
            for input in many {
                merged.merge(input.schema());
            }
            Arc::new(merged)
        }
    }
}

/// `plan` with its timestamp results labelled UTC: a projection on top casts each timestamp
/// column without a zone to the same instant with zone UTC (the values do not change). Plans
/// that are not queries, and queries with no such column, are left as they are.
pub fn utc_results(plan: LogicalPlan) -> Result<LogicalPlan> {
    let query = !matches!(plan, LogicalPlan::Ddl(_) | LogicalPlan::Dml(_) | LogicalPlan::Copy(_) | LogicalPlan::Statement(_) | LogicalPlan::Explain(_) | LogicalPlan::Analyze(_) | LogicalPlan::DescribeTable(_) | LogicalPlan::Extension(_));
    let naive = |t: &DataType| matches!(t, DataType::Timestamp(_, None));
    if !query || !plan.schema().fields().iter().any(|f| naive(f.data_type())) {
        return Ok(plan);
    }
    let columns: Vec<Expr> = plan
        .schema()
        .iter()
        .map(|(qualifier, field)| {
            let column = Expr::Column(Column::new(qualifier.cloned(), field.name()));
            match field.data_type() {
                DataType::Timestamp(unit, None) => Expr::Cast(Cast::new(Box::new(column), DataType::Timestamp(*unit, Some(UTC.into())))).alias_qualified(qualifier.cloned(), field.name()),
                _ => column,
            }
        })
        .collect();
    LogicalPlanBuilder::from(plan).project(columns)?.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::datatypes::TimeUnit;

    /// What `now()` and casts to timestamptz give.
    const NS: TimeUnit = TimeUnit::Nanosecond;
    use datafusion::sql::parser::DFParser;

    fn statement(sql: &str) -> Statement {
        match DFParser::parse_sql(sql).unwrap().pop_front().unwrap() {
            datafusion::sql::parser::Statement::Statement(s) => *s,
            other => panic!("{other:?}"),
        }
    }

    async fn planned(sql: &str) -> LogicalPlan {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE costs (team VARCHAR, hour TIMESTAMP WITH TIME ZONE, cost DOUBLE) AS VALUES ('ml', TIMESTAMP '2026-12-01T00:00:00Z', 1.5)").await.unwrap().collect().await.unwrap();
        let statement = statement(sql);
        Queries::plan(&statement, &ctx).await.unwrap()
    }

    fn types(plan: &LogicalPlan) -> Vec<(String, DataType)> {
        let mut types: Vec<_> = plan.get_parameter_fields().unwrap().into_iter().map(|(id, f)| (id, f.unwrap().data_type().clone())).collect();
        types.sort();
        types
    }

    #[tokio::test]
    async fn placeholders_are_typed_by_their_place_as_postgresql_types_them() {
        let teams = DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)));
        let plan = planned("SELECT team FROM costs WHERE team = ANY($1) AND $2 IS NULL LIMIT $3 OFFSET $4").await;
        assert_eq!(types(&plan), [("$1".into(), teams.clone()), ("$2".into(), DataType::Utf8), ("$3".into(), DataType::Int64), ("$4".into(), DataType::Int64)]);
        // The other comparisons with ANY, and a placeholder inside a scalar subquery.
        let plan = planned("SELECT (SELECT max(cost) FROM costs WHERE team <> ANY($1)) AS top, $2::timestamptz AS since").await;
        assert_eq!(types(&plan), [("$1".into(), teams), ("$2".into(), DataType::Timestamp(NS, Some(UTC.into())))]);
        // DataFusion's own inference stands.
        let plan = planned("SELECT cost FROM costs WHERE hour >= $1 AND cost > $2").await;
        assert!(matches!(&types(&plan)[..], [(_, DataType::Timestamp(_, Some(_))), (_, DataType::Float64)]), "{:?}", types(&plan));
    }

    /// A lookup rewritten to NULL drops its `$1`; the values a client binds are paired with a
    /// plan's placeholders in order, so `$1` must stay, with the type its cast gave it.
    #[tokio::test]
    async fn placeholders_a_rewrite_drops_are_kept_with_their_cast() {
        let ctx = SessionContext::new();
        ctx.sql("CREATE TABLE pg_sequence (seqrelid INT, seqstart BIGINT)").await.unwrap().collect().await.unwrap();
        ctx.sql("CREATE TABLE pg_class (oid INT, relname VARCHAR)").await.unwrap().collect().await.unwrap();
        let sql = "SELECT (SELECT s.seqstart FROM pg_sequence s WHERE s.seqrelid = CAST($1 AS INTEGER)) AS start, relname FROM pg_class WHERE relname = $2";
        let statement = statement(sql);
        let plan = Queries::plan(&statement, &ctx).await.unwrap();
        assert_eq!(types(&plan), [("$1".into(), DataType::Int32), ("$2".into(), DataType::Utf8View)], "{plan}");
        assert!(!plan.to_string().contains("seqstart"), "the lookup is answered NULL: {plan}");
        // Bound and run, the filter that holds $1 keeps every row.
        let bound = plan.with_param_values(vec![datafusion::scalar::ScalarValue::Int32(Some(7)), datafusion::scalar::ScalarValue::from("x")]).unwrap();
        assert!(ctx.execute_logical_plan(bound).await.unwrap().collect().await.unwrap().iter().all(|b| b.num_rows() == 0));
    }

    /// `pg_get_constraintdef(oid, $1)` (SQLAlchemy's foreign keys): the function's own type.
    #[tokio::test]
    async fn placeholders_passed_to_functions_of_fixed_types_take_those_types() {
        use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
        let ctx = SessionContext::new();
        let udf = create_udf("definition", vec![DataType::Int32, DataType::Boolean], DataType::Utf8, Volatility::Immutable, Arc::new(|_: &[ColumnarValue]| Ok(ColumnarValue::Scalar(datafusion::scalar::ScalarValue::Utf8(None)))));
        ctx.register_udf(udf);
        let statement = statement("SELECT definition(CAST(1 AS INT), $1) AS d");
        let plan = Queries::plan(&statement, &ctx).await.unwrap();
        assert_eq!(types(&plan), [("$1".into(), DataType::Boolean)]);
    }

    #[tokio::test]
    async fn timestamps_without_a_zone_are_results_in_utc() {
        let plan = planned("SELECT now() AS at, to_timestamp('2026-12-01 14:00:00') AS t, team FROM costs").await;
        let fields: Vec<_> = plan.schema().fields().iter().map(|f| (f.name().clone(), f.data_type().clone())).collect();
        assert!(matches!(&fields[0].1, DataType::Timestamp(_, Some(z)) if z.as_ref() == UTC), "{fields:?}");
        assert!(matches!(&fields[1].1, DataType::Timestamp(_, Some(z)) if z.as_ref() == UTC), "{fields:?}");
        assert_eq!((fields[0].0.as_str(), fields[2].0.as_str()), ("at", "team"));
        // The same instant: 14:00 read as UTC stays 14:00 UTC.
        let ctx = SessionContext::new();
        let batches = ctx.execute_logical_plan(utc_results(ctx.sql("SELECT to_timestamp('2026-12-01 14:00:00') AS t").await.unwrap().logical_plan().clone()).unwrap()).await.unwrap().collect().await.unwrap();
        let shown = arrow::util::pretty::pretty_format_batches(&batches).unwrap().to_string();
        assert!(shown.contains("2026-12-01T14:00:00Z"), "{shown}");
    }
}
