//! How durations and sizes are spelled in configuration files and flags, shared by every
//! section of `gpuledger.toml` so that `30s` or `2GiB` mean the same everywhere.

use std::time::Duration;

/// `250ms`, `30s`, `5m`, `1h`, `1d` (a bare number is refused: the unit is never guessed).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a duration (write 30s, 5m, 1h or 250ms)"))?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{s:?} is not a duration (write 30s, 5m, 1h or 250ms)")),
    };
    let total = n.checked_mul(ms).ok_or_else(|| format!("{s:?} is too long"))?;
    if total == 0 {
        return Err(format!("{s:?} must be longer than zero"));
    }
    Ok(Duration::from_millis(total))
}

/// [`parse_duration`], refusing anything shorter than `min` (a setting with a floor).
pub fn parse_duration_at_least(s: &str, min: Duration) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < min {
        return Err(format!("{s} is shorter than the minimum {}", format_duration(min)));
    }
    Ok(d)
}

/// The shortest spelling [`parse_duration`] reads back.
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// `512MiB`, `2GiB`, `1TiB`, `64KiB` or plain bytes `1048576`; decimal `MB`/`GB` too.
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || format!("{s:?} is not a size (write 512MiB, 2GiB or a number of bytes)");
    let n: f64 = num.parse().map_err(|_| bad())?;
    let scale: u64 = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        _ => return Err(bad()),
    };
    let bytes = n * scale as f64;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(format!("{s:?} must be at least one byte"));
    }
    Ok(bytes as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_round_trip_and_refuse_bare_numbers() {
        for (text, ms) in [("250ms", 250), ("30s", 30_000), ("5m", 300_000), ("1h", 3_600_000), ("2d", 172_800_000)] {
            let d = parse_duration(text).unwrap();
            assert_eq!(d.as_millis(), ms, "{text}");
            assert_eq!(format_duration(d), text);
        }
        assert!(parse_duration("30").unwrap_err().contains("not a duration"));
        assert!(parse_duration("0s").unwrap_err().contains("longer than zero"));
    }

    #[test]
    fn sizes_take_binary_and_decimal_units() {
        assert_eq!(parse_bytes("2GiB").unwrap(), 2 * 1024 * 1024 * 1024);
        assert_eq!(parse_bytes("512MiB").unwrap(), 512 * 1024 * 1024);
        assert_eq!(parse_bytes("1.5GiB").unwrap(), 3 * 512 * 1024 * 1024);
        assert_eq!(parse_bytes("100MB").unwrap(), 100_000_000);
        assert_eq!(parse_bytes("4096").unwrap(), 4096);
        assert!(parse_bytes("2 gigs").unwrap_err().contains("not a size"));
        assert!(parse_bytes("0GiB").unwrap_err().contains("at least one byte"));
    }
}
