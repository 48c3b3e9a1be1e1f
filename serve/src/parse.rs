//! SQL text to statements, and the PostgreSQL spellings tools use that DataFusion cannot plan.
//!
//! datafusion-postgres parses with datafusion-pg-catalog's compatibility parser: a few whole
//! queries tools send (psql's `\d` extras, Grafana's search-path lookup, DBeaver's sizes) are
//! swapped for plannable ones, then rules rewrite PostgreSQL spellings. One rule replaces every
//! scalar subquery in a select list that it takes for correlated by NULL, and it takes a `$n`
//! for a correlation: `SELECT (SELECT count(*) FROM t WHERE team = $1)` silently answered NULL,
//! as did a correlated subquery over ledger tables. Statements over the ledger's own tables are
//! therefore parsed without that rule ([`SqlParser`]): DataFusion plans the subquery, or says
//! why it cannot. Statements that read the catalog keep it, as the tools' metadata queries rely
//! on it.
//!
//! [`rewrite`] then turns what tools send about the catalog into what DataFusion plans:
//! `oid::regclass` (and `regnamespace`, `regtype`, `regproc`, `regrole`) as the object's name,
//! `to_regtype('name')` and `to_regclass` as a lookup, `ARRAY(SELECT ...)` as an `array_agg`,
//! `pg_settings` as the endpoint's settings, `information_schema.columns` with PostgreSQL's
//! type names, Grafana's search-path lookup as `public`, `(row).field` as `get_field`; and in
//! catalog statements, a correlated scalar subquery that returns a row per match as its
//! smallest value, and the option and key arrays this catalog does not fill as NULL. Before
//! any of that, [`SqlParser`] compares `pg_type`'s function columns with a `'name'::regproc`
//! by name.

use std::ops::ControlFlow;
use std::sync::Arc;

use async_trait::async_trait;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{
    AccessExpr, DataType, ExactNumberInfo, Expr, FunctionArg, FunctionArgExpr, FunctionArguments, Ident, JoinOperator, ObjectName, Query, SelectItem, SetExpr, Statement, TableAlias, TableFactor, Value, VisitMut, VisitorMut, visit_relations,
};
use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::parser::{Parser, ParserError};
use datafusion::sql::sqlparser::tokenizer::{Span, Token, TokenWithSpan, Tokenizer};
use datafusion_postgres::datafusion_pg_catalog::sql::PostgresCompatibilityParser;
use datafusion_postgres::datafusion_pg_catalog::sql::rules::{self, SqlStatementRewriteRule};
use datafusion_postgres::{QueryHook, pgwire};
use pgwire::api::ClientInfo;
use pgwire::api::Type;
use pgwire::api::portal::Format;
use pgwire::api::results::FieldInfo;
use pgwire::api::stmt::QueryParser;
use pgwire::error::PgWireResult;

/// The compatibility parser, and its rules without the one that empties select-list
/// subqueries.
pub struct SqlParser {
    compat: PostgresCompatibilityParser,
    rules: Vec<Arc<dyn SqlStatementRewriteRule>>,
}

impl Default for SqlParser {
    fn default() -> Self {
        SqlParser {
            compat: PostgresCompatibilityParser::new(),
            // datafusion-pg-catalog's list, in its order, less RemoveSubqueryFromProjection.
            rules: vec![
                Arc::new(rules::AliasDuplicatedProjectionRewrite),
                Arc::new(rules::ResolveUnqualifiedIdentifier),
                Arc::new(rules::RewriteArrayAnyAllOperation),
                Arc::new(rules::PrependUnqualifiedPgTableName),
                Arc::new(rules::StripCallableQualifier),
                Arc::new(rules::FixArrayLiteral),
                Arc::new(rules::CurrentUserVariableToSessionUserFunctionCall),
                Arc::new(rules::StripCollate),
                Arc::new(rules::RewritePgCatalogOperator),
                Arc::new(rules::RewriteRegCastToSubquery::new()),
                Arc::new(rules::FixVersionColumnName),
            ],
        }
    }
}

impl SqlParser {
    /// The statements of `sql`. Each is the compatibility parser's, except where that one
    /// only emptied a select-list subquery of a statement that does not read the catalog: there
    /// the subquery stays. (A statement the compatibility parser swapped whole, or changed in
    /// any other way its rules do not, is left as it made it.)
    pub fn parse(&self, sql: &str) -> Result<Vec<Statement>, ParserError> {
        let compat = self.compat.parse(sql)?;
        let Ok(plain) = plain_statements(sql) else { return Ok(compat) };
        if plain.len() != compat.len() {
            return Ok(compat);
        }
        Ok(plain
            .into_iter()
            .zip(compat)
            .map(|(plain, compat)| {
                let ours = self.rules.iter().fold(plain.clone(), |s, rule| rule.rewrite(s));
                let emptied = rules::RemoveSubqueryFromProjection.rewrite(ours.clone());
                if emptied != compat {
                    return compat;
                }
                if !reads_catalog(&compat) {
                    return ours;
                }
                // A catalog statement keeps every rule; its function names compared with a
                // regproc are compared as names first (see `procedures_by_name`).
                let mut plain = plain;
                if !procedures_by_name(&mut plain) {
                    return compat;
                }
                let ours = self.rules.iter().fold(plain, |s, rule| rule.rewrite(s));
                rules::RemoveSubqueryFromProjection.rewrite(ours)
            })
            .collect())
    }
}

/// `pg_type`'s function columns hold names here (`typinput` is `array_in`), while PostgreSQL's
/// are oids a `'name'::regproc` is compared with (pgjdbc: `typinput =
/// 'pg_catalog.array_in'::regproc`). Such a cast beside such a column becomes the bare name;
/// whether any was found.
fn procedures_by_name(statement: &mut Statement) -> bool {
    const NAME_COLUMNS: &[&str] = &["typinput", "typoutput", "typreceive", "typsend", "typmodin", "typmodout", "typanalyze"];
    let is_name_column = |e: &Expr| column_name(e).is_some_and(|c| NAME_COLUMNS.contains(&c.as_str()));
    let bare_name = |e: &Expr| match e {
        Expr::Cast { expr, data_type: DataType::Custom(kind, _), .. } if matches!(last_name(kind).as_deref(), Some("regproc" | "regprocedure")) => match expr.as_ref() {
            Expr::Value(v) => {
                let name = v.to_string();
                let name = name.trim_matches('\'');
                Some(name.rsplit('.').next().unwrap_or(name).to_owned())
            }
            _ => None,
        },
        _ => None,
    };
    let mut found = false;
    let _ = datafusion::sql::sqlparser::ast::visit_expressions_mut(statement, |e: &mut Expr| {
        if let Expr::BinaryOp { left, right, .. } = e {
            let by_name = |name: String| Expr::value(datafusion::sql::sqlparser::ast::Value::SingleQuotedString(name));
            if is_name_column(left)
                && let Some(name) = bare_name(right)
            {
                **right = by_name(name);
                found = true;
            } else if is_name_column(right)
                && let Some(name) = bare_name(left)
            {
                **left = by_name(name);
                found = true;
            }
        }
        ControlFlow::<()>::Continue(())
    });
    found
}

/// `sql` parsed as the compatibility parser parses it before its swaps and rules: tokens
/// without whitespace or positions, PostgreSQL's dialect.
fn plain_statements(sql: &str) -> Result<Vec<Statement>, ParserError> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize()?;
    let tokens: Vec<TokenWithSpan> = tokens.into_iter().filter(|t| !matches!(t, Token::Whitespace(_))).map(|token| TokenWithSpan { token, span: Span::empty() }).collect();
    Parser::new(&PostgreSqlDialect {}).with_tokens_with_locations(tokens).parse_statements()
}

/// The extended protocol's parser: statements parsed as [`SqlParser`] parses them and planned
/// by the first hook that claims them (the endpoint's last hook plans every statement); the
/// parameter and result types of a plan are datafusion-postgres', which binds and runs it.
pub struct StatementParser {
    pub sql: Arc<SqlParser>,
    pub ctx: Arc<SessionContext>,
    pub hooks: Vec<Arc<dyn QueryHook>>,
    pub types: Arc<datafusion_postgres::Parser>,
}

/// A statement as datafusion-postgres keeps it: its text, and the statement with its plan.
pub type PlannedStatement = (String, Option<(Statement, LogicalPlan)>);

#[async_trait]
impl QueryParser for StatementParser {
    type Statement = PlannedStatement;

    async fn parse_sql<C>(&self, client: &C, sql: &str, _types: &[Option<Type>]) -> PgWireResult<Option<PlannedStatement>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let mut statements = self.sql.parse(sql).map_err(|e| crate::pg::sql_error("42601", e.to_string()))?;
        if statements.is_empty() {
            return Ok(None);
        }
        let statement = statements.remove(0);
        for hook in &self.hooks {
            if let Some(plan) = hook.handle_extended_parse_query(&statement, &self.ctx, client).await {
                return Ok(Some((statement.to_string(), Some((statement, plan?)))));
            }
        }
        Err(crate::pg::sql_error("XX000", gpuledger_store::Bug::new(format!("no hook planned the statement {statement}")).to_string()))
    }

    fn get_parameter_types(&self, statement: &PlannedStatement) -> PgWireResult<Vec<Type>> {
        self.types.get_parameter_types(statement)
    }

    fn get_result_schema(&self, statement: &PlannedStatement, format: Option<&Format>) -> PgWireResult<Vec<FieldInfo>> {
        self.types.get_result_schema(statement, format)
    }
}

/// Whether `statement` reads a `pg_catalog` or `information_schema` table.
fn reads_catalog(statement: &Statement) -> bool {
    visit_relations(statement, |name: &ObjectName| {
        let parts = name_parts(name);
        let catalog = parts.iter().any(|p| p == "pg_catalog" || p == "information_schema") || parts.last().is_some_and(|t| t.starts_with("pg_"));
        if catalog { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
    })
    .is_break()
}

/// Rewrites the PostgreSQL spellings of `statement` that DataFusion cannot plan (see the
/// module documentation). The settings are those `pg_settings` lists.
pub fn rewrite(statement: &mut Statement, settings: &[(&str, &str)]) {
    let catalog = reads_catalog(statement);
    let _ = statement.visit(&mut Spellings { catalog, settings });
}

struct Spellings<'a> {
    /// The statement reads the catalog: correlated lookups may be made single-valued.
    catalog: bool,
    settings: &'a [(&'a str, &'a str)],
}

/// Option arrays PostgreSQL keeps in its catalog and this one does not: NULL, as for a table
/// without options.
const UNFILLED_CATALOG_COLUMNS: &[&str] = &["reloptions", "attoptions", "attfdwoptions"];

/// The column `name[i]` subscripts (`con.conkey[i]` parses as `con`, `.conkey`, `[i]`).
fn subscripted_column(root: &Expr, chain: &[AccessExpr]) -> Option<String> {
    let [path @ .., AccessExpr::Subscript(_)] = chain else { return None };
    let mut last = column_name(root)?;
    for step in path {
        match step {
            AccessExpr::Dot(field @ Expr::Identifier(_)) => last = column_name(field)?,
            _ => return None,
        }
    }
    Some(last)
}

/// The key columns of `pg_index` and `pg_constraint` (arrays in PostgreSQL, text here), and
/// the name pgjdbc's index query gives `indoption` in its subquery.
const KEY_ARRAYS: &[&str] = &["conkey", "confkey", "indkey", "indoption", "indclass", "indcollation", "i_indoption"];

/// `pg_index`'s vector columns (`int2vector` and `oidvector` in PostgreSQL, whose text is the
/// numbers apart by spaces: how this catalog keeps them).
const VECTOR_COLUMNS: &[&str] = &["indkey", "indclass", "indcollation", "indoption"];

/// `unnest(v)` and `generate_subscripts(v, 1)` of a vector column of `pg_index` (see
/// [`VECTOR_COLUMNS`]): its numbers, and their positions, as rows; `generate_subscripts` of
/// any other array too (DataFusion has no such function).
fn vector_rows(function: &str, arg: &FunctionArg) -> Option<Expr> {
    let FunctionArg::Unnamed(FunctionArgExpr::Expr(arg)) = arg else { return None };
    let array = match column_name(arg) {
        Some(c) if VECTOR_COLUMNS.contains(&c.as_str()) => format!("CAST(string_to_array(CAST({arg} AS VARCHAR), ' ') AS SMALLINT[])"),
        _ if function == "unnest" => return None,
        _ => arg.to_string(),
    };
    match function {
        "unnest" => parse_expr(&format!("unnest({array})")),
        _ => parse_expr(&format!("unnest(range(1, CAST(cardinality({array}) AS BIGINT) + 1))")),
    }
}

/// Where an object kind's names live: `regclass` names are `pg_class.relname`...
fn name_column(kind: &str) -> Option<(&'static str, &'static str)> {
    Some(match kind {
        "regclass" => ("pg_class", "relname"),
        "regnamespace" => ("pg_namespace", "nspname"),
        "regtype" => ("pg_type", "typname"),
        "regproc" | "regprocedure" => ("pg_proc", "proname"),
        "regrole" => ("pg_roles", "rolname"),
        _ => return None,
    })
}

/// The parts of a table or function name, lowercased.
fn name_parts(name: &ObjectName) -> Vec<String> {
    name.0.iter().filter_map(|p| p.as_ident()).map(|i| i.value.to_ascii_lowercase()).collect()
}

fn last_name(name: &ObjectName) -> Option<String> {
    name_parts(name).pop()
}

/// The column a bare or qualified column reference names, lowercased (`c.relname`: `relname`).
fn column_name(e: &Expr) -> Option<String> {
    match e {
        Expr::Identifier(i) => Some(i.value.to_ascii_lowercase()),
        Expr::CompoundIdentifier(parts) => parts.last().map(|i| i.value.to_ascii_lowercase()),
        _ => None,
    }
}

/// `query` as a table named `alias` (else `name`), in place of the table a statement read.
fn derived(query: Query, alias: &Option<TableAlias>, name: &str) -> TableFactor {
    let alias = alias.clone().unwrap_or_else(|| TableAlias { explicit: true, name: Ident::new(name), columns: vec![], at: None });
    TableFactor::Derived { lateral: false, subquery: Box::new(query), alias: Some(alias), sample: None }
}

fn parse_expr(sql: &str) -> Option<Expr> {
    Parser::new(&PostgreSqlDialect {}).try_with_sql(sql).ok()?.parse_expr().ok()
}

fn is_literal(e: &Expr) -> bool {
    matches!(e, Expr::Value(_))
}

impl VisitorMut for Spellings<'_> {
    type Break = ();

    fn pre_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table { name, alias, args: None, .. } = factor
            && last_name(name).as_deref() == Some("pg_settings")
            && let Some(query) = settings_query(self.settings)
        {
            *factor = derived(query, alias, "pg_settings");
        }
        ControlFlow::Continue(())
    }

    /// `information_schema.columns` with PostgreSQL's type names (after its children are
    /// visited: the table it reads is the one it replaces).
    fn post_visit_table_factor(&mut self, factor: &mut TableFactor) -> ControlFlow<()> {
        if let TableFactor::Table { name, alias, args: None, .. } = factor
            && name_parts(name).ends_with(&["information_schema".to_owned(), "columns".to_owned()])
            && let Some(query) = parse_query(COLUMNS_WITH_PG_TYPES)
        {
            *factor = derived(query, alias, "columns");
        }
        ControlFlow::Continue(())
    }

    fn post_visit_expr(&mut self, expr: &mut Expr) -> ControlFlow<()> {
        let replacement = match expr {
            // `numeric` without a precision keeps every digit in PostgreSQL; DataFusion makes
            // it decimal(38, 10). A literal gets exactly its own digits (read from its text:
            // as a float it would have lost some), anything else `numeric(x)`, which keeps a
            // decimal's scale, an integer whole and a float's or text's 15 places.
            Expr::Cast { expr: inner, data_type: DataType::Numeric(ExactNumberInfo::None) | DataType::Decimal(ExactNumberInfo::None) | DataType::Dec(ExactNumberInfo::None), .. } => {
                let digits = match inner.as_ref() {
                    Expr::Value(v) => match &v.value {
                        Value::Number(n, _) => Some(n.clone()),
                        Value::SingleQuotedString(s) => Some(s.clone()),
                        _ => None,
                    },
                    _ => None,
                };
                // (Arrow reads no exponent in text: `1.5e3` goes the float's way.)
                match digits.as_deref().filter(|d| !d.contains(['e', 'E'])).and_then(|d| Some((d, crate::pgcompat::numeric_digits(d)?))) {
                    Some((text, (before, scale))) if before + scale <= 76 => parse_expr(&format!("CAST('{}' AS NUMERIC({}, {scale}))", text.replace('\'', "''"), before + scale)),
                    Some(_) => None,
                    None if matches!(inner.as_ref(), Expr::Value(v) if matches!(v.value, Value::Placeholder(_))) => parse_expr(&format!("CAST({inner} AS NUMERIC(38, {}))", crate::pgcompat::NUMERIC_SCALE)),
                    None => parse_expr(&format!("numeric({inner})")),
                }
            }
            // An object's oid as its name: `relnamespace::regnamespace` is the schema's name.
            Expr::Cast { expr: inner, data_type: DataType::Custom(kind, _), .. } if !is_literal(inner) => {
                name_column(&last_name(kind).unwrap_or_default()).and_then(|(table, column)| {
                    let oid = inner.to_string();
                    parse_expr(&format!("coalesce((SELECT min({column}) FROM pg_catalog.{table} WHERE oid = {oid}), CAST({oid} AS VARCHAR))"))
                })
            }
            // to_regtype('name'): the oid of the type of that name, or NULL.
            Expr::Function(f) if matches!(last_name(&f.name).as_deref(), Some("to_regtype" | "to_regclass" | "to_regnamespace")) => match &f.args {
                FunctionArguments::List(list) if list.args.len() == 1 => {
                    let kind = last_name(&f.name).unwrap_or_default();
                    name_column(kind.trim_start_matches("to_")).and_then(|(table, column)| {
                        let name = &list.args[0];
                        parse_expr(&format!("(SELECT min(oid) FROM pg_catalog.{table} WHERE {column} = {name})"))
                    })
                }
                _ => None,
            },
            // The key columns of an index as rows (SQLAlchemy's primary key and unique
            // constraint reflection): PostgreSQL's vectors, text here ("1 2").
            // `generate_subscripts(a, 1)` numbers them: 1 to the array's length, as rows.
            Expr::Function(f) if self.catalog && matches!(last_name(&f.name).as_deref(), Some("unnest" | "generate_subscripts")) => match &f.args {
                FunctionArguments::List(list) if !list.args.is_empty() => vector_rows(&last_name(&f.name).unwrap_or_default(), &list.args[0]),
                _ => None,
            },
            // ARRAY(SELECT x FROM ...): the values of x as one array. In a catalog statement,
            // ARRAY(SELECT ... FROM unnest(c.reloptions) x) maps an option or ACL array of a
            // catalog row, and this catalog fills none of them: the answer is NULL (a
            // correlated unnest is more than DataFusion plans).
            Expr::Function(f) if last_name(&f.name).as_deref() == Some("array") => match &f.args {
                FunctionArguments::Subquery(query) if self.catalog && unnests(query) => parse_expr("CAST(NULL AS VARCHAR[])"),
                FunctionArguments::Subquery(query) => aggregated(query, "array_agg").map(|q| Expr::Subquery(Box::new(q))),
                _ => None,
            },
            // Catalog columns this catalog does not have because it fills none of them
            // (psql's `\d+` reads the storage options of a table and of its TOAST table).
            Expr::CompoundIdentifier(parts) if self.catalog && parts.last().is_some_and(|p| UNFILLED_CATALOG_COLUMNS.contains(&p.value.to_ascii_lowercase().as_str())) => parse_expr("CAST(NULL AS VARCHAR[])"),
            // Grafana's query editor asks for a table's columns `WHERE table_schema IN (<the
            // schemas of the search path, from current_setting('search_path')>)`; the
            // compatibility parser swaps that subquery for '' and the editor got no columns.
            // The search path is `public`.
            Expr::InList { expr: column, list, negated: false }
                if matches!(column.as_ref(), Expr::Identifier(i) if i.value.eq_ignore_ascii_case("table_schema")) && matches!(list.as_slice(), [Expr::Value(v)] if v.to_string() == "''") =>
            {
                parse_expr(&format!("{column} IN ('public')"))
            }
            // An element of an index's or constraint's key columns (`con.conkey[pos.n]`, pgjdbc's
            // foreign keys and index info). This catalog lists no index or constraint, and keeps
            // those columns as text: no element, NULL.
            Expr::CompoundFieldAccess { root, access_chain } if self.catalog && subscripted_column(root, access_chain).is_some_and(|c| KEY_ARRAYS.contains(&c.as_str())) => parse_expr("CAST(NULL AS SMALLINT)"),
            // `(row).field`, a field of a composite value: get_field. (DataFusion plans a dot
            // after a column name, not after a parenthesised expression or a function call.)
            Expr::CompoundFieldAccess { root, access_chain } if matches!(root.as_ref(), Expr::Nested(_) | Expr::Function(_)) => match access_chain.as_slice() {
                [AccessExpr::Dot(Expr::Identifier(field))] => parse_expr(&format!("get_field({root}, '{}')", field.value.replace('\'', "''"))),
                _ => None,
            },
            // A lookup in a catalog table this catalog never fills (SQLAlchemy's identity
            // options from pg_sequence): no row, NULL. (Its select list reads the outer row,
            // which DataFusion cannot decorrelate.)
            Expr::Subquery(query) if self.catalog && reads_only_never_filled(query) => parse_expr("CAST(NULL AS VARCHAR)"),
            // A lookup in the catalog that may match more than one row (PostgreSQL fails then;
            // DataFusion cannot plan it at all): its smallest value.
            Expr::Subquery(query) if self.catalog && !has_aggregate(query) => aggregated(query, "min").map(|q| Expr::Subquery(Box::new(q))),
            _ => None,
        };
        if let Some(r) = replacement {
            *expr = r;
        }
        ControlFlow::Continue(())
    }
}

/// `query` (one select of one value, no grouping or limit) with its value wrapped in the
/// aggregate `function`; its ORDER BY moves into the aggregate.
fn aggregated(query: &Query, function: &str) -> Option<Query> {
    let SetExpr::Select(select) = query.body.as_ref() else { return None };
    if select.projection.len() != 1 || query.limit_clause.is_some() || query.fetch.is_some() || !matches!(select.group_by, datafusion::sql::sqlparser::ast::GroupByExpr::Expressions(ref e, _) if e.is_empty()) || select.having.is_some() || select.distinct.is_some() {
        return None;
    }
    let (value, alias) = match &select.projection[0] {
        SelectItem::UnnamedExpr(e) => (e.clone(), None),
        SelectItem::ExprWithAlias { expr, alias } => (expr.clone(), Some(alias.clone())),
        _ => return None,
    };
    let order = query.order_by.as_ref().map(|o| format!(" {o}")).unwrap_or_default();
    let mut call = parse_expr(&format!("{function}({value}{order})"))?;
    if let Expr::Function(f) = &mut call
        && let FunctionArguments::List(list) = &mut f.args
        && let Some(first) = list.args.first_mut()
        && let FunctionArg::Unnamed(FunctionArgExpr::Expr(arg)) = first
    {
        // The value as it was parsed, not as it prints.
        *arg = value;
    }
    let mut out = query.clone();
    out.order_by = None;
    let SetExpr::Select(select) = out.body.as_mut() else { return None };
    select.projection = vec![match alias {
        Some(alias) => SelectItem::ExprWithAlias { expr: call, alias },
        None => SelectItem::UnnamedExpr(call),
    }];
    Some(out)
}

/// Catalog tables this catalog has no rows in, whatever the store holds: it lists no
/// sequences and no column defaults.
const NEVER_FILLED_CATALOG_TABLES: &[&str] = &["pg_sequence", "pg_attrdef"];

/// Whether `query` is one select from a table of [`NEVER_FILLED_CATALOG_TABLES`], alone or
/// inner-joined: it has no rows.
fn reads_only_never_filled(query: &Query) -> bool {
    let SetExpr::Select(select) = query.body.as_ref() else { return false };
    let [from] = select.from.as_slice() else { return false };
    let inner = from.joins.iter().all(|j| matches!(j.join_operator, JoinOperator::Join(_) | JoinOperator::Inner(_)));
    inner && matches!(&from.relation, TableFactor::Table { name, args: None, .. } if last_name(name).is_some_and(|t| NEVER_FILLED_CATALOG_TABLES.contains(&t.as_str())))
}

/// Whether `query` reads from `unnest(...)`.
fn unnests(query: &Query) -> bool {
    let SetExpr::Select(select) = query.body.as_ref() else { return false };
    select.from.iter().any(|t| match &t.relation {
        TableFactor::Table { name, args: Some(_), .. } => last_name(name).as_deref() == Some("unnest"),
        TableFactor::UNNEST { .. } => true,
        _ => false,
    })
}

/// Whether `query`'s select list holds an aggregate (then it returns one row already).
fn has_aggregate(query: &Query) -> bool {
    const AGGREGATES: &[&str] = &["count", "min", "max", "sum", "avg", "array_agg", "string_agg", "bool_and", "bool_or", "every"];
    let SetExpr::Select(select) = query.body.as_ref() else { return true };
    let mut found = false;
    for item in &select.projection {
        let _ = datafusion::sql::sqlparser::ast::visit_expressions(item, |e: &Expr| {
            if let Expr::Function(f) = e
                && last_name(&f.name).is_some_and(|n| AGGREGATES.contains(&n.as_str()))
            {
                found = true;
            }
            ControlFlow::<()>::Continue(())
        });
    }
    found || query.limit_clause.is_some()
}

/// DataFusion's `information_schema.columns`, its `data_type` the PostgreSQL name.
const COLUMNS_WITH_PG_TYPES: &str = "SELECT table_catalog, table_schema, table_name, column_name, ordinal_position, column_default, is_nullable, \
    sql_type_name(data_type) AS data_type, character_maximum_length, character_octet_length, numeric_precision, numeric_precision_radix, \
    numeric_scale, datetime_precision, interval_type FROM information_schema.columns";

fn parse_query(sql: &str) -> Option<Query> {
    match Parser::new(&PostgreSqlDialect {}).try_with_sql(sql).ok()?.parse_statement().ok()? {
        Statement::Query(q) => Some(*q),
        _ => None,
    }
}

/// `pg_settings` as a table of the endpoint's settings (the columns tools read).
fn settings_query(settings: &[(&str, &str)]) -> Option<Query> {
    let quote = |s: &str| format!("'{}'", s.replace('\'', "''"));
    let rows: Vec<String> = settings.iter().map(|(name, value)| format!("({}, {})", quote(name), quote(value))).collect();
    let sql = format!(
        "SELECT name, setting, CAST(NULL AS VARCHAR) AS unit, 'Preset Options' AS category, CAST(NULL AS VARCHAR) AS short_desc, \
         'internal' AS context, 'string' AS vartype, 'default' AS source, CAST(NULL AS VARCHAR) AS min_val, CAST(NULL AS VARCHAR) AS max_val, \
         setting AS boot_val, setting AS reset_val, false AS pending_restart FROM (VALUES {}) AS s(name, setting)",
        rows.join(", ")
    );
    parse_query(&sql)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewritten(sql: &str) -> String {
        let mut statements = SqlParser::default().parse(sql).unwrap();
        rewrite(&mut statements[0], &[("max_index_keys", "32")]);
        statements[0].to_string()
    }

    #[test]
    fn select_list_subqueries_over_ledger_tables_stay_and_catalog_ones_are_still_emptied() {
        let kept = rewritten("SELECT (SELECT count(*) FROM chargeback_monthly WHERE team = $1) AS n");
        assert!(kept.contains("WHERE team = $1"), "{kept}");
        let correlated = rewritten("SELECT t.team, (SELECT count(*) FROM runs r WHERE r.team = t.team) AS n FROM chargeback_monthly t");
        assert!(correlated.contains("r.team = t.team"), "{correlated}");
        // A catalog statement is the compatibility parser's, with its subquery emptied.
        let catalog = rewritten("SELECT c.relname, (SELECT a.attname FROM pg_attribute a WHERE a.attrelid = c.oid) FROM pg_class c");
        assert!(!catalog.contains("attrelid = c.oid"), "{catalog}");
        // pgjdbc's type cache: the function compared by name, the rest as the compatibility
        // parser makes it.
        let procs = rewritten("SELECT typinput='pg_catalog.array_in'::regproc as is_array, typtype, typname, pg_type.oid FROM pg_catalog.pg_type WHERE pg_type.oid = $1");
        assert!(procs.contains("typinput = 'array_in' AS is_array"), "{procs}");
    }

    #[test]
    fn catalog_spellings_become_lookups() {
        let cast = rewritten("SELECT c.relnamespace::regnamespace::text FROM pg_class c");
        assert!(cast.contains("SELECT min(nspname) FROM pg_catalog.pg_namespace WHERE oid = c.relnamespace"), "{cast}");
        let to_regtype = rewritten("SELECT oid FROM pg_type t WHERE t.oid = to_regtype('hstore')");
        assert!(to_regtype.contains("SELECT min(oid) FROM pg_catalog.pg_type WHERE typname = 'hstore'"), "{to_regtype}");
        let array = rewritten("SELECT ARRAY(SELECT b.rolname FROM pg_auth_members m JOIN pg_roles b ON m.roleid = b.oid WHERE m.member = r.oid) AS memberof FROM pg_roles r");
        assert!(array.contains("array_agg(b.rolname)"), "{array}");
        let toast = rewritten("SELECT pg_catalog.array_to_string(c.reloptions || array(select 'toast.' || x from pg_catalog.unnest(tc.reloptions) x), ', ') FROM pg_catalog.pg_class c LEFT JOIN pg_catalog.pg_class tc ON (c.reltoastrelid = tc.oid)");
        assert!(toast.contains("CAST(NULL AS VARCHAR[]) || CAST(NULL AS VARCHAR[])"), "{toast}");
        let settings = rewritten("SELECT setting FROM pg_catalog.pg_settings WHERE name = 'max_index_keys'");
        assert!(settings.contains("VALUES ('max_index_keys', '32')"), "{settings}");
        let field = rewritten("SELECT (information_schema._pg_expandarray(i.indkey)).n FROM pg_index i");
        assert!(field.contains("get_field(") && field.contains("'n')"), "{field}");
        let keys = rewritten("SELECT pka.attname FROM pg_catalog.pg_constraint con, pg_catalog.pg_attribute pka, (SELECT generate_series(1, 32) AS n) pos WHERE pka.attnum = con.confkey[pos.n]");
        assert!(keys.contains("pka.attnum = CAST(NULL AS SMALLINT)"), "{keys}");
        let grafana = rewritten("SELECT quote_ident(column_name) AS \"column\", data_type AS \"type\" FROM information_schema.columns WHERE table_schema IN (SELECT CASE WHEN trim(s[i]) = '\"$user\"' THEN user ELSE trim(s[i]) END FROM generate_series(array_lower(string_to_array(current_setting('search_path'),','),1), array_upper(string_to_array(current_setting('search_path'),','),1)) as i, string_to_array(current_setting('search_path'),',') s) AND table_name = 'gpu_samples'");
        assert!(grafana.contains("table_schema IN ('public')"), "{grafana}");
        let columns = rewritten("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'gpu_samples'");
        assert!(columns.contains("sql_type_name(data_type) AS data_type") && columns.matches("information_schema.columns").count() == 1, "{columns}");
        let lookup = rewritten("SELECT t.typname FROM pg_type t WHERE t.typrelid = 0 OR (SELECT c.relkind = 'c' FROM pg_class c WHERE c.oid = t.typrelid)");
        assert!(lookup.contains("SELECT min(c.relkind = 'c')"), "{lookup}");
    }

    #[test]
    fn numeric_without_a_precision_keeps_a_literals_digits() {
        let cast = rewritten("SELECT 0.123456789012345678::numeric AS a, '-12.50'::decimal AS b, cost::numeric AS c, CAST($1 AS NUMERIC) AS d, 1.5::numeric(5, 1) AS e FROM costs");
        assert!(cast.contains("CAST('0.123456789012345678' AS NUMERIC(19,18)) AS a"), "{cast}");
        assert!(cast.contains("CAST('-12.50' AS NUMERIC(4,2)) AS b") && cast.contains("numeric(cost) AS c") && cast.contains("CAST($1 AS NUMERIC(38,15)) AS d"), "{cast}");
        assert!(cast.contains("1.5::NUMERIC(5,1) AS e"), "a precision given stays: {cast}");
    }

    /// SQLAlchemy's column, key and index reflection.
    #[test]
    fn lookups_in_tables_this_catalog_never_fills_are_null_and_index_vectors_become_rows() {
        let identity = rewritten("SELECT CASE WHEN (a.attidentity != '') THEN (SELECT json_build_object('always', a.attidentity = 'a', 'start', s.seqstart) FROM pg_catalog.pg_sequence s WHERE s.seqrelid = a.attrelid) ELSE NULL END AS identity_options FROM pg_catalog.pg_attribute a");
        assert!(identity.contains("THEN CAST(NULL AS VARCHAR) ELSE NULL END") && !identity.contains("seqstart"), "{identity}");
        // A lookup in a table this catalog fills stays a lookup.
        let collation = rewritten("SELECT a.attname FROM pg_catalog.pg_attribute a WHERE (SELECT c.collname FROM pg_catalog.pg_collation c WHERE c.oid = a.attcollation) = 'C'");
        assert!(collation.contains("min(c.collname)"), "{collation}");
        let keys = rewritten("SELECT unnest(i.indkey) AS attnum, generate_subscripts(i.indkey, 1) AS ord, unnest(c.conkey) AS k FROM pg_catalog.pg_index i JOIN pg_catalog.pg_constraint c ON c.conindid = i.indexrelid");
        assert!(keys.contains("unnest(CAST(string_to_array(CAST(i.indkey AS VARCHAR), ' ') AS SMALLINT[])) AS attnum"), "{keys}");
        assert!(keys.contains("unnest(range(1, CAST(cardinality(CAST(string_to_array(CAST(i.indkey AS VARCHAR), ' ') AS SMALLINT[])) AS BIGINT) + 1)) AS ord"), "{keys}");
        // conkey is an array in this catalog already.
        assert!(keys.contains("unnest(c.conkey) AS k"), "{keys}");
    }
}
