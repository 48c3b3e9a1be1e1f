//! The report as one self-contained HTML page for finance readers.
//!
//! Everything is inline: a small stylesheet, and charts drawn as SVG by this module (no
//! JavaScript, no fonts, images or stylesheets fetched from anywhere), so the file can be
//! mailed, archived and opened offline, and prints as it shows. Every string that comes from
//! the data (team names, queues, causes) is HTML-escaped.

use std::collections::BTreeMap;

use super::text::{duration_fmt, grouped, hours_fmt, kwh_fmt, money_fmt, or_dash, per_unit_fmt, percent_fmt, provisional_note, score_fmt, units_fmt};
use super::{BudgetStatus, CSV_COLUMNS, ChargebackRow, Report, State};

/// GPU states in chart order, with their fixed colours.
const STATES: [(&str, &str); 5] =
    [("productive", "#2e7d32"), ("allocated idle", "#f9a825"), ("failed", "#c62828"), ("preempted", "#6a1b9a"), ("unallocated", "#9e9e9e")];

/// Idle reasons in chart order (allocated idle first, then unallocated), with fixed colours:
/// warm for a team's own idle time, cool and grey for the platform's.
const REASONS: [(&str, &str); 6] = [
    ("startup", "#fbc02d"),
    ("stall", "#ef6c00"),
    ("teardown", "#a1887f"),
    ("cordoned", "#546e7a"),
    ("stranded", "#1565c0"),
    ("no demand", "#bdbdbd"),
];

/// Cost components in chart order, with their fixed colours.
const COMPONENTS: [(&str, &str); 7] = [
    ("compute", "#1565c0"),
    ("network", "#00838f"),
    ("storage", "#6d4c41"),
    ("support", "#7e57c2"),
    ("idle", "#f9a825"),
    ("failed runs", "#c62828"),
    ("operations", "#546e7a"),
];

/// How many failure causes the page lists and charts.
const TOP_CAUSES: usize = 10;

const STYLE: &str = "\
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;color:#222;margin:2em auto;max-width:1200px;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.8em;border-bottom:1px solid #ccc}
.meta{color:#555;margin-top:0}.note{background:#fff8e1;border-left:4px solid #f9a825;padding:.4em .8em}
.wide{overflow-x:auto}table{border-collapse:collapse;font-size:13px;margin:.5em 0}
th,td{padding:.25em .6em;border-bottom:1px solid #e0e0e0}td{white-space:nowrap}
th{background:#f5f5f5;text-align:left;vertical-align:bottom}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
tfoot td{font-weight:bold;border-top:2px solid #999}
.prov{color:#e65100;font-weight:bold}.over{color:#c62828;font-weight:bold}
svg{max-width:100%;height:auto;display:block;margin:.5em 0}svg text{font-family:system-ui,sans-serif;font-size:12px;fill:#222}
@media print{body{margin:0;max-width:none}section{break-inside:avoid}*{-webkit-print-color-adjust:exact;print-color-adjust:exact}}
";

/// Renders `report` as a complete HTML5 document.
pub fn render(report: &Report) -> String {
    let mut h = String::with_capacity(32 * 1024);
    let title = format!("GPU chargeback {}", report.month);
    h.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    h.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n");
    h.push_str(&format!("<title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n", esc(&title)));
    h.push_str(&format!("<h1>{}</h1>\n", esc(&title)));
    h.push_str(&format!(
        "<p class=\"meta\">Currency {} &middot; idle policy <b>{}</b> &middot; total {} {}</p>\n",
        esc(&report.currency),
        esc(report.idle_policy.as_str()),
        esc(&money_fmt(report.total())),
        esc(&report.currency),
    ));
    let provisional = report.provisional_gpu_hours();
    if provisional > 0.0 {
        h.push_str(&format!("<p class=\"note\"><span class=\"prov\">*</span> {}</p>\n", esc(&provisional_note(provisional))));
    }

    // Why GPUs were idle leads: it is the first question a platform team asks of the month.
    if !report.idle_reasons.is_empty() {
        section(&mut h, &format!("Why GPUs were idle ({})", report.currency), &idle_section(report));
    }
    section(&mut h, "Chargeback", &chargeback_table(report));
    if !report.budgets.is_empty() {
        section(&mut h, &format!("Budgets ({})", report.currency), &budget_table(report));
    }
    if !report.quota.is_empty() {
        section(&mut h, &format!("GPU quota by ClusterQueue ({})", report.currency), &quota_table(report));
    }
    if report.flagged_days().next().is_some() {
        section(&mut h, &format!("Spend anomalies ({})", report.currency), &anomaly_tables(report));
    }
    section(&mut h, "GPU-hours by state", &hours_chart(report));
    section(&mut h, &format!("Cost by component ({})", report.currency), &cost_chart(report));
    section(&mut h, &format!("Cost per accepted unit ({})", report.currency), &per_unit_chart(report));
    if !report.failure_causes.is_empty() {
        section(&mut h, "Top failure causes", &failures(report));
    }
    if !report.queue_waits.is_empty() {
        section(&mut h, "Queue waits", &queue_table(report));
    }
    if report.energy.iter().any(|e| e.kwh > 0.0) {
        section(&mut h, "Energy (beside the cost, not in it)", &energy_table(report));
    }
    h.push_str("</body>\n</html>\n");
    h
}

fn section(h: &mut String, title: &str, body: &str) {
    h.push_str(&format!("<section>\n<h2>{}</h2>\n{body}</section>\n", esc(title)));
}

/// Escapes text for HTML content and attribute values alike.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

fn provisional(r: &ChargebackRow) -> bool {
    r.provisional_gpu_hours > 0.0
}

/// The team cell: the name, and a marker with the provisional hours when there are some.
fn team_cell(r: &ChargebackRow) -> String {
    if provisional(r) {
        format!(
            "{}<span class=\"prov\" title=\"{} provisional GPU-hours\">*</span>",
            esc(&r.team),
            esc(&hours_fmt(r.provisional_gpu_hours))
        )
    } else {
        esc(&r.team)
    }
}

/// One `<td>` per CSV column, numbers right-aligned.
fn chargeback_table(report: &Report) -> String {
    let mut t = String::from("<div class=\"wide\"><table>\n<thead><tr>");
    for (i, c) in CSV_COLUMNS.iter().enumerate() {
        let class = if i >= 2 { " class=\"n\"" } else { "" };
        t.push_str(&format!("<th{class}>{}</th>", esc(&column_title(c))));
    }
    t.push_str("</tr></thead>\n<tbody>\n");
    let num = |v: String| format!("<td class=\"n\">{}</td>", esc(&v));
    for r in &report.chargeback {
        t.push_str(&format!("<tr><td>{}</td><td>{}</td>", esc(&r.month), team_cell(r)));
        for v in r.state_hours() {
            t.push_str(&num(hours_fmt(v)));
        }
        for v in r.cost_components() {
            t.push_str(&num(money_fmt(v)));
        }
        t.push_str(&num(money_fmt(r.total)));
        t.push_str(&num(units_fmt(r.accepted_units)));
        t.push_str(&num(r.cost_per_accepted_unit.map(per_unit_fmt).unwrap_or_else(|| "no units".into())));
        t.push_str(&num(hours_fmt(r.lost_gpu_hours_platform_paid)));
        t.push_str(&num(money_fmt(r.lost_cost_platform_paid)));
        t.push_str("</tr>\n");
    }
    t.push_str("</tbody>\n<tfoot><tr><td></td><td>TOTAL</td>");
    let mut hour_totals = [0.0; 5];
    let mut cost_totals = [0.0; 7];
    for r in &report.chargeback {
        hour_totals.iter_mut().zip(r.state_hours()).for_each(|(t, v)| *t += v);
        cost_totals.iter_mut().zip(r.cost_components()).for_each(|(t, v)| *t += v);
    }
    for v in hour_totals {
        t.push_str(&num(hours_fmt(v)));
    }
    for v in cost_totals {
        t.push_str(&num(money_fmt(v)));
    }
    t.push_str(&num(money_fmt(report.total())));
    // Units differ between teams (tokens, images...), so they have no total.
    t.push_str("<td></td><td></td>");
    let paid_hours: f64 = report.chargeback.iter().map(|r| r.lost_gpu_hours_platform_paid).sum();
    let paid_cost: f64 = report.chargeback.iter().map(|r| r.lost_cost_platform_paid).sum();
    t.push_str(&num(hours_fmt(paid_hours)));
    t.push_str(&num(money_fmt(paid_cost)));
    t.push_str("</tr></tfoot>\n</table></div>\n");
    if paid_hours > 0.0 || paid_cost > 0.0 {
        t.push_str(&format!(
            "<p class=\"note paid\">The platform paid for {} lost GPU-hours ({} {}) of the teams' failed and preempted runs: \
             hardware faults (or preemptions, where configured so). The hours stay the teams'; the cost is in platform's failed runs.</p>\n",
            esc(&hours_fmt(paid_hours)),
            esc(&money_fmt(paid_cost)),
            esc(&report.currency)
        ));
    }
    t
}

/// A CSV column name as a header people read: `productive_gpu_hours` -> `productive GPU hours`.
fn column_title(column: &str) -> String {
    column.split('_').map(|w| if w == "gpu" { "GPU" } else { w }).collect::<Vec<_>>().join(" ")
}

fn hours_chart(report: &Report) -> String {
    let bars: Vec<Bar> = report
        .chargeback
        .iter()
        .map(|r| {
            let values = r.state_hours().to_vec();
            let end = format!("{} h{}", hours_fmt(values.iter().sum()), if provisional(r) { " *" } else { "" });
            Bar { label: r.team.clone(), values, end }
        })
        .collect();
    Chart { series: &STATES, bars, value: &|v| format!("{} GPU-hours", hours_fmt(v)), title: "GPU-hours by state and team" }.svg()
}

fn cost_chart(report: &Report) -> String {
    let currency = report.currency.as_str();
    let bars: Vec<Bar> =
        report.chargeback.iter().map(|r| Bar { label: r.team.clone(), values: r.cost_components().to_vec(), end: money_fmt(r.total) }).collect();
    Chart { series: &COMPONENTS, bars, value: &|v| format!("{} {currency}", money_fmt(v)), title: "Cost by component and team" }.svg()
}

fn per_unit_chart(report: &Report) -> String {
    // Which units a team delivered, to say what "per unit" means on its bar.
    let mut unit_names: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for u in &report.units {
        let names = unit_names.entry(u.team.as_str()).or_default();
        if !names.contains(&u.unit.as_str()) {
            names.push(u.unit.as_str());
        }
    }
    let currency = report.currency.as_str();
    let bars: Vec<Bar> = report
        .chargeback
        .iter()
        .map(|r| match r.cost_per_accepted_unit {
            Some(v) => {
                let units = unit_names.get(r.team.as_str()).map(|n| format!(" ({})", n.join(", "))).unwrap_or_default();
                Bar { label: r.team.clone(), values: vec![v], end: format!("{} {currency}/unit{units}", per_unit_fmt(v)) }
            }
            None => Bar { label: r.team.clone(), values: Vec::new(), end: "no units".into() },
        })
        .collect();
    Chart {
        series: &[("cost per unit", "#1565c0")],
        bars,
        value: &|v| format!("{} {currency}", per_unit_fmt(v)),
        title: "Cost per accepted unit by team",
    }
    .svg()
}

fn failures(report: &Report) -> String {
    let top = report.failure_causes.iter().take(TOP_CAUSES);
    let mut t =
        String::from("<table>\n<thead><tr><th>outcome</th><th>cause</th><th class=\"n\">segments</th><th class=\"n\">GPU-hours</th>");
    t.push_str(&format!("<th class=\"n\">wasted cost ({})</th></tr></thead>\n<tbody>\n", esc(&report.currency)));
    for f in top.clone() {
        t.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
            esc(f.outcome.as_str()),
            esc(&f.cause),
            f.segments,
            esc(&hours_fmt(f.gpu_hours)),
            esc(&money_fmt(f.cost))
        ));
    }
    t.push_str("</tbody>\n</table>\n");
    let currency = report.currency.as_str();
    // One series per outcome, so failures and preemptions keep their colours from the hours chart.
    let series = [("failed", "#c62828"), ("preempted", "#6a1b9a")];
    let bars = top
        .map(|f| {
            let preempted = f.outcome == State::Preempted;
            Bar {
                label: format!("{} ({})", f.cause, f.outcome),
                values: if preempted { vec![0.0, f.cost] } else { vec![f.cost, 0.0] },
                end: money_fmt(f.cost),
            }
        })
        .collect();
    t.push_str(
        &Chart { series: &series, bars, value: &|v| format!("{} {currency}", money_fmt(v)), title: "Wasted cost by failure cause" }.svg(),
    );
    t
}

/// The idle cost per team split by reason (a chart), the ranking (a table) and the unallocated
/// capacity per node pool with its stranded share.
fn idle_section(report: &Report) -> String {
    let currency = report.currency.as_str();
    let mut teams: BTreeMap<&str, [f64; 6]> = BTreeMap::new();
    for r in &report.idle_reasons {
        teams.entry(r.team.as_str()).or_default()[r.reason.index()] += r.cost;
    }
    let bars = teams
        .into_iter()
        .map(|(team, values)| Bar { label: team.to_owned(), end: format!("{} {currency}", money_fmt(values.iter().sum())), values: values.to_vec() })
        .collect();
    let mut t = Chart { series: &REASONS, bars, value: &|v| format!("{} {currency}", money_fmt(v)), title: "Idle cost by team and reason" }.svg();
    let idle_cost = report.idle_cost();
    t.push_str("<table>\n<thead><tr><th class=\"n\">#</th><th>team</th><th>state</th><th>reason</th><th class=\"n\">GPU-hours</th>");
    t.push_str("<th class=\"n\">cost</th><th class=\"n\">of idle cost</th><th>meaning</th></tr></thead>\n<tbody>\n");
    for r in &report.idle_reasons {
        t.push_str(&format!(
            "<tr><td class=\"n\">{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
            r.rank,
            esc(&r.team),
            esc(r.state.as_str()),
            esc(r.reason.as_str()),
            esc(&hours_fmt(r.gpu_hours)),
            esc(&money_fmt(r.cost)),
            esc(&or_dash(r.share_of(idle_cost), percent_fmt)),
            esc(r.reason.meaning()),
        ));
    }
    t.push_str("</tbody>\n</table>\n");
    if report.stranded.iter().any(|r| r.unallocated_gpu_hours > 0.0) {
        t.push_str("<table>\n<thead><tr><th>node pool</th><th>GPU model</th><th class=\"n\">unallocated GPU-hours</th><th class=\"n\">stranded</th>");
        t.push_str("<th class=\"n\">stranded share</th><th class=\"n\">stranded cost</th><th class=\"n\">cordoned</th></tr></thead>\n<tbody>\n");
        for r in &report.stranded {
            t.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                esc(r.pool.as_deref().unwrap_or("-")),
                esc(&r.model_name),
                esc(&hours_fmt(r.unallocated_gpu_hours)),
                esc(&hours_fmt(r.stranded_gpu_hours)),
                esc(&or_dash(r.stranded_share(), percent_fmt)),
                esc(&money_fmt(r.stranded_cost)),
                esc(&hours_fmt(r.cordoned_gpu_hours)),
            ));
        }
        t.push_str("</tbody>\n</table>\n");
    }
    t
}

/// Each ClusterQueue's nominal GPU quota per flavor: used (with its share), borrowed, unused and
/// the unused part's cost.
fn quota_table(report: &Report) -> String {
    let mut t = String::from("<p>Nominal GPU quota as GPU-hours; unused cost is the unallocated cost the <code>quota</code> idle policy charges the owner for it.</p>\n");
    t.push_str("<table>\n<thead><tr><th>ClusterQueue</th><th>owner</th><th>flavor</th><th class=\"n\">nominal</th><th class=\"n\">used</th>");
    t.push_str("<th class=\"n\">used share</th><th class=\"n\">borrowed</th><th class=\"n\">unused</th><th class=\"n\">unused cost</th></tr></thead>\n<tbody>\n");
    for q in &report.quota {
        t.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
            esc(&q.cluster_queue),
            esc(&q.team),
            esc(&q.flavor),
            esc(&hours_fmt(q.nominal_gpu_hours)),
            esc(&hours_fmt(q.used_gpu_hours)),
            esc(&or_dash(q.used_share(), percent_fmt)),
            esc(&hours_fmt(q.borrowed_gpu_hours)),
            esc(&hours_fmt(q.unused_gpu_hours)),
            esc(&money_fmt(q.unused_cost)),
        ));
    }
    t.push_str("</tbody>\n</table>\n");
    t
}

/// The flagged days (the day's cost against the team's baseline and how many spreads above it),
/// then the GPUs and runs behind each, largest increase first.
fn anomaly_tables(report: &Report) -> String {
    let mut t = String::from("<p>Days whose cost is at least <code>[anomalies] k</code> spreads above the median of the team's previous 14 observed days.</p>\n");
    t.push_str("<table>\n<thead><tr><th>day</th><th>team</th><th class=\"n\">cost</th><th class=\"n\">baseline</th><th class=\"n\">spread</th>");
    t.push_str("<th class=\"n\">score</th><th class=\"n\">baseline days</th></tr></thead>\n<tbody>\n");
    for a in report.flagged_days() {
        t.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\"><span class=\"over\">{}</span></td><td class=\"n\">{}</td></tr>\n",
            esc(&a.day),
            esc(&a.team),
            esc(&money_fmt(a.cost)),
            esc(&or_dash(a.baseline, money_fmt)),
            esc(&or_dash(a.spread, money_fmt)),
            esc(&or_dash(a.score, score_fmt)),
            a.baseline_days,
        ));
    }
    t.push_str("</tbody>\n</table>\n");
    if !report.anomaly_drivers.is_empty() {
        t.push_str("<p>What drove them: each GPU and run of the team against its own median over the same baseline days (a GPU's UUID in full on hover).</p>\n");
        t.push_str("<table>\n<thead><tr><th>day</th><th>team</th><th class=\"n\">#</th><th>node</th><th>GPU</th><th>run</th><th>pod</th>");
        t.push_str("<th class=\"n\">cost</th><th class=\"n\">its baseline</th><th class=\"n\">increase</th></tr></thead>\n<tbody>\n");
        let dash = |v: &Option<String>| esc(v.as_deref().unwrap_or("-"));
        for d in &report.anomaly_drivers {
            let uuid = d.uuid.as_deref().unwrap_or("-");
            // `GPU-` and the first 8 hex digits tell a node's GPUs apart; the rest only widens the table.
            let short = uuid.get(..12).filter(|_| uuid.len() > 13).map_or_else(|| uuid.to_owned(), |s| format!("{s}\u{2026}"));
            t.push_str(&format!(
                "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td><td title=\"{}\">{}</td><td title=\"namespace {}\">{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                esc(&d.day),
                esc(&d.team),
                d.rank,
                dash(&d.node),
                esc(uuid),
                esc(&short),
                dash(&d.namespace),
                dash(&d.run),
                dash(&d.pod),
                esc(&money_fmt(d.cost)),
                esc(&money_fmt(d.baseline)),
                esc(&money_fmt(d.increase)),
            ));
        }
        t.push_str("</tbody>\n</table>\n");
    }
    t
}

/// Budgets: a table, and a chart of each team's spend and forecast in % of its budget, where
/// a bar past 100 is a team heading over.
fn budget_table(report: &Report) -> String {
    let mut t = String::from("<table>\n<thead><tr><th>team</th><th class=\"n\">budget</th><th class=\"n\">spent</th><th class=\"n\">used</th>");
    t.push_str("<th class=\"n\">forecast</th><th class=\"n\">forecast used</th><th class=\"n\">days of data</th><th>status</th></tr></thead>\n<tbody>\n");
    for b in &report.budgets {
        let status = match b.status() {
            BudgetStatus::Within => esc(BudgetStatus::Within.as_str()),
            over => format!("<span class=\"over\">{}</span>", esc(over.as_str())),
        };
        t.push_str(&format!(
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{} of {}</td><td>{status}</td></tr>\n",
            esc(&b.team),
            esc(&money_fmt(b.budget)),
            esc(&money_fmt(b.spend)),
            esc(&percent_fmt(b.used_ratio)),
            esc(&money_fmt(b.forecast)),
            esc(&percent_fmt(b.forecast_ratio)),
            esc(&grouped(b.elapsed_days, 1)),
            esc(&grouped(b.month_days, 0)),
        ));
    }
    t.push_str("</tbody>\n</table>\n");
    let series = [("spent", "#1565c0"), ("forecast to month end", "#90caf9")];
    let bars = report
        .budgets
        .iter()
        .map(|b| Bar {
            label: b.team.clone(),
            values: vec![b.used_ratio * 100.0, (b.forecast_ratio - b.used_ratio).max(0.0) * 100.0],
            end: format!("{} / {}", percent_fmt(b.used_ratio), percent_fmt(b.forecast_ratio)),
        })
        .collect();
    t.push_str(&Chart { series: &series, bars, value: &|v| format!("{}% of budget", grouped(v, 0)), title: "Budget used and forecast (% of budget)" }.svg());
    t
}

/// Energy per team: a table with kWh per accepted unit beside cost per accepted unit, and a
/// chart of GPU kWh by team.
fn energy_table(report: &Report) -> String {
    let mut t = String::from("<table>\n<thead><tr><th>team</th><th class=\"n\">GPU kWh</th><th class=\"n\">facility kWh</th><th class=\"n\">kg CO2e</th>");
    t.push_str(&format!(
        "<th class=\"n\">kWh per accepted unit</th><th class=\"n\">cost per accepted unit ({})</th><th class=\"n\">GPU-hours measured</th></tr></thead>\n<tbody>\n",
        esc(&report.currency)
    ));
    for e in &report.energy {
        t.push_str(&format!(
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{} of {}</td></tr>\n",
            esc(&e.team),
            esc(&kwh_fmt(e.kwh)),
            esc(&kwh_fmt(e.facility_kwh)),
            esc(&or_dash(e.kg_co2e, kwh_fmt)),
            esc(&or_dash(e.kwh_per_accepted_unit, per_unit_fmt)),
            esc(&or_dash(e.cost_per_accepted_unit, per_unit_fmt)),
            esc(&hours_fmt(e.measured_gpu_hours)),
            esc(&hours_fmt(e.gpu_hours)),
        ));
    }
    t.push_str("</tbody>\n</table>\n");
    let series = [("GPU kWh", "#2e7d32")];
    let bars = report.energy.iter().map(|e| Bar { label: e.team.clone(), values: vec![e.kwh], end: format!("{} kWh", kwh_fmt(e.kwh)) }).collect();
    t.push_str(&Chart { series: &series, bars, value: &|v| format!("{} kWh", kwh_fmt(v)), title: "GPU energy by team (kWh)" }.svg());
    t
}

fn queue_table(report: &Report) -> String {
    let mut t = String::from("<table>\n<thead><tr><th>team</th><th>ClusterQueue</th><th class=\"n\">admissions</th>");
    t.push_str("<th class=\"n\">p50 wait</th><th class=\"n\">p95 wait</th><th class=\"n\">max wait</th><th class=\"n\">evictions</th><th>eviction reasons</th></tr></thead>\n<tbody>\n");
    for q in &report.queue_waits {
        t.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>\n",
            esc(&q.team),
            esc(&q.cluster_queue),
            q.admissions,
            duration_fmt(q.p50_seconds),
            duration_fmt(q.p95_seconds),
            duration_fmt(q.max_seconds),
            q.evictions,
            esc(&q.eviction_reasons)
        ));
    }
    t.push_str("</tbody>\n</table>\n");
    t
}

/// One horizontal bar: its label, its segments (one per series) and the text at its end.
struct Bar {
    label: String,
    values: Vec<f64>,
    end: String,
}

/// A horizontal (stacked) bar chart drawn as SVG.
struct Chart<'a> {
    series: &'a [(&'a str, &'a str)],
    bars: Vec<Bar>,
    /// Formats a value for the tooltips and axis.
    value: &'a dyn Fn(f64) -> String,
    title: &'a str,
}

const WIDTH: f64 = 900.0;
const LABEL_W: f64 = 180.0;
const PLOT_W: f64 = 520.0;
const ROW_H: f64 = 26.0;
const BAR_H: f64 = 18.0;
const LEGEND_H: f64 = 28.0;
const AXIS_H: f64 = 24.0;
const LABEL_CHARS: usize = 26;

impl Chart<'_> {
    fn svg(&self) -> String {
        if self.bars.is_empty() {
            return "<p>No data.</p>\n".into();
        }
        // Negative amounts (credits) are not drawn; the tables show them.
        let total = |b: &Bar| b.values.iter().map(|v| v.max(0.0)).sum::<f64>();
        let max = self.bars.iter().map(total).fold(0.0, f64::max);
        let (step, axis_max) = nice_axis(max);
        let legend = self.series.len() > 1;
        let top = if legend { LEGEND_H } else { 6.0 };
        let height = top + ROW_H * self.bars.len() as f64 + AXIS_H;
        let x = |v: f64| LABEL_W + v / axis_max * PLOT_W;

        let mut s = format!(
            "<svg viewBox=\"0 0 {WIDTH} {height:.0}\" width=\"{WIDTH}\" height=\"{height:.0}\" role=\"img\" aria-label=\"{}\">\n<title>{}</title>\n",
            esc(self.title),
            esc(self.title)
        );
        if legend {
            let mut lx = LABEL_W;
            for (name, colour) in self.series {
                s.push_str(&format!(
                    "<rect x=\"{lx:.1}\" y=\"8\" width=\"12\" height=\"12\" fill=\"{colour}\"/><text x=\"{:.1}\" y=\"18\">{}</text>\n",
                    lx + 16.0,
                    esc(name)
                ));
                lx += 16.0 + 7.0 * name.chars().count() as f64 + 18.0;
            }
        }
        // Grid lines and their values.
        let plot_bottom = top + ROW_H * self.bars.len() as f64;
        let mut tick = 0.0;
        while tick <= axis_max + step / 2.0 {
            let tx = x(tick);
            s.push_str(&format!(
                "<line x1=\"{tx:.1}\" y1=\"{top:.1}\" x2=\"{tx:.1}\" y2=\"{plot_bottom:.1}\" stroke=\"#ddd\"/><text x=\"{tx:.1}\" y=\"{:.1}\" text-anchor=\"middle\" fill=\"#666\">{}</text>\n",
                plot_bottom + 16.0,
                esc(&axis_label(tick, step))
            ));
            tick += step;
        }
        for (i, bar) in self.bars.iter().enumerate() {
            let y = top + ROW_H * i as f64 + (ROW_H - BAR_H) / 2.0;
            let text_y = y + BAR_H / 2.0 + 4.0;
            s.push_str(&format!(
                "<text x=\"{:.1}\" y=\"{text_y:.1}\" text-anchor=\"end\"><title>{}</title>{}</text>\n",
                LABEL_W - 8.0,
                esc(&bar.label),
                esc(&shorten(&bar.label))
            ));
            let mut start = 0.0;
            for (v, (name, colour)) in bar.values.iter().zip(self.series) {
                let v = v.max(0.0);
                if v == 0.0 {
                    continue;
                }
                let (x0, x1) = (x(start), x(start + v));
                s.push_str(&format!(
                    "<rect x=\"{x0:.1}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{BAR_H}\" fill=\"{colour}\"><title>{}: {} {}</title></rect>\n",
                    (x1 - x0).max(0.5),
                    esc(&bar.label),
                    esc(name),
                    esc(&(self.value)(v))
                ));
                start += v;
            }
            s.push_str(&format!("<text x=\"{:.1}\" y=\"{text_y:.1}\">{}</text>\n", x(start) + 6.0, esc(&bar.end)));
        }
        s.push_str("</svg>\n");
        s
    }
}

/// An axis from 0 with a round step (1, 2 or 5 times a power of ten) and about five ticks.
fn nice_axis(max: f64) -> (f64, f64) {
    if !max.is_finite() || max <= 0.0 {
        return (1.0, 1.0);
    }
    let raw = max / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = match raw / magnitude {
        n if n <= 1.0 => 1.0,
        n if n <= 2.0 => 2.0,
        n if n <= 5.0 => 5.0,
        _ => 10.0,
    } * magnitude;
    (step, (max / step).ceil() * step)
}

/// A tick value with as many decimals as the step needs.
fn axis_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 { 0 } else { (-step.log10().floor()) as usize };
    super::text::grouped(v, decimals)
}

/// Long labels are cut (the full text is in the tooltip).
fn shorten(s: &str) -> String {
    if s.chars().count() <= LABEL_CHARS { s.to_string() } else { format!("{}…", s.chars().take(LABEL_CHARS - 1).collect::<String>()) }
}

#[cfg(test)]
mod tests {
    use super::super::fixture;
    use super::*;

    #[test]
    fn page_is_self_contained_with_charts_and_every_team() {
        let report = fixture::report();
        let html = render(&report);
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(html.trim_end().ends_with("</html>"));
        for team in ["ml-research", "platform", "vision"] {
            assert!(html.contains(team), "{team} missing");
        }
        assert!(html.contains("The platform paid for 3.0 lost GPU-hours (6.00 EUR)"), "platform-paid note");
        assert!(html.contains("<th class=\"n\">lost cost platform paid</th>"));
        let opened = html.matches("<svg").count();
        assert_eq!(opened, 7, "why idle, budgets, hours, cost, per unit, failure causes, energy");
        // Why GPUs were idle leads the page: its chart, the ranking with shares of the idle
        // cost (46.00 in all), the node pools with their stranded share.
        let first = html.find("<h2>").unwrap();
        assert_eq!(html[first..].find("<h2>Why GPUs were idle (EUR)</h2>"), Some(0), "why idle comes first");
        let idle = html.split("<h2>Why GPUs were idle (EUR)</h2>").nth(1).unwrap().split("</section>").next().unwrap();
        assert!(idle.contains("Idle cost by team and reason"), "{idle}");
        assert!(idle.contains("<tr><td class=\"n\">1</td><td>ml-research</td><td>allocated_idle</td><td>stall</td><td class=\"n\">7.0</td><td class=\"n\">17.50</td><td class=\"n\">38%</td>"), "{idle}");
        assert_eq!(idle.matches("<tr><td class=\"n\">").count(), 5, "every idle row: {idle}");
        assert!(idle.contains("<tr><td>h100</td><td>NVIDIA H100 80GB HBM3</td><td class=\"n\">6.0</td><td class=\"n\">5.0</td><td class=\"n\">83%</td><td class=\"n\">10.00</td>"), "{idle}");
        // ml-research's bar stacks stall and teardown: 25.00 EUR.
        assert!(idle.contains("25.00 EUR"), "{idle}");
        let energy = html.split("<h2>Energy (beside the cost, not in it)</h2>").nth(1).unwrap();
        assert!(energy.contains("<td>ml-research</td><td class=\"n\">95.2</td><td class=\"n\">123.8</td><td class=\"n\">43.3</td>"), "{energy}");
        // Budgets come right after the chargeback, the team over its budget flagged.
        let budgets = html.split("<h2>Budgets (EUR)</h2>").nth(1).unwrap();
        assert!(html.find("<h2>Budgets").unwrap() < html.find("<h2>GPU-hours by state").unwrap());
        assert!(budgets.contains("<td>vision</td><td class=\"n\">30.00</td><td class=\"n\">36.00</td><td class=\"n\">120%</td>"), "{budgets}");
        assert!(budgets.contains("<span class=\"over\">over budget</span>") && budgets.contains("120% / 240%"));
        // Spend anomalies after the budgets: the flagged day, then the GPUs behind it.
        let anomalies = html.split("<h2>Spend anomalies (EUR)</h2>").nth(1).unwrap().split("</section>").next().unwrap();
        assert!(html.find("<h2>Budgets").unwrap() < html.find("<h2>Spend anomalies").unwrap());
        assert!(anomalies.contains("<tr><td>2026-10-11</td><td>ml-research</td><td class=\"n\">150.00</td><td class=\"n\">30.00</td><td class=\"n\">6.00</td><td class=\"n\"><span class=\"over\">20.0</span></td>"), "{anomalies}");
        assert!(!anomalies.contains("2026-10-10"), "unflagged days are not listed: {anomalies}");
        let quota = html.split("<h2>GPU quota by ClusterQueue (EUR)</h2>").nth(1).unwrap().split("</section>").next().unwrap();
        assert!(quota.contains("<tr><td>cq-research</td><td>ml-research</td><td>h100</td><td class=\"n\">100.0</td><td class=\"n\">80.0</td><td class=\"n\">80%</td><td class=\"n\">5.0</td><td class=\"n\">25.0</td><td class=\"n\">10.00</td></tr>"), "{quota}");
        assert!(anomalies.contains("<td>gpu-h100-0</td><td title=\"GPU-bb\">GPU-bb</td><td title=\"namespace ml-research\">pod/notebook-x</td><td>notebook-x</td><td class=\"n\">60.00</td>"), "{anomalies}");
        assert_eq!(opened, html.matches("</svg>").count());
        for tag in ["table", "section", "tr", "text", "title"] {
            assert_eq!(
                html.matches(&format!("<{tag}>")).count() + html.matches(&format!("<{tag} ")).count(),
                html.matches(&format!("</{tag}>")).count(),
                "<{tag}> unbalanced"
            );
        }
        assert!(!html.contains("http://") && !html.contains("https://"));
        assert!(!html.contains("<script") && !html.contains("<link") && !html.contains("<img") && !html.contains("url("));
        assert!(html.contains("GPU-hours belong to runs still running"));
        assert!(html.contains(">productive GPU hours</th>"));
        assert!(html.contains("no units"));
        assert!(html.contains("OOMKilled") && html.contains("4m12s") && html.contains("2h03m"));
        // Every CSV column has a header.
        for c in CSV_COLUMNS {
            assert!(html.contains(&format!(">{}</th>", column_title(c))), "{c}");
        }
        // ml-research is marked provisional, vision is not.
        assert!(html.contains("ml-research<span class=\"prov\""));
        assert!(!html.contains("vision<span class=\"prov\""));
    }

    #[test]
    fn a_long_gpu_uuid_is_shortened_with_the_whole_on_hover() {
        let mut report = fixture::report();
        report.anomaly_drivers[0].uuid = Some("GPU-19355ede-d83c-4947-add5-35a7236e4529".into());
        let html = render(&report);
        assert!(html.contains("<td title=\"GPU-19355ede-d83c-4947-add5-35a7236e4529\">GPU-19355ede\u{2026}</td>"), "{html}");
    }

    #[test]
    fn data_text_is_escaped() {
        let mut report = fixture::report();
        report.chargeback[2].team = "<script>alert('x')</script> & co".into();
        report.failure_causes[0].cause = "<b>OOM</b>".into();
        let html = render(&report);
        assert!(!html.contains("<script"));
        assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; co"));
        assert!(!html.contains("<b>OOM"));
        assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
    }

    #[test]
    fn no_note_when_settled_and_no_charts_without_teams() {
        let html = render(&fixture::settled());
        assert!(!html.contains("class=\"note\""));
        assert!(!html.contains("<span class=\"prov\""));

        let mut empty = fixture::report();
        empty.chargeback.clear();
        empty.failure_causes.clear();
        empty.queue_waits.clear();
        empty.budgets.clear();
        empty.energy.clear();
        empty.idle_reasons.clear();
        empty.stranded.clear();
        empty.anomalies.clear();
        empty.anomaly_drivers.clear();
        empty.quota.clear();
        let html = render(&empty);
        assert_eq!(html.matches("<svg").count(), 0);
        assert!(html.contains("No data."));
    }

    #[test]
    fn axis_is_round() {
        assert_eq!(nice_axis(290.5), (100.0, 300.0));
        assert_eq!(nice_axis(0.72), (0.2, 0.8));
        assert_eq!(nice_axis(0.0), (1.0, 1.0));
        assert_eq!(axis_label(0.4, 0.2), "0.4");
        assert_eq!(axis_label(2000.0, 500.0), "2,000");
    }
}
