//! Typed reading of query results at the edge between SQL and Rust.
//!
//! A report row is read column by column by name, each column with the type its field has. A
//! column that is missing, or whose type cannot be read as the field's, is an error naming the
//! column, never a silent empty string or zero: a renamed column in `queries/` fails the
//! report instead of showing zeros.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float64Type, Int64Type};

use crate::error::{Error, Result};

/// The columns of one result batch, read by name.
pub struct Columns<'a> {
    batch: &'a RecordBatch,
    /// What the result is, to name it in errors (`chargeback_monthly`).
    what: &'a str,
}

impl<'a> Columns<'a> {
    pub fn new(batch: &'a RecordBatch, what: &'a str) -> Columns<'a> {
        Columns { batch, what }
    }

    pub fn rows(&self) -> usize {
        self.batch.num_rows()
    }

    fn column(&self, name: &str) -> Result<&'a ArrayRef> {
        self.batch.column_by_name(name).ok_or_else(|| Error::internal(format!("{}: the result has no column {name}", self.what)))
    }

    fn cast(&self, name: &str, to: &DataType, accept: impl Fn(&DataType) -> bool) -> Result<ArrayRef> {
        let column = self.column(name)?;
        if !accept(column.data_type()) {
            return Err(Error::internal(format!("{}: column {name} is {}, not readable as {to}", self.what, column.data_type())));
        }
        arrow::compute::cast(column, to).map_err(|e| Error::internal(format!("{}: column {name}: {e}", self.what)))
    }

    /// A text column (any string type); nulls read as "".
    pub fn text(&self, name: &str) -> Result<Vec<String>> {
        Ok(self.opt_text(name)?.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// A text column whose nulls mean something (a pool no label rule matched): kept as `None`.
    pub fn opt_text(&self, name: &str) -> Result<Vec<Option<String>>> {
        let a = self.cast(name, &DataType::Utf8, |t| matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View | DataType::Null))?;
        Ok(a.as_string::<i32>().iter().map(|v| v.map(str::to_string)).collect())
    }

    /// A text column whose every value names a variant of `T` (a state, say); any other value,
    /// or a null, is an error naming it.
    pub fn parsed<T: std::str::FromStr>(&self, name: &str) -> Result<Vec<T>>
    where
        T::Err: std::fmt::Display,
    {
        self.text(name)?.iter().map(|v| v.parse::<T>().map_err(|e| Error::internal(format!("{}: column {name}: {e}", self.what)))).collect()
    }

    /// A number column (any integer or float type); nulls stay `None`.
    pub fn opt_f64(&self, name: &str) -> Result<Vec<Option<f64>>> {
        let a = self.cast(name, &DataType::Float64, |t| t.is_numeric() || *t == DataType::Null)?;
        Ok(a.as_primitive::<Float64Type>().iter().collect())
    }

    /// A number column whose nulls mean zero (a SUM over no rows).
    pub fn f64(&self, name: &str) -> Result<Vec<f64>> {
        Ok(self.opt_f64(name)?.into_iter().map(|v| v.unwrap_or(0.0)).collect())
    }

    /// A count column (any integer type); nulls read as 0.
    pub fn i64(&self, name: &str) -> Result<Vec<i64>> {
        let a = self.cast(name, &DataType::Int64, |t| t.is_integer() || *t == DataType::Null)?;
        Ok(a.as_primitive::<Int64Type>().iter().map(|v| v.unwrap_or(0)).collect())
    }

    /// A boolean column; nulls read as false.
    pub fn bool(&self, name: &str) -> Result<Vec<bool>> {
        let a = self.cast(name, &DataType::Boolean, |t| matches!(t, DataType::Boolean | DataType::Null))?;
        Ok(a.as_boolean().iter().map(|v| v.unwrap_or(false)).collect())
    }
}

/// Decodes every batch of a result with `row`, which reads one batch's columns into rows.
pub fn decode<T>(batches: &[RecordBatch], what: &str, mut row: impl FnMut(&Columns<'_>) -> Result<Vec<T>>) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for b in batches {
        out.extend(row(&Columns::new(b, what))?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Float64Array, Int32Array, StringArray};
    use arrow::datatypes::{Field, Schema};

    use super::*;

    #[test]
    fn a_missing_or_mistyped_column_is_an_error_not_a_zero() {
        let schema = Schema::new(vec![Field::new("team", DataType::Utf8, true), Field::new("cost", DataType::Float64, true), Field::new("n", DataType::Int32, false)]);
        let batch = RecordBatch::try_new(
            Arc::new(schema),
            vec![Arc::new(StringArray::from(vec![Some("a"), None])), Arc::new(Float64Array::from(vec![Some(1.5), None])), Arc::new(Int32Array::from(vec![3, 4]))],
        )
        .unwrap();
        let c = Columns::new(&batch, "t");
        assert_eq!(c.text("team").unwrap(), vec!["a", ""]);
        assert_eq!(c.opt_f64("cost").unwrap(), vec![Some(1.5), None]);
        assert_eq!(c.f64("n").unwrap(), vec![3.0, 4.0], "integers read as numbers");
        assert_eq!(c.i64("n").unwrap(), vec![3, 4]);
        let missing = c.f64("costs").unwrap_err().to_string();
        assert!(missing.contains("t: the result has no column costs") && missing.contains("bug"), "{missing}");
        let mistyped = c.f64("team").unwrap_err().to_string();
        assert!(mistyped.contains("column team is Utf8"), "{mistyped}");
        assert!(c.i64("cost").is_err(), "a float is not read as a count");
    }
}
