//! Functions PostgreSQL clients call that DataFusion answers differently or not at all:
//! `version()` (clients and drivers look for "PostgreSQL <major>.<minor>" in it),
//! `current_setting(name)` (the values match what the wire protocol announces at login and
//! what `SHOW` answers), and the catalog functions tools' metadata queries call that a ledger
//! has nothing for: no comments, sequences, indexes or user-defined functions
//! ([`catalog_stand_ins`]), `json_build_object`, which SQLAlchemy's column reflection
//! calls, and `sql_type_name`, the PostgreSQL name of an Arrow type's text, which
//! `information_schema.columns` answers with (see [`crate::parse`]).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::DataType;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility, create_udf};
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;

/// The PostgreSQL version the endpoint presents itself as (pgwire announces 16.6).
pub(crate) const PG_VERSION: &str = "16.6";

/// Settings `current_setting`, `SHOW` and `pg_settings` know; anything else is an error, as in
/// PostgreSQL. (pgjdbc reads `max_index_keys` before its key and index metadata.)
pub(crate) const SETTINGS: &[(&str, &str)] = &[
    ("server_version", PG_VERSION),
    ("server_version_num", "160006"),
    ("server_encoding", "UTF8"),
    ("client_encoding", "UTF8"),
    ("timezone", "UTC"),
    ("datestyle", "ISO, MDY"),
    ("intervalstyle", "postgres"),
    ("search_path", "public"),
    ("standard_conforming_strings", "on"),
    ("integer_datetimes", "on"),
    ("max_identifier_length", "63"),
    ("max_index_keys", "32"),
    ("max_function_args", "100"),
    ("block_size", "8192"),
    ("is_superuser", "off"),
    ("default_transaction_read_only", "on"),
    ("transaction_read_only", "on"),
];

pub fn register(ctx: &SessionContext) {
    let text = format!("PostgreSQL {PG_VERSION} (gpuledger {}, read-only, on Apache DataFusion {})", env!("CARGO_PKG_VERSION"), datafusion::DATAFUSION_VERSION);
    let version = create_udf("version", vec![], DataType::Utf8, Volatility::Stable, Arc::new(move |_args: &[ColumnarValue]| Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(text.clone()))))));
    ctx.register_udf(version);
    let current_setting = create_udf("current_setting", vec![DataType::Utf8], DataType::Utf8, Volatility::Stable, Arc::new(current_setting));
    ctx.register_udf(current_setting);
    for (name, answer) in catalog_stand_ins() {
        ctx.register_udf(ScalarUDF::new_from_impl(StandIn { name, answer, signature: Signature::variadic_any(Volatility::Stable) }));
    }
    ctx.register_udf(ScalarUDF::new_from_impl(JsonBuildObject { signature: Signature::variadic_any(Volatility::Immutable) }));
    ctx.register_udf(ScalarUDF::new_from_impl(Numeric { signature: Signature::any(1, Volatility::Immutable) }));
    ctx.register_udf(create_udf("sql_type_name", vec![DataType::Utf8], DataType::Utf8, Volatility::Immutable, Arc::new(sql_type_names)));
}

/// The name `information_schema.columns.data_type` gives a column in PostgreSQL, for the
/// Arrow type DataFusion writes there (`Timestamp(ms, "UTC")` is `timestamp with time zone`,
/// `Utf8View` is `text`): the type the column has on the wire, by its SQL-standard name, so
/// Grafana's query editor finds the time columns. Text that is no Arrow type stays as it is.
pub(crate) fn sql_type_name(arrow: &str) -> String {
    use datafusion_postgres::arrow_pg::datatypes::into_pg_type;
    use datafusion_postgres::pgwire::api::Type;
    let Some(pg) = arrow.parse::<DataType>().ok().and_then(|t| into_pg_type(&t).ok()) else { return arrow.to_owned() };
    let name = match pg {
        Type::BOOL => "boolean",
        Type::INT2 => "smallint",
        Type::INT4 => "integer",
        Type::INT8 => "bigint",
        Type::FLOAT4 => "real",
        Type::FLOAT8 => "double precision",
        Type::NUMERIC => "numeric",
        Type::TEXT | Type::VARCHAR => "text",
        Type::TIMESTAMP => "timestamp without time zone",
        Type::TIMESTAMPTZ => "timestamp with time zone",
        Type::DATE => "date",
        Type::TIME => "time without time zone",
        Type::INTERVAL => "interval",
        Type::BYTEA => "bytea",
        // Array types are named after their element with a leading underscore (`_text`).
        ref t if t.name().starts_with('_') => "ARRAY",
        ref t => return t.name().to_owned(),
    };
    name.to_owned()
}

fn sql_type_names(args: &[ColumnarValue]) -> Result<ColumnarValue, DataFusionError> {
    let arrays = ColumnarValue::values_to_arrays(args)?;
    let Some(types) = arrays.first() else { return Err(DataFusionError::Plan("sql_type_name takes an Arrow type's text".into())) };
    let types = arrow::compute::cast(types, &DataType::Utf8)?;
    let types = types.as_string::<i32>();
    let names: StringArray = (0..types.len()).map(|i| (!types.is_null(i)).then(|| sql_type_name(types.value(i)))).collect();
    Ok(ColumnarValue::Array(Arc::new(names) as ArrayRef))
}

/// Catalog functions of psql's `\\d+` and `\\df`, SQLAlchemy's reflection, pgjdbc's metadata
/// and DBeaver, answered as PostgreSQL answers them where the object has none of the thing
/// asked: no comment (`obj_description`), no sequence behind a column
/// (`pg_get_serial_sequence`), no index definition; the functions of `pg_proc` (none are
/// listed) visible, with no arguments and no result type to show. `_pg_expandarray` (pgjdbc's
/// key and index metadata) expands the keys of indexes and constraints, and there are none:
/// its `(x, n)` is never read, but must plan.
fn catalog_stand_ins() -> Vec<(&'static str, ScalarValue)> {
    let text = ScalarValue::Utf8(None);
    let key = DataType::Struct(vec![arrow::datatypes::Field::new("x", DataType::Int64, true), arrow::datatypes::Field::new("n", DataType::Int64, true)].into());
    let mut out: Vec<(&'static str, ScalarValue)> = [
        "obj_description",
        "col_description",
        "shobj_description",
        "pg_get_serial_sequence",
        "pg_get_indexdef",
        "pg_get_viewdef",
        "pg_get_triggerdef",
        "pg_get_function_result",
        "pg_get_function_arguments",
        "pg_get_function_identity_arguments",
    ]
    .into_iter()
    .map(|name| (name, text.clone()))
    .collect();
    for visible in ["pg_function_is_visible", "pg_type_is_visible", "pg_collation_is_visible", "pg_conversion_is_visible", "pg_opclass_is_visible", "pg_operator_is_visible"] {
        out.push((visible, ScalarValue::Boolean(Some(true))));
    }
    if let Ok(null_key) = ScalarValue::try_from(&key) {
        out.push(("_pg_expandarray", null_key));
    }
    out
}

/// `json_build_object(key, value, ...)`: a JSON object of the pairs, row by row, as text.
#[derive(Debug, PartialEq, Eq, Hash)]
struct JsonBuildObject {
    signature: Signature,
}

impl ScalarUDFImpl for JsonBuildObject {
    fn name(&self) -> &str {
        "json_build_object"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType, DataFusionError> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue, DataFusionError> {
        if !args.args.len().is_multiple_of(2) {
            return Err(DataFusionError::Execution("json_build_object takes keys and values in pairs".into()));
        }
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let mut out = Vec::with_capacity(args.number_rows);
        for row in 0..args.number_rows {
            let mut object = serde_json::Map::new();
            for pair in arrays.chunks(2) {
                let key = ScalarValue::try_from_array(&pair[0], row)?;
                let value = ScalarValue::try_from_array(&pair[1], row)?;
                let json = match value {
                    v if v.is_null() => serde_json::Value::Null,
                    ScalarValue::Boolean(Some(b)) => serde_json::Value::Bool(b),
                    ScalarValue::Int8(Some(n)) => n.into(),
                    ScalarValue::Int16(Some(n)) => n.into(),
                    ScalarValue::Int32(Some(n)) => n.into(),
                    ScalarValue::Int64(Some(n)) => n.into(),
                    ScalarValue::UInt64(Some(n)) => n.into(),
                    ScalarValue::Float64(Some(n)) => serde_json::Number::from_f64(n).map_or(serde_json::Value::Null, serde_json::Value::Number),
                    other => serde_json::Value::String(other.to_string()),
                };
                object.insert(key.to_string(), json);
            }
            out.push(Some(serde_json::Value::Object(object).to_string()));
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out)) as ArrayRef))
    }
}

/// Decimal places kept by `numeric` without a scale for a value whose digits are not known
/// when the statement is planned (a float or text column): a float's 15 significant digits
/// (DBL_DIG) for values from 0.1 up.
pub(crate) const NUMERIC_SCALE: i8 = 15;

/// The digits before and after the point of the number `text` writes (`-12.50` has 2 and 2,
/// `1.5e3` has 4 and 0, `1e-5` has 1 and 5); None when it is not a number.
pub(crate) fn numeric_digits(text: &str) -> Option<(u32, u32)> {
    let t = text.trim().trim_start_matches(['+', '-']);
    let (mantissa, exponent) = match t.split_once(['e', 'E']) {
        Some((m, e)) => (m, e.parse::<i32>().ok()?),
        None => (t, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    // The digits as one run, and where the point falls in it once the exponent is applied.
    let point = int.len() as i32 + exponent;
    let leading_zeros = int.chars().chain(frac.chars()).take_while(|&c| c == '0').count() as i32;
    let before = (point - leading_zeros).max(1);
    let scale = (frac.len() as i32 - exponent).max(0);
    Some((before as u32, scale as u32))
}

/// `numeric(x)`, what `x::numeric` without a precision becomes (see [`crate::parse`]):
/// PostgreSQL keeps every digit, DataFusion made it `decimal(38, 10)` and cut the rest. A
/// decimal stays as it is, an integer becomes a decimal without places, a float keeps
/// [`NUMERIC_SCALE`] places, and text is read with as many, or refused when it has more.
#[derive(Debug, PartialEq, Eq, Hash)]
struct Numeric {
    signature: Signature,
}

impl ScalarUDFImpl for Numeric {
    fn name(&self) -> &str {
        "numeric"
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType, DataFusionError> {
        Ok(match args.first() {
            Some(t @ (DataType::Decimal32(..) | DataType::Decimal64(..) | DataType::Decimal128(..) | DataType::Decimal256(..))) => t.clone(),
            Some(t) if t.is_integer() => DataType::Decimal128(20, 0),
            _ => DataType::Decimal128(38, NUMERIC_SCALE),
        })
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue, DataFusionError> {
        let [value] = args.args.as_slice() else { return Err(DataFusionError::Plan("numeric takes one value".into())) };
        let to = args.return_field.data_type();
        let array = value.to_array(args.number_rows)?;
        if let Some(text) = arrow::compute::cast(&array, &DataType::Utf8).ok().filter(|_| matches!(array.data_type(), DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)) {
            let text = text.as_string::<i32>();
            for i in (0..text.len()).filter(|&i| !text.is_null(i)) {
                let v = text.value(i).trim();
                if numeric_digits(v).is_some_and(|(_, scale)| scale > NUMERIC_SCALE as u32) {
                    return Err(DataFusionError::Execution(format!(
                        "numeric: '{v}' has more decimal places than the {NUMERIC_SCALE} kept for numeric without a scale here; cast to numeric(precision, scale)"
                    )));
                }
            }
        }
        let options = arrow::compute::CastOptions { safe: false, ..Default::default() };
        Ok(ColumnarValue::Array(arrow::compute::cast_with_options(&array, to, &options)?))
    }
}

/// A catalog function that gives one answer whatever it is asked (see [`catalog_stand_ins`]).
#[derive(Debug, PartialEq, Eq, Hash)]
struct StandIn {
    name: &'static str,
    answer: ScalarValue,
    signature: Signature,
}

impl ScalarUDFImpl for StandIn {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType, DataFusionError> {
        Ok(self.answer.data_type())
    }

    fn invoke_with_args(&self, _args: ScalarFunctionArgs) -> Result<ColumnarValue, DataFusionError> {
        Ok(ColumnarValue::Scalar(self.answer.clone()))
    }
}

/// The value of the server setting `name` (any case), if it is one.
pub(crate) fn setting(name: &str) -> Option<&'static str> {
    let key = name.trim().to_ascii_lowercase();
    SETTINGS.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

fn lookup(name: &str) -> Result<&'static str, DataFusionError> {
    setting(name).ok_or_else(|| DataFusionError::Execution(format!("unrecognized configuration parameter \"{name}\"")))
}

fn current_setting(args: &[ColumnarValue]) -> Result<ColumnarValue, DataFusionError> {
    match args.first() {
        Some(ColumnarValue::Scalar(ScalarValue::Utf8(Some(name)))) => Ok(ColumnarValue::Scalar(ScalarValue::Utf8(Some(lookup(name)?.to_owned())))),
        Some(ColumnarValue::Scalar(_)) => Ok(ColumnarValue::Scalar(ScalarValue::Utf8(None))),
        Some(ColumnarValue::Array(a)) => {
            let names = a.as_string::<i32>();
            let mut out = Vec::with_capacity(names.len());
            for i in 0..names.len() {
                out.push(if names.is_null(i) { None } else { Some(lookup(names.value(i))?) });
            }
            Ok(ColumnarValue::Array(Arc::new(StringArray::from(out)) as ArrayRef))
        }
        None => Err(DataFusionError::Plan("current_setting takes the name of a setting".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn version_reads_as_postgresql_and_settings_resolve() {
        let ctx = SessionContext::new();
        register(&ctx);
        let batches = ctx.sql("SELECT version() AS v, current_setting('server_version_num') AS n, current_setting('TimeZone') AS tz").await.unwrap().collect().await.unwrap();
        let col = |i: usize| batches[0].column(i).as_string::<i32>().value(0).to_owned();
        assert!(col(0).starts_with("PostgreSQL 16.6 (gpuledger"), "{}", col(0));
        assert_eq!(col(1), "160006");
        assert_eq!(col(2), "UTC");
        let err = ctx.sql("SELECT current_setting('no_such_thing')").await.unwrap().collect().await.unwrap_err();
        assert!(err.to_string().contains("unrecognized configuration parameter"), "{err}");
    }

    #[tokio::test]
    async fn catalog_stand_ins_answer_as_for_an_object_without_the_thing_asked() {
        let ctx = SessionContext::new();
        register(&ctx);
        let sql = "SELECT obj_description(CAST(16384 AS INT), 'pg_class') IS NULL AS a, pg_get_serial_sequence('costs', 'team') IS NULL AS b, pg_function_is_visible(CAST(1 AS BIGINT)) AS c";
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let row: Vec<bool> = (0..3).map(|i| batches[0].column(i).as_boolean().value(0)).collect();
        assert_eq!(row, [true, true, true]);
    }

    #[test]
    fn a_numbers_digits_before_and_after_the_point() {
        let digits: Vec<_> = ["-12.50", "1.5e3", "1e-5", "0.001", "007", ".5", "abc", ".", "1.2.3"].into_iter().map(numeric_digits).collect();
        assert_eq!(digits, [Some((2, 2)), Some((4, 0)), Some((1, 5)), Some((1, 3)), Some((1, 0)), Some((1, 1)), None, None, None]);
    }

    #[tokio::test]
    async fn numeric_without_a_scale_keeps_digits_or_refuses() {
        let ctx = SessionContext::new();
        register(&ctx);
        let batches = ctx.sql("SELECT numeric(CAST(0.000123456789 AS DOUBLE)) AS f, numeric(CAST(3 AS BIGINT)) AS i, numeric(CAST(1.25 AS DECIMAL(10, 2))) AS d, numeric('2.123456789012345') AS t").await.unwrap().collect().await.unwrap();
        let schema = batches[0].schema();
        let types: Vec<_> = schema.fields().iter().map(|f| f.data_type().clone()).collect();
        assert_eq!(types, [DataType::Decimal128(38, 15), DataType::Decimal128(20, 0), DataType::Decimal128(10, 2), DataType::Decimal128(38, 15)]);
        let shown = arrow::util::pretty::pretty_format_batches(&batches).unwrap().to_string();
        assert!(shown.contains("0.000123456789000") && shown.contains("| 3 ") && shown.contains("1.25") && shown.contains("2.123456789012345"), "{shown}");
        let refused = ctx.sql("SELECT numeric('0.1234567890123456789') AS t").await.unwrap().collect().await.unwrap_err().to_string();
        assert!(refused.contains("'0.1234567890123456789' has more decimal places than the 15"), "{refused}");
    }

    #[test]
    fn arrow_types_get_the_names_postgresql_gives_them_in_information_schema() {
        let named: Vec<String> = ["Timestamp(ms, \"UTC\")", "Timestamp(ns)", "Utf8View", "Int64", "Float64", "Decimal128(38, 6)", "Boolean", "Date32", "not a type"].into_iter().map(sql_type_name).collect();
        assert_eq!(named, ["timestamp with time zone", "timestamp without time zone", "text", "bigint", "double precision", "numeric", "boolean", "date", "not a type"]);
    }

    #[tokio::test]
    async fn json_build_object_pairs_keys_with_typed_values_row_by_row() {
        let ctx = SessionContext::new();
        register(&ctx);
        let sql = "SELECT json_build_object('always', a = 'a', 'start', CAST(NULL AS BIGINT), 'n', n) AS j FROM (VALUES ('a', 1), ('', 2)) AS t(a, n)";
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let rows: Vec<serde_json::Value> = (0..2).map(|i| serde_json::from_str(batches[0].column(0).as_string::<i32>().value(i)).unwrap()).collect();
        assert_eq!(rows, [serde_json::json!({"always": true, "start": null, "n": 1}), serde_json::json!({"always": false, "start": null, "n": 2})]);
    }
}
