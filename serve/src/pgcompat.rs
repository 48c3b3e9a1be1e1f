//! Functions PostgreSQL clients call that DataFusion answers differently or not at all:
//! `version()` (clients and drivers look for "PostgreSQL <major>.<minor>" in it),
//! and `current_setting(name)` (the values match what the wire protocol announces at login and
//! what `SHOW` answers).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, StringArray};
use arrow::datatypes::DataType;
use datafusion::error::DataFusionError;
use datafusion::logical_expr::{ColumnarValue, Volatility, create_udf};
use datafusion::prelude::SessionContext;
use datafusion::scalar::ScalarValue;

/// The PostgreSQL version the endpoint presents itself as (pgwire announces 16.6).
pub(crate) const PG_VERSION: &str = "16.6";

/// Settings `current_setting` knows; anything else is an error, as in PostgreSQL.
const SETTINGS: &[(&str, &str)] = &[
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
}
