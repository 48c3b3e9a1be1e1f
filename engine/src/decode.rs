//! Typed reading of query results at the edge between SQL and Rust.
//!
//! A report row is read column by column by name, each column with the type its field has. A
//! column that is missing, or whose type cannot be read as the field's, is an error naming the
//! column, never a silent empty string or zero: a renamed column in `queries/` fails the
//! report instead of showing zeros.
//!
//! A result of a declared table or view (`gpuledger_schemas::derived`) is read by its
//! declaration: [`decode_rows!`] fills a row struct whose fields are named as the columns, each
//! field read by the type the declaration gives its column ([`FromColumn`]), so a report row
//! names its columns once, in its struct, and an amount of money is read as one because the
//! schema says it is.
//!
//! Money columns are exact decimals (`DECIMAL(38, 6)`, micro-units): [`Columns::money`] reads
//! them as the nearest float, for formatting only (a report sums nothing itself), and refuses a
//! float column, which would mean the SQL lost the exact amount on the way.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Decimal128Type, Float64Type, Int64Type};

use gpuledger_schemas::derived::{DerivedTable, DerivedType};

use crate::error::{Error, Result};

/// The columns of one result batch, read by name.
pub struct Columns<'a> {
    batch: &'a RecordBatch,
    /// What the result is, to name it in errors (`chargeback_monthly`).
    what: &'a str,
    /// The table or view the result is rows of, when it is a declared one.
    declared: Option<&'static DerivedTable>,
}

impl<'a> Columns<'a> {
    pub fn new(batch: &'a RecordBatch, what: &'a str) -> Columns<'a> {
        Columns { batch, what, declared: None }
    }

    /// Whether `name` is an amount of money by the declaration (`DECIMAL(38, 6)`); a column the
    /// declaration lacks is an error, a result of no declared table has no amounts.
    fn is_money(&self, name: &str) -> Result<bool> {
        match self.declared {
            None => Ok(false),
            Some(table) => match table.column(name) {
                Some(c) => Ok(c.ty == DerivedType::Money),
                None => Err(Error::internal(format!("{}: {name} is not a declared column of {}", self.what, table.name))),
            },
        }
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

    /// An amount of money: a decimal column (`DECIMAL(38, 6)`), each value as the float nearest
    /// to it (an amount below 9e9 converts exactly from its micro-units and the quotient is
    /// rounded once); nulls stay `None`. A float column is an error: money is exact in SQL.
    pub fn opt_money(&self, name: &str) -> Result<Vec<Option<f64>>> {
        let column = self.column(name)?;
        match column.data_type() {
            DataType::Decimal128(_, scale) => {
                let unit = 10f64.powi(i32::from(*scale));
                Ok(column.as_primitive::<Decimal128Type>().iter().map(|v| v.map(|m| m as f64 / unit)).collect())
            }
            DataType::Null => Ok(vec![None; column.len()]),
            other => Err(Error::internal(format!("{}: column {name} is {other}, not an exact amount (DECIMAL(38, 6))", self.what))),
        }
    }

    /// An amount of money whose nulls mean zero (a sum over no rows).
    pub fn money(&self, name: &str) -> Result<Vec<f64>> {
        Ok(self.opt_money(name)?.into_iter().map(|v| v.unwrap_or(0.0)).collect())
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
pub fn decode<T>(batches: &[RecordBatch], what: &str, row: impl FnMut(&Columns<'_>) -> Result<Vec<T>>) -> Result<Vec<T>> {
    decode_batches(batches, what, None, row)
}

/// [`decode`] for rows of the declared table or view `table`: each column is read as its
/// declaration says (see [`FromColumn`]).
pub fn decode_declared<T>(batches: &[RecordBatch], table: &'static DerivedTable, row: impl FnMut(&Columns<'_>) -> Result<Vec<T>>) -> Result<Vec<T>> {
    decode_batches(batches, table.name, Some(table), row)
}

fn decode_batches<T>(batches: &[RecordBatch], what: &str, declared: Option<&'static DerivedTable>, mut row: impl FnMut(&Columns<'_>) -> Result<Vec<T>>) -> Result<Vec<T>> {
    let mut out = Vec::new();
    for batch in batches {
        out.extend(row(&Columns { batch, what, declared })?);
    }
    Ok(out)
}

/// A value read from a column, every row of it at once. Numbers are read as amounts of money
/// where the declaration says the column is one, so a money column the SQL turned into a float
/// is an error, never a silently rounded figure.
pub trait FromColumn: Sized {
    fn read(columns: &Columns<'_>, name: &str) -> Result<Vec<Self>>;
}

impl FromColumn for String {
    fn read(c: &Columns<'_>, name: &str) -> Result<Vec<Self>> {
        c.text(name)
    }
}

impl FromColumn for Option<String> {
    fn read(c: &Columns<'_>, name: &str) -> Result<Vec<Self>> {
        c.opt_text(name)
    }
}

impl FromColumn for f64 {
    fn read(c: &Columns<'_>, name: &str) -> Result<Vec<Self>> {
        if c.is_money(name)? { c.money(name) } else { c.f64(name) }
    }
}

impl FromColumn for Option<f64> {
    fn read(c: &Columns<'_>, name: &str) -> Result<Vec<Self>> {
        if c.is_money(name)? { c.opt_money(name) } else { c.opt_f64(name) }
    }
}

impl FromColumn for i64 {
    fn read(c: &Columns<'_>, name: &str) -> Result<Vec<Self>> {
        c.i64(name)
    }
}

impl FromColumn for bool {
    fn read(c: &Columns<'_>, name: &str) -> Result<Vec<Self>> {
        c.bool(name)
    }
}

/// The next value of a column being read into rows ([`decode_rows!`]).
pub fn next<T>(values: &mut std::vec::IntoIter<T>, what: &str, name: &str) -> Result<T> {
    values.next().ok_or_else(|| Error::internal(format!("{what}: column {name} is shorter than its batch")))
}

/// Reads the rows of a declared table or view into `Row { field, ... }`, each field from the
/// column of its name, read as [`FromColumn`] says for the field's type and the column's
/// declaration:
///
/// ```ignore
/// decode_rows!(&batches, CHARGEBACK_MONTHLY => ChargebackRow { month, team, total })
/// ```
#[macro_export]
macro_rules! decode_rows {
    ($batches:expr, $table:expr => $row:ident { $($field:ident),+ $(,)? }) => {
        $crate::decode::decode_declared($batches, &$table, |c| {
            $( let mut $field = $crate::decode::FromColumn::read(c, stringify!($field))?.into_iter(); )+
            let mut rows = Vec::with_capacity(c.rows());
            for _ in 0..c.rows() {
                rows.push($row { $( $field: $crate::decode::next(&mut $field, $table.name, stringify!($field))? ),+ });
            }
            Ok(rows)
        })
    };
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
        let float_money = c.money("cost").unwrap_err().to_string();
        assert!(float_money.contains("column cost is Float64, not an exact amount"), "{float_money}");
    }

    #[test]
    fn money_is_read_from_decimals() {
        use arrow::array::Decimal128Array;
        let amounts = Decimal128Array::from(vec![Some(33_333_334), None, Some(-1)]).with_precision_and_scale(38, 6).unwrap();
        let schema = Schema::new(vec![Field::new("cost", DataType::Decimal128(38, 6), true)]);
        let batch = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(amounts)]).unwrap();
        let c = Columns::new(&batch, "t");
        assert_eq!(c.opt_money("cost").unwrap(), vec![Some(33.333334), None, Some(-0.000001)]);
        assert_eq!(c.money("cost").unwrap(), vec![33.333334, 0.0, -0.000001]);
        assert_eq!(c.f64("cost").unwrap(), vec![33.333334, 0.0, -0.000001], "a decimal is a number too");
    }
}
