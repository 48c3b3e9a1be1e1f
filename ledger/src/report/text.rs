//! The text formats of `gpuledger report`: an aligned table for a terminal, GitHub
//! markdown for a wiki page or a pull request, CSV for finance scripts and JSON for programs.
//!
//! CSV keeps 4 decimals on every figure so that a script summing the rows lands within a
//! cent of the report's totals; the table and markdown round for reading (hours to 0.1,
//! money to 0.01) and add thousands separators.

use super::{CSV_COLUMNS, ChargebackRow, Report};

/// Output formats of `gpuledger report`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextFormat {
    Table,
    Csv,
    Json,
    Markdown,
    /// The budgets alone, as CSV ([`BUDGET_CSV_COLUMNS`]).
    BudgetsCsv,
    /// Why GPUs were idle, as CSV ([`IDLE_CSV_COLUMNS`]).
    IdleCsv,
    /// Stranded capacity per node pool, as CSV ([`STRANDED_CSV_COLUMNS`]).
    StrandedCsv,
    /// Each team's days against its own recent days, as CSV ([`ANOMALY_CSV_COLUMNS`]).
    AnomaliesCsv,
    /// GPU quota per ClusterQueue and flavor, as CSV ([`QUOTA_CSV_COLUMNS`]).
    QuotaCsv,
}

/// The columns of the quota CSV, in order: one row per ClusterQueue and GPU flavor.
pub const QUOTA_CSV_COLUMNS: [&str; 9] =
    ["month", "cluster_queue", "team", "flavor", "nominal_gpu_hours", "used_gpu_hours", "borrowed_gpu_hours", "unused_gpu_hours", "unused_cost"];

/// The columns of the budgets CSV, in order.
pub const BUDGET_CSV_COLUMNS: [&str; 9] = ["month", "team", "budget", "spend", "forecast", "used_ratio", "forecast_ratio", "elapsed_days", "month_days"];

/// The columns of the why-idle CSV, in order (the rows come costliest first).
pub const IDLE_CSV_COLUMNS: [&str; 7] = ["month", "team", "state", "reason", "gpu_hours", "cost", "rank"];

/// The columns of the stranded-capacity CSV, in order (an empty pool: no label rule matched).
pub const STRANDED_CSV_COLUMNS: [&str; 7] = ["month", "pool", "model_name", "unallocated_gpu_hours", "stranded_gpu_hours", "stranded_cost", "cordoned_gpu_hours"];

/// The columns of the spend-anomalies CSV, in order: one row per team and complete day of the
/// month; baseline, spread and score are empty before the team has 7 baseline days.
pub const ANOMALY_CSV_COLUMNS: [&str; 7] = ["day", "team", "cost", "baseline", "spread", "score", "flagged"];

/// Renders `report` in `format`; the result ends with a newline.
pub fn render(report: &Report, format: TextFormat) -> String {
    match format {
        TextFormat::Csv => csv(report),
        TextFormat::BudgetsCsv => budgets_csv(report),
        TextFormat::IdleCsv => idle_csv(report),
        TextFormat::StrandedCsv => stranded_csv(report),
        TextFormat::AnomaliesCsv => anomalies_csv(report),
        TextFormat::QuotaCsv => quota_csv(report),
        TextFormat::Json => json(report),
        TextFormat::Table => document(report, Style::Terminal),
        TextFormat::Markdown => document(report, Style::Markdown),
    }
}

/// Decimals of every number in the CSV (hours, units and money alike).
const CSV_DECIMALS: usize = 4;

/// A CSV document: the header, then one line of `fields` per item.
fn csv_table<T>(columns: &[&str], items: &[T], fields: impl Fn(&T) -> Vec<String>) -> String {
    let mut out = columns.join(",");
    out.push('\n');
    for item in items {
        out.push_str(&fields(item).join(","));
        out.push('\n');
    }
    out
}

/// A CSV number: [`CSV_DECIMALS`] decimals; an absent figure is an empty field, not 0.
fn csv_number(v: impl Into<Option<f64>>) -> String {
    v.into().map(|v| format!("{v:.CSV_DECIMALS$}")).unwrap_or_default()
}

fn csv(report: &Report) -> String {
    csv_table(&CSV_COLUMNS, &report.chargeback, |r| {
        let numbers = [
            r.productive_gpu_hours,
            r.allocated_idle_gpu_hours,
            r.failed_gpu_hours,
            r.preempted_gpu_hours,
            r.unallocated_gpu_hours,
            r.compute,
            r.network,
            r.storage,
            r.support,
            r.idle,
            r.failed_runs,
            r.operations,
            r.total,
            r.accepted_units,
        ];
        let mut fields = vec![csv_field(&r.month), csv_field(&r.team)];
        fields.extend(numbers.map(csv_number));
        // An empty field, not 0: a team without units has no cost per unit.
        fields.push(csv_number(r.cost_per_accepted_unit));
        fields.extend([r.lost_gpu_hours_platform_paid, r.lost_cost_platform_paid].map(csv_number));
        fields
    })
}

fn idle_csv(report: &Report) -> String {
    csv_table(&IDLE_CSV_COLUMNS, &report.idle_reasons, |r| {
        vec![
            csv_field(report.month.as_str()),
            csv_field(&r.team),
            r.state.to_string(),
            r.reason.to_string(),
            csv_number(r.gpu_hours),
            csv_number(r.cost),
            r.rank.to_string(),
        ]
    })
}

fn stranded_csv(report: &Report) -> String {
    csv_table(&STRANDED_CSV_COLUMNS, &report.stranded, |r| {
        let mut fields = vec![csv_field(report.month.as_str()), r.pool.as_deref().map(csv_field).unwrap_or_default(), csv_field(&r.model_name)];
        fields.extend([r.unallocated_gpu_hours, r.stranded_gpu_hours, r.stranded_cost, r.cordoned_gpu_hours].map(csv_number));
        fields
    })
}

fn quota_csv(report: &Report) -> String {
    csv_table(&QUOTA_CSV_COLUMNS, &report.quota, |q| {
        let mut fields = vec![csv_field(report.month.as_str()), csv_field(&q.cluster_queue), csv_field(&q.team), csv_field(&q.flavor)];
        fields.extend([q.nominal_gpu_hours, q.used_gpu_hours, q.borrowed_gpu_hours, q.unused_gpu_hours, q.unused_cost].map(csv_number));
        fields
    })
}

fn anomalies_csv(report: &Report) -> String {
    csv_table(&ANOMALY_CSV_COLUMNS, &report.anomalies, |a| {
        vec![csv_field(&a.day), csv_field(&a.team), csv_number(a.cost), csv_number(a.baseline), csv_number(a.spread), csv_number(a.score), a.flagged.to_string()]
    })
}

fn budgets_csv(report: &Report) -> String {
    csv_table(&BUDGET_CSV_COLUMNS, &report.budgets, |b| {
        let mut fields = vec![csv_field(&b.month), csv_field(&b.team)];
        fields.extend([b.budget, b.spend, b.forecast, b.used_ratio, b.forecast_ratio, b.elapsed_days, b.month_days].map(csv_number));
        fields
    })
}

/// Quotes a CSV field the RFC 4180 way when it holds a separator, a quote or a line break.
fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) { format!("\"{}\"", s.replace('"', "\"\"")) } else { s.to_string() }
}

fn json(report: &Report) -> String {
    // Serializing plain structs with string keys cannot fail; keep the output JSON if it ever does.
    let mut s = serde_json::to_string_pretty(report)
        .unwrap_or_else(|e| serde_json::json!({ "error": format!("serializing the report: {e}") }).to_string());
    s.push('\n');
    s
}

/// Terminal table or markdown: the same sections, drawn differently.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Style {
    Terminal,
    Markdown,
}

/// The provisional note (the table marks the rows it concerns with `*`).
pub(crate) fn provisional_note(hours: f64) -> String {
    format!("provisional: {} GPU-hours belong to runs still running; they settle when the runs end", hours_fmt(hours))
}

/// The team as the table shows it: with `*` when some of its hours are provisional.
fn team_label(r: &ChargebackRow) -> String {
    if r.provisional_gpu_hours > 0.0 { format!("{}*", r.team) } else { r.team.clone() }
}

fn document(report: &Report, style: Style) -> String {
    let title = format!("GPU chargeback {} ({}, idle policy {})", report.month, report.currency, report.idle_policy);
    let mut out = String::new();
    match style {
        Style::Terminal => out.push_str(&format!("{}\n\n", terminal_cell(&title))),
        Style::Markdown => out.push_str(&format!("# {}\n\n", markdown_cell(&title))),
    }
    out.push_str(&chargeback_grid(report).render(style));

    let provisional = report.provisional_gpu_hours();
    if provisional > 0.0 {
        let note = provisional_note(provisional);
        match style {
            // Escaped so markdown does not read the leading `*` as a list bullet.
            Style::Markdown => out.push_str(&format!("\n\\* {note}\n")),
            Style::Terminal => out.push_str(&format!("\n* {note}\n")),
        }
    }

    if report.units.iter().any(|u| u.month == report.month.as_str()) {
        out.push_str(&heading("Accepted units (what \"per unit\" counts)", style));
        out.push_str(&units_grid(report).render(style));
    }
    if !report.idle_reasons.is_empty() {
        out.push_str(&heading(&format!("Why GPUs were idle ({}, costliest first)", report.currency), style));
        out.push_str(&idle_grid(report, IDLE_ROWS_SHOWN).render(style));
        if report.idle_reasons.len() > IDLE_ROWS_SHOWN {
            out.push_str(&format!("\n... and {} more (report --format idle-csv)\n", report.idle_reasons.len() - IDLE_ROWS_SHOWN));
        }
    }
    if report.stranded.iter().any(|r| r.stranded_gpu_hours > 0.0 || r.cordoned_gpu_hours > 0.0) {
        out.push_str(&heading("Unallocated capacity by node pool", style));
        out.push_str(&stranded_grid(report).render(style));
    }
    if !report.quota.is_empty() {
        out.push_str(&heading(&format!("GPU quota by ClusterQueue (GPU-hours; unused cost in {})", report.currency), style));
        out.push_str(&quota_grid(report).render(style));
    }
    if report.flagged_days().next().is_some() {
        out.push_str(&heading(&format!("Spend anomalies ({}, days far above the team's recent days)", report.currency), style));
        out.push_str(&anomaly_grid(report).render(style));
        if !report.anomaly_drivers.is_empty() {
            out.push_str(&heading("What drove them (GPU and run against its own recent days)", style));
            out.push_str(&driver_grid(report).render(style));
            let more = report.anomaly_drivers.iter().filter(|d| d.rank > DRIVERS_SHOWN).count();
            if more > 0 {
                out.push_str(&format!("\n... and {more} more (report --format json, or the anomaly_drivers table)\n"));
            }
        }
    }
    if !report.budgets.is_empty() {
        out.push_str(&heading(&format!("Budgets ({})", report.currency), style));
        out.push_str(&budget_grid(report).render(style));
    }
    if report.platform_paid_any() {
        out.push_str(&heading("Lost runs the platform paid for", style));
        out.push_str(&platform_paid_grid(report).render(style));
    }
    if !report.failure_causes.is_empty() {
        out.push_str(&heading("Top failure causes", style));
        out.push_str(&failure_grid(report, 5).render(style));
    }
    if !report.queue_waits.is_empty() {
        out.push_str(&heading("Queue waits", style));
        out.push_str(&queue_grid(report).render(style));
    }
    if report.energy.iter().any(|e| e.kwh > 0.0) {
        out.push_str(&heading("Energy (beside the cost, not in it)", style));
        out.push_str(&energy_grid(report).render(style));
    }
    out
}

/// Each team's accepted units by name, with the cost of one where the team counts units of
/// one name only: the chargeback's cost per unit is the team's total over all its units, which
/// means something only when they are alike (a team counting tokens and requests has none here).
fn units_grid(report: &Report) -> Grid {
    let month: Vec<_> = report.units.iter().filter(|u| u.month == report.month.as_str()).collect();
    let rows = month
        .iter()
        .map(|u| {
            let alike = month.iter().filter(|o| o.team == u.team).count() == 1;
            let per_unit = report
                .chargeback
                .iter()
                .find(|r| r.team == u.team)
                .and_then(|r| r.cost_per_accepted_unit)
                .filter(|_| alike)
                .map_or_else(|| "- (units of several names)".to_owned(), |v| format!("{} {} per {}", per_unit_fmt(v), report.currency, u.unit));
            vec![u.team.clone(), u.unit.clone(), units_fmt(u.accepted_units), per_unit]
        })
        .collect();
    let mut grid = Grid::new(&["team", "unit", "accepted", "cost per unit"], 2, rows, None);
    if let Some(last) = grid.right.last_mut() {
        *last = false;
    }
    grid
}

/// How many why-idle rows the table and markdown show (the CSV has them all).
const IDLE_ROWS_SHOWN: usize = 10;

/// Why GPUs were idle: the costliest team, state and reason first, each row's share of the
/// month's idle cost beside it.
fn idle_grid(report: &Report, limit: usize) -> Grid {
    let idle_cost = report.idle_cost();
    let rows = report
        .idle_reasons
        .iter()
        .take(limit)
        .map(|r| {
            vec![
                r.rank.to_string(),
                r.team.clone(),
                r.state.to_string(),
                r.reason.to_string(),
                hours_fmt(r.gpu_hours),
                money_fmt(r.cost),
                or_dash(r.share_of(idle_cost), percent_fmt),
                r.reason.meaning().to_owned(),
            ]
        })
        .collect();
    let mut grid = Grid::new(&["#", "team", "state", "reason", "GPU-hours", "cost", "of idle cost", "meaning"], 4, rows, None);
    if let Some(last) = grid.right.last_mut() {
        *last = false;
    }
    grid
}

/// Unallocated GPU-hours per node pool: how many were stranded (GPU Workloads waited that the
/// pool could have served) or cordoned.
fn stranded_grid(report: &Report) -> Grid {
    let rows = report
        .stranded
        .iter()
        .map(|r| {
            vec![
                r.pool.clone().unwrap_or_else(|| "-".into()),
                r.model_name.clone(),
                hours_fmt(r.unallocated_gpu_hours),
                hours_fmt(r.stranded_gpu_hours),
                or_dash(r.stranded_share(), percent_fmt),
                money_fmt(r.stranded_cost),
                hours_fmt(r.cordoned_gpu_hours),
            ]
        })
        .collect();
    Grid::new(&["node pool", "GPU model", "unallocated GPU-hours", "stranded", "stranded share", "stranded cost", "cordoned"], 2, rows, None)
}

/// Energy per team, with kWh and cost per accepted unit side by side.
fn energy_grid(report: &Report) -> Grid {
    let rows = report
        .energy
        .iter()
        .map(|e| {
            vec![
                e.team.clone(),
                kwh_fmt(e.kwh),
                kwh_fmt(e.facility_kwh),
                or_dash(e.kg_co2e, kwh_fmt),
                or_dash(e.kwh_per_accepted_unit, per_unit_fmt),
                or_dash(e.cost_per_accepted_unit, per_unit_fmt),
            ]
        })
        .collect();
    Grid::new(&["team", "GPU kWh", "facility kWh", "kg CO2e", "kWh per unit", "cost per unit"], 1, rows, None)
}

/// Each ClusterQueue's nominal GPU quota on each flavor: how much its Workloads used, borrowed
/// beyond it and left unused, and what the unused part cost under the `quota` idle policy.
fn quota_grid(report: &Report) -> Grid {
    let rows = report
        .quota
        .iter()
        .map(|q| {
            vec![
                q.cluster_queue.clone(),
                q.team.clone(),
                q.flavor.clone(),
                hours_fmt(q.nominal_gpu_hours),
                hours_fmt(q.used_gpu_hours),
                or_dash(q.used_share(), percent_fmt),
                hours_fmt(q.borrowed_gpu_hours),
                hours_fmt(q.unused_gpu_hours),
                money_fmt(q.unused_cost),
            ]
        })
        .collect();
    Grid::new(&["ClusterQueue", "owner", "flavor", "nominal", "used", "used share", "borrowed", "unused", "unused cost"], 3, rows, None)
}

/// The month's flagged days: the day's cost, the baseline and how many spreads above it.
fn anomaly_grid(report: &Report) -> Grid {
    let rows = report
        .flagged_days()
        .map(|a| {
            vec![
                a.day.clone(),
                a.team.clone(),
                money_fmt(a.cost),
                or_dash(a.baseline, money_fmt),
                or_dash(a.spread, money_fmt),
                or_dash(a.score, score_fmt),
                a.baseline_days.to_string(),
            ]
        })
        .collect();
    Grid::new(&["day", "team", "cost", "baseline", "spread", "score", "baseline days"], 2, rows, None)
}

/// How many of a flagged day's drivers the table and markdown show (json and html have them all,
/// up to the ledger's 10).
const DRIVERS_SHOWN: i64 = 5;

/// The GPUs and runs behind each flagged day, largest increase first.
fn driver_grid(report: &Report) -> Grid {
    let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
    let rows = report
        .anomaly_drivers
        .iter()
        .filter(|d| d.rank <= DRIVERS_SHOWN)
        .map(|d| {
            vec![
                d.day.clone(),
                d.team.clone(),
                d.rank.to_string(),
                dash(&d.node),
                dash(&d.uuid),
                format!("{}/{}", dash(&d.namespace), dash(&d.run)),
                dash(&d.pod),
                money_fmt(d.cost),
                money_fmt(d.baseline),
                money_fmt(d.increase),
            ]
        })
        .collect();
    let mut grid = Grid::new(&["day", "team", "#", "node", "GPU", "run", "pod", "cost", "baseline", "increase"], 7, rows, None);
    grid.right[2] = true;
    grid
}

/// A score in spreads: one decimal.
pub(crate) fn score_fmt(v: f64) -> String {
    grouped(v, 1)
}

/// Budgets, the team heading furthest over first.
fn budget_grid(report: &Report) -> Grid {
    let rows = report
        .budgets
        .iter()
        .map(|b| {
            vec![
                b.team.clone(),
                money_fmt(b.budget),
                money_fmt(b.spend),
                percent_fmt(b.used_ratio),
                money_fmt(b.forecast),
                percent_fmt(b.forecast_ratio),
                format!("{}/{}", grouped(b.elapsed_days, 1), grouped(b.month_days, 0)),
                b.status().as_str().to_owned(),
            ]
        })
        .collect();
    let mut grid = Grid::new(&["team", "budget", "spent", "used", "forecast", "forecast used", "days", "status"], 1, rows, None);
    if let Some(last) = grid.right.last_mut() {
        *last = false;
    }
    grid
}

fn heading(text: &str, style: Style) -> String {
    match style {
        Style::Terminal => format!("\n{text}\n\n"),
        Style::Markdown => format!("\n## {text}\n\n"),
    }
}

fn chargeback_grid(report: &Report) -> Grid {
    let headers = [
        "team",
        "productive h",
        "idle h",
        "failed h",
        "preempted h",
        "unallocated h",
        "compute",
        "network",
        "storage",
        "support",
        "idle",
        "failed runs",
        "operations",
        "total",
        "units",
        "per unit",
    ];
    let rows = report
        .chargeback
        .iter()
        .map(|r| {
            let mut cells = vec![team_label(r)];
            cells.extend(r.state_hours().iter().map(|&v| hours_fmt(v)));
            cells.extend(money_of(r).iter().map(|&v| money_fmt(v)));
            cells.push(units_fmt(r.accepted_units));
            cells.push(r.cost_per_accepted_unit.map(per_unit_fmt).unwrap_or_default());
            cells
        })
        .collect();

    // Units are counted in different units per team, so they have no total.
    let mut footer = vec!["TOTAL".to_string()];
    let mut hours = [0.0; 5];
    let mut money = [0.0; 8];
    for r in &report.chargeback {
        hours.iter_mut().zip(r.state_hours()).for_each(|(t, v)| *t += v);
        money.iter_mut().zip(money_of(r)).for_each(|(t, v)| *t += v);
    }
    footer.extend(hours.iter().map(|&v| hours_fmt(v)));
    footer.extend(money.iter().map(|&v| money_fmt(v)));
    footer.extend([String::new(), String::new()]);

    Grid::new(&headers, 1, rows, Some(footer))
}

/// The cost components, then the total (the table's money columns).
fn money_of(r: &ChargebackRow) -> [f64; 8] {
    let c = r.cost_components();
    [c[0], c[1], c[2], c[3], c[4], c[5], c[6], r.total]
}

/// Per team: its lost (failed + preempted) hours, and the part of them, and its cost, that the
/// platform paid for (moved from the team's failed runs to platform's).
fn platform_paid_grid(report: &Report) -> Grid {
    let rows = report
        .chargeback
        .iter()
        .filter(|r| r.lost_gpu_hours_platform_paid > 0.0 || r.lost_cost_platform_paid > 0.0)
        .map(|r| {
            vec![
                r.team.clone(),
                hours_fmt(r.failed_gpu_hours + r.preempted_gpu_hours),
                hours_fmt(r.lost_gpu_hours_platform_paid),
                money_fmt(r.lost_cost_platform_paid),
            ]
        })
        .collect();
    Grid::new(&["team", "lost h", "platform paid h", "platform paid"], 1, rows, None)
}

fn failure_grid(report: &Report, limit: usize) -> Grid {
    let rows = report
        .failure_causes
        .iter()
        .take(limit)
        .map(|f| vec![f.outcome.to_string(), f.cause.clone(), f.segments.to_string(), hours_fmt(f.gpu_hours), money_fmt(f.cost)])
        .collect();
    Grid::new(&["outcome", "cause", "segments", "GPU-hours", "cost"], 2, rows, None)
}

fn queue_grid(report: &Report) -> Grid {
    let rows = report
        .queue_waits
        .iter()
        .map(|q| {
            let evictions =
                if q.eviction_reasons.is_empty() { q.evictions.to_string() } else { format!("{} ({})", q.evictions, q.eviction_reasons) };
            vec![
                q.team.clone(),
                q.cluster_queue.clone(),
                q.admissions.to_string(),
                duration_fmt(q.p50_seconds),
                duration_fmt(q.p95_seconds),
                duration_fmt(q.max_seconds),
                evictions,
            ]
        })
        .collect();
    // The evictions column reads as text ("2 (Preempted x2)"), so it stays left-aligned.
    let mut grid = Grid::new(&["team", "cluster queue", "admissions", "p50", "p95", "max", "evictions"], 2, rows, None);
    if let Some(last) = grid.right.last_mut() {
        *last = false;
    }
    grid
}

/// A table of text cells: the first `left` columns are text, the others numbers.
struct Grid {
    headers: Vec<String>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
    footer: Option<Vec<String>>,
}

impl Grid {
    fn new(headers: &[&str], left: usize, rows: Vec<Vec<String>>, footer: Option<Vec<String>>) -> Grid {
        Grid {
            headers: headers.iter().map(|h| h.to_string()).collect(),
            right: (0..headers.len()).map(|i| i >= left).collect(),
            rows,
            footer,
        }
    }

    fn render(&self, style: Style) -> String {
        match style {
            Style::Terminal => self.terminal(),
            Style::Markdown => self.markdown(),
        }
    }

    fn terminal(&self) -> String {
        let clean = |row: &[String]| row.iter().map(|c| terminal_cell(c)).collect::<Vec<_>>();
        let headers = clean(&self.headers);
        let rows: Vec<Vec<String>> = self.rows.iter().map(|r| clean(r)).collect();
        let footer = self.footer.as_deref().map(clean);

        let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
        for row in rows.iter().chain(footer.iter()) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let line = |cells: &[String]| {
            let padded: Vec<String> = cells
                .iter()
                .zip(&widths)
                .zip(&self.right)
                .map(|((c, &w), &right)| if right { format!("{c:>w$}") } else { format!("{c:<w$}") })
                .collect();
            format!("{}\n", padded.join("  ").trim_end())
        };
        let rule = format!("{}\n", widths.iter().map(|&w| "-".repeat(w)).collect::<Vec<_>>().join("  "));

        let mut out = line(&headers);
        out.push_str(&rule);
        for row in &rows {
            out.push_str(&line(row));
        }
        if let Some(footer) = &footer {
            out.push_str(&rule);
            out.push_str(&line(footer));
        }
        out
    }

    fn markdown(&self) -> String {
        let line = |cells: &[String]| format!("| {} |\n", cells.iter().map(|c| markdown_cell(c)).collect::<Vec<_>>().join(" | "));
        let mut out = line(&self.headers);
        let align: Vec<&str> = self.right.iter().map(|&r| if r { "---:" } else { "---" }).collect();
        out.push_str(&format!("| {} |\n", align.join(" | ")));
        for row in &self.rows {
            out.push_str(&line(row));
        }
        if let Some(footer) = &self.footer {
            let cells: Vec<String> =
                footer.iter().map(|c| if c.is_empty() { String::new() } else { format!("**{}**", markdown_cell(c)) }).collect();
            out.push_str(&format!("| {} |\n", cells.join(" | ")));
        }
        out
    }
}

/// Control characters (a newline in a team name) would break the alignment.
fn terminal_cell(s: &str) -> String {
    s.chars().map(|c| if c.is_control() { ' ' } else { c }).collect()
}

/// Backslash-escapes the characters markdown gives a meaning (the cell separator `|` above all).
fn markdown_cell(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' | '|' | '*' | '_' | '`' | '<' | '>' | '[' | ']' | '#' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

/// GPU-hours as the tables show them: one decimal, thousands separators.
pub(crate) fn hours_fmt(v: f64) -> String {
    grouped(v, 1)
}

/// Money as the tables show it: two decimals, thousands separators.
pub(crate) fn money_fmt(v: f64) -> String {
    grouped(v, 2)
}

/// A ratio as a whole percentage: 1.25 -> `125%`.
pub(crate) fn percent_fmt(ratio: f64) -> String {
    format!("{}%", grouped(ratio * 100.0, 0))
}

/// Energy (kWh) and emissions (kg) as the tables show them: one decimal.
pub(crate) fn kwh_fmt(v: f64) -> String {
    grouped(v, 1)
}

/// `-` where a figure does not exist (no units, no grid intensity).
pub(crate) fn or_dash(v: Option<f64>, format: fn(f64) -> String) -> String {
    v.map_or_else(|| "-".to_owned(), format)
}

/// Accepted units: one decimal (units may be fractional, e.g. epochs).
pub(crate) fn units_fmt(v: f64) -> String {
    grouped(v, 1)
}

/// Cost per unit: two decimals at or above 1, otherwise three significant digits, so that a
/// cost per token (0.000251) does not print as 0.00.
pub(crate) fn per_unit_fmt(v: f64) -> String {
    let abs = v.abs();
    if !v.is_finite() || abs >= 1.0 || abs == 0.0 {
        return grouped(v, 2);
    }
    let decimals = (2.0 - abs.log10().floor()).clamp(2.0, 12.0) as usize;
    let mut s = grouped(v, decimals);
    // Significant digits only: 0.720 reads as 0.72, but keep two decimals like money.
    while s.len() > 4 && s.ends_with('0') && s.split_once('.').is_some_and(|(_, f)| f.len() > 2) {
        s.pop();
    }
    s
}

/// `v` with `decimals` decimals and a comma every three integer digits; never `-0.00`.
pub(crate) fn grouped(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let plain = format!("{:.decimals$}", v.abs());
    let (int, frac) = match plain.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (plain.as_str(), None),
    };
    let mut out = String::with_capacity(plain.len() + int.len() / 3 + 1);
    let zero = plain.chars().all(|c| c == '0' || c == '.');
    if v < 0.0 && !zero {
        out.push('-');
    }
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(frac) = frac {
        out.push('.');
        out.push_str(frac);
    }
    out
}

/// A wait in human units: `42s`, `4m12s`, `2h03m` (rounded to the second; `-` when unknown).
pub(crate) fn duration_fmt(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "-".to_string();
    }
    let s = seconds.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixture;
    use super::*;

    /// The units section says what one unit of each team is and costs, and refuses a price for
    /// a team whose units have several names (its cost per unit adds them up).
    #[test]
    fn units_are_listed_by_name_with_the_cost_of_one_where_alike() {
        let mut r = fixture::report();
        r.units.push(crate::report::UnitsRow { month: "2026-10".into(), team: "vision".into(), unit: "videos".into(), accepted_units: 2.0 });
        let out = render(&r, TextFormat::Table);
        let line = |team: &str, unit: &str| out.lines().find(|l| l.starts_with(team) && l.contains(&format!(" {unit} "))).unwrap_or_else(|| panic!("{team} {unit}:\n{out}")).to_owned();
        assert!(out.contains("Accepted units (what \"per unit\" counts)"), "{out}");
        assert!(line("ml-research", "samples").ends_with("0.245 EUR per samples"), "{out}");
        assert!(line("vision", "images").ends_with("- (units of several names)"), "{out}");
        assert!(line("vision", "videos").contains(" 2.0 "), "{out}");
    }

    fn parse_csv_line(line: &str) -> Vec<String> {
        // Enough of RFC 4180 for the tests: quoted fields with doubled quotes, no line breaks.
        let mut fields = Vec::new();
        let mut cur = String::new();
        let mut quoted = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    cur.push('"');
                    chars.next();
                }
                ('"', _) => quoted = !quoted,
                (',', false) => fields.push(std::mem::take(&mut cur)),
                (c, _) => cur.push(c),
            }
        }
        fields.push(cur);
        fields
    }

    #[test]
    fn csv_header_rows_and_values() {
        let report = fixture::report();
        let out = render(&report, TextFormat::Csv);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], CSV_COLUMNS.join(","));
        assert_eq!(lines.len(), 1 + report.chargeback.len());

        for (line, row) in lines[1..].iter().zip(&report.chargeback) {
            let f = parse_csv_line(line);
            assert_eq!(f.len(), CSV_COLUMNS.len(), "{line}");
            let col = |name: &str| &f[CSV_COLUMNS.iter().position(|c| *c == name).unwrap()];
            let num = |name: &str| col(name).parse::<f64>().unwrap();
            assert_eq!(col("month"), &row.month);
            assert_eq!(col("team"), &row.team);
            assert!((num("productive_gpu_hours") - row.productive_gpu_hours).abs() < 1e-4);
            assert!((num("unallocated_gpu_hours") - row.unallocated_gpu_hours).abs() < 1e-4);
            assert!((num("idle") - row.idle).abs() < 0.01);
            assert!((num("operations") - row.operations).abs() < 0.01);
            assert!((num("total") - row.total).abs() < 0.01);
            assert!((num("accepted_units") - row.accepted_units).abs() < 1e-4);
            match row.cost_per_accepted_unit {
                Some(v) => assert!((num("cost_per_accepted_unit") - v).abs() < 1e-4),
                None => assert_eq!(col("cost_per_accepted_unit"), ""),
            }
            assert!((num("lost_gpu_hours_platform_paid") - row.lost_gpu_hours_platform_paid).abs() < 1e-4);
            assert!((num("lost_cost_platform_paid") - row.lost_cost_platform_paid).abs() < 1e-4);
        }
        // platform accepted no units: its cost per unit is an empty field.
        let platform = lines.iter().find(|l| l.contains(",platform,")).unwrap();
        assert!(platform.ends_with(",,0.0000,0.0000"), "{platform}");
        let ml = lines.iter().find(|l| l.contains(",ml-research,")).unwrap();
        assert!(ml.ends_with(",0.2450,3.0000,6.0000"), "{ml}");
    }

    #[test]
    fn budgets_csv_has_its_columns_and_the_rows_in_report_order() {
        let out = render(&fixture::report(), TextFormat::BudgetsCsv);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], BUDGET_CSV_COLUMNS.join(","));
        assert_eq!(lines[1], "2026-10,vision,30.0000,36.0000,72.0000,1.2000,2.4000,15.5000,31.0000");
        assert_eq!(lines[2], "2026-10,ml-research,400.0000,245.0000,500.0000,0.6125,1.2500,15.5000,31.0000");
        assert_eq!(lines.len(), 3);
    }

    #[test]
    fn csv_quotes_awkward_team_names() {
        let mut report = fixture::report();
        report.chargeback[0].team = "research, \"core\"".into();
        let out = render(&report, TextFormat::Csv);
        let line = out.lines().nth(1).unwrap();
        assert!(line.starts_with("2026-10,\"research, \"\"core\"\"\","), "{line}");
        let f = parse_csv_line(line);
        assert_eq!(f.len(), CSV_COLUMNS.len());
        assert_eq!(f[1], "research, \"core\"");
    }

    #[test]
    fn json_round_trips() {
        let report = fixture::report();
        let v: serde_json::Value = serde_json::from_str(&render(&report, TextFormat::Json)).unwrap();
        assert_eq!(v["month"], "2026-10");
        assert_eq!(v["idle_policy"], "share");
        let rows = v["chargeback"].as_array().unwrap();
        assert_eq!(rows.len(), report.chargeback.len());
        for (j, r) in rows.iter().zip(&report.chargeback) {
            assert_eq!(j["team"], r.team.as_str());
            assert_eq!(j["total"].as_f64().unwrap(), r.total);
            assert_eq!(j["provisional_gpu_hours"].as_f64().unwrap(), r.provisional_gpu_hours);
            assert_eq!(j["cost_per_accepted_unit"].as_f64(), r.cost_per_accepted_unit);
        }
        assert!(rows[1]["cost_per_accepted_unit"].is_null());
        assert_eq!(v["usage"].as_array().unwrap().len(), report.usage.len());
        assert_eq!(v["queue_waits"][0]["p95_seconds"].as_f64().unwrap(), 7380.0);
        assert_eq!(v["budgets"][0]["team"], "vision");
        assert_eq!(v["budgets"][0]["forecast_ratio"].as_f64().unwrap(), 2.4);
        assert_eq!(v["energy"][0]["kwh"].as_f64().unwrap(), 95.2);
        assert!(v["energy"][1]["kwh_per_accepted_unit"].is_null());
    }

    #[test]
    fn table_shows_teams_totals_and_provisional_note() {
        let report = fixture::report();
        let out = render(&report, TextFormat::Table);
        assert!(out.starts_with("GPU chargeback 2026-10 (EUR, idle policy share)\n"), "{out}");
        for team in ["ml-research*", "platform", "vision"] {
            assert!(out.contains(team), "{team} missing:\n{out}");
        }
        assert!(!out.contains("platform*") && !out.contains("vision*"));
        assert!(out.contains("* provisional: 3.5 GPU-hours belong to runs still running; they settle when the runs end"));
        let total = out.lines().find(|l| l.starts_with("TOTAL")).unwrap();
        assert!(total.contains("290.50"), "{total}"); // 251 + 3.5 + 36
        // Numbers are right-aligned: every row's total ends where the header's `total` ends.
        let table: Vec<&str> = out.lines().skip(2).take_while(|l| !l.is_empty()).collect();
        let end = table[0].find("total").unwrap() + "total".len();
        for line in table.iter().skip(1).filter(|l| !l.starts_with("---")) {
            let b = line.as_bytes();
            assert!(b[end - 1].is_ascii_digit() && b.get(end).is_none_or(|&c| c == b' '), "misaligned: {line}");
        }
        assert!(out.contains("Top failure causes") && out.contains("OOMKilled"));
        // ml-research lost 9 h (5 failed + 4 preempted); the platform paid for 3 h of it, 6.00.
        let paid = out.split("Lost runs the platform paid for\n\n").nth(1).unwrap();
        let ml = paid.lines().find(|l| l.starts_with("ml-research")).unwrap();
        assert_eq!(ml.split_whitespace().collect::<Vec<_>>(), ["ml-research", "9.0", "3.0", "6.00"], "{paid}");
        assert!(!paid.split("\n\n").next().unwrap().contains("vision"), "{paid}");
        assert!(out.contains("Queue waits") && out.contains("4m12s") && out.contains("2h03m"));
        // Budgets: the team furthest over first, percentages of the budget, the status in words.
        let budgets = out.split("Budgets (EUR)\n\n").nth(1).unwrap();
        let rows: Vec<Vec<&str>> = budgets.lines().skip(2).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows[0], ["vision", "30.00", "36.00", "120%", "72.00", "240%", "15.5/31", "over", "budget"], "{budgets}");
        assert_eq!(rows[1], ["ml-research", "400.00", "245.00", "61%", "500.00", "125%", "15.5/31", "forecast", "over"], "{budgets}");
        // Energy: GPU and facility kWh, emissions, kWh per unit beside cost per unit.
        let energy = out.split("Energy (beside the cost, not in it)\n\n").nth(1).unwrap();
        let rows: Vec<Vec<&str>> = energy.lines().skip(2).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows[0][..4], ["ml-research", "95.2", "123.8", "43.3"], "{energy}");
        assert_eq!(rows[1][rows[1].len() - 2..], ["-", "-"], "{energy}");
        // Why idle comes right after the chargeback, then stranded capacity, then budgets.
        let (idle_at, pools_at, budgets_at, failures_at) = (
            out.find("Why GPUs were idle (EUR, costliest first)").unwrap(),
            out.find("Unallocated capacity by node pool").unwrap(),
            out.find("Budgets (EUR)").unwrap(),
            out.find("Top failure causes").unwrap(),
        );
        assert!(idle_at < pools_at && pools_at < budgets_at && budgets_at < failures_at, "{out}");
        let idle = out.split("Why GPUs were idle (EUR, costliest first)\n\n").nth(1).unwrap();
        let rows: Vec<Vec<&str>> = idle.lines().skip(2).take(5).map(|l| l.split_whitespace().collect()).collect();
        // Idle cost 46.00 in all: stall 17.50 is 38%, startup 5.00 is 11%.
        assert_eq!(rows[0][..7], ["1", "ml-research", "allocated_idle", "stall", "7.0", "17.50", "38%"], "{idle}");
        assert_eq!(rows[4][..7], ["5", "vision", "allocated_idle", "startup", "2.0", "5.00", "11%"], "{idle}");
        let pools = out.split("Unallocated capacity by node pool\n\n").nth(1).unwrap();
        let rows: Vec<Vec<&str>> = pools.lines().skip(2).take(2).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows[0], ["h100", "NVIDIA", "H100", "80GB", "HBM3", "6.0", "5.0", "83%", "10.00", "0.0"], "{pools}");
        assert_eq!(rows[1], ["-", "Tesla", "T4", "2.0", "0.0", "0%", "0.00", "0.0"], "{pools}");
    }

    #[test]
    fn idle_and_stranded_csv_have_their_columns_and_every_row() {
        let report = fixture::report();
        let out = render(&report, TextFormat::IdleCsv);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], IDLE_CSV_COLUMNS.join(","));
        assert_eq!(lines.len(), 1 + report.idle_reasons.len());
        assert_eq!(lines[1], "2026-10,ml-research,allocated_idle,stall,7.0000,17.5000,1");
        assert_eq!(lines[4], "2026-10,platform,unallocated,no_demand,3.0000,6.0000,4");
        // Each team's reasons add up to its idle hours in the chargeback.
        for r in &report.chargeback {
            let idle: f64 = report.idle_reasons.iter().filter(|i| i.team == r.team).map(|i| i.gpu_hours).sum();
            assert_eq!(idle, r.allocated_idle_gpu_hours + r.unallocated_gpu_hours, "{}", r.team);
        }
        let out = render(&report, TextFormat::StrandedCsv);
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            [STRANDED_CSV_COLUMNS.join(",").as_str(), "2026-10,h100,NVIDIA H100 80GB HBM3,6.0000,5.0000,10.0000,0.0000", "2026-10,,Tesla T4,2.0000,0.0000,0.0000,0.0000"]
        );
    }

    #[test]
    fn anomalies_csv_has_every_day_and_the_table_names_what_drove_a_flagged_one() {
        let report = fixture::report();
        let out = render(&report, TextFormat::AnomaliesCsv);
        assert_eq!(
            out.lines().collect::<Vec<_>>(),
            [
                ANOMALY_CSV_COLUMNS.join(",").as_str(),
                "2026-10-10,ml-research,31.5000,30.0000,6.0000,0.2500,false",
                "2026-10-10,vision,12.0000,,,,false",
                "2026-10-11,ml-research,150.0000,30.0000,6.0000,20.0000,true",
            ]
        );
        let table = render(&report, TextFormat::Table);
        let section = table.split("Spend anomalies (EUR, days far above the team's recent days)\n\n").nth(1).expect(&table);
        let rows: Vec<Vec<&str>> = section.lines().skip(2).take_while(|l| !l.is_empty()).map(|l| l.split_whitespace().collect()).collect();
        // Only the flagged day: 150 against 30, 20 spreads of 6 above it.
        assert_eq!(rows, [["2026-10-11", "ml-research", "150.00", "30.00", "6.00", "20.0", "10"]], "{section}");
        let drivers = table.split("What drove them (GPU and run against its own recent days)\n\n").nth(1).expect(&table);
        let rows: Vec<Vec<&str>> = drivers.lines().skip(2).take_while(|l| !l.is_empty()).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows[0], ["2026-10-11", "ml-research", "1", "gpu-h100-0", "GPU-aa", "ml-research/pod/notebook-x", "notebook-x", "60.00", "0.00", "60.00"], "{drivers}");
        assert_eq!(rows.len(), 2);
        // Stranded capacity comes before the anomalies, budgets after.
        let (pools, anomalies, budgets) = (table.find("Unallocated capacity").unwrap(), table.find("Spend anomalies").unwrap(), table.find("Budgets (EUR)").unwrap());
        assert!(pools < anomalies && anomalies < budgets);
        // Without a flagged day there is no section.
        let mut calm = fixture::report();
        calm.anomalies.retain(|a| !a.flagged);
        calm.anomaly_drivers.clear();
        assert!(!render(&calm, TextFormat::Markdown).contains("Spend anomalies"));
        assert!(render(&report, TextFormat::Markdown).contains("## Spend anomalies"));
    }

    #[test]
    fn quota_csv_and_section_list_every_queue() {
        let report = fixture::report();
        assert_eq!(
            render(&report, TextFormat::QuotaCsv).lines().collect::<Vec<_>>(),
            [
                QUOTA_CSV_COLUMNS.join(",").as_str(),
                "2026-10,cq-batch,platform,l4,40.0000,40.0000,0.0000,0.0000,0.0000",
                "2026-10,cq-research,ml-research,h100,100.0000,80.0000,5.0000,25.0000,10.0000",
            ]
        );
        let table = render(&report, TextFormat::Table);
        let section = table.split("GPU quota by ClusterQueue (GPU-hours; unused cost in EUR)\n\n").nth(1).expect(&table);
        let rows: Vec<Vec<&str>> = section.lines().skip(2).take_while(|l| !l.is_empty()).map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows[1], ["cq-research", "ml-research", "h100", "100.0", "80.0", "80%", "5.0", "25.0", "10.00"], "{section}");
        let mut none = fixture::report();
        none.quota.clear();
        assert!(!render(&none, TextFormat::Table).contains("GPU quota"));
    }

    #[test]
    fn no_provisional_note_when_all_runs_settled() {
        let report = fixture::settled();
        for format in [TextFormat::Table, TextFormat::Markdown] {
            let out = render(&report, format);
            assert!(!out.contains("provisional"), "{out}");
            assert!(!out.contains("ml-research*") && !out.contains("ml-research\\*"));
        }
    }

    #[test]
    fn markdown_tables_and_escaping() {
        let mut report = fixture::report();
        report.chargeback[2].team = "vision|eu".into();
        let out = render(&report, TextFormat::Markdown);
        assert!(out.starts_with("# GPU chargeback 2026-10"));
        assert!(out.contains("\n## Top failure causes\n") && out.contains("\n## Queue waits\n"));
        assert!(out.contains("| ml-research\\* |"), "{out}");
        assert!(out.contains("| platform |") && out.contains("| vision\\|eu |"));
        assert!(out.contains("| **TOTAL** |"));
        assert!(out.contains("\\* provisional: 3.5 GPU-hours belong to runs still running"));
        // Header, alignment row, 3 teams, total: every line has the same number of cells.
        let cells = |l: &str| l.replace("\\|", "").matches('|').count();
        let lines: Vec<&str> = out.lines().skip_while(|l| !l.contains("compute")).take(6).collect();
        assert!(lines.iter().all(|l| cells(l) == 17), "{lines:?}");
    }

    #[test]
    fn number_formats() {
        assert_eq!(grouped(1234567.891, 2), "1,234,567.89");
        assert_eq!(grouped(-1234.5, 1), "-1,234.5");
        assert_eq!(grouped(-0.001, 2), "0.00");
        assert_eq!(grouped(999.0, 0), "999");
        assert_eq!(per_unit_fmt(0.000251), "0.000251");
        assert_eq!(per_unit_fmt(0.251), "0.251");
        assert_eq!(per_unit_fmt(12.5), "12.50");
        assert_eq!(per_unit_fmt(0.72), "0.72");
        assert_eq!(per_unit_fmt(0.00025), "0.00025");
        assert_eq!(duration_fmt(42.4), "42s");
        assert_eq!(duration_fmt(252.0), "4m12s");
        assert_eq!(duration_fmt(7380.0), "2h03m");
        assert_eq!(duration_fmt(f64::NAN), "-");
    }
}
