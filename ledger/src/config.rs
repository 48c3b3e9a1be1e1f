//! The ledger's configuration file (TOML): how GPU time is attributed to teams, what a GPU-hour
//! costs, which overheads come on top, and where extra accepted-unit counts come from.
//!
//! ```toml
//! [accounting]
//! team_label = "team"                 # label key read on pod, Workload, namespace
//! idle_policy = "platform"            # or "share", or "quota" (owners of unused quota pay)
//! active_threshold_engine = 0.05      # DCGM_FI_PROF_GR_ENGINE_ACTIVE, a 0-1 ratio
//! active_threshold_util = 5.0         # DCGM_FI_DEV_GPU_UTIL (percent), where engine activity is absent
//! max_gap_factor = 2.5                # a longer gap between samples is unobserved time
//! currency = "USD"
//! hardware_xids = [48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120]  # XID codes that are hardware faults
//! hardware_failures = "platform"      # who pays for runs lost to a hardware fault, or "team"
//! preemptions = "team"                # who pays for preempted runs, or "platform"
//! sharing = "even"                    # a time-sliced GPU's pods: "even" shares, or "measured" by their utilisation
//! gpu_device_classes = ["gpu.nvidia.com"]  # DRA DeviceClasses whose devices are whole GPUs
//! dra_capacity_key = "memory"         # consumedCapacity key that splits a device several claims share
//!
//! [[accounting.device_class_mappings]]  # Kueue's resources.deviceClassMappings, as configured there
//! name = "whole-gpus"                 # the resource name ClusterQueues and Workloads count
//! device_class_names = ["gpu.nvidia.com"]
//!
//! [prices]
//! default = 2.0                       # per GPU-hour; the only required key
//! [prices.by_model]                   # DCGM modelName -> price
//! "NVIDIA H100 80GB HBM3" = 2.49
//! [prices.by_node_label."gpuledger.io/pool"]   # node label key, then value -> price; beats by_model
//! spot-h100 = 1.10
//!
//! [[overheads]]                       # spread over teams by allocated GPU-hours
//! month = "2026-10"
//! network = 310.0
//!
//! [[overheads]]                       # with `team`: charged to that team directly
//! month = "2026-10"
//! team = "serving"
//! support = 50.0
//!
//! [units]
//! files = ["units.csv"]               # month,team,unit,accepted_units (CSV or .parquet)
//!
//! [[units.counters]]                  # accepted units from a counter pods expose
//! metric = "vllm:generation_tokens_total"
//! unit = "1M-tokens"
//! scale = 1e-6                        # units per counter increment (default 1)
//! match = 'finished_reason=~"stop|length"'   # optional: one label matcher, PromQL-style
//!
//! [[budgets]]                         # a team's monthly budget, in the currency above
//! team = "ml-research"
//! amount = 5000.0
//!
//! [[budgets]]                         # with `month`: that month only, beating the entry without
//! team = "ml-research"
//! month = "2026-12"
//! amount = 2500.0
//!
//! [energy]                            # reported beside the chargeback, never charged
//! pue = 1.3                           # facility energy per GPU energy (default 1.0)
//! grid_gco2_per_kwh = 350.0           # grid carbon intensity; without it, no emissions
//!
//! [anomalies]                         # spend anomalies (anomalies_daily)
//! k = 3.0                             # flag a day this many spreads above its baseline (default 3)
//!
//! [[quota.owners]]                    # a ClusterQueue's owner where it has no team label
//! cluster_queue = "cq-research"
//! team = "ml-research"
//!
//! [focus]                             # who bills whom in the FOCUS export; all optional
//! billing_account_id = "gpu-cluster"
//! billing_account_name = "GPU cluster"
//! provider_name = "GPU platform"      # who runs the cluster
//! invoice_issuer_name = "GPU platform"  # default: provider_name
//! publisher_name = "GPU platform"     # default: provider_name
//! ```
//!
//! The file is read by the one loader of `gpuledger-config`: every mistake is reported, all of
//! them in one run, as `<file>:<line>: <dotted.key>: <reason>`. Unknown keys are errors because a
//! misspelt key would otherwise fall back to its default without a word. This module checks the
//! ledger's sections; `[collector]` and `[serve]` are checked by their components on the same
//! [`Document`] (the binary runs all three).

use std::collections::BTreeMap;
use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Float64Type};
use serde::Deserialize;
use gpuledger_config::{Document, key_segment};
use toml::Spanned;

pub const DEFAULT_TEAM_LABEL: &str = "team";
pub const DEFAULT_ACTIVE_THRESHOLD_ENGINE: f64 = 0.05;
pub const DEFAULT_ACTIVE_THRESHOLD_UTIL: f64 = 5.0;
pub const DEFAULT_MAX_GAP_FACTOR: f64 = 2.5;
pub const DEFAULT_CURRENCY: &str = "USD";
/// XID codes that mean the hardware failed, not the job (docs/accounting.md "Who pays for lost runs"):
/// ECC and row remapping (48, 63, 64, 94, 95), GPU memory and NVLink faults (61, 62, 74, 92),
/// fallen off the bus (79), GSP errors (119, 120).
pub const DEFAULT_HARDWARE_XIDS: [i64; 12] = [48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120];

/// The columns of an extra-units file, in the order they are documented.
const UNIT_COLUMNS: [&str; 4] = ["month", "team", "unit", "accepted_units"];

/// Who carries the cost of GPU time that no team was allocated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IdlePolicy {
    /// It stays with the `platform` row of the chargeback.
    #[default]
    Platform,
    /// It is spread over the teams in proportion to their allocated GPU-hours.
    Share,
    /// The unallocated time of a flavor's nodes is charged to the owners of that flavor's
    /// unused nominal quota, in proportion and at most their unused GPU time; the rest stays
    /// with `platform` (queries/58_quota.sql).
    Quota,
}

impl IdlePolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            IdlePolicy::Platform => "platform",
            IdlePolicy::Share => "share",
            IdlePolicy::Quota => "quota",
        }
    }
}

impl std::fmt::Display for IdlePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An idle policy name that is neither `platform` nor `share`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown idle policy {0:?} (expected platform, share or quota)")]
pub struct UnknownIdlePolicy(pub String);

impl FromStr for IdlePolicy {
    type Err = UnknownIdlePolicy;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "platform" => Ok(IdlePolicy::Platform),
            "share" => Ok(IdlePolicy::Share),
            "quota" => Ok(IdlePolicy::Quota),
            other => Err(UnknownIdlePolicy(other.to_string())),
        }
    }
}

/// Who pays for a lost (failed or preempted) run's GPU time: the policy moves its cost, never
/// its hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payer {
    /// The platform team's `failed_runs` carries the cost.
    Platform,
    /// The run's own team carries it.
    Team,
}

impl Payer {
    pub fn as_str(self) -> &'static str {
        match self {
            Payer::Platform => "platform",
            Payer::Team => "team",
        }
    }
}

impl FromStr for Payer {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "platform" => Ok(Payer::Platform),
            "team" => Ok(Payer::Team),
            other => Err(format!("unknown payer {other:?} (expected platform or team)")),
        }
    }
}

/// How a time-sliced (or MPS) GPU's observation is split among the pods it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Sharing {
    /// 1/k each.
    #[default]
    Even,
    /// In proportion to each pod's own `DCGM_FI_DEV_GPU_UTIL`, where the exporter writes
    /// per-process values; even where they are all zero.
    Measured,
}

impl Sharing {
    pub fn as_str(self) -> &'static str {
        match self {
            Sharing::Even => "even",
            Sharing::Measured => "measured",
        }
    }
}

impl FromStr for Sharing {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "even" => Ok(Sharing::Even),
            "measured" => Ok(Sharing::Measured),
            other => Err(format!("unknown sharing {other:?} (expected even or measured)")),
        }
    }
}

/// One entry of Kueue's `resources.deviceClassMappings`: Kueue counts the devices of these
/// DeviceClasses as the resource `name` (in quotas and a Workload's usage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceClassMapping {
    pub name: String,
    pub device_class_names: Vec<String>,
}

/// The DeviceClass of NVIDIA's DRA driver for whole GPUs.
pub const DEFAULT_GPU_DEVICE_CLASSES: [&str; 1] = ["gpu.nvidia.com"];
/// The consumed capacity that splits a device several claims share.
pub const DEFAULT_DRA_CAPACITY_KEY: &str = "memory";

pub use gpuledger_config::{ConfigError, Problem};

/// An amount of the currency, exact to the micro-unit (6 decimals): a price, an overhead, a
/// budget. The file's numbers are read as written (`2.49` is 2.490000, not the float nearest to
/// it); a number with more than 6 decimals is refused rather than rounded, since no rule says
/// which way a configured amount should round. The SQL holds it as `DECIMAL(38, 6)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Money {
    micros: i128,
}

/// Why a configured number is not an amount of money.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MoneyError {
    #[error("{0} is not a finite number")]
    NotFinite(f64),
    #[error("{0} has more than 6 decimals: amounts are exact to the micro-unit (0.000001)")]
    TooPrecise(f64),
    #[error("{0} is too large for an amount (at most 32 digits before the decimal point)")]
    TooLarge(f64),
}

impl Money {
    pub const ZERO: Money = Money { micros: 0 };
    /// Micro-units in one unit of the currency.
    pub const MICROS_PER_UNIT: i128 = 1_000_000;

    pub const fn from_micros(micros: i128) -> Money {
        Money { micros }
    }

    /// The amount in micro-units (millionths of the currency).
    pub const fn micros(self) -> i128 {
        self.micros
    }

    /// The amount a TOML number spells. A float's shortest decimal spelling (what Rust prints,
    /// which reads back to the same float) is the number as the file wrote it for any literal
    /// of up to 15 significant digits, so `2.49` is exactly 2.490000. More than 6 decimals, a
    /// value beyond 10^32 or a non-finite one is an error.
    pub fn from_f64(value: f64) -> Result<Money, MoneyError> {
        if !value.is_finite() {
            return Err(MoneyError::NotFinite(value));
        }
        // Display never uses an exponent: 1e-7 prints as 0.0000001, 1e20 as 100000000000000000000.
        format!("{value}").parse::<Money>().map_err(|e| match e {
            MoneyError::TooPrecise(_) => MoneyError::TooPrecise(value),
            _ => MoneyError::TooLarge(value),
        })
    }

    /// `value` rounded to the nearest micro-unit (half away from zero): for an amount given in
    /// code rather than read from a file. A non-finite value or one beyond 10^32 is 0.
    pub fn rounded(value: f64) -> Money {
        let micros = (value * 1e6).round();
        if micros.is_finite() && micros.abs() < 1e38 { Money { micros: micros as i128 } } else { Money::ZERO }
    }

    /// The nearest float (for display; sums are taken in SQL on the exact amounts).
    pub fn to_f64(self) -> f64 {
        self.micros as f64 / 1e6
    }
}

impl FromStr for Money {
    type Err = MoneyError;

    /// A decimal spelled in digits (`2.49`, `-0.000001`, `100`): exact, at most 6 decimals and
    /// 32 digits before the point.
    fn from_str(s: &str) -> Result<Money, MoneyError> {
        let bad = || MoneyError::TooLarge(s.parse().unwrap_or(f64::NAN));
        let (negative, digits) = match s.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
        if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) || !fraction.bytes().all(|b| b.is_ascii_digit()) {
            return Err(MoneyError::NotFinite(s.parse().unwrap_or(f64::NAN)));
        }
        if fraction.len() > 6 {
            return Err(MoneyError::TooPrecise(s.parse().unwrap_or(f64::NAN)));
        }
        if whole.len() > 32 {
            return Err(bad());
        }
        let micros: i128 = format!("{whole}{fraction:0<6}").parse().map_err(|_| bad())?;
        Ok(Money { micros: if negative { -micros } else { micros } })
    }
}

impl std::fmt::Display for Money {
    /// The amount with its decimals, trailing zeros dropped: `2.49`, `100`, `-0.000001`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sign = if self.micros < 0 { "-" } else { "" };
        let (whole, fraction) = (self.micros.unsigned_abs() / 1_000_000, self.micros.unsigned_abs() % 1_000_000);
        if fraction == 0 {
            return write!(f, "{sign}{whole}");
        }
        let fraction = format!("{fraction:06}");
        write!(f, "{sign}{whole}.{}", fraction.trim_end_matches('0'))
    }
}

/// The whole configuration, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub accounting: Accounting,
    pub prices: Prices,
    /// In file order. Several entries for the same month and component add up.
    pub overheads: Vec<Overhead>,
    /// The rows of every `[units].files` file, file after file, in row order.
    pub units: Vec<ExtraUnits>,
    /// `[units].files`, resolved against the configuration file's directory.
    pub unit_files: Vec<PathBuf>,
    /// `[[units.counters]]`, in file order.
    pub unit_counters: Vec<UnitCounter>,
    /// In file order; at most one per team without a month and one per team and month.
    pub budgets: Vec<Budget>,
    pub energy: Energy,
    pub focus: FocusAccount,
    pub anomalies: Anomalies,
    /// `[[quota.owners]]`, in file order: the owner of a ClusterQueue without a team label.
    pub quota_owners: Vec<QuotaOwner>,
}

/// One `[[quota.owners]]` entry: who owns a ClusterQueue's nominal quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaOwner {
    pub cluster_queue: String,
    pub team: String,
}

/// `[anomalies]`: when a team's day of GPU cost is flagged against its own recent days.
#[derive(Debug, Clone, PartialEq)]
pub struct Anomalies {
    /// A day is flagged when its cost exceeds the median of its baseline days by at least `k`
    /// spreads (queries/69_anomalies.sql).
    pub k: f64,
}

impl Default for Anomalies {
    fn default() -> Self {
        Anomalies { k: 3.0 }
    }
}

/// `[energy]`: how GPU energy becomes facility energy and emissions.
#[derive(Debug, Clone, PartialEq)]
pub struct Energy {
    /// Power usage effectiveness: facility energy over IT energy, >= 1.
    pub pue: f64,
    /// Grams of CO2e per kWh of the grid; `None` reports no emissions.
    pub grid_gco2_per_kwh: Option<f64>,
}

impl Default for Energy {
    fn default() -> Self {
        Energy { pue: 1.0, grid_gco2_per_kwh: None }
    }
}

/// One `[[budgets]]` entry: what `team` may spend in a month (its chargeback total), in the
/// configured currency. With `month`, for that month only.
#[derive(Debug, Clone, PartialEq)]
pub struct Budget {
    pub team: String,
    /// `YYYY-MM`; `None` for every month without an entry of its own.
    pub month: Option<String>,
    pub amount: Money,
}

/// `[focus]`: the parties of the FOCUS export, which only the user knows. FOCUS requires them
/// on every row; a chargeback has no cloud provider, so the defaults name the cluster and the
/// team that runs it. The invoice issuer and the publisher default to the provider: the
/// platform team runs the GPUs and bills for them (were the issuer another party, FOCUS would
/// read the charges as a third party's and want BilledCost 0).
#[derive(Debug, Clone, PartialEq)]
pub struct FocusAccount {
    pub billing_account_id: String,
    pub billing_account_name: String,
    pub provider_name: String,
    pub invoice_issuer_name: String,
    pub publisher_name: String,
}

pub const DEFAULT_BILLING_ACCOUNT_ID: &str = "gpu-cluster";
pub const DEFAULT_BILLING_ACCOUNT_NAME: &str = "GPU cluster";
pub const DEFAULT_PROVIDER_NAME: &str = "GPU platform";

impl Default for FocusAccount {
    fn default() -> Self {
        FocusAccount {
            billing_account_id: DEFAULT_BILLING_ACCOUNT_ID.into(),
            billing_account_name: DEFAULT_BILLING_ACCOUNT_NAME.into(),
            provider_name: DEFAULT_PROVIDER_NAME.into(),
            invoice_issuer_name: DEFAULT_PROVIDER_NAME.into(),
            publisher_name: DEFAULT_PROVIDER_NAME.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Accounting {
    /// Label key read on pod, Workload and namespace to find a team.
    pub team_label: String,
    pub idle_policy: IdlePolicy,
    /// A GPU sample counts as active at `DCGM_FI_PROF_GR_ENGINE_ACTIVE` >= this (0-1).
    pub active_threshold_engine: f64,
    /// Used where engine activity is not exported: active at `DCGM_FI_DEV_GPU_UTIL` >= this (0-100).
    pub active_threshold_util: f64,
    /// A gap between samples longer than this many scrape intervals is not counted as GPU time.
    pub max_gap_factor: f64,
    /// ISO 4217 code, three uppercase letters.
    pub currency: String,
    /// XID codes that make a lost run the platform's fault.
    pub hardware_xids: Vec<i64>,
    /// Who pays for runs lost to a hardware fault (default: the platform).
    pub hardware_failures: Payer,
    /// Who pays for preempted runs (default: their team).
    pub preemptions: Payer,
    /// How a shared GPU's observation is split among its pods.
    pub sharing: Sharing,
    /// DRA DeviceClasses whose devices are whole GPUs (demand, GPU runs).
    pub gpu_device_classes: Vec<String>,
    /// The `consumedCapacity` key that splits a device held by several claims.
    pub dra_capacity_key: String,
    /// Kueue's device class mappings: resource names that count DRA devices.
    pub device_class_mappings: Vec<DeviceClassMapping>,
}

impl Accounting {
    /// The resource names that are GPUs for demand and runs besides `nvidia.com/gpu` and
    /// `nvidia.com/mig-*`: each device class mapping that lists a GPU device class.
    pub fn gpu_mapped_resources(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .device_class_mappings
            .iter()
            // nvidia.com/gpu is a GPU resource already; counting it again would count twice.
            .filter(|m| m.name != "nvidia.com/gpu" && m.device_class_names.iter().any(|c| self.gpu_device_classes.contains(c)))
            .map(|m| m.name.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

impl Default for Accounting {
    fn default() -> Self {
        Accounting {
            team_label: DEFAULT_TEAM_LABEL.to_string(),
            idle_policy: IdlePolicy::Platform,
            active_threshold_engine: DEFAULT_ACTIVE_THRESHOLD_ENGINE,
            active_threshold_util: DEFAULT_ACTIVE_THRESHOLD_UTIL,
            max_gap_factor: DEFAULT_MAX_GAP_FACTOR,
            currency: DEFAULT_CURRENCY.to_string(),
            hardware_xids: DEFAULT_HARDWARE_XIDS.to_vec(),
            hardware_failures: Payer::Platform,
            preemptions: Payer::Team,
            sharing: Sharing::Even,
            gpu_device_classes: DEFAULT_GPU_DEVICE_CLASSES.iter().map(|c| c.to_string()).collect(),
            dra_capacity_key: DEFAULT_DRA_CAPACITY_KEY.to_string(),
            device_class_mappings: Vec::new(),
        }
    }
}

/// Prices per GPU-hour. A GPU's price is the first matching `by_node_label` entry, else its
/// model's `by_model` price, else `default`.
#[derive(Debug, Clone, PartialEq)]
pub struct Prices {
    pub default: Money,
    /// `(DCGM modelName, price)`, sorted by model name.
    pub by_model: Vec<(String, Money)>,
    /// In file order: label keys in the order they first appear in the text, and within a key
    /// the values in the order they appear. When a node matches several label keys, the first
    /// one in the file wins.
    pub by_node_label: Vec<NodeLabelPrice>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeLabelPrice {
    pub label_key: String,
    pub label_value: String,
    pub price: Money,
}

/// One `[[overheads]]` entry. Without `team` it is spread over the teams by allocated
/// GPU-hours; with `team` it is charged to that team alone. An absent amount is 0.
#[derive(Debug, Clone, PartialEq)]
pub struct Overhead {
    /// `YYYY-MM`.
    pub month: String,
    pub team: Option<String>,
    pub network: Money,
    pub storage: Money,
    pub support: Money,
    pub operations: Money,
}

/// One `[[units.counters]]` entry: a Prometheus counter whose increases, per pod, are its run's
/// accepted units (queries/50_units.sql).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitCounter {
    pub metric: String,
    pub unit: String,
    /// Units per increment of the counter (1e-6: a million tokens).
    pub scale: Scale,
    /// Only the series this label matcher selects.
    pub matcher: Option<LabelMatcher>,
}

/// A counter's scale as an exact fraction, `numerator / denominator` (a power of ten), so the
/// SQL multiplies by it without rounding twice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scale {
    pub numerator: i64,
    pub denominator: i64,
}

impl Scale {
    /// The shortest decimal that reads back as `value`, as a fraction; none for a value that is
    /// not above 0 or needs more than 12 decimals or 15 digits.
    pub fn of(value: f64) -> Option<Scale> {
        if !(value.is_finite() && value > 0.0) {
            return None;
        }
        let text = format!("{value}");
        let (whole, decimals) = text.split_once('.').unwrap_or((&text, ""));
        if decimals.len() > 12 || whole.len() + decimals.len() > 15 {
            return None;
        }
        let numerator: i64 = format!("{whole}{decimals}").parse().ok()?;
        Some(Scale { numerator, denominator: 10i64.pow(decimals.len() as u32) })
    }
}

/// One PromQL-style label matcher: `label="v"`, `label!="v"`, `label=~"re"`, `label!~"re"`.
/// Regular expressions match the whole value, as PromQL's do (stored anchored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelMatcher {
    pub label: String,
    /// `=`, `!=`, `=~` or `!~`.
    pub op: String,
    /// The value, or the anchored regular expression `^(?:re)$`.
    pub value: String,
}

impl LabelMatcher {
    pub fn parse(text: &str) -> Result<LabelMatcher, String> {
        let text = text.trim();
        let at = text.find(['=', '!']).ok_or_else(|| format!("{text:?} is not a label matcher (label=\"value\", label=~\"regex\", != or !~)"))?;
        let label = text[..at].trim();
        let rest = &text[at..];
        let op = ["=~", "!~", "!=", "="].into_iter().find(|op| rest.starts_with(op)).ok_or_else(|| format!("{text:?}: expected =, !=, =~ or !~ after the label"))?;
        let quoted = rest[op.len()..].trim();
        let value = quoted.strip_prefix('"').and_then(|v| v.strip_suffix('"')).ok_or_else(|| format!("{text:?}: the value must be in double quotes"))?;
        let valid_label = !label.is_empty() && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') && !label.starts_with(|c: char| c.is_ascii_digit());
        if !valid_label {
            return Err(format!("{label:?} is not a Prometheus label name"));
        }
        let value = if op.ends_with('~') {
            let anchored = format!("^(?:{value})$");
            regex::Regex::new(&anchored).map_err(|e| format!("{value:?} is not a regular expression: {e}"))?;
            anchored
        } else {
            value.to_owned()
        };
        Ok(LabelMatcher { label: label.to_owned(), op: op.to_owned(), value })
    }
}

/// One row of an extra-units file: units accepted outside the cluster's own annotations.
#[derive(Debug, Clone, PartialEq)]
pub struct ExtraUnits {
    /// `YYYY-MM`.
    pub month: String,
    pub team: String,
    pub unit: String,
    pub accepted_units: f64,
}

impl Config {
    /// Reads and validates the file at `path`; unit files are resolved against its directory.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = Document::read(path)?;
        Config::parse(&text, path)
    }

    /// Validates `text`. `origin` names the file in messages, and its directory is where
    /// relative unit files are looked for. Every problem of the ledger's sections (and any
    /// unknown section) is reported, not only the first; `[collector]` and `[serve]` are
    /// checked by their own components ([`Config::check`] runs beside theirs on one document).
    pub fn parse(text: &str, origin: &Path) -> Result<Config, ConfigError> {
        let doc = Document::parse(text, origin);
        let config = Config::check(&doc);
        doc.finish()?;
        config.ok_or_else(|| ConfigError::Invalid {
            problems: vec![Problem {
                path: origin.to_path_buf(),
                line: None,
                key: String::new(),
                reason: gpuledger_store::Bug::new("the configuration was refused without a reason").to_string(),
            }],
        })
    }

    /// Checks the ledger's sections of `doc` (`accounting`, `prices`, `overheads`, `units`, `budgets`, `energy`, `focus`),
    /// reporting every problem to it; the configuration when none of them had one.
    pub fn check(doc: &Document<'_>) -> Option<Config> {
        if !doc.parsed() {
            return None;
        }
        let accounting = accounting(doc, doc.section::<RawAccounting>("accounting"));
        // A missing `prices.default` is reported at the `[prices]` header, else at line 1.
        let prices_span = doc.section_span("prices").unwrap_or(0..0);
        let prices = prices(doc, doc.section::<RawPrices>("prices"), prices_span);
        let raw_overheads = doc.section::<Vec<Spanned<RawOverhead>>>("overheads").unwrap_or_default();
        let overheads: Vec<Overhead> = raw_overheads.into_iter().enumerate().filter_map(|(i, o)| overhead(doc, i, o)).collect();
        let mut units = Vec::new();
        let mut unit_files = Vec::new();
        let mut counters = Vec::new();
        if let Some(mut raw) = doc.section::<RawUnits>("units") {
            counters = unit_counters(doc, raw.counters.take().unwrap_or_default());
            for file in raw.files.unwrap_or_default() {
                let path = doc.dir().join(file.get_ref());
                if !path.is_file() {
                    doc.report(file.span(), "units.files", format!("units file {} not found", path.display()));
                    continue;
                }
                match read_units(&path) {
                    Ok(rows) => units.extend(rows),
                    Err(problem) => doc.report_problem(problem),
                }
                unit_files.push(path);
            }
        }
        let raw_budgets = doc.section::<Vec<Spanned<RawBudget>>>("budgets").unwrap_or_default();
        let budgets = budgets(doc, raw_budgets);
        let energy = energy(doc, doc.section::<RawEnergy>("energy"));
        let focus = focus_account(doc, doc.section::<RawFocus>("focus"));
        let anomalies = anomalies(doc, doc.section::<RawAnomalies>("anomalies"));
        let quota_owners = quota_owners(doc, doc.section::<RawQuota>("quota"));
        if doc.has_problems() {
            return None;
        }
        Some(Config { accounting, prices: prices?, overheads, units, unit_files, unit_counters: counters, budgets, energy, focus, anomalies, quota_owners })
    }

    /// A configuration with every default and one price for every GPU, for runs without a file
    /// (the price rounded to the micro-unit: [`Money::rounded`]).
    pub fn with_default_price(price: f64) -> Config {
        Config {
            accounting: Accounting::default(),
            prices: Prices { default: Money::rounded(price), by_model: Vec::new(), by_node_label: Vec::new() },
            overheads: Vec::new(),
            units: Vec::new(),
            unit_files: Vec::new(),
            unit_counters: Vec::new(),
            budgets: Vec::new(),
            energy: Energy::default(),
            focus: FocusAccount::default(),
            anomalies: Anomalies::default(),
            quota_owners: Vec::new(),
        }
    }
}

// The file as serde reads it, one section at a time. Every value checked beyond its type keeps
// its span, so the check can name the line; all fields are optional so that a missing key is
// reported by us, with its line, rather than by serde against the whole table.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAccounting {
    team_label: Option<Spanned<String>>,
    idle_policy: Option<Spanned<String>>,
    active_threshold_engine: Option<Spanned<f64>>,
    active_threshold_util: Option<Spanned<f64>>,
    max_gap_factor: Option<Spanned<f64>>,
    currency: Option<Spanned<String>>,
    hardware_xids: Option<Spanned<Vec<Spanned<i64>>>>,
    hardware_failures: Option<Spanned<String>>,
    preemptions: Option<Spanned<String>>,
    sharing: Option<Spanned<String>>,
    gpu_device_classes: Option<Spanned<Vec<Spanned<String>>>>,
    dra_capacity_key: Option<Spanned<String>>,
    device_class_mappings: Option<Vec<Spanned<RawDeviceClassMapping>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawDeviceClassMapping {
    name: Option<Spanned<String>>,
    device_class_names: Option<Spanned<Vec<Spanned<String>>>>,
}

/// Name -> price. The map's order is by name; the key spans give the file order back.
type SpannedPrices = BTreeMap<Spanned<String>, Spanned<f64>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPrices {
    default: Option<Spanned<f64>>,
    by_model: Option<SpannedPrices>,
    by_node_label: Option<BTreeMap<Spanned<String>, SpannedPrices>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOverhead {
    month: Option<Spanned<String>>,
    team: Option<Spanned<String>>,
    network: Option<Spanned<f64>>,
    storage: Option<Spanned<f64>>,
    support: Option<Spanned<f64>>,
    operations: Option<Spanned<f64>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUnits {
    files: Option<Vec<Spanned<String>>>,
    counters: Option<Vec<Spanned<RawCounter>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCounter {
    metric: Option<Spanned<String>>,
    unit: Option<Spanned<String>>,
    scale: Option<Spanned<f64>>,
    #[serde(rename = "match")]
    matcher: Option<Spanned<String>>,
}

/// A required text key of a table entry at `span`: reported at the entry when missing, at the
/// value when blank.
fn required_text(doc: &Document<'_>, span: &std::ops::Range<usize>, key: &str, value: Option<Spanned<String>>, what: &str) -> Option<String> {
    match value {
        Some(v) if !v.get_ref().trim().is_empty() => Some(v.into_inner()),
        Some(v) => {
            doc.report(v.span(), key, format!("empty: {what}"));
            None
        }
        None => {
            doc.report(span.clone(), key, format!("missing: {what}"));
            None
        }
    }
}

/// `[[units.counters]]`: each entry checked, every problem reported.
fn unit_counters(doc: &Document<'_>, raw: Vec<Spanned<RawCounter>>) -> Vec<UnitCounter> {
    let mut out = Vec::new();
    for (index, entry) in raw.into_iter().enumerate() {
        let at = format!("units.counters[{index}]");
        let span = entry.span();
        let raw = entry.into_inner();
        let metric = required_text(doc, &span, &format!("{at}.metric"), raw.metric, "the counter's metric name, as the pods expose it");
        let unit = required_text(doc, &span, &format!("{at}.unit"), raw.unit, "the name of the unit it counts");
        let scale = match raw.scale {
            None => Some(Scale { numerator: 1, denominator: 1 }),
            Some(v) => match Scale::of(*v.get_ref()) {
                Some(s) => Some(s),
                None => {
                    doc.report(v.span(), format!("{at}.scale"), format!("{} is not a number of units per increment (more than 0, at most 12 decimals)", v.get_ref()));
                    None
                }
            },
        };
        let matcher = match raw.matcher {
            None => Some(None),
            Some(m) => match LabelMatcher::parse(m.get_ref()) {
                Ok(matcher) => Some(Some(matcher)),
                Err(reason) => {
                    doc.report(m.span(), format!("{at}.match"), reason);
                    None
                }
            },
        };
        if let (Some(metric), Some(unit), Some(scale), Some(matcher)) = (metric, unit, scale, matcher) {
            out.push(UnitCounter { metric, unit, scale, matcher });
        }
    }
    out
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudget {
    team: Option<Spanned<String>>,
    month: Option<Spanned<String>>,
    amount: Option<Spanned<f64>>,
}

/// `[[budgets]]`: every entry checked, all problems reported; a second entry for the same team
/// (and month, or both without one) is an error, since which one holds would be a guess.
fn budgets(doc: &Document<'_>, raw: Vec<Spanned<RawBudget>>) -> Vec<Budget> {
    let mut out: Vec<Budget> = Vec::new();
    for (index, entry) in raw.into_iter().enumerate() {
        let at = format!("budgets[{index}]");
        let span = entry.span();
        let raw = entry.into_inner();
        let team = match raw.team {
            None => {
                doc.report(span.clone(), format!("{at}.team"), "missing: a budget is for one team");
                None
            }
            Some(t) => checked_team(doc, &at, t),
        };
        let month = match raw.month {
            None => None,
            Some(m) => match checked_month(doc, &at, m) {
                Some(m) => Some(m),
                None => continue,
            },
        };
        let amount = match raw.amount {
            None => {
                doc.report(span.clone(), format!("{at}.amount"), "missing: the budget's amount for the month");
                None
            }
            Some(v) if !(v.get_ref().is_finite() && *v.get_ref() > 0.0) => {
                doc.report(v.span(), format!("{at}.amount"), format!("{} must be a finite amount > 0", v.get_ref()));
                None
            }
            Some(v) => amount(doc, &v, &format!("{at}.amount")),
        };
        let (Some(team), Some(amount)) = (team, amount) else { continue };
        if out.iter().any(|b| b.team == team && b.month == month) {
            let which = month.as_deref().map_or("every month".to_owned(), |m| format!("month {m}"));
            doc.report(span, at.clone(), format!("a second budget for team {team:?} and {which}"));
            continue;
        }
        out.push(Budget { team, month, amount });
    }
    out
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEnergy {
    pue: Option<Spanned<f64>>,
    grid_gco2_per_kwh: Option<Spanned<f64>>,
}

/// `[energy]`: a bad value is reported and its default kept.
fn energy(doc: &Document<'_>, raw: Option<RawEnergy>) -> Energy {
    let mut out = Energy::default();
    let Some(raw) = raw else { return out };
    if let Some(v) = raw.pue {
        let pue = *v.get_ref();
        if pue.is_finite() && (1.0..=10.0).contains(&pue) {
            out.pue = pue;
        } else {
            doc.report(v.span(), "energy.pue", format!("{pue} is not a power usage effectiveness (facility over IT energy, from 1 to 10)"));
        }
    }
    if let Some(v) = raw.grid_gco2_per_kwh {
        let g = *v.get_ref();
        if g.is_finite() && (0.0..=5000.0).contains(&g) {
            out.grid_gco2_per_kwh = Some(g);
        } else {
            doc.report(v.span(), "energy.grid_gco2_per_kwh", format!("{g} is not a grid carbon intensity in g CO2e per kWh (0 to 5000)"));
        }
    }
    out
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAnomalies {
    k: Option<Spanned<f64>>,
}

/// `[anomalies]`: a bad value is reported and its default kept.
fn anomalies(doc: &Document<'_>, raw: Option<RawAnomalies>) -> Anomalies {
    let mut out = Anomalies::default();
    if let Some(v) = raw.and_then(|r| r.k) {
        let k = *v.get_ref();
        if k.is_finite() && k > 0.0 && k <= 100.0 {
            out.k = k;
        } else {
            doc.report(v.span(), "anomalies.k", format!("{k} is not a number of spreads above the baseline (more than 0, at most 100)"));
        }
    }
    out
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuota {
    owners: Option<Vec<Spanned<RawQuotaOwner>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawQuotaOwner {
    cluster_queue: Option<Spanned<String>>,
    team: Option<Spanned<String>>,
}

/// `[[quota.owners]]`: each entry needs both keys; a second owner for one ClusterQueue is an
/// error, since which one pays would be a guess.
fn quota_owners(doc: &Document<'_>, raw: Option<RawQuota>) -> Vec<QuotaOwner> {
    let mut out: Vec<QuotaOwner> = Vec::new();
    for (index, entry) in raw.and_then(|r| r.owners).unwrap_or_default().into_iter().enumerate() {
        let at = format!("quota.owners[{index}]");
        let span = entry.span();
        let raw = entry.into_inner();
        let cluster_queue = required_text(doc, &span, &format!("{at}.cluster_queue"), raw.cluster_queue, "the ClusterQueue whose quota the team owns");
        let team = match raw.team {
            None => {
                doc.report(span.clone(), format!("{at}.team"), "missing: the team that owns the ClusterQueue's quota");
                None
            }
            Some(t) => checked_team(doc, &at, t),
        };
        let (Some(cluster_queue), Some(team)) = (cluster_queue, team) else { continue };
        if out.iter().any(|o| o.cluster_queue == cluster_queue) {
            doc.report(span, at.clone(), format!("a second owner for ClusterQueue {cluster_queue:?}"));
            continue;
        }
        out.push(QuotaOwner { cluster_queue, team });
    }
    out
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFocus {
    billing_account_id: Option<Spanned<String>>,
    billing_account_name: Option<Spanned<String>>,
    provider_name: Option<Spanned<String>>,
    invoice_issuer_name: Option<Spanned<String>>,
    publisher_name: Option<Spanned<String>>,
}

/// `[focus]`: each name must be non-empty text without surrounding spaces (FOCUS compares
/// them as they are). The issuer and the publisher follow the provider unless given.
fn focus_account(doc: &Document<'_>, raw: Option<RawFocus>) -> FocusAccount {
    let mut out = FocusAccount::default();
    let Some(raw) = raw else { return out };
    let name = |v: Option<Spanned<String>>, key: &str| -> Option<String> {
        let v = v?;
        let text = v.get_ref();
        if text.is_empty() || text.trim() != text || text.chars().any(char::is_control) {
            doc.report(v.span(), key, format!("{text:?} must be non-empty text without leading or trailing spaces"));
            return None;
        }
        Some(text.clone())
    };
    if let Some(id) = name(raw.billing_account_id, "focus.billing_account_id") {
        out.billing_account_id = id;
    }
    if let Some(n) = name(raw.billing_account_name, "focus.billing_account_name") {
        out.billing_account_name = n;
    }
    if let Some(p) = name(raw.provider_name, "focus.provider_name") {
        out.invoice_issuer_name = p.clone();
        out.publisher_name = p.clone();
        out.provider_name = p;
    }
    if let Some(i) = name(raw.invoice_issuer_name, "focus.invoice_issuer_name") {
        out.invoice_issuer_name = i;
    }
    if let Some(p) = name(raw.publisher_name, "focus.publisher_name") {
        out.publisher_name = p;
    }
    out
}

/// `[accounting]`: a bad value is reported and its default kept, so the other keys are
/// still checked.
fn accounting(doc: &Document<'_>, raw: Option<RawAccounting>) -> Accounting {
    let mut acc = Accounting::default();
    let Some(raw) = raw else { return acc };
    if let Some(v) = raw.team_label {
        let label = v.get_ref();
        if label.is_empty() || label.chars().any(char::is_whitespace) {
            doc.report(v.span(), "accounting.team_label", format!("team label {label:?} must be a non-empty label key without spaces"));
        } else {
            acc.team_label = label.clone();
        }
    }
    if let Some(v) = raw.idle_policy {
        match v.get_ref().parse::<IdlePolicy>() {
            Ok(p) => acc.idle_policy = p,
            Err(e) => doc.report(v.span(), "accounting.idle_policy", e.to_string()),
        }
    }
    if let Some(v) = raw.active_threshold_engine {
        acc.active_threshold_engine = ranged(doc, &v, "accounting.active_threshold_engine", 0.0, 1.0, "an engine-active ratio").unwrap_or(acc.active_threshold_engine);
    }
    if let Some(v) = raw.active_threshold_util {
        acc.active_threshold_util = ranged(doc, &v, "accounting.active_threshold_util", 0.0, 100.0, "a utilisation percentage").unwrap_or(acc.active_threshold_util);
    }
    if let Some(v) = raw.max_gap_factor {
        let f = *v.get_ref();
        if !f.is_finite() || f < 1.0 {
            doc.report(v.span(), "accounting.max_gap_factor", format!("{f} must be a finite number >= 1 (scrape intervals)"));
        } else {
            acc.max_gap_factor = f;
        }
    }
    if let Some(v) = raw.currency {
        let c = v.get_ref();
        if c.len() != 3 || !c.bytes().all(|b| b.is_ascii_uppercase()) {
            doc.report(v.span(), "accounting.currency", format!("currency {c:?} must be three uppercase letters (ISO 4217, e.g. USD)"));
        } else {
            acc.currency = c.clone();
        }
    }
    if let Some(v) = raw.hardware_xids {
        let mut codes = Vec::new();
        for code in v.into_inner() {
            let c = *code.get_ref();
            if c <= 0 {
                doc.report(code.span(), "accounting.hardware_xids", format!("{c} is not an XID code (a positive integer)"));
            }
            codes.push(c);
        }
        acc.hardware_xids = codes;
    }
    for (raw, key, slot) in [(raw.hardware_failures, "accounting.hardware_failures", &mut acc.hardware_failures), (raw.preemptions, "accounting.preemptions", &mut acc.preemptions)] {
        if let Some(v) = raw {
            match v.get_ref().parse::<Payer>() {
                Ok(p) => *slot = p,
                Err(e) => doc.report(v.span(), key, e),
            }
        }
    }
    if let Some(v) = raw.sharing {
        match v.get_ref().parse::<Sharing>() {
            Ok(s) => acc.sharing = s,
            Err(e) => doc.report(v.span(), "accounting.sharing", e),
        }
    }
    if let Some(v) = raw.gpu_device_classes {
        acc.gpu_device_classes = names(doc, v.into_inner(), "accounting.gpu_device_classes", "a DeviceClass name");
    }
    if let Some(v) = raw.dra_capacity_key {
        let key = v.get_ref();
        if key.is_empty() || key.chars().any(char::is_whitespace) {
            doc.report(v.span(), "accounting.dra_capacity_key", format!("{key:?} must be a capacity name without spaces (e.g. memory)"));
        } else {
            acc.dra_capacity_key = key.clone();
        }
    }
    for (i, m) in raw.device_class_mappings.into_iter().flatten().enumerate() {
        let key = format!("accounting.device_class_mappings[{i}]");
        let span = m.span();
        let m = m.into_inner();
        let name = match m.name {
            Some(n) if !n.get_ref().is_empty() => {
                if acc.device_class_mappings.iter().any(|d: &DeviceClassMapping| &d.name == n.get_ref()) {
                    doc.report(n.span(), format!("{key}.name"), format!("{:?} is mapped twice", n.get_ref()));
                }
                Some(n.into_inner())
            }
            Some(n) => {
                doc.report(n.span(), format!("{key}.name"), "must be a resource name (e.g. whole-gpus)".to_string());
                None
            }
            None => {
                doc.report(span.clone(), format!("{key}.name"), "missing: the resource name Kueue counts the devices as".to_string());
                None
            }
        };
        let classes = match m.device_class_names {
            Some(c) => names(doc, c.into_inner(), &format!("{key}.device_class_names"), "a DeviceClass name"),
            None => {
                doc.report(span, format!("{key}.device_class_names"), "missing: the DeviceClasses Kueue counts".to_string());
                Vec::new()
            }
        };
        if let Some(name) = name {
            acc.device_class_mappings.push(DeviceClassMapping { name, device_class_names: classes });
        }
    }
    acc
}

/// A list of non-empty names without spaces; a bad one is reported and left out.
fn names(doc: &Document<'_>, values: Vec<Spanned<String>>, key: &str, what: &str) -> Vec<String> {
    let mut out = Vec::new();
    for v in values {
        let n = v.get_ref();
        if n.is_empty() || n.chars().any(char::is_whitespace) {
            doc.report(v.span(), key, format!("{n:?} is not {what}"));
        } else {
            out.push(n.clone());
        }
    }
    out
}

fn ranged(doc: &Document<'_>, v: &Spanned<f64>, key: &str, lo: f64, hi: f64, what: &str) -> Option<f64> {
    let f = *v.get_ref();
    // `contains` is false for NaN, so this also refuses non-finite values.
    if !(lo..=hi).contains(&f) {
        doc.report(v.span(), key, format!("{f} must be {what} between {lo} and {hi}"));
        return None;
    }
    Some(f)
}

/// An amount of money (a price, an overhead, a budget): a finite number >= 0 with at most 6
/// decimals ([`Money::from_f64`]).
fn amount(doc: &Document<'_>, v: &Spanned<f64>, key: &str) -> Option<Money> {
    let f = *v.get_ref();
    if !f.is_finite() || f < 0.0 {
        doc.report(v.span(), key, format!("{f} must be a finite number >= 0"));
        return None;
    }
    match Money::from_f64(f) {
        Ok(m) => Some(m),
        Err(e) => {
            doc.report(v.span(), key, e.to_string());
            None
        }
    }
}

/// `[prices]`; `None` when the default price is missing or bad (there is nothing to fall
/// back to), every other problem reported all the same.
fn prices(doc: &Document<'_>, raw: Option<RawPrices>, prices_span: Range<usize>) -> Option<Prices> {
    // A default that was there but badly shaped is already reported: no second "missing".
    let missing = || {
        if !doc.reported_under("prices.default") {
            doc.report(prices_span.clone(), "prices.default", "missing: a default price per GPU-hour is required");
        }
    };
    let Some(raw) = raw else {
        // Present but unreadable (`prices = 3`) is already reported.
        if doc.section_span("prices").is_none() {
            missing();
        }
        return None;
    };
    let default = match &raw.default {
        Some(v) => amount(doc, v, "prices.default"),
        None => {
            missing();
            None
        }
    };

    let mut by_model = Vec::new();
    for (model, price) in raw.by_model.unwrap_or_default() {
        let key = format!("prices.by_model.{}", key_segment(model.get_ref()));
        if model.get_ref().is_empty() {
            doc.report(model.span(), key, "empty model name");
            continue;
        }
        if let Some(p) = amount(doc, &price, &key) {
            by_model.push((model.into_inner(), p));
        }
    }

    let mut by_node_label = Vec::new();
    let mut label_keys: Vec<_> = raw.by_node_label.unwrap_or_default().into_iter().collect();
    // The first label key in the file wins, so keep file order rather than the map's.
    label_keys.sort_by_key(|(k, _)| k.span().start);
    for (label_key, values) in label_keys {
        let key = format!("prices.by_node_label.{}", key_segment(label_key.get_ref()));
        if label_key.get_ref().is_empty() {
            doc.report(label_key.span(), key, "empty node label key");
            continue;
        }
        let mut values: Vec<_> = values.into_iter().collect();
        values.sort_by_key(|(v, _)| v.span().start);
        for (value, price) in values {
            let key = format!("{key}.{}", key_segment(value.get_ref()));
            if let Some(price) = amount(doc, &price, &key) {
                by_node_label.push(NodeLabelPrice { label_key: label_key.get_ref().clone(), label_value: value.into_inner(), price });
            }
        }
    }
    Some(Prices { default: default?, by_model, by_node_label })
}

/// One `[[overheads]]` entry; `None` when it has a problem (all of them reported).
fn overhead(doc: &Document<'_>, index: usize, raw: Spanned<RawOverhead>) -> Option<Overhead> {
    let at = format!("overheads[{index}]");
    let entry_span = raw.span();
    let raw = raw.into_inner();
    let mut ok = true;
    let month = match raw.month {
        None => {
            doc.report(entry_span.clone(), format!("{at}.month"), "missing: every overhead needs a month (YYYY-MM)");
            None
        }
        Some(m) => checked_month(doc, &at, m),
    };
    let team = match raw.team {
        Some(t) => {
            let team = checked_team(doc, &at, t);
            ok &= team.is_some();
            team
        }
        None => None,
    };
    if raw.network.is_none() && raw.storage.is_none() && raw.support.is_none() && raw.operations.is_none() {
        doc.report(entry_span, at.clone(), "no amount: give at least one of network, storage, support, operations");
        ok = false;
    }
    let mut amount_of = |v: &Option<Spanned<f64>>, name: &str| match v {
        None => Money::ZERO,
        Some(v) => amount(doc, v, &format!("{at}.{name}")).unwrap_or_else(|| {
            ok = false;
            Money::ZERO
        }),
    };
    let network = amount_of(&raw.network, "network");
    let storage = amount_of(&raw.storage, "storage");
    let support = amount_of(&raw.support, "support");
    let operations = amount_of(&raw.operations, "operations");
    if !ok {
        return None;
    }
    Some(Overhead { month: month?, team, network, storage, support, operations })
}

/// The `month` key of entry `at` (`overheads[2]`): `YYYY-MM`, else reported and `None`.
fn checked_month(doc: &Document<'_>, at: &str, m: Spanned<String>) -> Option<String> {
    if valid_month(m.get_ref()) {
        return Some(m.into_inner());
    }
    doc.report(m.span(), format!("{at}.month"), format!("month {:?} is not YYYY-MM", m.get_ref()));
    None
}

/// The `team` key of entry `at`: a name that is not blank, else reported and `None`.
fn checked_team(doc: &Document<'_>, at: &str, t: Spanned<String>) -> Option<String> {
    if t.get_ref().trim().is_empty() {
        doc.report(t.span(), format!("{at}.team"), "empty team name");
        return None;
    }
    Some(t.into_inner())
}

/// `YYYY-MM` with a month from 01 to 12.
pub fn valid_month(s: &str) -> bool {
    s.parse::<crate::types::Month>().is_ok()
}

/// Reads one extra-units file: Parquet by its `.parquet` extension, CSV otherwise.
fn read_units(path: &Path) -> Result<Vec<ExtraUnits>, Problem> {
    let parquet = path.extension().is_some_and(|e| e.eq_ignore_ascii_case("parquet"));
    if parquet { read_units_parquet(path) } else { read_units_csv(path) }
}

/// Checks one row's values; the caller adds file and line.
fn unit_row(month: &str, team: &str, unit: &str, accepted_units: f64) -> Result<ExtraUnits, String> {
    if !valid_month(month) {
        return Err(format!("month {month:?} is not YYYY-MM"));
    }
    if team.is_empty() {
        return Err("empty team".into());
    }
    if unit.is_empty() {
        return Err("empty unit".into());
    }
    if !accepted_units.is_finite() || accepted_units < 0.0 {
        return Err(format!("accepted_units {accepted_units} must be a finite number >= 0"));
    }
    Ok(ExtraUnits { month: month.to_string(), team: team.to_string(), unit: unit.to_string(), accepted_units })
}

/// Which position each of [`UNIT_COLUMNS`] has, from the header's names.
fn column_order<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<[usize; 4], String> {
    let mut pos = [usize::MAX; 4];
    for (i, name) in names.into_iter().enumerate() {
        let Some(c) = UNIT_COLUMNS.iter().position(|&c| c == name) else {
            return Err(format!("unknown column {name:?} (expected exactly {})", UNIT_COLUMNS.join(", ")));
        };
        if pos[c] != usize::MAX {
            return Err(format!("column {name:?} appears twice"));
        }
        pos[c] = i;
    }
    let missing: Vec<_> = UNIT_COLUMNS.iter().zip(pos).filter(|(_, p)| *p == usize::MAX).map(|(c, _)| *c).collect();
    if !missing.is_empty() {
        return Err(format!("missing column(s) {} (expected exactly {})", missing.join(", "), UNIT_COLUMNS.join(", ")));
    }
    Ok(pos)
}

fn read_units_csv(path: &Path) -> Result<Vec<ExtraUnits>, Problem> {
    let text = fs::read_to_string(path).map_err(|e| Problem { path: path.to_path_buf(), line: None, key: String::new(), reason: format!("cannot read: {e}") })?;
    let bad = |line: usize, reason: String| Problem { path: path.to_path_buf(), line: Some(line), key: String::new(), reason };
    let mut rows = Vec::new();
    let mut order: Option<[usize; 4]> = None;
    for (i, line) in text.trim_start_matches('\u{feff}').lines().enumerate() {
        let n = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let fields = split_csv_line(line).map_err(|r| bad(n, r))?;
        let Some(pos) = order else {
            order = Some(column_order(fields.iter().map(String::as_str)).map_err(|r| bad(n, r))?);
            continue;
        };
        if fields.len() != UNIT_COLUMNS.len() {
            return Err(bad(n, format!("{} fields, expected {}", fields.len(), UNIT_COLUMNS.len())));
        }
        let raw_units = &fields[pos[3]];
        let accepted = raw_units.parse::<f64>().map_err(|_| bad(n, format!("accepted_units {raw_units:?} is not a number")))?;
        rows.push(unit_row(&fields[pos[0]], &fields[pos[1]], &fields[pos[2]], accepted).map_err(|r| bad(n, r))?);
    }
    if order.is_none() {
        return Err(Problem { path: path.to_path_buf(), line: None, key: String::new(), reason: format!("empty: expected a header {}", UNIT_COLUMNS.join(",")) });
    }
    Ok(rows)
}

/// Splits one CSV line: fields may be quoted (`"a, b"`, with `""` for a quote); unquoted fields
/// are trimmed. A quoted field cannot span lines.
fn split_csv_line(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false; // this field started with a quote
    let mut in_quotes = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' if in_quotes => {
                if chars.peek() == Some(&'"') {
                    chars.next();
                    field.push('"');
                } else {
                    in_quotes = false;
                }
            }
            '"' if !quoted && field.trim().is_empty() => {
                field.clear();
                quoted = true;
                in_quotes = true;
            }
            ',' if !in_quotes => {
                fields.push(if quoted { std::mem::take(&mut field) } else { std::mem::take(&mut field).trim().to_string() });
                quoted = false;
            }
            c if quoted && !in_quotes => {
                if !c.is_whitespace() {
                    return Err(format!("unexpected {c:?} after a closing quote in field {}", fields.len() + 1));
                }
            }
            c => field.push(c),
        }
    }
    if in_quotes {
        return Err(format!("unterminated quote in field {}", fields.len() + 1));
    }
    fields.push(if quoted { field } else { field.trim().to_string() });
    Ok(fields)
}

fn read_units_parquet(path: &Path) -> Result<Vec<ExtraUnits>, Problem> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

    let whole = |reason: String| Problem { path: path.to_path_buf(), line: None, key: String::new(), reason };
    let file = fs::File::open(path).map_err(|e| whole(format!("cannot read: {e}")))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| whole(format!("not a readable Parquet file: {e}")))?;
    let schema = builder.schema().clone();
    column_order(schema.fields().iter().map(|f| f.name().as_str())).map_err(whole)?;
    for field in schema.fields() {
        let ok = if field.name() == "accepted_units" { field.data_type().is_numeric() } else { is_string_type(field.data_type()) };
        if !ok {
            let want = if field.name() == "accepted_units" { "a number" } else { "a string" };
            return Err(whole(format!("column {} is {}, expected {want}", field.name(), field.data_type())));
        }
    }
    let reader = builder.build().map_err(|e| whole(format!("cannot read: {e}")))?;
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| whole(format!("cannot read: {e}")))?;
        let col = |name: &str, to: &DataType| {
            let array = batch.column_by_name(name).ok_or_else(|| whole(format!("missing column {name}")))?;
            arrow::compute::cast(array, to).map_err(|e| whole(format!("column {name}: {e}")))
        };
        let (month, team, unit) = (col("month", &DataType::Utf8)?, col("team", &DataType::Utf8)?, col("unit", &DataType::Utf8)?);
        let accepted = col("accepted_units", &DataType::Float64)?;
        let (month, team, unit) = (month.as_string::<i32>(), team.as_string::<i32>(), unit.as_string::<i32>());
        let accepted = accepted.as_primitive::<Float64Type>();
        for i in 0..batch.num_rows() {
            let n = rows.len() + 1;
            let bad = |reason: String| Problem { path: path.to_path_buf(), line: Some(n), key: String::new(), reason };
            for (name, array) in [("month", month as &dyn Array), ("team", team), ("unit", unit), ("accepted_units", accepted)] {
                if array.is_null(i) {
                    return Err(bad(format!("{name} is null")));
                }
            }
            rows.push(unit_row(month.value(i), team.value(i), unit.value(i), accepted.value(i)).map_err(bad)?);
        }
    }
    Ok(rows)
}

fn is_string_type(t: &DataType) -> bool {
    match t {
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => true,
        DataType::Dictionary(_, v) => is_string_type(v),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    const FULL: &str = r#"[accounting]
team_label = "team"                 # label key read on pod, Workload, namespace
idle_policy = "platform"            # or "share"
active_threshold_engine = 0.05      # DCGM_FI_PROF_GR_ENGINE_ACTIVE
active_threshold_util = 5.0         # DCGM_FI_DEV_GPU_UTIL, where engine activity is absent
max_gap_factor = 2.0
currency = "USD"
hardware_xids = [79, 48]
hardware_failures = "team"
preemptions = "platform"

[prices]
default = 2.0                       # per GPU-hour
[prices.by_model]                   # DCGM modelName -> price
"NVIDIA H100 80GB HBM3" = 2.49
[prices.by_node_label."gpuledger.io/pool"]   # node label key, then value -> price; beats by_model
spot-h100 = 1.10

[[overheads]]                       # spread over teams by allocated GPU-hours
month = "2026-10"
network = 310.0
storage = 190.0
support = 120.0
operations = 380.0

[[overheads]]                       # with `team`: charged to that team directly, not spread
month = "2026-10"
team = "serving"
support = 50.0
"#;

    /// An amount as written (exact).
    fn m(s: &str) -> Money {
        s.parse().unwrap()
    }

    fn parse(text: &str) -> Result<Config, ConfigError> {
        Config::parse(text, Path::new("gpuledger.toml"))
    }

    /// The error message of `text`, which must fail.
    fn error(text: &str) -> String {
        match parse(text) {
            Ok(c) => panic!("expected an error, got {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[track_caller]
    fn assert_error(text: &str, line: usize, key: &str, words: &[&str]) {
        let msg = error(text);
        let at = format!("gpuledger.toml:{line}: {key}: ");
        assert!(msg.starts_with(&at), "{msg:?} should start with {at:?}");
        for w in words {
            assert!(msg.contains(w), "{msg:?} should contain {w:?}");
        }
    }

    #[test]
    fn full_example_parses_to_every_field() {
        let c = parse(FULL).unwrap();
        assert_eq!(
            c,
            Config {
                accounting: Accounting {
                    team_label: "team".into(),
                    idle_policy: IdlePolicy::Platform,
                    active_threshold_engine: 0.05,
                    active_threshold_util: 5.0,
                    max_gap_factor: 2.0,
                    currency: "USD".into(),
                    hardware_xids: vec![79, 48],
                    hardware_failures: Payer::Team,
                    preemptions: Payer::Platform,
                    ..Accounting::default()
                },
                prices: Prices {
                    default: m("2"),
                    by_model: vec![("NVIDIA H100 80GB HBM3".into(), m("2.49"))],
                    by_node_label: vec![NodeLabelPrice { label_key: "gpuledger.io/pool".into(), label_value: "spot-h100".into(), price: m("1.1") }],
                },
                overheads: vec![
                    Overhead { month: "2026-10".into(), team: None, network: m("310"), storage: m("190"), support: m("120"), operations: m("380") },
                    Overhead { month: "2026-10".into(), team: Some("serving".into()), network: Money::ZERO, storage: Money::ZERO, support: m("50"), operations: Money::ZERO },
                ],
                units: vec![],
                unit_files: vec![],
                unit_counters: vec![],
                budgets: vec![],
                energy: Energy::default(),
                focus: FocusAccount::default(),
                anomalies: Anomalies::default(),
                quota_owners: Vec::new(),
            }
        );
    }

    #[test]
    fn defaults_when_only_the_default_price_is_given() {
        let c = parse("[prices]\ndefault = 1.5\n").unwrap();
        assert_eq!(c, Config::with_default_price(1.5));
        assert_eq!(c.accounting.team_label, "team");
        assert_eq!(c.accounting.idle_policy, IdlePolicy::Platform);
        assert_eq!(c.accounting.active_threshold_engine, 0.05);
        assert_eq!(c.accounting.active_threshold_util, 5.0);
        assert_eq!(c.accounting.max_gap_factor, 2.5);
        assert_eq!(c.accounting.currency, "USD");
        assert!(c.prices.by_model.is_empty() && c.prices.by_node_label.is_empty());
        assert!(c.overheads.is_empty() && c.units.is_empty() && c.unit_files.is_empty());
        assert_eq!((c.focus.billing_account_id.as_str(), c.focus.provider_name.as_str()), ("gpu-cluster", "GPU platform"));
    }

    #[test]
    fn budgets_per_team_and_month() {
        let p = "[prices]\ndefault = 1.5\n";
        let c = parse(&format!("{p}[[budgets]]\nteam = \"ml\"\namount = 100.0\n[[budgets]]\nteam = \"ml\"\nmonth = \"2026-10\"\namount = 50\n")).unwrap();
        assert_eq!(
            c.budgets,
            vec![Budget { team: "ml".into(), month: None, amount: m("100") }, Budget { team: "ml".into(), month: Some("2026-10".into()), amount: m("50") }]
        );
        assert_error(&format!("{p}[[budgets]]\nteam = \"ml\"\namount = 0.0\n"), 5, "budgets[0].amount", &["> 0"]);
        assert_error(&format!("{p}[[budgets]]\nteam = \"ml\"\nmonth = \"2026-13\"\namount = 1.0\n"), 5, "budgets[0].month", &["YYYY-MM"]);
        assert_error(&format!("{p}[[budgets]]\namount = 1.0\n"), 3, "budgets[0].team", &["missing"]);
        assert_error(&format!("{p}[[budgets]]\nteam = \"ml\"\n"), 3, "budgets[0].amount", &["missing"]);
        assert_error(
            &format!("{p}[[budgets]]\nteam = \"ml\"\namount = 1.0\n[[budgets]]\nteam = \"ml\"\namount = 2.0\n"),
            6,
            "budgets[1]",
            &["second budget", "\"ml\"", "every month"],
        );
    }

    #[test]
    fn energy_factors_are_checked() {
        let p = "[prices]\ndefault = 1.5\n";
        let c = parse(&format!("{p}[energy]\npue = 1.3\ngrid_gco2_per_kwh = 350\n")).unwrap();
        assert_eq!(c.energy, Energy { pue: 1.3, grid_gco2_per_kwh: Some(350.0) });
        assert_eq!(parse(p).unwrap().energy, Energy { pue: 1.0, grid_gco2_per_kwh: None });
        assert_error(&format!("{p}[energy]\npue = 0.9\n"), 4, "energy.pue", &["0.9", "from 1 to 10"]);
        assert_error(&format!("{p}[energy]\ngrid_gco2_per_kwh = -1.0\n"), 4, "energy.grid_gco2_per_kwh", &["-1"]);
    }

    #[test]
    fn sharing_and_device_classes_are_checked() {
        let p = "[prices]\ndefault = 1.0\n";
        let c = parse(p).unwrap();
        assert_eq!((c.accounting.sharing, c.accounting.gpu_device_classes.clone()), (Sharing::Even, vec!["gpu.nvidia.com".to_string()]));
        assert!(c.accounting.gpu_mapped_resources().is_empty());
        let c = parse(&format!(
            "{p}[accounting]\nsharing = \"measured\"\ngpu_device_classes = [\"gpu.nvidia.com\", \"gpu.example.com\"]\n\
             [[accounting.device_class_mappings]]\nname = \"whole-gpus\"\ndevice_class_names = [\"gpu.example.com\"]\n\
             [[accounting.device_class_mappings]]\nname = \"nics\"\ndevice_class_names = [\"rdma.example.com\"]\n"
        ))
        .unwrap();
        assert_eq!(c.accounting.sharing, Sharing::Measured);
        assert_eq!(c.accounting.gpu_mapped_resources(), ["whole-gpus"], "only a mapping listing a GPU class is a GPU resource");
        assert_error(&format!("{p}[accounting]\nsharing = \"by-memory\"\n"), 4, "accounting.sharing", &["even or measured"]);
        assert_error(&format!("{p}[[accounting.device_class_mappings]]\nname = \"g\"\n"), 3, "accounting.device_class_mappings[0].device_class_names", &["missing"]);
        assert_error(&format!("{p}[accounting]\ngpu_device_classes = [\"a b\"]\n"), 4, "accounting.gpu_device_classes", &["not a DeviceClass name"]);
    }

    #[test]
    fn unit_counters_are_checked() {
        let p = "[prices]\ndefault = 1.0\n";
        let c = parse(&format!("{p}[[units.counters]]\nmetric = \"vllm:generation_tokens_total\"\nunit = \"1M-tokens\"\nscale = 1e-6\n[[units.counters]]\nmetric = \"vllm:request_success_total\"\nunit = \"requests\"\nmatch = 'finished_reason=~\"stop|length\"'\n")).unwrap();
        assert_eq!(c.unit_counters[0].scale, Scale { numerator: 1, denominator: 1_000_000 });
        assert_eq!(c.unit_counters[0].matcher, None);
        assert_eq!(c.unit_counters[1].scale, Scale { numerator: 1, denominator: 1 });
        assert_eq!(
            c.unit_counters[1].matcher,
            Some(LabelMatcher { label: "finished_reason".into(), op: "=~".into(), value: "^(?:stop|length)$".into() })
        );
        assert_eq!(Scale::of(2.5), Some(Scale { numerator: 25, denominator: 10 }));
        assert_eq!(Scale::of(1e-13), None, "more than 12 decimals");
        assert_eq!(LabelMatcher::parse(r#"model != "m""#).unwrap().op, "!=");
        assert!(LabelMatcher::parse(r#"finished_reason=~"(stop""#).unwrap_err().contains("regular expression"));
        assert!(LabelMatcher::parse("finished_reason=stop").unwrap_err().contains("double quotes"));
        assert!(LabelMatcher::parse(r#"9x="a""#).unwrap_err().contains("label name"));
        assert_error(&format!("{p}[[units.counters]]\nunit = \"tokens\"\n"), 3, "units.counters[0].metric", &["missing"]);
        assert_error(&format!("{p}[[units.counters]]\nmetric = \"m\"\nunit = \"u\"\nscale = -1.0\n"), 6, "units.counters[0].scale", &["-1", "more than 0"]);
        assert_error(&format!("{p}[[units.counters]]\nmetric = \"m\"\nunit = \"u\"\nmatch = 'reason!\"x\"'\n"), 6, "units.counters[0].match", &["=, !=, =~ or !~"]);
    }

    #[test]
    fn quota_owners_and_the_quota_policy() {
        let p = "[prices]\ndefault = 1.0\n";
        let c = parse(&format!("{p}[accounting]\nidle_policy = \"quota\"\n[[quota.owners]]\ncluster_queue = \"cq-a\"\nteam = \"ml\"\n")).unwrap();
        assert_eq!(c.accounting.idle_policy, IdlePolicy::Quota);
        assert_eq!(c.quota_owners, vec![QuotaOwner { cluster_queue: "cq-a".into(), team: "ml".into() }]);
        assert_error(&format!("{p}[[quota.owners]]\nteam = \"ml\"\n"), 3, "quota.owners[0].cluster_queue", &["missing"]);
        assert_error(&format!("{p}[[quota.owners]]\ncluster_queue = \"cq-a\"\n"), 3, "quota.owners[0].team", &["missing"]);
        assert_error(
            &format!("{p}[[quota.owners]]\ncluster_queue = \"cq-a\"\nteam = \"ml\"\n[[quota.owners]]\ncluster_queue = \"cq-a\"\nteam = \"nlp\"\n"),
            6,
            "quota.owners[1]",
            &["second owner", "cq-a"],
        );
        assert_eq!("quota".parse::<IdlePolicy>(), Ok(IdlePolicy::Quota));
        assert!("owners".parse::<IdlePolicy>().unwrap_err().to_string().contains("platform, share or quota"));
    }

    #[test]
    fn the_anomaly_threshold_is_checked() {
        let p = "[prices]\ndefault = 1.0\n";
        assert_eq!(parse(p).unwrap().anomalies.k, 3.0);
        assert_eq!(parse(&format!("{p}[anomalies]\nk = 4.5\n")).unwrap().anomalies.k, 4.5);
        assert_error(&format!("{p}[anomalies]\nk = 0.0\n"), 4, "anomalies.k", &["0", "more than 0"]);
        assert_error(&format!("{p}[anomalies]\nk = -2.0\n"), 4, "anomalies.k", &["-2"]);
    }

    #[test]
    fn focus_parties_follow_the_provider_unless_given() {
        let c = parse("[prices]\ndefault = 1.5\n[focus]\nprovider_name = \"ACME platform\"\nbilling_account_id = \"acme\"\n").unwrap();
        assert_eq!(
            c.focus,
            FocusAccount {
                billing_account_id: "acme".into(),
                billing_account_name: "GPU cluster".into(),
                provider_name: "ACME platform".into(),
                invoice_issuer_name: "ACME platform".into(),
                publisher_name: "ACME platform".into(),
            }
        );
        let c = parse("[prices]\ndefault = 1.5\n[focus]\ninvoice_issuer_name = \"ACME finance\"\nprovider_name = \"ACME\"\n").unwrap();
        assert_eq!((c.focus.invoice_issuer_name.as_str(), c.focus.publisher_name.as_str()), ("ACME finance", "ACME"));
        assert_error("[prices]\ndefault = 1.5\n[focus]\nprovider_name = \" ACME\"\n", 4, "focus.provider_name", &["leading or trailing spaces"]);
        assert_error("[prices]\ndefault = 1.5\n[focus]\nbilling_account_id = \"\"\n", 4, "focus.billing_account_id", &["non-empty"]);
        assert_error("[prices]\ndefault = 1.5\n[focus]\nbilling_account = \"x\"\n", 4, "focus.billing_account", &["unknown field", "billing_account_id"]);
    }

    #[test]
    fn amounts_are_read_as_written() {
        // The float nearest 2.49 is 2.4900000000000002131...: the amount is 2.490000 exactly.
        assert_eq!(Money::from_f64(2.49).unwrap().micros(), 2_490_000);
        assert_eq!(Money::from_f64(0.1).unwrap().micros(), 100_000);
        assert_eq!(Money::from_f64(1e-6).unwrap().micros(), 1);
        assert_eq!(Money::from_f64(123456789.123456).unwrap().micros(), 123_456_789_123_456);
        assert_eq!(Money::from_f64(1e20).unwrap().micros(), 100_000_000_000_000_000_000_000_000);
        assert_eq!(Money::from_f64(0.0000005), Err(MoneyError::TooPrecise(0.0000005)));
        assert_eq!(Money::from_f64(1.0 / 3.0), Err(MoneyError::TooPrecise(1.0 / 3.0)));
        assert!(matches!(Money::from_f64(f64::INFINITY), Err(MoneyError::NotFinite(_))));
        assert_eq!(m("-0.000001").micros(), -1);
        assert_eq!((m("2.49").to_string(), m("100").to_string(), m("-0.000001").to_string()), ("2.49".into(), "100".into(), "-0.000001".into()));
        assert!("1.2345678".parse::<Money>().is_err() && "x".parse::<Money>().is_err() && ".5".parse::<Money>().is_err());
        assert_eq!(Money::rounded(2.4999995).micros(), 2_500_000);
        assert_eq!(Money::rounded(f64::NAN), Money::ZERO);
    }

    #[test]
    fn integers_are_accepted_where_numbers_are_expected() {
        let c = parse("[prices]\ndefault = 2\n[accounting]\nmax_gap_factor = 3\n").unwrap();
        assert_eq!(c.prices.default, m("2"));
        assert_eq!(c.accounting.max_gap_factor, 3.0);
    }

    #[test]
    fn idle_policy_parses_and_prints() {
        assert_eq!("share".parse::<IdlePolicy>(), Ok(IdlePolicy::Share));
        assert_eq!("platform".parse::<IdlePolicy>(), Ok(IdlePolicy::Platform));
        let e = "Share".parse::<IdlePolicy>().unwrap_err().to_string();
        assert!(e.contains("\"Share\"") && e.contains("platform") && e.contains("share"), "{e}");
        assert_eq!(IdlePolicy::Share.as_str(), "share");
        let c = parse("[accounting]\nidle_policy = \"share\"\n[prices]\ndefault = 1.0\n").unwrap();
        assert_eq!(c.accounting.idle_policy, IdlePolicy::Share);
    }

    #[test]
    fn unknown_key_names_its_table_and_the_accepted_keys() {
        assert_error(
            "[prices]\ndefault = 1.0\n\n[accounting]\nteam_lable = \"team\"\n",
            5,
            "accounting.team_lable",
            &["unknown field", "team_label", "idle_policy", "currency"],
        );
        assert_error("[prices]\ndefault = 1.0\ncheap = 0.1\n", 3, "prices.cheap", &["unknown field", "by_model"]);
        assert_error(
            "[prices]\ndefault = 1.0\n[[overheads]]\nmonth = \"2026-10\"\nnetwork = 1.0\n[[overheads]]\nmonth = \"2026-11\"\nnetwrok = 1.0\n",
            8,
            "overheads[1].netwrok",
            &["unknown field", "network"],
        );
        assert_error("[prices]\ndefault = 1.0\n[units]\nfile = []\n", 4, "units.file", &["unknown field", "files"]);
    }

    #[test]
    fn collector_and_serve_are_left_to_their_components_other_sections_are_refused() {
        parse("[prices]\ndefault = 1.0\n[collector]\nlisten = \"0.0.0.0:9464\"\n[serve]\npg_listen = \"0.0.0.0:5432\"\n").unwrap();
        assert_error("[prices]\ndefault = 1.0\n\n[colector]\nx = 1\n", 4, "colector", &["unknown section", "collector", "serve", "did you mean `collector`?"]);
    }

    #[test]
    fn wrong_type_names_key_and_line() {
        assert_error(
            "[prices]\ndefault = 1.0\n[accounting]\nmax_gap_factor = \"two\"\n",
            4,
            "accounting.max_gap_factor",
            &["invalid type: string \"two\", expected a number"],
        );
        assert_error("[prices]\ndefault = 1.0\n[units]\nfiles = [\"a.csv\", 3]\n", 4, "units.files[1]", &["invalid type"]);
        assert_error("[prices]\ndefault = 1.0\n[overheads]\nmonth = \"2026-10\"\n", 3, "overheads", &["invalid type: table, expected an array"]);
    }

    #[test]
    fn unknown_idle_policy() {
        assert_error(
            "[prices]\ndefault = 1.0\n[accounting]\n\nidle_policy = \"sharing\"\n",
            5,
            "accounting.idle_policy",
            &["unknown idle policy \"sharing\"", "platform", "share"],
        );
    }

    #[test]
    fn who_pays_defaults_and_bad_values() {
        let c = parse("[prices]\ndefault = 1.0\n").unwrap();
        assert_eq!(c.accounting.hardware_xids, DEFAULT_HARDWARE_XIDS.to_vec());
        assert_eq!((c.accounting.hardware_failures, c.accounting.preemptions), (Payer::Platform, Payer::Team));
        assert_error(
            "[prices]\ndefault = 1.0\n[accounting]\nhardware_failures = \"vendor\"\n",
            4,
            "accounting.hardware_failures",
            &["\"vendor\"", "platform", "team"],
        );
        assert_error("[prices]\ndefault = 1.0\n[accounting]\npreemptions = \"\"\n", 4, "accounting.preemptions", &["expected platform or team"]);
        assert_error("[prices]\ndefault = 1.0\n[accounting]\nhardware_xids = [79,\n  -3]\n", 5, "accounting.hardware_xids", &["-3", "positive integer"]);
        assert_error("[prices]\ndefault = 1.0\n[accounting]\nhardware_xids = [\"79\"]\n", 4, "accounting.hardware_xids[0]", &["invalid type", "i64"]);
    }

    #[test]
    fn missing_default_price() {
        assert_error("[accounting]\ncurrency = \"EUR\"\n", 1, "prices.default", &["missing", "default price"]);
        assert_error("[accounting]\ncurrency = \"EUR\"\n\n[prices]\n[prices.by_model]\nx = 1.0\n", 4, "prices.default", &["missing"]);
        assert_error("", 1, "prices.default", &["missing"]);
    }

    #[test]
    fn out_of_range_values() {
        let p = "[prices]\ndefault = 1.0\n";
        assert_error("[prices]\ndefault = -1.0\n", 2, "prices.default", &["-1", ">= 0"]);
        assert_error("[prices]\ndefault = nan\n", 2, "prices.default", &["NaN", "finite"]);
        // Money is exact to the micro-unit: a seventh decimal is refused, not rounded.
        assert_error("[prices]\ndefault = 2.4999995\n", 2, "prices.default", &["2.4999995", "more than 6 decimals"]);
        assert_error("[prices]\ndefault = 1.0\n[[overheads]]\nmonth = \"2026-10\"\nnetwork = 1e-7\n", 5, "overheads[0].network", &["more than 6 decimals"]);
        assert_error("[prices]\ndefault = 1e40\n", 2, "prices.default", &["too large"]);
        assert_error(&format!("{p}[prices.by_model]\n\"NVIDIA L4\" = inf\n"), 4, "prices.by_model.\"NVIDIA L4\"", &["inf", "finite"]);
        assert_error(
            &format!("{p}[prices.by_node_label.\"gpuledger.io/pool\"]\nt4 = -0.35\n"),
            4,
            "prices.by_node_label.\"gpuledger.io/pool\".t4",
            &["-0.35", ">= 0"],
        );
        assert_error(&format!("{p}[accounting]\nactive_threshold_engine = -0.1\n"), 4, "accounting.active_threshold_engine", &["-0.1", "between 0 and 1"]);
        assert_error(&format!("{p}[accounting]\nactive_threshold_engine = 5.0\n"), 4, "accounting.active_threshold_engine", &["between 0 and 1"]);
        assert_error(&format!("{p}[accounting]\nactive_threshold_util = -inf\n"), 4, "accounting.active_threshold_util", &["between 0 and 100"]);
        assert_error(&format!("{p}[accounting]\nmax_gap_factor = 0.5\n"), 4, "accounting.max_gap_factor", &["0.5", ">= 1"]);
        assert_error(&format!("{p}[accounting]\nteam_label = \"\"\n"), 4, "accounting.team_label", &["non-empty"]);
        assert_error(&format!("{p}[accounting]\ncurrency = \"\"\n"), 4, "accounting.currency", &["three uppercase letters"]);
        assert_error(&format!("{p}[accounting]\ncurrency = \"usd\"\n"), 4, "accounting.currency", &["\"usd\"", "three uppercase letters"]);
        assert_error(&format!("{p}[accounting]\ncurrency = \"EURO\"\n"), 4, "accounting.currency", &["three uppercase letters"]);
        assert_error(&format!("{p}[[overheads]]\nmonth = \"2026-10\"\nstorage = -5.0\n"), 5, "overheads[0].storage", &["-5", ">= 0"]);
    }

    #[test]
    fn overhead_months_and_amounts() {
        let p = "[prices]\ndefault = 1.0\n";
        assert_error(&format!("{p}[[overheads]]\nmonth = \"2026-13\"\nnetwork = 1.0\n"), 4, "overheads[0].month", &["\"2026-13\"", "YYYY-MM"]);
        assert_error(&format!("{p}[[overheads]]\nmonth = \"2026-1\"\nnetwork = 1.0\n"), 4, "overheads[0].month", &["YYYY-MM"]);
        assert_error(&format!("{p}[[overheads]]\nmonth = \"2026-00\"\nnetwork = 1.0\n"), 4, "overheads[0].month", &["YYYY-MM"]);
        assert_error(&format!("{p}[[overheads]]\nnetwork = 1.0\n"), 3, "overheads[0].month", &["missing"]);
        assert_error(
            &format!("{p}[[overheads]]\nmonth = \"2026-10\"\nnetwork = 1.0\n\n[[overheads]]\nmonth = \"2026-10\"\nteam = \"nlp\"\n"),
            7,
            "overheads[1]",
            &["no amount", "network", "operations"],
        );
        assert_error(&format!("{p}[[overheads]]\nmonth = \"2026-10\"\nteam = \"\"\nsupport = 1.0\n"), 5, "overheads[0].team", &["empty team"]);

        // Two spread entries for the same month and component are both kept: they add up.
        let c = parse(&format!("{p}[[overheads]]\nmonth = \"2026-10\"\nnetwork = 1.0\n[[overheads]]\nmonth = \"2026-10\"\nnetwork = 2.5\n")).unwrap();
        assert_eq!(c.overheads.iter().map(|o| o.network.micros()).sum::<i128>(), 3_500_000);
        assert_eq!(c.overheads.len(), 2);
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let msg = error("[prices]\ndefault = 1.0\n[accounting]\nmax_gap_factor = 2.0.0\n");
        assert!(msg.starts_with("gpuledger.toml:4: "), "{msg}");
        let msg = error("[prices]\ndefault = 1.0\n\n[accounting\n");
        assert!(msg.starts_with("gpuledger.toml:4: "), "{msg}");
        let msg = error("[prices]\ndefault = 1.0\ndefault = 2.0\n");
        assert!(msg.starts_with("gpuledger.toml:3: "), "{msg}");
        assert!(msg.contains("duplicate key (`default`)"), "{msg}");
        assert!(!msg.contains('\n'), "{msg}");
    }

    #[test]
    fn node_label_prices_keep_file_order() {
        let c = parse(
            "[prices]\ndefault = 1.0\n[prices.by_node_label.\"z.io/pool\"]\nb = 1.0\na = 2.0\n[prices.by_node_label.\"a.io/pool\"]\nx = 3.0\n[prices.by_model]\n\"Tesla T4\" = 0.3\n\"NVIDIA L4\" = 0.8\n",
        )
        .unwrap();
        let order: Vec<_> = c.prices.by_node_label.iter().map(|p| (p.label_key.as_str(), p.label_value.as_str(), p.price)).collect();
        assert_eq!(order, [("z.io/pool", "b", m("1")), ("z.io/pool", "a", m("2")), ("a.io/pool", "x", m("3"))]);
        assert_eq!(c.prices.by_model, [("NVIDIA L4".to_string(), m("0.8")), ("Tesla T4".to_string(), m("0.3"))]);
    }

    fn config_with_units(dir: &Path, files: &str) -> Result<Config, ConfigError> {
        let path = dir.join("gpuledger.toml");
        fs::write(&path, format!("[prices]\ndefault = 1.0\n\n[units]\nfiles = [{files}]\n")).unwrap();
        Config::load(&path)
    }

    #[test]
    fn units_csv_good_rows() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(
            dir.path().join("units.csv"),
            "team,month,accepted_units,unit\r\nnlp,2026-10,12,\"tokens, billions\"\n\n\"vision\" , 2026-11 , 0.5 , \"say \"\"hi\"\"\"\n",
        )
        .unwrap();
        let c = config_with_units(dir.path(), "\"units.csv\"").unwrap();
        assert_eq!(c.unit_files, [dir.path().join("units.csv")]);
        assert_eq!(
            c.units,
            [
                ExtraUnits { month: "2026-10".into(), team: "nlp".into(), unit: "tokens, billions".into(), accepted_units: 12.0 },
                ExtraUnits { month: "2026-11".into(), team: "vision".into(), unit: "say \"hi\"".into(), accepted_units: 0.5 },
            ]
        );
    }

    #[track_caller]
    fn assert_units_error(csv: &str, line: usize, words: &[&str]) {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("units.csv"), csv).unwrap();
        let msg = config_with_units(dir.path(), "\"units.csv\"").unwrap_err().to_string();
        let at = format!("units.csv:{line}: ");
        assert!(msg.contains(&at), "{msg:?} should contain {at:?}");
        for w in words {
            assert!(msg.contains(w), "{msg:?} should contain {w:?}");
        }
    }

    #[test]
    fn units_csv_bad_lines() {
        let h = "month,team,unit,accepted_units\n";
        assert_units_error(&format!("{h}2026-10,nlp,runs,3\n2026-10,nlp,runs,4\n2026-10,nlp,runs,x\n"), 4, &["accepted_units \"x\" is not a number"]);
        assert_units_error(&format!("{h}2026-10,nlp,runs,-1\n"), 2, &["accepted_units", ">= 0"]);
        assert_units_error(&format!("{h}2026-10,nlp,runs,NaN\n"), 2, &["finite"]);
        assert_units_error(&format!("{h}2026-1,nlp,runs,1\n"), 2, &["month \"2026-1\" is not YYYY-MM"]);
        assert_units_error(&format!("{h}2026-10,nlp,runs\n"), 2, &["3 fields, expected 4"]);
        assert_units_error(&format!("{h}2026-10,,runs,1\n"), 2, &["empty team"]);
        assert_units_error(&format!("{h}2026-10,\"nlp,runs,1\n"), 2, &["unterminated quote"]);
        assert_units_error("month,team,unit,accepted_units,note\n", 1, &["unknown column \"note\""]);
        assert_units_error("month,team,accepted_units\n", 1, &["missing column", "unit"]);
        assert_units_error("month,team,team,unit,accepted_units\n", 1, &["\"team\" appears twice"]);
    }

    #[test]
    fn missing_units_file_names_the_config_key() {
        let dir = tempfile::tempdir().unwrap();
        let msg = config_with_units(dir.path(), "\n  \"nope.csv\",\n").unwrap_err().to_string();
        assert!(msg.contains("gpuledger.toml:6: units.files: "), "{msg}");
        assert!(msg.contains("nope.csv") && msg.contains("not found"), "{msg}");
    }

    #[test]
    fn units_parquet_int_and_float() {
        use arrow::array::{Float64Array, Int64Array, RecordBatch, StringArray};
        use arrow::datatypes::{Field, Schema};
        use std::sync::Arc;

        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, units: Arc<dyn Array>| {
            let schema = Arc::new(Schema::new(vec![
                Field::new("unit", DataType::Utf8, false),
                Field::new("month", DataType::Utf8, false),
                Field::new("team", DataType::Utf8, false),
                Field::new("accepted_units", units.data_type().clone(), false),
            ]));
            let batch = RecordBatch::try_new(
                schema.clone(),
                vec![
                    Arc::new(StringArray::from(vec!["runs", "runs"])),
                    Arc::new(StringArray::from(vec!["2026-10", "2026-11"])),
                    Arc::new(StringArray::from(vec!["nlp", "serving"])),
                    units,
                ],
            )
            .unwrap();
            let mut w = parquet::arrow::ArrowWriter::try_new(fs::File::create(dir.path().join(name)).unwrap(), schema, None).unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
        };
        write("ints.parquet", Arc::new(Int64Array::from(vec![3, 4])));
        write("floats.parquet", Arc::new(Float64Array::from(vec![1.5, -2.0])));
        write("more.parquet", Arc::new(Float64Array::from(vec![1.5, 2.0])));

        let c = config_with_units(dir.path(), "\"ints.parquet\", \"more.parquet\"").unwrap();
        assert_eq!(c.units.len(), 4);
        assert_eq!(c.units[0], ExtraUnits { month: "2026-10".into(), team: "nlp".into(), unit: "runs".into(), accepted_units: 3.0 });
        assert_eq!(c.units[3], ExtraUnits { month: "2026-11".into(), team: "serving".into(), unit: "runs".into(), accepted_units: 2.0 });

        let msg = config_with_units(dir.path(), "\"floats.parquet\"").unwrap_err().to_string();
        assert!(msg.contains("floats.parquet:2: ") && msg.contains(">= 0"), "{msg}");
    }

    #[test]
    fn example_file_loads() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gpuledger.toml");
        let c = Config::load(&path).unwrap();
        assert_eq!(c.prices.default, m("2"));
        assert_eq!(c.accounting.idle_policy, IdlePolicy::Platform);
        let pools: Vec<_> = c.prices.by_node_label.iter().filter(|p| p.label_key == "gpuledger.io/pool").map(|p| (p.label_value.as_str(), p.price)).collect();
        assert_eq!(pools, [("h100", m("2.49")), ("h100-dra", m("2.49")), ("a100-mig", m("1.6")), ("l4", m("0.8")), ("t4", m("0.35"))]);
        assert!(c.prices.by_model.iter().any(|(model, p)| model == "NVIDIA H100 80GB HBM3" && *p == m("2.49")));
        let months: BTreeSet<_> = c.overheads.iter().map(|o| o.month.as_str()).collect();
        assert_eq!(months, BTreeSet::from(["2026-10", "2026-11"]));
        assert!(c.overheads.iter().any(|o| o.team.as_deref() == Some("serving")));
        assert!(c.unit_files.is_empty());
    }

    #[test]
    fn unreadable_config_is_an_io_error() {
        let msg = Config::load(Path::new("/nonexistent/gpuledger.toml")).unwrap_err().to_string();
        assert!(msg.starts_with("/nonexistent/gpuledger.toml: cannot read"), "{msg}");
    }
}
