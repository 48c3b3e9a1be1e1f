//! What a client of the SQL endpoint may run: reads of the store's tables and the session chatter
//! clients send (catalog queries, `SET` of client settings, transactions, cursors). Everything
//! else is refused before DataFusion plans it.
//!
//! It is an allow-list on the parsed statement, so a statement kind DataFusion learns later is
//! refused until someone looks at it. The session is also built without any way to reach files
//! by URL (DataFusion's URL tables are off and no file-reading table function is registered).

use std::ops::ControlFlow;

use datafusion::sql::sqlparser::ast::{Expr, ObjectName, Query, Select, Set, SetExpr, Statement, TableFactor, Visit, Visitor};

/// Why a statement was refused, in words for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal(pub String);

/// Client settings a `SET` may change: they only shape how this connection's results are
/// written. Everything DataFusion reads (`datafusion.*`) is the server's to decide.
const CLIENT_SETTINGS: &[&str] = &["statement_timeout", "datestyle", "bytea_output", "intervalstyle", "application_name", "extra_float_digits", "search_path", "client_encoding", "client_min_messages", "standard_conforming_strings", "timezone", "time zone"];

/// Table functions that make rows from their arguments and read nothing.
const SAFE_TABLE_FUNCTIONS: &[&str] = &["generate_series", "range", "unnest", "pg_get_keywords"];

/// Checks one statement; `Ok` means it may run.
pub fn check(statement: &Statement) -> Result<(), Refusal> {
    let refuse = |what: &str| Err(Refusal(format!("gpuledger serves the ledger read-only: {what} is not allowed")));
    match statement {
        Statement::Query(q) => check_query(q),
        Statement::Explain { statement, .. } => check(statement),
        Statement::ExplainTable { .. }
        | Statement::ShowTables { .. }
        | Statement::ShowColumns { .. }
        | Statement::ShowVariable { .. }
        | Statement::ShowVariables { .. }
        | Statement::ShowStatus { .. }
        | Statement::ShowCatalogs { .. }
        | Statement::ShowSchemas { .. }
        | Statement::ShowFunctions { .. }
        | Statement::StartTransaction { .. }
        | Statement::Commit { .. }
        | Statement::Rollback { .. }
        | Statement::Fetch { .. }
        | Statement::Close { .. }
        | Statement::Savepoint { .. }
        | Statement::ReleaseSavepoint { .. } => Ok(()),
        Statement::Declare { stmts } => {
            for d in stmts {
                if let Some(q) = &d.for_query {
                    check_query(q)?;
                }
            }
            Ok(())
        }
        Statement::Set(set) => check_set(set),
        Statement::Copy { .. } => refuse("COPY"),
        Statement::Insert(_) => refuse("INSERT"),
        Statement::Update { .. } => refuse("UPDATE"),
        Statement::Delete(_) => refuse("DELETE"),
        Statement::CreateTable(_) | Statement::CreateView { .. } | Statement::CreateSchema { .. } | Statement::CreateDatabase { .. } | Statement::CreateFunction(_) => refuse("CREATE"),
        Statement::Drop { .. } | Statement::DropFunction { .. } => refuse("DROP"),
        other => {
            let text = other.to_string();
            let word: String = text.split_whitespace().take(2).collect::<Vec<_>>().join(" ");
            refuse(&word.to_uppercase())
        }
    }
}

fn check_query(query: &Query) -> Result<(), Refusal> {
    let mut v = ReadOnlyVisitor;
    match query.visit(&mut v) {
        ControlFlow::Break(r) => Err(r),
        ControlFlow::Continue(()) => Ok(()),
    }
}

fn check_set(set: &Set) -> Result<(), Refusal> {
    let name = match set {
        Set::SingleAssignment { variable, .. } => variable.to_string().to_lowercase(),
        Set::SetTimeZone { .. } => "time zone".to_owned(),
        Set::SetNames { .. } | Set::SetNamesDefault {} => "client_encoding".to_owned(),
        // Transaction modes (READ ONLY, an isolation level) change nothing here: every write is
        // refused whatever a client declares, and every read sees one snapshot per table.
        Set::SetTransaction { .. } => return Ok(()),
        other => return Err(Refusal(format!("gpuledger serves the ledger read-only: `{other}` is not allowed"))),
    };
    if CLIENT_SETTINGS.contains(&name.as_str()) {
        Ok(())
    } else {
        Err(Refusal(format!("setting {name} cannot be changed on this server (clients may set: {})", CLIENT_SETTINGS.join(", "))))
    }
}

/// Walks a query for what would write or read outside the store: nested statements
/// (`WITH x AS (INSERT ...)`), `SELECT ... INTO`, table functions, relations named by path.
struct ReadOnlyVisitor;

impl Visitor for ReadOnlyVisitor {
    type Break = Refusal;

    fn pre_visit_statement(&mut self, statement: &Statement) -> ControlFlow<Refusal> {
        match check(statement) {
            Ok(()) => ControlFlow::Continue(()),
            Err(r) => ControlFlow::Break(r),
        }
    }

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<Refusal> {
        if let SetExpr::Select(select) = query.body.as_ref()
            && has_into(select)
        {
            return ControlFlow::Break(Refusal("gpuledger serves the ledger read-only: SELECT ... INTO is not allowed".into()));
        }
        if !matches!(query.body.as_ref(), SetExpr::Select(_) | SetExpr::Query(_) | SetExpr::SetOperation { .. } | SetExpr::Values(_) | SetExpr::Table(_)) {
            return ControlFlow::Break(Refusal(format!("gpuledger serves the ledger read-only: `{}` is not allowed", query.body)));
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_relation(&mut self, relation: &ObjectName) -> ControlFlow<Refusal> {
        let name = relation.to_string();
        if name.contains(['/', '\\']) || name.contains("://") {
            return ControlFlow::Break(Refusal(format!("{name} names a file or URL: only the store's tables can be read")));
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_table_factor(&mut self, factor: &TableFactor) -> ControlFlow<Refusal> {
        let function = match factor {
            TableFactor::Table { name, args: Some(_), .. } => Some(name.to_string()),
            TableFactor::Function { name, .. } => Some(name.to_string()),
            TableFactor::TableFunction { expr, .. } => Some(match expr {
                Expr::Function(f) => f.name.to_string(),
                other => other.to_string(),
            }),
            _ => None,
        };
        match function {
            Some(f) if !SAFE_TABLE_FUNCTIONS.contains(&f.to_lowercase().as_str()) => ControlFlow::Break(Refusal(format!("table function {f} is not allowed (it could read outside the store)"))),
            _ => ControlFlow::Continue(()),
        }
    }
}

fn has_into(select: &Select) -> bool {
    select.into.is_some()
}

#[cfg(test)]
mod tests {
    use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
    use datafusion::sql::sqlparser::parser::Parser;

    use super::*;

    fn verdict(sql: &str) -> Result<(), Refusal> {
        let statements = Parser::parse_sql(&PostgreSqlDialect {}, sql).unwrap();
        assert_eq!(statements.len(), 1, "{sql}");
        check(&statements[0])
    }

    #[test]
    fn reads_and_session_chatter_pass() {
        for sql in [
            "SELECT team, SUM(total) FROM chargeback_monthly GROUP BY team",
            "WITH x AS (SELECT 1 AS a) SELECT * FROM x UNION ALL SELECT 2",
            "SELECT * FROM generate_series(1, 3)",
            "EXPLAIN SELECT * FROM gpu_samples",
            "SELECT c.relname FROM pg_catalog.pg_class c WHERE pg_catalog.pg_table_is_visible(c.oid)",
            "SET extra_float_digits = 3",
            "SET application_name = 'grafana'",
            "SET statement_timeout = '5s'",
            "SET TIME ZONE 'UTC'",
            "SHOW TIME ZONE",
            "BEGIN",
            "COMMIT",
            "ROLLBACK",
            "SHOW TABLES",
        ] {
            assert_eq!(verdict(sql), Ok(()), "{sql}");
        }
    }

    #[test]
    fn writes_files_and_settings_that_matter_are_refused() {
        for (sql, words) in [
            ("CREATE TABLE t (a INT)", "CREATE"),
            ("CREATE VIEW v AS SELECT 1", "CREATE"),
            ("DROP TABLE gpu_samples", "DROP"),
            ("INSERT INTO gpu_samples SELECT * FROM gpu_samples", "INSERT"),
            ("DELETE FROM gpu_samples", "DELETE"),
            ("UPDATE gpu_samples SET value = 0", "UPDATE"),
            ("COPY gpu_samples TO '/tmp/out.csv'", "COPY"),
            ("COPY (SELECT 1) TO '/tmp/out.parquet'", "COPY"),
            ("SELECT * INTO newtable FROM gpu_samples", "INTO"),
            ("WITH w AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM w", "INSERT"),
            ("SELECT * FROM read_parquet('/etc/passwd')", "read_parquet"),
            ("SELECT * FROM read_csv('http://example.com/x.csv')", "read_csv"),
            ("SELECT * FROM '/etc/passwd'", "only the store's tables"),
            ("SELECT * FROM \"/etc/passwd\"", "only the store's tables"),
            ("SET datafusion.execution.target_partitions = 1", "datafusion.execution.target_partitions"),
            ("SET datafusion.catalog.information_schema = false", "cannot be changed"),
            ("PREPARE p AS SELECT 1", "PREPARE"),
            ("ALTER TABLE gpu_samples RENAME TO x", "ALTER"),
            ("TRUNCATE gpu_samples", "TRUNCATE"),
        ] {
            let r = verdict(sql).expect_err(sql);
            assert!(r.0.contains(words), "{sql}: {}", r.0);
        }
    }
}
