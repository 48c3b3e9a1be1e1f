//! The one retry schedule of the collector: waits doubling from a first delay, up to a cap,
//! optionally stretched by jitter. The live watches and the backfill both use it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Doubling waits between retries.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The wait before the first retry.
    pub first: Duration,
    /// No wait is longer than this (before jitter).
    pub max: Duration,
    /// Each wait is stretched by up to this fraction of itself, so that many clients failing
    /// together do not retry in step.
    pub jitter: f64,
}

impl Backoff {
    /// `first`, `2 * first`, `4 * first`, ... without cap or jitter.
    pub const fn doubling(first: Duration) -> Self {
        Backoff { first, max: Duration::MAX, jitter: 0.0 }
    }

    /// The same waits, none longer than `max`.
    pub const fn capped(self, max: Duration) -> Self {
        Backoff { max, ..self }
    }

    /// The same waits, each stretched by up to `fraction` of itself.
    pub const fn jittered(self, fraction: f64) -> Self {
        Backoff { jitter: fraction, ..self }
    }

    /// The wait before retry number `attempt` (1 for the first; 0 is taken as 1).
    pub fn delay(&self, attempt: u32) -> Duration {
        // Past 2^16 doublings every useful cap has long been reached; the shift stays in range.
        let base = self.first.saturating_mul(1 << attempt.saturating_sub(1).min(16)).min(self.max);
        if self.jitter > 0.0 { base.mul_f64(1.0 + self.jitter * noise()) } else { base }
    }

    /// The waits before the first `retries` retries.
    pub fn delays(&self, retries: u32) -> Vec<Duration> {
        (1..=retries).map(|a| self.delay(a)).collect()
    }
}

/// A number in [0, 1) that differs between processes and moments: the clock's milliseconds are
/// random enough to spread retries, and need no generator.
fn noise() -> f64 {
    let ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
    (ms % 250) as f64 / 250.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_without_cap_or_jitter() {
        assert_eq!(Backoff::doubling(Duration::from_secs(1)).delays(3), [1, 2, 4].map(Duration::from_secs));
        assert!(Backoff::doubling(Duration::from_secs(1)).delays(0).is_empty());
        assert_eq!(Backoff::doubling(Duration::from_secs(1)).delay(0), Duration::from_secs(1));
        // Far past any cap, the doubling stops instead of overflowing.
        assert_eq!(Backoff::doubling(Duration::from_millis(1)).delay(u32::MAX), Duration::from_millis(1 << 16));
    }

    #[test]
    fn caps_and_jitters() {
        let b = Backoff::doubling(Duration::from_millis(500)).capped(Duration::from_secs(60)).jittered(0.25);
        for _ in 0..20 {
            let d = b.delay(1);
            assert!(d >= Duration::from_millis(500) && d < Duration::from_millis(625), "{d:?}");
        }
        assert!(b.delay(4) >= Duration::from_secs(4));
        assert!(b.delay(40) >= Duration::from_secs(60) && b.delay(40) <= Duration::from_secs(75));
    }
}
