//! The accounting's SQL files, embedded, and how they are read: statement by statement, each
//! `CREATE [OR REPLACE] VIEW name AS ...`.

use crate::error::{Error, Result};

/// The accounting, one SQL file per step, in the order they run.
pub const QUERY_FILES: &[(&str, &str)] = &[
    ("10_objects.sql", include_str!("../../queries/10_objects.sql")),
    ("20_runs.sql", include_str!("../../queries/20_runs.sql")),
    ("25_capacity.sql", include_str!("../../queries/25_capacity.sql")),
    ("30_observations.sql", include_str!("../../queries/30_observations.sql")),
    ("31_intervals.sql", include_str!("../../queries/31_intervals.sql")),
    ("32_spans.sql", include_str!("../../queries/32_spans.sql")),
    ("40_states.sql", include_str!("../../queries/40_states.sql")),
    ("45_hourly.sql", include_str!("../../queries/45_hourly.sql")),
    ("50_units.sql", include_str!("../../queries/50_units.sql")),
    ("55_who_pays.sql", include_str!("../../queries/55_who_pays.sql")),
    ("58_quota.sql", include_str!("../../queries/58_quota.sql")),
    ("60_chargeback.sql", include_str!("../../queries/60_chargeback.sql")),
    ("62_quota_monthly.sql", include_str!("../../queries/62_quota_monthly.sql")),
    ("65_budgets.sql", include_str!("../../queries/65_budgets.sql")),
    ("67_energy.sql", include_str!("../../queries/67_energy.sql")),
    ("68_why_idle.sql", include_str!("../../queries/68_why_idle.sql")),
    ("69_anomalies.sql", include_str!("../../queries/69_anomalies.sql")),
    ("70_queue.sql", include_str!("../../queries/70_queue.sql")),
    ("80_failures.sql", include_str!("../../queries/80_failures.sql")),
    ("90_reports.sql", include_str!("../../queries/90_reports.sql")),
];

/// The text of the query file `file`.
pub fn query_file(file: &str) -> Result<&'static str> {
    QUERY_FILES.iter().find(|(name, _)| *name == file).map(|(_, sql)| *sql).ok_or_else(|| Error::internal(format!("no query file {file}")))
}

/// The view name of a `CREATE [OR REPLACE] VIEW name AS` statement.
pub fn created_view(statement: &str) -> Option<String> {
    let words: Vec<&str> = statement.split_whitespace().take(6).collect();
    let i = words.iter().position(|w| w.eq_ignore_ascii_case("VIEW"))?;
    words.get(i + 1).map(|w| w.to_string())
}

/// The views a file creates, in order.
pub fn created_views(sql: &str) -> Vec<String> {
    split_statements(sql).iter().filter_map(|s| created_view(s)).collect()
}

/// The one statement of `file` that creates `view`.
pub fn view_statement(file: &str, view: &str) -> Result<String> {
    split_statements(query_file(file)?)
        .into_iter()
        .find(|s| created_view(s).as_deref() == Some(view))
        .ok_or_else(|| Error::internal(format!("{file} creates no view {view}")))
}

/// Splits a SQL file into statements: a statement ends with `;` at the end of a line.
/// Comment lines are dropped, so a `;` in a comment does not end anything.
pub fn split_statements(sql: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in sql.lines() {
        if line.trim_start().starts_with("--") {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if line.trim_end().ends_with(';') {
            let statement = current.trim().trim_end_matches(';').to_string();
            if !statement.is_empty() {
                out.push(statement);
            }
            current.clear();
        }
    }
    if !current.trim().is_empty() {
        out.push(current.trim().to_string());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_split_at_line_end_semicolons() {
        let sql = "-- a comment; not an end\nCREATE VIEW a AS\nSELECT 1;\n\n-- x\nCREATE OR REPLACE VIEW b AS SELECT ';' AS s;\n";
        let s = split_statements(sql);
        assert_eq!(s.len(), 2);
        assert_eq!(s[0], "CREATE VIEW a AS\nSELECT 1");
        assert_eq!(created_view(&s[1]).as_deref(), Some("b"));
        assert_eq!(created_views(sql), vec!["a", "b"]);
    }

    #[test]
    fn every_query_file_is_embedded_in_order() {
        let names: Vec<&str> = QUERY_FILES.iter().map(|(n, _)| *n).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        let on_disk = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../queries"))
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".sql"))
            .count();
        assert_eq!(on_disk, names.len(), "a queries/*.sql file is not run by the ledger");
        assert!(query_file("nothing.sql").is_err());
        assert!(view_statement("30_observations.sql", "pod_samples").unwrap().contains("FROM counted_samples"));
    }
}
