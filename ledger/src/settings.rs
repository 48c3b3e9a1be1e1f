//! The settings that change figures: the configuration as the tables the SQL reads, and their
//! digest. A ledger run records the digest (and the settings reports label figures with) beside
//! its derived tables (`crate::record`); a report whose configuration gives the same digest reads
//! those tables instead of computing them again.

use std::collections::BTreeMap;
use std::hash::Hasher;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{Field, Schema};
use arrow::row::{RowConverter, SortField};
use xxhash_rust::xxh3::Xxh3;

use crate::config::{Config, IdlePolicy, Money};
use crate::error::Result;

/// The configuration as the small tables the SQL joins against (`queries/README.md`, "Inputs"),
/// each (name, rows). `idle_policy` overrides the configuration's (`report --idle-policy`).
pub fn config_tables(config: &Config, idle_policy: Option<IdlePolicy>) -> Result<Vec<(&'static str, RecordBatch)>> {
    let a = &config.accounting;
    let policy = idle_policy.unwrap_or(a.idle_policy);
    let settings = batch(vec![
        ("team_label", text(vec![Some(a.team_label.clone())])),
        ("idle_policy", text(vec![Some(policy.as_str().to_string())])),
        ("active_threshold_engine", float(vec![a.active_threshold_engine])),
        ("active_threshold_util", float(vec![a.active_threshold_util])),
        ("max_gap_factor", float(vec![a.max_gap_factor])),
        ("default_price", money(vec![config.prices.default])?),
        ("currency", text(vec![Some(a.currency.clone())])),
        ("hardware_failures", text(vec![Some(a.hardware_failures.as_str().to_string())])),
        ("preemptions", text(vec![Some(a.preemptions.as_str().to_string())])),
        ("pue", float(vec![config.energy.pue])),
        ("grid_gco2_per_kwh", Arc::new(Float64Array::from(vec![config.energy.grid_gco2_per_kwh])) as ArrayRef),
        ("anomaly_k", float(vec![config.anomalies.k])),
        ("sharing", text(vec![Some(a.sharing.as_str().to_string())])),
        ("dra_capacity_key", text(vec![Some(a.dra_capacity_key.clone())])),
    ])?;
    let gpu_device_classes = batch(vec![("device_class", text(a.gpu_device_classes.iter().map(|c| Some(c.clone())).collect()))])?;
    let gpu_resource_names = batch(vec![("resource", text(a.gpu_mapped_resources().into_iter().map(Some).collect()))])?;
    let xids = batch(vec![("xid", Arc::new(Int64Array::from(a.hardware_xids.clone())) as ArrayRef)])?;
    let labels = &config.prices.by_node_label;
    let by_label = batch(vec![
        ("rank", Arc::new(Int64Array::from_iter_values(0..labels.len() as i64)) as ArrayRef),
        ("label_key", text(labels.iter().map(|p| Some(p.label_key.clone())).collect())),
        ("label_value", text(labels.iter().map(|p| Some(p.label_value.clone())).collect())),
        ("price", money(labels.iter().map(|p| p.price).collect())?),
    ])?;
    let models = &config.prices.by_model;
    let by_model = batch(vec![
        ("model_name", text(models.iter().map(|(m, _)| Some(m.clone())).collect())),
        ("price", money(models.iter().map(|(_, p)| *p).collect())?),
    ])?;
    let mut o_month = Vec::new();
    let mut o_team = Vec::new();
    let mut o_component = Vec::new();
    let mut o_amount = Vec::new();
    for o in &config.overheads {
        for (component, amount) in [("network", o.network), ("storage", o.storage), ("support", o.support), ("operations", o.operations)] {
            if amount != Money::ZERO {
                o_month.push(Some(o.month.clone()));
                o_team.push(o.team.clone());
                o_component.push(Some(component.to_string()));
                o_amount.push(amount);
            }
        }
    }
    let overheads = batch(vec![("month", text(o_month)), ("team", text(o_team)), ("component", text(o_component)), ("amount", money(o_amount)?)])?;
    let u = &config.units;
    let extra_units = batch(vec![
        ("month", text(u.iter().map(|r| Some(r.month.clone())).collect())),
        ("team", text(u.iter().map(|r| Some(r.team.clone())).collect())),
        ("unit", text(u.iter().map(|r| Some(r.unit.clone())).collect())),
        ("accepted_units", float(u.iter().map(|r| r.accepted_units).collect())),
    ])?;
    let b = &config.budgets;
    let budgets = batch(vec![
        ("team", text(b.iter().map(|r| Some(r.team.clone())).collect())),
        ("month", text(b.iter().map(|r| r.month.clone()).collect())),
        ("amount", money(b.iter().map(|r| r.amount).collect())?),
    ])?;
    let q = &config.quota_owners;
    let quota_owners = batch(vec![
        ("cluster_queue", text(q.iter().map(|o| Some(o.cluster_queue.clone())).collect())),
        ("team", text(q.iter().map(|o| Some(o.team.clone())).collect())),
    ])?;
    let c = &config.unit_counters;
    let unit_counters = batch(vec![
        ("metric", text(c.iter().map(|u| Some(u.metric.clone())).collect())),
        ("unit", text(c.iter().map(|u| Some(u.unit.clone())).collect())),
        ("scale_numerator", Arc::new(Int64Array::from_iter_values(c.iter().map(|u| u.scale.numerator))) as ArrayRef),
        ("scale_denominator", Arc::new(Int64Array::from_iter_values(c.iter().map(|u| u.scale.denominator))) as ArrayRef),
        ("match_label", text(c.iter().map(|u| u.matcher.as_ref().map(|m| m.label.clone())).collect())),
        ("match_op", text(c.iter().map(|u| u.matcher.as_ref().map(|m| m.op.clone())).collect())),
        ("match_value", text(c.iter().map(|u| u.matcher.as_ref().map(|m| m.value.clone())).collect())),
    ])?;
    let tables = [
        ("settings", settings),
        ("price_by_node_label", by_label),
        ("price_by_model", by_model),
        ("overheads", overheads),
        ("extra_units", extra_units),
        ("hardware_xids", xids),
        ("budgets", budgets),
        ("quota_owners", quota_owners),
        ("unit_counters", unit_counters),
        ("gpu_device_classes", gpu_device_classes),
        ("gpu_resource_names", gpu_resource_names),
    ];
    Ok(tables.into())
}





pub(crate) fn text(values: Vec<Option<String>>) -> ArrayRef {
    Arc::new(StringArray::from(values))
}

pub(crate) fn float(values: Vec<f64>) -> ArrayRef {
    Arc::new(Float64Array::from(values))
}

/// Amounts of money (prices, overheads, budgets) as `DECIMAL(38, 6)`: exact micro-units, as the
/// SQL sums them.
pub(crate) fn money(values: Vec<Money>) -> Result<ArrayRef> {
    let micros = arrow::array::Decimal128Array::from_iter_values(values.into_iter().map(Money::micros));
    Ok(Arc::new(micros.with_precision_and_scale(gpuledger_engine::udf::money::MONEY_PRECISION, gpuledger_engine::udf::money::MONEY_SCALE)?))
}

/// One batch of the named columns, each nullable.
pub(crate) fn batch(columns: Vec<(&str, ArrayRef)>) -> Result<RecordBatch> {
    let fields: Vec<Field> = columns.iter().map(|(n, a)| Field::new(*n, a.data_type().clone(), true)).collect();
    let arrays = columns.into_iter().map(|(_, a)| a).collect();
    Ok(RecordBatch::try_new(Arc::new(Schema::new(fields)), arrays)?)
}

/// The digest of each thing that changes figures, by name: every configuration table, and the
/// accounting itself (the SQL and gpuledger's version). Hex, so that a record can be read.
pub fn digests(config: &Config, idle_policy: Option<IdlePolicy>) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for (name, b) in config_tables(config, idle_policy)? {
        out.insert(name.to_string(), hex(batch_digest(&b)?));
    }
    let mut h = Xxh3::new();
    h.write(env!("CARGO_PKG_VERSION").as_bytes());
    for (name, sql) in crate::queries::QUERY_FILES {
        h.write(name.as_bytes());
        h.write(sql.as_bytes());
    }
    out.insert("accounting SQL".to_string(), hex(h.finish()));
    Ok(out)
}

/// The digest of a batch's rows in order (configuration tables keep the file's order: it
/// decides, for one, which price rule wins).
fn batch_digest(b: &RecordBatch) -> Result<u64> {
    let fields = b.schema().fields().iter().map(|f| SortField::new(f.data_type().clone())).collect();
    let rows = RowConverter::new(fields)?.convert_columns(b.columns())?;
    let mut h = Xxh3::new();
    for f in b.schema().fields() {
        h.write(f.name().as_bytes());
        h.write(f.data_type().to_string().as_bytes());
    }
    for r in rows.iter() {
        h.write_u64(r.as_ref().len() as u64);
        h.write(r.as_ref());
    }
    Ok(h.finish())
}

fn hex(key: u64) -> String {
    format!("{key:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_that_changes_figures_changes_its_digest_and_only_its_own() {
        let base = Config::with_default_price(2.0);
        let same = digests(&base, None).unwrap();
        assert_eq!(same, digests(&Config::with_default_price(2.0), None).unwrap(), "the same settings, the same digests");
        let other_price = digests(&Config::with_default_price(2.5), None).unwrap();
        let changed: Vec<&String> = same.keys().filter(|k| same[*k] != other_price[*k]).collect();
        assert_eq!(changed, ["settings"], "the default price lives in `settings`");
        let share = digests(&base, Some(IdlePolicy::Share)).unwrap();
        assert_ne!(same["settings"], share["settings"], "an idle policy given on the command line counts");
        assert!(same.contains_key("accounting SQL") && same.contains_key("overheads"));
    }
}
