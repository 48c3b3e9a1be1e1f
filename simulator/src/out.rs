//! Output helpers: atomic files, hand-written number formatting and UTC calendar arithmetic.
//!
//! The DCGM writer emits tens of millions of lines, so numbers and timestamps are formatted by
//! hand into byte buffers instead of through `format!`.

use std::path::Path;

use crate::error::{Result, SimError};

pub const MS_PER_DAY: i64 = 86_400_000;

pub use gpuledger_store::AtomicFile;

/// Writes a whole file atomically; returns its size.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<u64> {
    Ok(gpuledger_store::atomic::write_file(path, bytes)?)
}

pub fn create_dir(path: &Path) -> Result<()> {
    std::fs::create_dir_all(path).map_err(|e| SimError::io(path, e))
}

/// Appends the decimal digits of `v`.
#[inline]
pub fn push_u64(buf: &mut Vec<u8>, mut v: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    loop {
        i -= 1;
        tmp[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    buf.extend_from_slice(&tmp[i..]);
}

/// Appends `micros / 1e6` with exactly six decimals, as dcgm-exporter prints floats (`%f`).
#[inline]
pub fn push_fixed6(buf: &mut Vec<u8>, micros: u64) {
    push_u64(buf, micros / 1_000_000);
    buf.push(b'.');
    let frac = micros % 1_000_000;
    let mut tmp = [b'0'; 6];
    let mut f = frac;
    for i in (0..6).rev() {
        tmp[i] = b'0' + (f % 10) as u8;
        f /= 10;
    }
    buf.extend_from_slice(&tmp);
}

/// Days since 1970-01-01 -> (year, month 1..=12, day 1..=31). Howard Hinnant's civil algorithm.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// (year, month, day) -> days since 1970-01-01.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 } as i64;
    let doy = (153 * mp + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DD` of the UTC day holding `ms`.
pub fn day_string(ms: i64) -> String {
    let (y, m, d) = civil_from_days(ms.div_euclid(MS_PER_DAY));
    format!("{y:04}-{m:02}-{d:02}")
}

/// `YYYY-MM` of the UTC month holding `ms`.
pub fn month_string(ms: i64) -> String {
    let (y, m, _) = civil_from_days(ms.div_euclid(MS_PER_DAY));
    format!("{y:04}-{m:02}")
}

/// Start (ms) of the UTC month after the one holding `ms`.
pub fn next_month_start_ms(ms: i64) -> i64 {
    let (y, m, _) = civil_from_days(ms.div_euclid(MS_PER_DAY));
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    days_from_civil(ny, nm, 1) * MS_PER_DAY
}

/// RFC 3339 with whole seconds, as Kubernetes writes metav1.Time: `2026-10-30T00:00:00Z`.
pub fn rfc3339(secs: i64) -> String {
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

/// RFC 3339 with microseconds, as Kubernetes writes metav1.MicroTime (events.k8s.io eventTime).
pub fn rfc3339_micros(secs: i64, micros: u32) -> String {
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{micros:06}Z",
        s / 3600,
        (s / 60) % 60,
        s % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_format_like_printf() {
        let mut b = Vec::new();
        push_u64(&mut b, 0);
        b.push(b' ');
        push_u64(&mut b, 9_223_372_036_854_775_794);
        b.push(b' ');
        push_fixed6(&mut b, 112_252_000);
        b.push(b' ');
        push_fixed6(&mut b, 62);
        assert_eq!(
            String::from_utf8(b).unwrap(),
            "0 9223372036854775794 112.252000 0.000062"
        );
    }

    #[test]
    fn calendar_round_trips_and_matches_chrono() {
        for days in [-1000i64, 0, 365, 10_957, 20_756, 20_757, 20_758, 60_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
            let c = chrono::DateTime::from_timestamp(days * 86_400, 0).unwrap();
            assert_eq!(
                rfc3339(days * 86_400),
                c.format("%Y-%m-%dT%H:%M:%SZ").to_string()
            );
        }
        let oct30 = days_from_civil(2026, 10, 30) * MS_PER_DAY;
        assert_eq!(month_string(oct30), "2026-10");
        assert_eq!(
            next_month_start_ms(oct30),
            days_from_civil(2026, 11, 1) * MS_PER_DAY
        );
        assert_eq!(day_string(oct30 + MS_PER_DAY * 2 + 5), "2026-11-01");
        assert_eq!(rfc3339_micros(0, 42), "1970-01-01T00:00:00.000042Z");
    }
}
