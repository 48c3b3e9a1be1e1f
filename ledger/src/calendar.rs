//! Days as the accounting counts them: UTC, `YYYY-MM-DD`, and milliseconds since the epoch.

use chrono::NaiveDate;

pub const MS_PER_DAY: i64 = 86_400_000;

/// Milliseconds since the epoch at the start of a `YYYY-MM-DD` day (UTC).
pub fn day_start_ms(day: &str) -> Option<i64> {
    let d = NaiveDate::parse_from_str(day, "%Y-%m-%d").ok()?;
    Some(d.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis())
}

/// The SQL's `day_number` (UTC days since the epoch) of a `YYYY-MM-DD` day.
pub fn day_number(day: &str) -> Option<i64> {
    day_start_ms(day).map(|ms| ms.div_euclid(MS_PER_DAY))
}

/// The day before a `YYYY-MM-DD` day (empty for one that is not a date).
pub fn previous_day(day: &str) -> String {
    NaiveDate::parse_from_str(day, "%Y-%m-%d").ok().and_then(|d| d.pred_opt()).map(|d| d.format("%Y-%m-%d").to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_roll_over_months_and_count_from_the_epoch() {
        assert_eq!(previous_day("2026-11-01"), "2026-10-31");
        assert_eq!(previous_day("2027-01-01"), "2026-12-31");
        assert_eq!(previous_day("not a day"), "");
        assert_eq!(day_start_ms("1970-01-02"), Some(MS_PER_DAY));
        // 2026-11-02 is day 20,759 since the epoch.
        assert_eq!(day_number("2026-11-02"), Some(20_759));
        assert_eq!(day_number("1969-12-31"), Some(-1));
    }
}
