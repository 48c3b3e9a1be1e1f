//! The Grafana dashboards under `dashboards/`: their structure, and every panel's SQL expanded the
//! way Grafana's PostgreSQL data source expands it (template variables in the browser, then the
//! backend's macros), run on a simulated store with its derived tables.
//!
//! All SQL goes through [`run_sql`], the one place that knows how a query reaches the ledger
//! (psql, the real PostgreSQL client, against `gpuledger serve`). The rest only sees its [`Csv`]:
//! a header and rows of strings, as `psql --csv` prints them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use chrono::{DateTime, NaiveDate, NaiveDateTime, TimeDelta, Utc};
use serde_json::Value;

use crate::util::{ingest, run};

// ---------------------------------------------------------------------------------------------
// Grafana's expansion of a panel's raw SQL.
// ---------------------------------------------------------------------------------------------

/// A template variable's selection.
#[derive(Clone, Debug, PartialEq)]
pub enum VarValue {
    /// A variable without multi-value or "All": its value goes in as typed, quotes doubled.
    Single(String),
    /// A multi-value or include-All variable (even with one value selected): each value quoted.
    Multi(Vec<String>),
}

/// What Grafana knows when it sends a panel's query.
#[derive(Clone, Debug)]
pub struct GrafanaContext {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
    /// `$__interval`: the panel's bucket width.
    pub interval: TimeDelta,
    pub vars: BTreeMap<String, VarValue>,
}

/// Expands `sql` as Grafana does for its PostgreSQL data source: first the template variables
/// (the browser: `$var`, `${var}`, `${var:format}`, `[[var]]`, and `$__interval`,
/// `$__interval_ms`, `$__from`, `$__to`), then the backend's global substitutions and its
/// macros (`$__timeFilter(col)` and friends). An unknown variable stays as written (Grafana
/// leaves it); an unknown macro or a bad argument is an error, as it fails the query there.
pub fn expand(sql: &str, ctx: &GrafanaContext) -> Result<String, String> {
    let sql = interpolate_variables(sql, ctx)?;
    // The backend's global pass (sqleng.Interpolate) before the data source's macro engine.
    let sql = sql
        .replace("$__interval_ms", &ctx.interval.num_milliseconds().to_string())
        .replace("$__interval", &format_interval(ctx.interval))
        .replace("$__unixEpochFrom()", &ctx.from.timestamp().to_string())
        .replace("$__unixEpochTo()", &ctx.to.timestamp().to_string());
    expand_macros(&sql, ctx)
}

fn is_word(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Length in bytes of the run of word characters at the start of `s`.
fn word_len(s: &str) -> usize {
    s.find(|c: char| !is_word(c)).unwrap_or(s.len())
}

/// The template pass. Grafana's template service recognises `$name`, `[[name]]`, `[[name:fmt]]`,
/// `${name}` and `${name:fmt}`; the data source formats the values when no format is named.
fn interpolate_variables(sql: &str, ctx: &GrafanaContext) -> Result<String, String> {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(pos) = rest.find(['$', '[']) {
        out.push_str(&rest[..pos]);
        rest = &rest[pos..];
        // (name, format, length of the whole reference)
        let reference: Option<(&str, Option<&str>, usize)> = if rest.starts_with("${") {
            braced(rest, "${", "}")
        } else if rest.starts_with("[[") {
            braced(rest, "[[", "]]").filter(|(_, f, _)| f.is_none_or(|f| f.chars().all(is_word)))
        } else if let Some(body) = rest.strip_prefix('$') {
            let n = word_len(body);
            (n > 0).then(|| (&body[..n], None, n + 1))
        } else {
            None
        };
        match reference.map(|(name, fmt, len)| (resolve_variable(name, fmt, ctx), len)) {
            Some((Some(value), len)) => {
                out.push_str(&value?);
                rest = &rest[len..];
            }
            // Not a reference, or not a variable of this dashboard: Grafana leaves the text.
            _ => {
                let step = rest.chars().next().map_or(1, char::len_utf8);
                out.push_str(&rest[..step]);
                rest = &rest[step..];
            }
        }
    }
    out.push_str(rest);
    Ok(out)
}

/// `name` or `name:format` between `open` and `close` at the start of `text`, with the length
/// of the whole reference; None unless the name is a word.
fn braced<'a>(text: &'a str, open: &str, close: &str) -> Option<(&'a str, Option<&'a str>, usize)> {
    let body = text.strip_prefix(open)?;
    let end = body.find(close)?;
    let inner = &body[..end];
    let (name, format) = match inner.split_once(':') {
        Some((n, f)) => (n, Some(f)),
        None => (inner, None),
    };
    let ok = !name.is_empty() && name.chars().all(is_word) && format.is_none_or(|f| !f.is_empty());
    ok.then_some((name, format, open.len() + end + close.len()))
}

/// The text for variable `name` in `format`; None when the dashboard has no such variable.
fn resolve_variable(name: &str, format: Option<&str>, ctx: &GrafanaContext) -> Option<Result<String, String>> {
    let builtin = match name {
        "__interval" => Some(format_interval(ctx.interval)),
        "__interval_ms" => Some(ctx.interval.num_milliseconds().to_string()),
        "__from" => Some(ctx.from.timestamp_millis().to_string()),
        "__to" => Some(ctx.to.timestamp_millis().to_string()),
        _ => None,
    };
    if let Some(text) = builtin {
        return Some(match format {
            None | Some("raw") => Ok(text),
            Some(f) => Err(format!("format {f:?} of ${{{name}}} is not supported here")),
        });
    }
    let value = ctx.vars.get(name)?;
    let values: Vec<&str> = match value {
        VarValue::Single(v) => vec![v.as_str()],
        VarValue::Multi(vs) => vs.iter().map(String::as_str).collect(),
    };
    if values.is_empty() {
        return Some(Err(format!("${name} has no value selected")));
    }
    let sql_quote = |v: &str| format!("'{}'", v.replace('\'', "''"));
    Some(match format {
        // The PostgreSQL data source's own formatting (interpolateVariable).
        None => Ok(match value {
            VarValue::Single(v) => v.replace('\'', "''"),
            VarValue::Multi(_) => values.iter().map(|v| sql_quote(v)).collect::<Vec<_>>().join(","),
        }),
        Some("raw" | "csv") => Ok(values.join(",")),
        Some("sqlstring") => Ok(values.iter().map(|v| sql_quote(v)).collect::<Vec<_>>().join(",")),
        Some("singlequote") => Ok(values.iter().map(|v| format!("'{}'", v.replace('\'', "\\'"))).collect::<Vec<_>>().join(",")),
        Some("doublequote") => Ok(values.iter().map(|v| format!("\"{}\"", v.replace('"', "\\\""))).collect::<Vec<_>>().join(",")),
        Some("pipe") => Ok(values.join("|")),
        Some(f) => Err(format!("unknown variable format {f:?} in ${{{name}:{f}}}")),
    })
}

/// The macro engine: `$name(args)`, where args hold no `)` (so a macro's column is a name, not
/// an expression) and are split at commas and trimmed of spaces.
fn expand_macros(sql: &str, ctx: &GrafanaContext) -> Result<String, String> {
    let mut out = String::with_capacity(sql.len());
    let mut rest = sql;
    while let Some(pos) = rest.find('$') {
        out.push_str(&rest[..pos]);
        rest = &rest[pos..];
        let name_len = word_len(&rest[1..]);
        let after_name = &rest[1 + name_len..];
        let close = after_name.strip_prefix('(').and_then(|a| a.find(')'));
        let (Some(close), true) = (close, name_len > 0) else {
            out.push('$');
            rest = &rest[1..];
            continue;
        };
        let mut name = &rest[1..1 + name_len];
        let args: Vec<&str> = after_name[1..1 + close].split(',').map(|a| a.trim_matches(' ')).collect();
        let consumed = 1 + name_len + close + 2;
        // Before Grafana 5.3 `$__timeGroup` carried its own alias; a comma right after the call
        // still means that old use.
        if name == "__timeGroup" && rest[consumed..].starts_with(',') {
            name = "__timeGroupAlias";
        }
        out.push_str(&evaluate_macro(name, &args, ctx)?);
        rest = &rest[consumed..];
    }
    out.push_str(rest);
    Ok(out)
}

fn evaluate_macro(name: &str, args: &[&str], ctx: &GrafanaContext) -> Result<String, String> {
    let column = || match args.first() {
        Some(c) if !c.is_empty() => Ok(*c),
        _ => Err(format!("missing time column argument for macro ${name}")),
    };
    let group_seconds = || -> Result<String, String> {
        if args.len() < 2 || args.len() > 3 {
            return Err(format!("macro ${name} needs a time column, an interval and an optional fill value"));
        }
        if let Some(fill) = args.get(2) {
            let ok = fill.eq_ignore_ascii_case("null") || fill.eq_ignore_ascii_case("previous") || fill.parse::<f64>().is_ok();
            if !ok {
                return Err(format!("macro ${name}: fill value {fill:?} is not NULL, previous or a number"));
            }
        }
        let interval = parse_interval(args[1].trim_matches('\''))?;
        Ok(go_float(interval.num_nanoseconds().unwrap_or(i64::MAX) as f64 / 1e9))
    };
    let (from, to) = (rfc3339_nano(ctx.from), rfc3339_nano(ctx.to));
    Ok(match name {
        "__time" => format!("{} AS \"time\"", column()?),
        "__timeEpoch" => format!("extract(epoch from {}) as \"time\"", column()?),
        "__timeFilter" => format!("{} BETWEEN '{from}' AND '{to}'", column()?),
        "__timeFrom" => format!("'{from}'"),
        "__timeTo" => format!("'{to}'"),
        "__timeGroup" | "__timeGroupAlias" => {
            let n = group_seconds()?;
            let group = format!("floor(extract(epoch from {})/{n})*{n}", column()?);
            if name == "__timeGroupAlias" { format!("{group} AS \"time\"") } else { group }
        }
        "__unixEpochFilter" => {
            let c = column()?;
            format!("{c} >= {} AND {c} <= {}", ctx.from.timestamp(), ctx.to.timestamp())
        }
        "__unixEpochNanoFilter" => {
            let c = column()?;
            format!("{c} >= {} AND {c} <= {}", unix_nanos(ctx.from), unix_nanos(ctx.to))
        }
        "__unixEpochNanoFrom" => unix_nanos(ctx.from).to_string(),
        "__unixEpochNanoTo" => unix_nanos(ctx.to).to_string(),
        "__unixEpochGroup" | "__unixEpochGroupAlias" => {
            let n = group_seconds()?;
            let group = format!("floor(({})/{n})*{n}", column()?);
            if name == "__unixEpochGroupAlias" { format!("{group} AS \"time\"") } else { group }
        }
        other => return Err(format!("unknown macro \"{other}\"")),
    })
}

fn unix_nanos(t: DateTime<Utc>) -> i128 {
    i128::from(t.timestamp()) * 1_000_000_000 + i128::from(t.timestamp_subsec_nanos())
}

/// Go's `time.RFC3339Nano` in UTC: the fraction only when non-zero, trailing zeros dropped.
fn rfc3339_nano(t: DateTime<Utc>) -> String {
    let nanos = t.timestamp_subsec_nanos();
    let fraction = if nanos == 0 { String::new() } else { format!(".{:09}", nanos).trim_end_matches('0').to_string() };
    format!("{}{fraction}Z", t.format("%Y-%m-%dT%H:%M:%S"))
}

/// Go's `%v` of a float64: shortest digits, exponent form from 1e+06 up and below 1e-04.
fn go_float(v: f64) -> String {
    let sci = format!("{v:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if v == 0.0 || (-4..6).contains(&exp) {
        return format!("{v}");
    }
    format!("{mantissa}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
}

/// An interval as Grafana's backend reads it (gtime.ParseInterval): `<n>d` and `<n>w`, else a
/// Go duration (`1h`, `90s`, `1h30m`, `1.5h`, `500ms`). Months and years depend on the calendar
/// (Grafana counts them back from now), so they are refused here.
fn parse_interval(text: &str) -> Result<TimeDelta, String> {
    let bad = || format!("error parsing interval {text}");
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    if digits > 0 && text.len() == digits + 1 {
        let n: i64 = text[..digits].parse().map_err(|_| bad())?;
        match &text[digits..] {
            "d" => return Ok(TimeDelta::days(n)),
            "w" => return Ok(TimeDelta::weeks(n)),
            "M" | "y" => return Err(format!("interval {text}: months and years are not fixed lengths")),
            _ => {}
        }
    }
    // A Go duration: (number unit)+, number = digits[.digits].
    let mut nanos: f64 = 0.0;
    let mut rest = text;
    if rest.is_empty() {
        return Err(bad());
    }
    if rest == "0" {
        return Err(format!("interval {text} is zero"));
    }
    while !rest.is_empty() {
        let num_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number: f64 = rest[..num_len].parse().map_err(|_| bad())?;
        rest = &rest[num_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "ns" => 1.0,
            "us" | "µs" | "μs" => 1e3,
            "ms" => 1e6,
            "s" => 1e9,
            "m" => 60e9,
            "h" => 3600e9,
            _ => return Err(bad()),
        };
        nanos += number * scale;
        rest = &rest[unit_len..];
    }
    if nanos <= 0.0 {
        return Err(format!("interval {text} is zero"));
    }
    Ok(TimeDelta::nanoseconds(nanos.round() as i64))
}

/// `$__interval`'s text (gtime.FormatInterval): the largest whole unit, truncated.
fn format_interval(d: TimeDelta) -> String {
    let ms = d.num_milliseconds();
    let units: [(i64, &str); 6] = [(365 * 86_400_000, "y"), (86_400_000, "d"), (3_600_000, "h"), (60_000, "m"), (1000, "s"), (1, "ms")];
    units.iter().find(|(size, _)| ms >= *size).map_or_else(|| "1ms".to_string(), |(size, unit)| format!("{}{unit}", ms / size))
}

#[cfg(test)]
mod expand_tests {
    use super::*;

    /// 2026-10-30T00:00:00Z to 2026-10-31T06:30:00.25Z, 5m buckets.
    fn ctx(vars: &[(&str, VarValue)]) -> GrafanaContext {
        GrafanaContext {
            from: DateTime::parse_from_rfc3339("2026-10-30T00:00:00Z").unwrap().with_timezone(&Utc),
            to: DateTime::parse_from_rfc3339("2026-10-31T06:30:00.25Z").unwrap().with_timezone(&Utc),
            interval: TimeDelta::minutes(5),
            vars: vars.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        }
    }

    fn x(sql: &str, c: &GrafanaContext) -> String {
        expand(sql, c).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    #[test]
    fn time_macros_follow_the_postgres_data_source() {
        let c = ctx(&[]);
        // Worked out by hand: 2026-10-30T00:00:00Z is 1793318400 s; the end is 109800.25 s later.
        assert_eq!(x("WHERE $__timeFilter(ts)", &c), "WHERE ts BETWEEN '2026-10-30T00:00:00Z' AND '2026-10-31T06:30:00.25Z'");
        assert_eq!(x("$__timeFrom() < $__timeTo()", &c), "'2026-10-30T00:00:00Z' < '2026-10-31T06:30:00.25Z'");
        assert_eq!(x("SELECT $__time(ts), v", &c), "SELECT ts AS \"time\", v");
        assert_eq!(x("SELECT $__timeEpoch(ts)", &c), "SELECT extract(epoch from ts) as \"time\"");
        assert_eq!(x("$__unixEpochFilter(t_s)", &c), "t_s >= 1793318400 AND t_s <= 1793428200");
        assert_eq!(x("$__unixEpochFrom() $__unixEpochTo()", &c), "1793318400 1793428200");
        assert_eq!(x("$__unixEpochNanoFilter(t)", &c), "t >= 1793318400000000000 AND t <= 1793428200250000000");
        assert_eq!(x("$__unixEpochNanoFrom()-$__unixEpochNanoTo()", &c), "1793318400000000000-1793428200250000000");
    }

    #[test]
    fn time_groups_turn_intervals_into_seconds() {
        let c = ctx(&[]);
        assert_eq!(x("SELECT $__timeGroupAlias(ts, '1h')", &c), "SELECT floor(extract(epoch from ts)/3600)*3600 AS \"time\"");
        assert_eq!(x("GROUP BY $__timeGroup(ts, 1h)", &c), "GROUP BY floor(extract(epoch from ts)/3600)*3600");
        assert_eq!(x("$__timeGroup(ts,'1d', 0) AS t", &c), "floor(extract(epoch from ts)/86400)*86400 AS t");
        assert_eq!(x("$__timeGroup(ts, 1w, previous) x", &c), "floor(extract(epoch from ts)/604800)*604800 x");
        assert_eq!(x("$__timeGroup(ts, 500ms, NULL) x", &c), "floor(extract(epoch from ts)/0.5)*0.5 x");
        assert_eq!(x("$__timeGroup(ts, 1h30m) x", &c), "floor(extract(epoch from ts)/5400)*5400 x");
        // Go prints a float64 of a million or more in exponent form, and so does Grafana.
        assert_eq!(x("$__timeGroup(ts, 12d) x", &c), "floor(extract(epoch from ts)/1.0368e+06)*1.0368e+06 x");
        // The pre-5.3 use: a comma right after `$__timeGroup` means it carries the alias.
        assert_eq!(x("SELECT $__timeGroup(ts, '5m'), avg(v)", &c), "SELECT floor(extract(epoch from ts)/300)*300 AS \"time\", avg(v)");
        assert_eq!(x("$__unixEpochGroupAlias(t_s, 5m)", &c), "floor((t_s)/300)*300 AS \"time\"");
        assert_eq!(x("$__unixEpochGroup(t_s, '2h')", &c), "floor((t_s)/7200)*7200");
        // $__interval is the panel's interval in Grafana's units, and in milliseconds.
        assert_eq!(x("$__timeGroupAlias(ts, $__interval) -- $__interval / $__interval_ms", &c), "floor(extract(epoch from ts)/300)*300 AS \"time\" -- 5m / 300000");
    }

    #[test]
    fn bad_macros_fail_as_they_fail_in_grafana() {
        let c = ctx(&[]);
        assert!(expand("$__timeGroup(ts)", &c).is_err(), "interval missing");
        assert!(expand("$__timeGroup(ts, soon)", &c).is_err(), "bad interval");
        assert!(expand("$__timeGroup(ts, 1h, sometimes)", &c).is_err(), "bad fill");
        assert!(expand("$__timeFilter()", &c).is_err(), "column missing");
        assert!(expand("$__timeFrame(ts)", &c).unwrap_err().contains("__timeFrame"), "unknown macro");
        assert!(expand("$__timeGroup(ts, 1M)", &c).is_err(), "calendar months");
    }

    #[test]
    fn variables_are_formatted_like_the_postgres_data_source() {
        let c = ctx(&[
            ("month", VarValue::Single("2026-10".into())),
            ("team", VarValue::Multi(vec!["nlp".into(), "o'brien".into(), "vision".into()])),
            ("one", VarValue::Multi(vec!["ml".into()])),
            ("owner", VarValue::Single("o'brien".into())),
        ]);
        assert_eq!(
            x("WHERE month = '$month' AND team IN ($team)", &c),
            "WHERE month = '2026-10' AND team IN ('nlp','o''brien','vision')"
        );
        assert_eq!(x("team IN (${one}) AND m = '[[month]]'", &c), "team IN ('ml') AND m = '2026-10'");
        assert_eq!(x("owner = '$owner'", &c), "owner = 'o''brien'");
        assert_eq!(x("${team:raw}|${team:csv}", &c), "nlp,o'brien,vision|nlp,o'brien,vision");
        assert_eq!(x("${month:sqlstring} ${team:sqlstring}", &c), "'2026-10' 'nlp','o''brien','vision'");
        assert_eq!(x("${team:singlequote}", &c), "'nlp','o\\'brien','vision'");
        assert_eq!(x("${team:pipe} [[team:csv]]", &c), "nlp|o'brien|vision nlp,o'brien,vision");
        // A name continues as long as word characters do; unknown names stay as written.
        assert_eq!(x("$months $month_x ${nope} $1 $", &c), "$months $month_x ${nope} $1 $");
        assert!(expand("${team:percentencode}", &c).is_err(), "unsupported format");
        // Variables first, macros second: a variable may hold a macro's argument.
        let c2 = ctx(&[("bucket", VarValue::Single("1h".into()))]);
        assert_eq!(x("$__timeGroupAlias(ts, '$bucket')", &c2), "floor(extract(epoch from ts)/3600)*3600 AS \"time\"");
        assert_eq!(x("$__from..$__to", &c), "1793318400000..1793428200250");
    }

    #[test]
    fn intervals_parse_and_print_like_grafana() {
        for (text, secs) in [("1h", 3600.0), ("5m", 300.0), ("30s", 30.0), ("1d", 86400.0), ("2w", 1_209_600.0), ("1.5h", 5400.0), ("100ms", 0.1)] {
            let d = parse_interval(text).unwrap();
            assert_eq!(d.num_milliseconds() as f64 / 1000.0, secs, "{text}");
        }
        assert!(parse_interval("").is_err() && parse_interval("h").is_err() && parse_interval("0").is_err() && parse_interval("1x").is_err());
        assert_eq!(format_interval(TimeDelta::seconds(90)), "1m");
        assert_eq!(format_interval(TimeDelta::hours(36)), "1d");
        assert_eq!(format_interval(TimeDelta::milliseconds(1500)), "1s");
        assert_eq!(format_interval(TimeDelta::milliseconds(20)), "20ms");
        assert_eq!(go_float(3600.0), "3600");
        assert_eq!(go_float(604_800.0), "604800");
        assert_eq!(go_float(2_592_000.0), "2.592e+06");
        assert_eq!(go_float(0.00005), "5e-05");
    }
}

// ---------------------------------------------------------------------------------------------
// Running SQL: the one choke point.
// ---------------------------------------------------------------------------------------------

/// A simulated store with its derived tables. (Running SQL through `gpuledger serve` adds the
/// server here: its address and the login psql uses.)
pub struct Env {
    /// `gpuledger serve` over the store: panel SQL goes through its PostgreSQL endpoint, as
    /// Grafana's data source sends it. Dropped (killed) before the directory below.
    server: super::serving::Server,
    _dir: tempfile::TempDir,
}

/// A result as text: the header and the rows, every value a string (null is empty).
#[derive(Debug, Clone)]
pub struct Csv {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

impl Csv {
    fn column(&self, name: &str) -> Option<usize> {
        self.header.iter().position(|h| h == name)
    }

    fn values(&self, i: usize) -> impl Iterator<Item = &str> {
        self.rows.iter().map(move |r| r.get(i).map_or("", String::as_str))
    }
}

/// Runs one SQL statement through psql against `gpuledger serve` (the wire endpoint Grafana's
/// PostgreSQL data source talks to) and returns its result as CSV text. The only function that
/// knows how SQL reaches the ledger (null is an empty field).
fn run_sql(env: &Env, sql: &str) -> Result<Csv, String> {
    let (code, out, err) = env.server.psql_as(super::serving::PASSWORD, &["--csv", "-c", sql]);
    if code != 0 {
        return Err(err.trim().to_string());
    }
    parse_csv(&out)
}

/// psql's CSV as a [`Csv`]: the header, then rows as wide as it.
fn parse_csv(text: &str) -> Result<Csv, String> {
    let records = super::serving::csv_records(text)?;
    let mut records = records.into_iter();
    let header = records.next().unwrap_or_default();
    let rows: Vec<Vec<String>> = records.collect();
    if let Some(bad) = rows.iter().find(|r| r.len() != header.len()) {
        return Err(format!("CSV row {bad:?} does not match the header {header:?}"));
    }
    Ok(Csv { header, rows })
}

/// The ledger's configuration for the simulated store: both months priced, overheads and budgets.
const CONFIG: &str = r#"
[prices]
default = 1.75
[prices.by_model]
"NVIDIA H100 80GB HBM3" = 2.49
[prices.by_node_label."gpuledger.io/pool"]
a100-mig = 1.60
l4 = 0.80

[[overheads]]
month = "2026-10"
network = 100.0
storage = 50.0
support = 40.0
operations = 80.0

[[overheads]]
month = "2026-11"
network = 120.0
operations = 60.0

[[budgets]]
team = "nlp"
amount = 400.0

[[budgets]]
team = "vision"
month = "2026-10"
amount = 50.0
"#;

/// 8 GPUs for ten days across the October/November boundary, ingested and through the ledger.
/// The fleet dashboard reads the ledger's hourly rollups, never the raw samples (a month of
/// samples per panel is what made it slow), and the rollups agree with the samples, computed
/// here straight from `gpu_samples`: per host without an HA pair of scrapers, its readings (a
/// GPU's rows at one instant are one), its hottest reading and its mean power per reading.
fn fleet_reads_rollups_that_agree_with_the_samples(env: &Env, dashboards: &[(String, Value)]) {
    let (_, fleet) = dashboards.iter().find(|(f, _)| f == "gpuledger-fleet.json").expect("the fleet dashboard");
    let mut queries: Vec<String> = panels(fleet).into_iter().flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default()).map(|t| t["rawSql"].to_string()).collect();
    queries.extend(fleet["templating"]["list"].as_array().into_iter().flatten().map(|v| v["query"].to_string()));
    let text = queries.join("\n");
    assert!(!text.contains("gpu_samples"), "the fleet dashboard reads gpu_samples: {text}");
    assert!(text.contains("FROM gpu_hourly") && text.contains("FROM node_hourly"), "the fleet dashboard reads the rollups");
    let by_host = |sql: &str| -> BTreeMap<String, Vec<f64>> {
        let csv = run_sql(env, sql).unwrap_or_else(|e| panic!("{e}\n{sql}"));
        csv.rows.iter().map(|r| (r[0].clone(), r[1..].iter().map(|v| parse_number(v).unwrap_or(f64::NAN)).collect())).collect()
    };
    let raw = by_host(
        "SELECT hostname, count(*) AS n, max(temp_c) AS t, avg(power_w) AS p \
         FROM (SELECT hostname, uuid, ts, max(temp_c) AS temp_c, max(power_w) AS power_w FROM gpu_samples GROUP BY hostname, uuid, ts) \
         WHERE hostname NOT IN (SELECT DISTINCT hostname FROM gpu_samples WHERE strpos(labels, 'replica') > 0) GROUP BY hostname",
    );
    let rolled = by_host("SELECT hostname, sum(samples) AS n, max(max_temp_c) AS t, sum(power_w * samples) / sum(samples) AS p FROM gpu_hourly GROUP BY hostname");
    let nodes = by_host("SELECT hostname, sum(samples) AS n, max(max_temp_c) AS t FROM node_hourly GROUP BY hostname");
    assert!(raw.len() >= 3, "{raw:?}");
    for (host, want) in &raw {
        let got = rolled.get(host).unwrap_or_else(|| panic!("{host} has no gpu_hourly rows: {rolled:?}"));
        assert_eq!((got[0], got[1]), (want[0], want[1]), "{host}: samples and hottest reading");
        assert!((got[2] - want[2]).abs() <= 1e-9 * want[2].abs().max(1.0), "{host}: mean power {} vs {}", got[2], want[2]);
        assert_eq!(nodes.get(host).map(|n| (n[0], n[1])), Some((want[0], want[1])), "{host}: node_hourly");
    }
}

fn simulated_env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let capture = dir.path().join("capture");
    let store = dir.path().join("store");
    let capture_arg = capture.display().to_string();
    // Ten days, so that spend anomalies are scored and the simulator's runaway notebook is
    // flagged (the anomaly panels have data); at a 5-minute scrape, as many samples as two days
    // at one minute.
    run(&["simulate", "--out", &capture_arg, "--gpus", "8", "--days", "10", "--seed", "11", "--scrape-interval", "300s", "--start", "2026-10-31T00:00:00Z"], 0);
    ingest(&[&capture], &store);
    let config = dir.path().join("gpuledger.toml");
    std::fs::write(&config, CONFIG).unwrap();
    run(&["ledger", "--store", &store.display().to_string(), "--config", &config.display().to_string(), "--progress", "off"], 0);
    let server = super::serving::Server::start(&store, &super::serving::serve_config(dir.path(), &config, ""));
    Env { server, _dir: dir }
}

// ---------------------------------------------------------------------------------------------
// The dashboards.
// ---------------------------------------------------------------------------------------------

const DS_TYPE: &str = "grafana-postgresql-datasource";
const DS_INPUT: &str = "${DS_GPULEDGER}";
/// Panel kinds whose values must be numbers (they reduce or plot fields).
const NUMERIC_PANELS: [&str; 6] = ["stat", "gauge", "bargauge", "barchart", "piechart", "heatmap"];

fn dashboards_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("dashboards")
}

fn load_dashboards() -> Vec<(String, Value)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dashboards_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap_or_else(|e| panic!("{name} is not JSON: {e}"));
            (name, v)
        })
        .collect()
}

/// Every panel, rows' collapsed children included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    for p in dashboard["panels"].as_array().map(Vec::as_slice).unwrap_or_default() {
        out.push(p);
        for child in p["panels"].as_array().map(Vec::as_slice).unwrap_or_default() {
            out.push(child);
        }
    }
    out
}

fn is_input_datasource(v: &Value) -> bool {
    v["type"] == DS_TYPE && v["uid"] == DS_INPUT
}

/// Names a SQL text refers to as template variables (`$x`, `${x...}`, `[[x...]]`), without
/// Grafana's own `$__...`.
fn referenced_variables(sql: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = sql;
    while let Some(pos) = rest.find(['$', '[']) {
        rest = &rest[pos..];
        let body = rest.strip_prefix("${").or_else(|| rest.strip_prefix("[[")).or_else(|| rest.strip_prefix('$'));
        let step = match body {
            Some(b) => {
                let n = word_len(b);
                if n > 0 && !b.starts_with("__") && !b[..n].chars().all(|c| c.is_ascii_digit()) {
                    names.insert(b[..n].to_string());
                }
                rest.len() - b.len() + n
            }
            None => 1,
        };
        rest = &rest[step.max(1)..];
    }
    names
}

/// Checks the dashboard's shape; returns its variables' definitions in order.
fn check_structure(file: &str, d: &Value) -> Vec<Value> {
    let schema = d["schemaVersion"].as_i64().unwrap_or(0);
    assert!(schema >= 39, "{file}: schemaVersion {schema} < 39");
    assert!(d["uid"].as_str().is_some_and(|u| !u.is_empty() && u.len() <= 40), "{file}: a stable uid");
    assert!(d["title"].as_str().is_some_and(|t| !t.is_empty()), "{file}: a title");
    let inputs = d["__inputs"].as_array().unwrap_or_else(|| panic!("{file}: __inputs is missing"));
    assert!(
        inputs.iter().any(|i| i["name"] == "DS_GPULEDGER" && i["type"] == "datasource" && i["pluginId"] == DS_TYPE),
        "{file}: __inputs declares DS_GPULEDGER as a {DS_TYPE} datasource: {inputs:?}"
    );
    let requires = d["__requires"].as_array().unwrap_or_else(|| panic!("{file}: __requires is missing"));
    let required = |kind: &str, id: &str| requires.iter().any(|r| r["type"] == kind && r["id"] == id);
    assert!(required("grafana", "grafana"), "{file}: __requires lists grafana");
    assert!(required("datasource", DS_TYPE), "{file}: __requires lists the datasource");

    let mut ids = BTreeSet::new();
    for p in panels(d) {
        let id = p["id"].as_i64().unwrap_or_else(|| panic!("{file}: a panel without an id: {}", p["title"]));
        assert!(ids.insert(id), "{file}: panel id {id} is used twice");
        let kind = p["type"].as_str().unwrap_or_else(|| panic!("{file}: panel {id} has no type"));
        assert!(p["gridPos"].is_object(), "{file}: panel {id} has no gridPos");
        if kind == "row" {
            continue;
        }
        assert!(required("panel", kind), "{file}: __requires does not list panel type {kind}");
        assert!(is_input_datasource(&p["datasource"]), "{file}: panel {id} datasource is {}", p["datasource"]);
        let targets = p["targets"].as_array().unwrap_or_else(|| panic!("{file}: panel {id} has no targets"));
        assert!(!targets.is_empty(), "{file}: panel {id} has no targets");
        let mut refs = BTreeSet::new();
        for t in targets {
            let r = t["refId"].as_str().unwrap_or_else(|| panic!("{file}: panel {id}: a target without refId"));
            assert!(refs.insert(r.to_string()), "{file}: panel {id}: refId {r} twice");
            assert!(is_input_datasource(&t["datasource"]), "{file}: panel {id} target {r} datasource is {}", t["datasource"]);
            assert_eq!(t["rawQuery"], true, "{file}: panel {id} target {r}: rawQuery");
            assert_eq!(t["editorMode"], "code", "{file}: panel {id} target {r}: editorMode");
            let format = t["format"].as_str().unwrap_or_default();
            assert!(format == "time_series" || format == "table", "{file}: panel {id} target {r}: format {format:?}");
            assert!(t["rawSql"].as_str().is_some_and(|s| !s.trim().is_empty()), "{file}: panel {id} target {r}: rawSql");
        }
    }
    assert!(ids.len() > 1, "{file}: no panels");

    let vars: Vec<Value> = d["templating"]["list"].as_array().cloned().unwrap_or_default();
    let mut names = BTreeSet::new();
    for v in &vars {
        let name = v["name"].as_str().unwrap_or_else(|| panic!("{file}: a variable without a name"));
        assert!(names.insert(name.to_string()), "{file}: variable {name} twice");
        if v["type"] == "query" {
            assert!(is_input_datasource(&v["datasource"]), "{file}: variable {name} datasource is {}", v["datasource"]);
        }
    }
    // Every variable a query uses is defined (Grafana would leave `$x` in the SQL).
    let mut sqls: Vec<String> = vars.iter().filter_map(variable_sql).collect();
    sqls.extend(panels(d).iter().flat_map(|p| p["targets"].as_array().cloned().unwrap_or_default()).filter_map(|t| t["rawSql"].as_str().map(String::from)));
    for sql in &sqls {
        for name in referenced_variables(sql) {
            assert!(names.contains(&name), "{file}: ${name} is used but not defined, in:\n{sql}");
        }
    }
    vars
}

fn variable_sql(v: &Value) -> Option<String> {
    match &v["query"] {
        Value::String(s) if v["type"] == "query" => Some(s.clone()),
        Value::Object(o) if v["type"] == "query" => o.get("rawSql").and_then(Value::as_str).map(String::from),
        _ => None,
    }
}

fn parse_number(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok()
}

/// A time value as CSV shows it: epoch seconds, or a timestamp (RFC 3339, or psql's form).
fn parse_time(s: &str) -> Option<f64> {
    if let Some(n) = parse_number(s) {
        return Some(n);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.timestamp_millis() as f64 / 1000.0);
    }
    for f in ["%Y-%m-%d %H:%M:%S%.f%#z", "%Y-%m-%dT%H:%M:%S%.f%#z"] {
        if let Ok(t) = DateTime::parse_from_str(s, f) {
            return Some(t.timestamp_millis() as f64 / 1000.0);
        }
    }
    for f in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(s, f) {
            return Some(t.and_utc().timestamp_millis() as f64 / 1000.0);
        }
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d").ok().map(|d| d.and_hms_opt(0, 0, 0).map_or(0.0, |t| t.and_utc().timestamp() as f64))
}

/// Columns whose every non-empty value is a number (and that hold at least one).
fn numeric_columns(csv: &Csv) -> BTreeSet<String> {
    (0..csv.header.len())
        .filter(|&i| {
            let mut seen = false;
            csv.values(i).all(|v| {
                seen |= !v.is_empty();
                v.is_empty() || parse_number(v).is_some()
            }) && seen
        })
        .map(|i| csv.header[i].clone())
        .collect()
}

/// The smallest of Grafana-like round intervals at or above `span / 200`, at least `min`.
fn panel_interval(from: DateTime<Utc>, to: DateTime<Utc>, min: Option<&str>) -> TimeDelta {
    let wanted = (to - from) / 200;
    let nice = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400]
        .map(TimeDelta::seconds)
        .into_iter()
        .find(|d| *d >= wanted)
        .unwrap_or(TimeDelta::days(1));
    let min = min.filter(|m| !m.is_empty()).map(|m| parse_interval(m.trim_start_matches('>')).unwrap_or_else(|e| panic!("panel interval {m}: {e}")));
    min.map_or(nice, |m| m.max(nice))
}

/// Runs one variable's query and returns the values Grafana would offer (first column).
fn variable_options(env: &Env, file: &str, v: &Value, ctx: &GrafanaContext) -> Vec<String> {
    let name = v["name"].as_str().unwrap_or_default();
    match v["type"].as_str() {
        Some("query") => {
            let raw = variable_sql(v).unwrap_or_else(|| panic!("{file}: variable {name} has no SQL"));
            let sql = expand(&raw, ctx).unwrap_or_else(|e| panic!("{file}: variable {name}: {e}"));
            let csv = run_sql(env, &sql).unwrap_or_else(|e| panic!("{file}: variable {name} fails: {e}\n{sql}"));
            let i = csv.column("__value").unwrap_or(0);
            let mut seen = BTreeSet::new();
            csv.values(i).filter(|x| !x.is_empty() && seen.insert(x.to_string())).map(String::from).collect()
        }
        Some("custom") => v["query"].as_str().unwrap_or_default().split(',').map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(),
        other => panic!("{file}: variable {name} of type {other:?} is not covered by this test"),
    }
}

/// What one panel target's result must satisfy, given its panel. Returns a failure message.
fn check_result(panel: &Value, target: &Value, csv: &Csv, ctx: &GrafanaContext, all_selected: bool) -> Result<(), String> {
    let kind = panel["type"].as_str().unwrap_or_default();
    let raw = target["rawSql"].as_str().unwrap_or_default();
    // An aggregate over nothing is one row of nulls: Grafana shows no data either way.
    if all_selected && csv.rows.iter().all(|r| r.iter().all(String::is_empty)) {
        return Err("no data on the simulated store (no rows, or only nulls)".into());
    }
    // Values of a column named like a variable the query filters on are among its selection.
    for (name, value) in &ctx.vars {
        let Some(i) = csv.column(name) else { continue };
        if !referenced_variables(raw).contains(name) {
            continue;
        }
        let allowed: BTreeSet<&str> = match value {
            VarValue::Single(v) => BTreeSet::from([v.as_str()]),
            VarValue::Multi(vs) => vs.iter().map(String::as_str).collect(),
        };
        if let Some(bad) = csv.values(i).find(|x| !allowed.contains(x)) {
            return Err(format!("column {name} holds {bad:?}, outside ${name} = {value:?}"));
        }
    }
    let numeric = numeric_columns(csv);
    let format = target["format"].as_str().unwrap_or_default();
    if format == "time_series" {
        let t = csv.column("time").ok_or_else(|| format!("time series without a `time` column: {:?}", csv.header))?;
        let values: Vec<&String> = numeric.iter().filter(|c| *c != "time").collect();
        if values.is_empty() && !csv.rows.is_empty() {
            return Err(format!("time series without a numeric value column: {:?}", csv.header));
        }
        let times: Vec<f64> = csv.values(t).map(|s| parse_time(s).ok_or_else(|| format!("time value {s:?} is not a time"))).collect::<Result<_, _>>()?;
        if times.windows(2).any(|w| w[1] < w[0]) {
            return Err("time series rows are not sorted by time".into());
        }
        if raw.contains("$__timeFilter(") {
            // Buckets start at most a day before the range.
            let (lo, hi) = (ctx.from.timestamp() as f64 - 86_400.0, ctx.to.timestamp() as f64 + 1.0);
            if let Some(bad) = times.iter().find(|x| **x < lo || **x > hi) {
                return Err(format!("time {bad} outside the dashboard range {} .. {}", ctx.from, ctx.to));
            }
        }
        // Long format: Grafana turns the string columns into series; (time, strings) must be unique.
        let labels: Vec<usize> = (0..csv.header.len()).filter(|&i| i != t && !numeric.contains(&csv.header[i])).collect();
        if !labels.is_empty() {
            let mut keys = BTreeSet::new();
            for row in &csv.rows {
                let key: Vec<&str> = std::iter::once(t).chain(labels.iter().copied()).map(|i| row[i].as_str()).collect();
                if !keys.insert(key.clone()) {
                    return Err(format!("two rows for the same series and time: {key:?}"));
                }
            }
        }
    } else {
        let fields = referenced_fields(panel);
        if let Some(missing) = fields.iter().find(|f| !csv.header.contains(f)) {
            return Err(format!("the panel refers to field {missing:?}, the result has {:?}", csv.header));
        }
        if let Some(x) = panel["options"]["xField"].as_str()
            && numeric.contains(x)
        {
            return Err(format!("x field {x} is numeric"));
        }
    }
    if NUMERIC_PANELS.contains(&kind) && numeric.iter().all(|c| c == "time") && !csv.rows.is_empty() {
        return Err(format!("a {kind} panel needs a numeric column: {:?}", csv.header));
    }
    Ok(())
}

/// Field names a table-like panel refers to: overrides by name, the bar chart's x field, the
/// table's initial sort, and the fields its transformations name.
fn referenced_fields(panel: &Value) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for o in panel["fieldConfig"]["overrides"].as_array().map(Vec::as_slice).unwrap_or_default() {
        if o["matcher"]["id"] == "byName"
            && let Some(n) = o["matcher"]["options"].as_str()
        {
            names.insert(n.to_string());
        }
    }
    if let Some(x) = panel["options"]["xField"].as_str() {
        names.insert(x.to_string());
    }
    for s in panel["options"]["sortBy"].as_array().map(Vec::as_slice).unwrap_or_default() {
        if let Some(n) = s["displayName"].as_str() {
            names.insert(n.to_string());
        }
    }
    for t in panel["transformations"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let o = &t["options"];
        for key in ["excludeByName", "indexByName", "renameByName"] {
            if let Some(m) = o[key].as_object() {
                names.extend(m.keys().cloned());
            }
        }
        for s in o["sort"].as_array().map(Vec::as_slice).unwrap_or_default() {
            if let Some(f) = s["field"].as_str() {
                names.insert(f.to_string());
            }
        }
        for n in o["include"]["names"].as_array().map(Vec::as_slice).unwrap_or_default() {
            if let Some(n) = n.as_str() {
                names.insert(n.to_string());
            }
        }
    }
    names
}

/// Series names a time-series panel's by-name overrides refer to must exist in some result:
/// a value column, or a value of the `metric` column.
fn check_series_overrides(file: &str, panel: &Value, results: &[Csv]) {
    if panel["targets"].as_array().is_none_or(|ts| ts.iter().all(|t| t["format"] != "time_series")) {
        return;
    }
    let mut series = BTreeSet::new();
    for csv in results {
        series.extend(csv.header.iter().cloned());
        if let Some(m) = csv.column("metric") {
            series.extend(csv.values(m).map(String::from));
        }
    }
    for name in referenced_fields(panel) {
        assert!(series.contains(&name), "{file}: panel {} ({}) overrides series {name:?}, which no result has: {series:?}", panel["id"], panel["title"]);
    }
}

#[test]
fn every_dashboard_panel_query_runs_and_returns_what_the_panel_needs() {
    let started = std::time::Instant::now();
    let dashboards = load_dashboards();
    let files: BTreeSet<&str> = dashboards.iter().map(|(f, _)| f.as_str()).collect();
    for want in ["gpuledger-chargeback.json", "gpuledger-waste.json", "gpuledger-queue.json", "gpuledger-failures.json", "gpuledger-fleet.json"] {
        assert!(files.contains(want), "dashboards/{want} is missing (have {files:?})");
    }
    let mut uids = BTreeSet::new();
    for (file, d) in &dashboards {
        assert!(uids.insert(d["uid"].as_str().unwrap_or_default().to_string()), "{file}: uid {} is used twice", d["uid"]);
    }
    let structures: Vec<Vec<Value>> = dashboards.iter().map(|(f, d)| check_structure(f, d)).collect();

    let env = simulated_env();
    let built = started.elapsed();
    fleet_reads_rollups_that_agree_with_the_samples(&env, &dashboards);
    // The dashboard's range: the store's own data span.
    let span = run_sql(&env, "SELECT min(ts) AS lo, max(ts) AS hi FROM gpu_samples").unwrap();
    let at = |i: usize| -> DateTime<Utc> {
        let secs = parse_time(&span.rows[0][i]).unwrap_or_else(|| panic!("span {:?}", span.rows));
        DateTime::from_timestamp_millis((secs * 1000.0).round() as i64).unwrap()
    };
    let (from, to) = (at(0), at(1));
    assert!(from < to, "the store spans no time: {span:?}");
    // The expanded time filter compares as timestamps, fractions of a second included: the whole
    // span keeps every sample, a millisecond less at either end drops the first or last.
    let count = |f: DateTime<Utc>, t: DateTime<Utc>| -> f64 {
        let c = GrafanaContext { from: f, to: t, interval: TimeDelta::hours(1), vars: BTreeMap::new() };
        let sql = expand("SELECT count(*) AS n FROM gpu_samples WHERE $__timeFilter(ts)", &c).unwrap();
        parse_number(&run_sql(&env, &sql).unwrap().rows[0][0]).unwrap()
    };
    let total = parse_number(&run_sql(&env, "SELECT count(*) AS n FROM gpu_samples").unwrap().rows[0][0]).unwrap();
    let ms = TimeDelta::milliseconds(1);
    assert_eq!(count(from, to), total, "$__timeFilter over the data span keeps every sample");
    assert!(count(from + ms, to) < total && count(from, to - ms) < total, "$__timeFilter bounds are exact");
    // The busiest month, for a single-valued month picker.
    let months = run_sql(&env, "SELECT month, sum(gpu_hours) AS h FROM priced_state_hours GROUP BY month").unwrap();
    let busiest = |offered: &[String]| -> Option<String> {
        months
            .rows
            .iter()
            .filter(|r| offered.contains(&r[0]))
            .max_by(|a, b| parse_number(&a[1]).unwrap_or(0.0).total_cmp(&parse_number(&b[1]).unwrap_or(0.0)))
            .map(|r| r[0].clone())
    };

    let mut failures: Vec<String> = Vec::new();
    let mut ran = 0;
    // The main pass's statements and psql's answers, for the other drivers below.
    let mut answered: Vec<(String, String, Csv)> = Vec::new();
    for ((file, d), vars) in dashboards.iter().zip(&structures) {
        let mut ctx = GrafanaContext { from, to, interval: panel_interval(from, to, None), vars: BTreeMap::new() };
        // Variables in order: a later one's query may use an earlier one.
        for v in vars {
            let name = v["name"].as_str().unwrap_or_default().to_string();
            let options = variable_options(&env, file, v, &ctx);
            assert!(!options.is_empty(), "{file}: variable {name} offers no value on the simulated store");
            let multi = v["multi"] == true || v["includeAll"] == true;
            let value = if multi {
                VarValue::Multi(options.clone())
            } else if name == "month" {
                VarValue::Single(busiest(&options).unwrap_or_else(|| panic!("{file}: none of the months {options:?} has GPU-hours")))
            } else {
                VarValue::Single(options[0].clone())
            };
            ctx.vars.insert(name, value);
        }
        // The main pass: All selected; then each multi-value variable narrowed to one value.
        // (label, the narrowed variable, the selection)
        let mut passes: Vec<(String, Option<&str>, BTreeMap<String, VarValue>)> = vec![("all".into(), None, ctx.vars.clone())];
        for (name, value) in &ctx.vars {
            if let VarValue::Multi(vs) = value
                && vs.len() > 1
            {
                let mut narrowed = ctx.vars.clone();
                narrowed.insert(name.clone(), VarValue::Multi(vec![vs[0].clone()]));
                passes.push((format!("${name} = {}", vs[0]), Some(name.as_str()), narrowed));
            }
        }
        for (pass_name, narrowed, vars) in &passes {
            let main = narrowed.is_none();
            for panel in panels(d) {
                if panel["type"] == "row" {
                    continue;
                }
                let pctx = GrafanaContext { vars: vars.clone(), interval: panel_interval(from, to, panel["interval"].as_str()), ..ctx.clone() };
                let mut results = Vec::new();
                for t in panel["targets"].as_array().map(Vec::as_slice).unwrap_or_default() {
                    let raw = t["rawSql"].as_str().unwrap_or_default();
                    // Narrowed passes rerun only the queries that use the narrowed variable.
                    if narrowed.is_some_and(|n| !referenced_variables(raw).contains(n)) {
                        continue;
                    }
                    let what = format!("{file} [{pass_name}] panel {} \"{}\" target {}", panel["id"], panel["title"].as_str().unwrap_or_default(), t["refId"]);
                    let sql = match expand(raw, &pctx) {
                        Ok(s) => s,
                        Err(e) => {
                            failures.push(format!("{what}: expansion fails: {e}"));
                            continue;
                        }
                    };
                    ran += 1;
                    match run_sql(&env, &sql) {
                        Err(e) => failures.push(format!("{what}: {e}\n{sql}")),
                        Ok(csv) => {
                            if let Err(e) = check_result(panel, t, &csv, &pctx, main) {
                                failures.push(format!("{what}: {e}\n{sql}\n{:?} {:?}", csv.header, csv.rows.iter().take(3).collect::<Vec<_>>()));
                            }
                            if main {
                                answered.push((what.clone(), sql.clone(), csv.clone()));
                            }
                            results.push(csv);
                        }
                    }
                }
                if main {
                    check_series_overrides(file, panel, &results);
                }
            }
        }
    }
    assert!(failures.is_empty(), "{} of {ran} panel queries fail:\n\n{}", failures.len(), failures.join("\n\n"));
    same_through_other_drivers(&env, &answered);
    eprintln!("{ran} panel queries in {:?} (store built in {built:?})", started.elapsed());
}

/// A driver's answer with every cell that reads as a number or an instant written one way.
/// The server writes a float's text as the client's `extra_float_digits` asks (psql sends
/// none, lib/pq asks for 2: `47.0` and `47`, `1793404800.0` and `1.7934048e+09`); lib/pq hands
/// timestamps over as Go times, which database/sql writes as RFC 3339. The value is compared.
fn values_alike(answer: &Value) -> Value {
    let mut answer = answer.clone();
    if let Some(rows) = answer.get_mut("rows").and_then(Value::as_array_mut) {
        for cell in rows.iter_mut().filter_map(Value::as_array_mut).flatten() {
            let Some(text) = cell.as_str() else { continue };
            if let Ok(n) = text.parse::<f64>() {
                *cell = Value::String(n.to_string());
            } else if let Some(t) = chrono::DateTime::parse_from_rfc3339(text).ok().or_else(|| chrono::DateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f%#z").ok()) {
                *cell = Value::String(t.with_timezone(&Utc).to_rfc3339_opts(chrono::SecondsFormat::Nanos, true));
            }
        }
    }
    answer
}

/// Every panel query of the main pass read again through psycopg 3 (server-side binding on the
/// extended protocol, client-side binding, a named cursor), psycopg2 and Go's lib/pq in the
/// simple-query mode Grafana uses: the same header and the same text in every cell as psql's.
fn same_through_other_drivers(env: &Env, answered: &[(String, String, Csv)]) {
    let statements: Vec<&str> = answered.iter().map(|(_, sql, _)| sql.as_str()).collect();
    let job = serde_json::json!({ "statements": statements });
    let mut report = super::drivers::python_drivers(&env.server, &job);
    report["libpq"] = super::drivers::go_libpq(&env.server, &job);
    let mut failures = Vec::new();
    let drivers = ["psycopg_server", "psycopg_client", "psycopg_named", "psycopg2", "libpq"];
    for driver in drivers {
        let rows = report[driver]["rows"].as_array().unwrap_or_else(|| panic!("{driver}: no rows in {report}"));
        assert_eq!(rows.len(), answered.len(), "{driver}: one answer per statement");
        for ((what, sql, csv), got) in answered.iter().zip(rows) {
            let want = serde_json::json!({ "header": csv.header, "rows": csv.rows });
            if values_alike(got) != values_alike(&want) {
                let shown = |v: &Value| v.to_string().chars().take(400).collect::<String>();
                failures.push(format!("{driver}: {what}\n{sql}\ngot  {}\npsql {}", shown(got), shown(&want)));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} panel answers differ from psql's:\n\n{}", failures.len(), answered.len() * drivers.len(), failures.join("\n\n"));
}

#[test]
fn provisioning_points_grafana_at_gpuledger_serve() {
    let dir = dashboards_dir().join("provisioning");
    let ds: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(dir.join("datasources/gpuledger.yaml")).unwrap()).unwrap();
    assert_eq!(ds["apiVersion"].as_i64(), Some(1));
    let d = &ds["datasources"][0];
    assert_eq!(d["type"].as_str(), Some(DS_TYPE));
    assert_eq!(d["name"].as_str(), Some("gpuledger"));
    assert_eq!(d["uid"].as_str(), Some("gpuledger"));
    assert_eq!(d["url"].as_str(), Some("127.0.0.1:5432"));
    assert_eq!(d["user"].as_str(), Some("grafana"));
    assert_eq!(d["secureJsonData"]["password"].as_str(), Some("$GPULEDGER_GRAFANA_PASSWORD"));
    assert_eq!(d["jsonData"]["sslmode"].as_str(), Some("disable"));
    assert_eq!(d["jsonData"]["database"].as_str(), Some("datafusion"));
    assert_eq!(d["jsonData"]["postgresVersion"].as_i64(), Some(1500));
    assert_eq!(d["jsonData"]["timescaledb"].as_bool(), Some(false), "$__timeGroup must expand to floor(), not time_bucket()");

    let dash: serde_yaml::Value = serde_yaml::from_str(&std::fs::read_to_string(dir.join("dashboards/gpuledger.yaml")).unwrap()).unwrap();
    assert_eq!(dash["apiVersion"].as_i64(), Some(1));
    let p = &dash["providers"][0];
    assert_eq!(p["type"].as_str(), Some("file"));
    let path = p["options"]["path"].as_str().unwrap_or_default();
    assert!(path.starts_with('/'), "the provider reads an absolute folder: {path:?}");
    // The README's provisioning steps copy the dashboards into that folder.
    let readme = std::fs::read_to_string(dashboards_dir().join("README.md")).unwrap();
    assert!(readme.contains(path), "dashboards/README.md tells where to copy the JSON files ({path})");
    assert!(readme.contains("DS_GPULEDGER"), "dashboards/README.md explains the ${{DS_GPULEDGER}} input");
}
