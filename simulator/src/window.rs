//! Which part of the simulated period is written: a benchmark grows a store the way a live one
//! grows by simulating the same cluster twice, writing what was observed before a cut, then
//! what was observed after it. Only the writing is filtered; the cluster, its runs and every
//! random draw are those of the whole period, so the two halves add up to the whole capture.

use chrono::{DateTime, Utc};

use crate::error::SimError;

/// The half-open span `[from, until)` of observation times whose samples, watch events and
/// Events are written; a missing bound is open. [`Window::ALL`] writes everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// First millisecond written (observation times are whole milliseconds or seconds, so a
    /// bound with a fraction of a millisecond rounds up and admits the same times).
    from_ms: i64,
    /// First millisecond not written.
    until_ms: i64,
}

impl Default for Window {
    fn default() -> Self {
        Window::ALL
    }
}

/// `t` in whole milliseconds, rounded up: for whole-millisecond times `x`, `x >= t` and
/// `x < t` hold exactly when they hold for the rounded value.
fn ceil_ms(t: DateTime<Utc>) -> i64 {
    t.timestamp_millis() + i64::from(!t.timestamp_subsec_nanos().is_multiple_of(1_000_000))
}

impl Window {
    /// Everything: the capture of the whole period.
    pub const ALL: Window = Window { from_ms: i64::MIN, until_ms: i64::MAX };

    /// `[from, until)`; an error when both are given and `from` is not before `until`, since
    /// such a window would write nothing and is most likely a mistyped cut.
    pub fn new(from: Option<DateTime<Utc>>, until: Option<DateTime<Utc>>) -> Result<Window, SimError> {
        if let (Some(f), Some(u)) = (from, until)
            && f >= u
        {
            return Err(SimError::Config(format!(
                "the window's start {} is not before its end {}",
                f.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
                u.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
            )));
        }
        Ok(Window { from_ms: from.map_or(i64::MIN, ceil_ms), until_ms: until.map_or(i64::MAX, ceil_ms) })
    }

    /// An observation at `t_ms` (Unix milliseconds) is written.
    pub(crate) fn contains_ms(&self, t_ms: i64) -> bool {
        self.from_ms <= t_ms && t_ms < self.until_ms
    }

    /// An observation at `t_s` (Unix seconds, as Kubernetes times are) is written.
    pub(crate) fn contains_s(&self, t_s: i64) -> bool {
        self.contains_ms(t_s.saturating_mul(1000))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    #[test]
    fn the_window_is_half_open() {
        let w = Window::new(Some(at("2026-11-01T00:00:00Z")), Some(at("2026-11-02T00:00:00Z"))).unwrap();
        let from = at("2026-11-01T00:00:00Z").timestamp();
        let until = at("2026-11-02T00:00:00Z").timestamp();
        assert!(w.contains_s(from) && w.contains_s(until - 1));
        assert!(!w.contains_s(from - 1) && !w.contains_s(until));
        assert!(w.contains_ms(until * 1000 - 1) && !w.contains_ms(from * 1000 - 1));
        assert!(Window::ALL.contains_ms(i64::MIN) && Window::ALL.contains_s(i64::MAX / 1000));
        assert_eq!(Window::new(None, None).unwrap(), Window::ALL);
        let open_end = Window::new(Some(at("2026-11-01T00:00:00Z")), None).unwrap();
        assert!(open_end.contains_s(i64::MAX / 1000) && !open_end.contains_s(from - 1));
    }

    #[test]
    fn a_fraction_of_a_millisecond_rounds_up() {
        // 10.0005 s: the millisecond 10 000 is before it, 10 001 is not.
        let t = DateTime::from_timestamp(10, 500_000).unwrap();
        let w = Window::new(Some(t), None).unwrap();
        assert!(!w.contains_ms(10_000) && w.contains_ms(10_001));
        let w = Window::new(None, Some(t)).unwrap();
        assert!(w.contains_ms(10_000) && !w.contains_ms(10_001));
    }

    #[test]
    fn an_empty_window_is_an_error_naming_both_ends() {
        for (f, u) in [("2026-11-01T00:00:00Z", "2026-11-01T00:00:00Z"), ("2026-11-02T00:00:00Z", "2026-11-01T00:00:00Z")] {
            let e = Window::new(Some(at(f)), Some(at(u))).unwrap_err().to_string();
            assert!(e.contains(f) && e.contains(u), "{e}");
        }
    }
}
