//! The money functions of the accounting SQL: exact arithmetic on `DECIMAL(38, 6)` amounts
//! (micro-units of the currency) and integer GPU-nanoseconds, in 128-bit integers.
//!
//! Money is never a float in the ledger: a float sum depends on the order of its terms, so the
//! same month summed by another engine, file layout or run would differ in the last place. A
//! decimal sum does not. What needs more than a sum (pricing a row, spreading an amount over
//! teams, a forecast, a cost per unit) rounds once, in one of these functions, as said here:
//!
//! - [`price_ns`](price_ns): `gpu_ns x price / 3.6e12`, half to even, to micro-units;
//! - [`money_ratio`](money_ratio): `amount x num / den`, half to even, to micro-units;
//! - `share_floor` / `share_remainder`: `amount x part / whole` rounded down to micro-units, and
//!   what that left over, from which the SQL hands the leftover micro-units out by largest
//!   remainder (`queries/60_chargeback.sql`).
//!
//! Arguments are coerced to exact types only: a money argument takes an integer or a decimal of
//! at most 6 decimals, never a float (cast it to `DECIMAL(38, 6)` first, saying where it rounds).

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, Decimal128Array};
use arrow::datatypes::{DataType, Decimal128Type, Int64Type};
use datafusion::error::{DataFusionError, Result};
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};

/// Decimal places of money: amounts are whole micro-units of the currency.
pub const MONEY_SCALE: i8 = 6;
/// Digits of a money decimal (Arrow's widest Decimal128).
pub const MONEY_PRECISION: u8 = 38;
/// Micro-units per unit of the currency.
pub const MICROS_PER_UNIT: i128 = 1_000_000;
/// GPU-nanoseconds in a GPU-hour.
pub const NS_PER_HOUR: i128 = 3_600_000_000_000;

/// `DECIMAL(38, 6)`: the type of every amount of money in the derived tables.
pub fn money_type() -> DataType {
    DataType::Decimal128(MONEY_PRECISION, MONEY_SCALE)
}

/// `DECIMAL(38, 0)`: an exact count too large for BIGINT (a month's GPU-nanoseconds of a fleet).
pub fn count_type() -> DataType {
    DataType::Decimal128(MONEY_PRECISION, 0)
}

/// `n / d` rounded half to even; `None` when `d` is 0 or the result overflows.
pub fn div_half_even(n: i128, d: i128) -> Option<i128> {
    let q = n.checked_div(d)?;
    let r = n.checked_rem(d)?;
    if r == 0 {
        return Some(q);
    }
    let (twice, den) = (r.unsigned_abs().checked_mul(2)?, d.unsigned_abs());
    let away = twice > den || (twice == den && q % 2 != 0);
    match (away, (n < 0) != (d < 0)) {
        (false, _) => Some(q),
        (true, false) => q.checked_add(1),
        (true, true) => q.checked_sub(1),
    }
}

/// `n / d` rounded toward negative infinity, and what is left (`n - q x d`, of `d`'s sign);
/// `None` when `d` is 0 or the result overflows.
pub fn div_floor(n: i128, d: i128) -> Option<(i128, i128)> {
    let q = n.checked_div(d)?;
    let r = n.checked_rem(d)?;
    if r != 0 && ((r < 0) != (d < 0)) { Some((q.checked_sub(1)?, r.checked_add(d)?)) } else { Some((q, r)) }
}

/// The cost in micro-units of `gpu_ns` GPU-nanoseconds at `price_micros` per GPU-hour, rounded
/// half to even.
pub fn price_ns(gpu_ns: i128, price_micros: i128) -> Option<i128> {
    div_half_even(gpu_ns.checked_mul(price_micros)?, NS_PER_HOUR)
}

/// `amount x num / den` in micro-units, each argument in micro-units, rounded half to even;
/// `None` when `den` is 0 or on overflow.
pub fn money_ratio(amount_micros: i128, num_micros: i128, den_micros: i128) -> Option<i128> {
    div_half_even(amount_micros.checked_mul(num_micros)?, den_micros)
}

/// `amount x part / whole` in micro-units rounded down, and the remainder
/// `amount_micros x part mod whole` that orders the parts for the leftover micro-units.
pub fn share(amount_micros: i128, part: i128, whole: i128) -> Option<(i128, i128)> {
    div_floor(amount_micros.checked_mul(part)?, whole)
}

/// The four money functions.
pub fn all() -> Vec<ScalarUDF> {
    [Op::PriceNs, Op::MoneyRatio, Op::ShareFloor, Op::ShareRemainder].into_iter().map(|op| ScalarUDF::new_from_impl(MoneyFn::new(op))).collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Op {
    PriceNs,
    MoneyRatio,
    ShareFloor,
    ShareRemainder,
}

/// What an argument must be, and what it is cast to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Arg {
    /// An integer (GPU-nanoseconds): BIGINT.
    Integer,
    /// An amount: an integer or a decimal of at most 6 decimals, as `DECIMAL(38, 6)`.
    Money,
    /// An exact count (a weight): an integer or a decimal without decimals, as `DECIMAL(38, 0)`.
    Count,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::PriceNs => "price_ns",
            Op::MoneyRatio => "money_ratio",
            Op::ShareFloor => "share_floor",
            Op::ShareRemainder => "share_remainder",
        }
    }

    fn args(self) -> &'static [Arg] {
        match self {
            Op::PriceNs => &[Arg::Integer, Arg::Money],
            Op::MoneyRatio => &[Arg::Money, Arg::Money, Arg::Money],
            Op::ShareFloor | Op::ShareRemainder => &[Arg::Money, Arg::Count, Arg::Count],
        }
    }

    fn returns(self) -> DataType {
        match self {
            Op::ShareRemainder => count_type(),
            _ => money_type(),
        }
    }

    /// One row: the arguments as integers (micro-units, nanoseconds, counts), the result as the
    /// return type's integer; `Ok(None)` is a null (a null argument, a zero divisor).
    fn eval(self, a: &[i128]) -> Result<Option<i128>> {
        let overflow = || DataFusionError::Execution(format!("{}({a:?}): the result overflows DECIMAL(38)", self.name()));
        let zero_divisor = match self {
            Op::PriceNs => false,
            Op::MoneyRatio | Op::ShareFloor | Op::ShareRemainder => a[2] == 0,
        };
        if zero_divisor {
            return Ok(None);
        }
        let v = match self {
            Op::PriceNs => price_ns(a[0], a[1]),
            Op::MoneyRatio => money_ratio(a[0], a[1], a[2]),
            Op::ShareFloor => share(a[0], a[1], a[2]).map(|(q, _)| q),
            Op::ShareRemainder => share(a[0], a[1], a[2]).map(|(_, r)| r),
        };
        let v = v.ok_or_else(overflow)?;
        // The result must fit the 38 digits of its type.
        if v.unsigned_abs() >= 10u128.pow(u32::from(MONEY_PRECISION)) {
            return Err(overflow());
        }
        Ok(Some(v))
    }
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct MoneyFn {
    op: Op,
    signature: Signature,
}

impl MoneyFn {
    fn new(op: Op) -> MoneyFn {
        MoneyFn { op, signature: Signature::user_defined(Volatility::Immutable) }
    }
}

impl ScalarUDFImpl for MoneyFn {
    fn name(&self) -> &str {
        self.op.name()
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(self.op.returns())
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        let want = self.op.args();
        if arg_types.len() != want.len() {
            return Err(DataFusionError::Plan(format!("{} takes {} arguments, got {}", self.name(), want.len(), arg_types.len())));
        }
        arg_types
            .iter()
            .zip(want)
            .enumerate()
            .map(|(i, (got, want))| {
                let ok = match (want, got) {
                    (_, DataType::Null) => true,
                    (Arg::Integer, t) => t.is_integer(),
                    (Arg::Money, DataType::Decimal128(_, s) | DataType::Decimal256(_, s)) => (0..=MONEY_SCALE).contains(s),
                    (Arg::Count, DataType::Decimal128(_, s) | DataType::Decimal256(_, s)) => *s == 0,
                    (Arg::Money | Arg::Count, t) => t.is_integer(),
                };
                if !ok {
                    return Err(DataFusionError::Plan(format!(
                        "{}: argument {} is {got}; it must be {} (money is exact: cast a float to DECIMAL(38, 6) where it may round)",
                        self.name(),
                        i + 1,
                        match want {
                            Arg::Integer => "an integer",
                            Arg::Money => "an integer or a decimal of at most 6 decimals",
                            Arg::Count => "an integer or a decimal without decimals",
                        }
                    )));
                }
                Ok(match want {
                    Arg::Integer => DataType::Int64,
                    Arg::Money => money_type(),
                    Arg::Count => count_type(),
                })
            })
            .collect()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let columns: Vec<Vec<Option<i128>>> = arrays.iter().map(|a| integers(a, self.name())).collect::<Result<_>>()?;
        let rows = arrays.first().map_or(args.number_rows, |a| a.len());
        let mut out = Vec::with_capacity(rows);
        let mut row = vec![0i128; columns.len()];
        for i in 0..rows {
            let mut null = false;
            for (k, c) in columns.iter().enumerate() {
                match c[i] {
                    Some(v) => row[k] = v,
                    None => null = true,
                }
            }
            out.push(if null { None } else { self.op.eval(&row)? });
        }
        let (precision, scale) = match self.op.returns() {
            DataType::Decimal128(p, s) => (p, s),
            other => return Err(DataFusionError::Internal(format!("{}: returns {other}", self.name()))),
        };
        let result = Decimal128Array::from(out).with_precision_and_scale(precision, scale)?;
        Ok(ColumnarValue::Array(Arc::new(result) as ArrayRef))
    }
}

/// A coerced argument's values as integers: a BIGINT as it is, a decimal as its unscaled value.
fn integers(array: &ArrayRef, function: &str) -> Result<Vec<Option<i128>>> {
    match array.data_type() {
        DataType::Int64 => Ok(array.as_primitive::<Int64Type>().iter().map(|v| v.map(i128::from)).collect()),
        DataType::Decimal128(..) => Ok(array.as_primitive::<Decimal128Type>().iter().collect()),
        DataType::Null => Ok(vec![None; array.len()]),
        other => Err(DataFusionError::Internal(format!("{function}: an argument reached it as {other}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::prelude::SessionContext;

    #[test]
    fn half_to_even_at_the_half_and_away_from_it() {
        assert_eq!(div_half_even(5, 2), Some(2), "2.5 -> 2 (even)");
        assert_eq!(div_half_even(7, 2), Some(4), "3.5 -> 4 (even)");
        assert_eq!(div_half_even(-5, 2), Some(-2));
        assert_eq!(div_half_even(-7, 2), Some(-4));
        assert_eq!(div_half_even(5, -2), Some(-2));
        assert_eq!(div_half_even(10, 3), Some(3), "3.33 -> 3");
        assert_eq!(div_half_even(20, 3), Some(7), "6.67 -> 7");
        assert_eq!(div_half_even(-20, 3), Some(-7));
        assert_eq!(div_half_even(6, 3), Some(2));
        assert_eq!(div_half_even(1, 0), None);
        assert_eq!(div_half_even(i128::MIN, -1), None, "overflow");
    }

    #[test]
    fn floor_division_keeps_the_remainder_of_the_divisors_sign() {
        assert_eq!(div_floor(7, 2), Some((3, 1)));
        assert_eq!(div_floor(-7, 2), Some((-4, 1)));
        assert_eq!(div_floor(7, -2), Some((-4, -1)));
        assert_eq!(div_floor(6, 3), Some((2, 0)));
        assert_eq!(div_floor(1, 0), None);
    }

    #[test]
    fn pricing_rounds_each_row_once() {
        // One hour at 2.49: 2.490000.
        assert_eq!(price_ns(NS_PER_HOUR, 2_490_000), Some(2_490_000));
        // One second at 1.00 per hour: 277.777... micro-units -> 278.
        assert_eq!(price_ns(1_000_000_000, 1_000_000), Some(278));
        // 1.8 s at 1.00: 500 micro-units exactly.
        assert_eq!(price_ns(1_800_000_000, 1_000_000), Some(500));
        // 9 ms at 1.00 per hour is 2.5 micro-units: half to even, 2; 27 ms is 7.5: 8.
        assert_eq!(price_ns(9_000_000, 1_000_000), Some(2));
        assert_eq!(price_ns(27_000_000, 1_000_000), Some(8));
    }

    #[test]
    fn a_spread_amount_splits_into_floors_and_remainders() {
        // 100.000000 over three equal weights: 33.333333 each and 1 micro-unit left over, each
        // with the remainder 1 (of 3).
        assert_eq!(share(100_000_000, 1, 3), Some((33_333_333, 1)));
        // 10.000000 over weights 1 and 2: 3.333333 r 1, 6.666666 r 2 (of 3).
        assert_eq!(share(10_000_000, 1, 3), Some((3_333_333, 1)));
        assert_eq!(share(10_000_000, 2, 3), Some((6_666_666, 2)));
        assert_eq!(share(10_000_000, 0, 3), Some((0, 0)));
    }

    async fn one(sql: &str) -> String {
        let ctx = SessionContext::new();
        crate::udf::register(&ctx);
        let batches = ctx.sql(sql).await.unwrap().collect().await.unwrap();
        let text = arrow::util::pretty::pretty_format_batches(&batches).unwrap().to_string();
        text.lines().nth(3).unwrap_or_default().trim_matches(|c| c == '|' || c == ' ').to_string()
    }

    #[tokio::test]
    async fn the_functions_in_sql() {
        assert_eq!(one("SELECT price_ns(CAST(9000000 AS BIGINT), CAST(1 AS DECIMAL(38, 6)))").await, "0.000002");
        assert_eq!(one("SELECT price_ns(3600000000000, CAST(2.49 AS DECIMAL(10, 2)))").await, "2.490000");
        assert_eq!(one("SELECT money_ratio(CAST(24 AS DECIMAL(38, 6)), 31, 11)").await, "67.636364");
        assert_eq!(one("SELECT money_ratio(CAST(1 AS DECIMAL(38, 6)), 1, 0)").await, "");
        assert_eq!(one("SELECT share_floor(CAST(100 AS DECIMAL(38, 6)), 1, 3)").await, "33.333333");
        assert_eq!(one("SELECT share_remainder(CAST(100 AS DECIMAL(38, 6)), 1, 3)").await, "1");
        assert_eq!(one("SELECT price_ns(CAST(NULL AS BIGINT), CAST(1 AS DECIMAL(38, 6)))").await, "");
    }

    #[tokio::test]
    async fn a_float_is_no_money() {
        let ctx = SessionContext::new();
        crate::udf::register(&ctx);
        let err = match ctx.sql("SELECT price_ns(1, 2.5)").await {
            Ok(df) => df.collect().await.err().map(|e| e.to_string()).unwrap_or_default(),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("price_ns: argument 2 is Float64"), "{err}");
        let err = match ctx.sql("SELECT share_floor(CAST(1 AS DECIMAL(38, 6)), CAST(1.5 AS DECIMAL(10, 1)), 3)").await {
            Ok(df) => df.collect().await.err().map(|e| e.to_string()).unwrap_or_default(),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("without decimals"), "{err}");
    }
}
