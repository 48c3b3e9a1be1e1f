//! The small SQL functions the accounting in `queries/` needs beyond DataFusion's own.
//!
//! Each has the same name and meaning as a DuckDB built-in or a short DuckDB macro, so the SQL
//! files also run there (see `queries/README.md` and `bench/duckdb_port.py`'s prelude):
//!
//! | function | returns | DuckDB |
//! | --- | --- | --- |
//! | `label(labels_json, key)` | the value of `key` in a JSON object of string labels, else null | `json_extract_string(labels_json, '$."' \|\| key \|\| '"')` |
//! | `epoch_ms(ts)` | milliseconds since the Unix epoch | `epoch_ms(ts)` (built in) |
//! | `json_contains(haystack_json, needle_json)` | true when every key of the `needle` object is in `haystack` with a value that contains the needle's (a scalar: equal; an array: each needle element is contained in some haystack element); null when either is null or not JSON | `json_contains(haystack_json, needle_json)` (built in) |
//! | `quantity_units(quantity)` | a Kubernetes quantity (`80Gi`, `500m`, `2`, `1e3`) in whole units, rounded up as the API's `Value()` does; null when the text is not a quantity or the value is past BIGINT | a `regexp_extract` macro (floats for fractions) |
//! | `mig_sevenths(profile)` | `N` of a MIG profile `Ng.*` (or `Mc.Ng.*`), the instance's compute slices (of 7, of 4 on an A30); null for a whole GPU | `TRY_CAST(regexp_extract(profile, '^(?:[0-9]+c\.)?([0-9]+)g', 1) AS BIGINT)` |
//!
//! Money is exact: `DECIMAL(38, 6)` (micro-units of the currency), computed in 128-bit integers
//! by the four money functions ([`money`]). Each rounds at one place, said below; DuckDB does
//! the same arithmetic on HUGEINT (`//`, `%`) in a macro.
//!
//! | function | returns |
//! | --- | --- |
//! | `price_ns(gpu_ns, price)` | the cost of `gpu_ns` GPU-nanoseconds at `price` per GPU-hour: `gpu_ns x price / 3.6e12`, rounded half to even to micro-units |
//! | `money_ratio(amount, num, den)` | `amount x num / den`, rounded half to even to micro-units (a forecast, a cost per unit); null when `den` is 0 |
//! | `share_floor(amount, part, whole)` | `amount x part / whole` rounded down to micro-units: a part's share of an amount spread in proportion; null when `whole` is 0 |
//! | `share_remainder(amount, part, whole)` | what `share_floor` left over, in `1/whole` of a micro-unit (`amount_micros x part mod whole`, a `DECIMAL(38, 0)`): the parts with the largest remainders get the micro-units the floors left |

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, BooleanArray, Int64Array, StringArray, StringBuilder, TimestampMillisecondArray};
use arrow::datatypes::{DataType, TimeUnit};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Volatility, create_udf};
use datafusion::prelude::SessionContext;

pub mod money;

/// Registers `label`, `epoch_ms`, `json_contains`, `mig_sevenths` and the money functions with `ctx`.
pub fn register(ctx: &SessionContext) {
    for f in all() {
        ctx.register_udf(f);
    }
}

/// The ledger's functions, for sessions built by hand (Ballista's scheduler and executors).
pub fn all() -> Vec<ScalarUDF> {
    let mut all = vec![label_udf(), epoch_ms_udf(), json_contains_udf(), mig_sevenths_udf(), quantity_units_udf()];
    all.extend(money::all());
    all
}

fn json_contains_udf() -> ScalarUDF {
    create_udf(
        "json_contains",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Boolean,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let haystack = strings(&arrays[0], "json_contains")?;
            let needle = strings(&arrays[1], "json_contains")?;
            let out: BooleanArray = (0..haystack.len())
                .map(|i| {
                    if haystack.is_null(i) || needle.is_null(i) {
                        return None;
                    }
                    let h: serde_json::Value = serde_json::from_str(haystack.value(i)).ok()?;
                    let n: serde_json::Value = serde_json::from_str(needle.value(i)).ok()?;
                    Some(json_contains(&h, &n))
                })
                .collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }),
    )
}

/// Whether `needle` is contained in `haystack`: an object's every key is in the haystack
/// object with a value containing the needle's, an array's every element is contained in some
/// haystack element, and a scalar equals the haystack. (`{}` is in every object: a
/// ResourceFlavor without node labels selects every node.)
pub fn json_contains(haystack: &serde_json::Value, needle: &serde_json::Value) -> bool {
    use serde_json::Value;
    match (haystack, needle) {
        (Value::Object(h), Value::Object(n)) => n.iter().all(|(k, v)| h.get(k).is_some_and(|hv| json_contains(hv, v))),
        (Value::Array(h), Value::Array(n)) => n.iter().all(|v| h.iter().any(|hv| json_contains(hv, v))),
        (h, n) => h == n,
    }
}

fn label_udf() -> ScalarUDF {
    create_udf(
        "label",
        vec![DataType::Utf8, DataType::Utf8],
        DataType::Utf8,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let json = strings(&arrays[0], "label")?;
            let key = strings(&arrays[1], "label")?;
            let mut out = StringBuilder::with_capacity(json.len(), json.len() * 8);
            for i in 0..json.len() {
                if json.is_null(i) || key.is_null(i) {
                    out.append_null();
                    continue;
                }
                match label_value(json.value(i), key.value(i)) {
                    Some(v) => out.append_value(v),
                    None => out.append_null(),
                }
            }
            Ok(ColumnarValue::Array(Arc::new(out.finish()) as ArrayRef))
        }),
    )
}

/// Looks `key` up in a JSON object of labels. Labels are strings; a number or boolean is
/// returned as its JSON text, since a hand-written object may carry one.
pub fn label_value(json: &str, key: &str) -> Option<String> {
    // The store writes labels with sorted keys and string values; a cheap substring test
    // skips the parse for the common case where the key is absent.
    if !json.contains(key) {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(json).ok()?;
    match value.get(key)? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Null => None,
        other => Some(other.to_string()),
    }
}

fn epoch_ms_udf() -> ScalarUDF {
    create_udf(
        "epoch_ms",
        vec![DataType::Timestamp(TimeUnit::Millisecond, Some("UTC".into()))],
        DataType::Int64,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let ms = arrow::compute::cast(&arrays[0], &DataType::Timestamp(TimeUnit::Millisecond, None))?;
            let ms = ms
                .as_any()
                .downcast_ref::<TimestampMillisecondArray>()
                .ok_or_else(|| DataFusionError::Internal("epoch_ms: expected a timestamp".into()))?;
            let out: Int64Array = ms.iter().collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }),
    )
}

fn mig_sevenths_udf() -> ScalarUDF {
    create_udf(
        "mig_sevenths",
        vec![DataType::Utf8],
        DataType::Int64,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let profiles = strings(&arrays[0], "mig_sevenths")?;
            let out: Int64Array = profiles.iter().map(|p| p.and_then(mig_sevenths)).collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }),
    )
}

/// `3g.40gb` -> 3, `1c.3g.40gb` -> 3, `7g.80gb` -> 7; anything else -> None.
pub fn mig_sevenths(profile: &str) -> Option<i64> {
    let rest = match profile.split_once('.') {
        // A compute-instance profile `Mc.Ng.size` names the GPU instance after the first dot.
        Some((head, tail)) if head.ends_with('c') && head[..head.len() - 1].bytes().all(|b| b.is_ascii_digit()) => tail,
        _ => profile,
    };
    let digits: &str = &rest[..rest.bytes().take_while(u8::is_ascii_digit).count()];
    if digits.is_empty() || !rest[digits.len()..].starts_with('g') {
        return None;
    }
    let n: i64 = digits.parse().ok()?;
    (1..=7).contains(&n).then_some(n)
}

fn quantity_units_udf() -> ScalarUDF {
    create_udf(
        "quantity_units",
        vec![DataType::Utf8],
        DataType::Int64,
        Volatility::Immutable,
        Arc::new(|args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let texts = strings(&arrays[0], "quantity_units")?;
            let out: Int64Array = texts.iter().map(|q| q.and_then(quantity_units)).collect();
            Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
        }),
    )
}

/// A Kubernetes quantity in whole units, rounded up: `80Gi` -> 85899345920, `1500m` -> 2,
/// `2k` -> 2000, `1e3` -> 1000. `None` for text that is not a quantity, a negative one, or one
/// past `i64`. Exact: the digits are read as an integer and a power of ten, never as a float.
pub fn quantity_units(text: &str) -> Option<i64> {
    let t = text.trim();
    let number_len = t.bytes().take_while(|b| b.is_ascii_digit() || *b == b'.').count();
    let (number, suffix) = t.split_at(number_len);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return None;
    }
    let digits = format!("{whole}{fraction}");
    let mantissa: i128 = if digits.is_empty() { 0 } else { digits.parse().ok()? };
    // value = mantissa x factor / 10^decimals, as numerator / denominator.
    let mut decimals = fraction.len() as u32;
    let factor: i128 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        "Ei" => 1 << 60,
        "n" => {
            decimals += 9;
            1
        }
        "u" => {
            decimals += 6;
            1
        }
        "m" => {
            decimals += 3;
            1
        }
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "E" => 1_000_000_000_000_000_000,
        e if e.starts_with(['e', 'E']) => {
            let exp: i32 = e[1..].parse().ok()?;
            if exp >= 0 {
                10i128.checked_pow(exp as u32)?
            } else {
                decimals += exp.unsigned_abs();
                1
            }
        }
        _ => return None,
    };
    let numerator = mantissa.checked_mul(factor)?;
    let denominator = 10i128.checked_pow(decimals)?;
    let units = numerator / denominator + i128::from(numerator % denominator != 0);
    i64::try_from(units).ok()
}

fn strings<'a>(array: &'a ArrayRef, function: &str) -> Result<&'a StringArray> {
    array
        .as_any()
        .downcast_ref::<StringArray>()
        .ok_or_else(|| DataFusionError::Execution(format!("{function}: expected a string argument, got {}", array.data_type())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_quantities() {
        assert_eq!(quantity_units("80Gi"), Some(80 << 30));
        assert_eq!(quantity_units("20Gi"), Some(21_474_836_480));
        assert_eq!(quantity_units("1500m"), Some(2), "rounded up, as Quantity.Value()");
        assert_eq!(quantity_units("2"), Some(2));
        assert_eq!(quantity_units("0.5"), Some(1));
        assert_eq!(quantity_units("2k"), Some(2_000));
        assert_eq!(quantity_units("1e3"), Some(1_000));
        assert_eq!(quantity_units("1.5Ki"), Some(1_536));
        assert_eq!(quantity_units("100Ei"), None, "past i64");
        assert_eq!(quantity_units("-1"), None);
        assert_eq!(quantity_units("abc"), None);
        assert_eq!(quantity_units(""), None);
        assert_eq!(quantity_units("1.2.3"), None);
    }

    #[test]
    fn mig_profiles() {
        assert_eq!(mig_sevenths("3g.40gb"), Some(3));
        assert_eq!(mig_sevenths("1g.10gb"), Some(1));
        assert_eq!(mig_sevenths("1g.10gb+me"), Some(1));
        assert_eq!(mig_sevenths("7g.80gb"), Some(7));
        assert_eq!(mig_sevenths("1c.3g.40gb"), Some(3));
        assert_eq!(mig_sevenths("9g.90gb"), None);
        assert_eq!(mig_sevenths("gpu"), None);
        assert_eq!(mig_sevenths(""), None);
    }

    #[test]
    fn json_containment() {
        let node: serde_json::Value = serde_json::from_str(r#"{"gpuledger.io/pool":"h100","zone":"a","n":3}"#).unwrap();
        let has = |needle: &str| json_contains(&node, &serde_json::from_str(needle).unwrap());
        assert!(has(r#"{"gpuledger.io/pool":"h100"}"#));
        assert!(has(r#"{"gpuledger.io/pool":"h100","zone":"a"}"#));
        assert!(has("{}"));
        assert!(!has(r#"{"gpuledger.io/pool":"h100","zone":"b"}"#));
        assert!(!has(r#"{"gpuledger.io/pool":"l4"}"#));
        assert!(!has(r#"{"missing":"x"}"#));
        assert!(!has(r#"{"n":"3"}"#), "a number is not its string");
        let list: serde_json::Value = serde_json::from_str(r#"[1,{"a":1,"b":2}]"#).unwrap();
        assert!(json_contains(&list, &serde_json::from_str(r#"[{"a":1}]"#).unwrap()));
        assert!(!json_contains(&list, &serde_json::from_str(r#"[{"a":2}]"#).unwrap()));
    }

    #[test]
    fn labels_from_json() {
        let j = r#"{"app":"x","gpuledger.io/pool":"h100","n":3,"team":"nlp"}"#;
        assert_eq!(label_value(j, "team").as_deref(), Some("nlp"));
        assert_eq!(label_value(j, "gpuledger.io/pool").as_deref(), Some("h100"));
        assert_eq!(label_value(j, "n").as_deref(), Some("3"));
        assert_eq!(label_value(j, "te"), None);
        assert_eq!(label_value("not json team", "team"), None);
    }

    #[tokio::test]
    async fn functions_in_sql() {
        let ctx = SessionContext::new();
        register(&ctx);
        let batches = ctx
            .sql(
                r#"SELECT label('{"team":"a"}', 'team') AS t, label(NULL, 'team') AS n,
                          epoch_ms(CAST('2026-10-01T00:00:01Z' AS TIMESTAMP WITH TIME ZONE)) AS ms,
                          mig_sevenths('2g.20gb') AS m"#,
            )
            .await
            .unwrap()
            .collect()
            .await
            .unwrap();
        let text = arrow::util::pretty::pretty_format_batches(&batches).unwrap().to_string();
        assert!(text.contains("| a "), "{text}");
        assert!(text.contains("1790812801000"), "{text}");
        assert!(text.contains("| 2 "), "{text}");
    }
}
