//! A small seeded PRNG (xoshiro256** seeded through splitmix64).
//!
//! Written here rather than taken from `rand` so that the same seed gives the same capture with
//! any toolchain or dependency version: the expected figures of a capture are part of tests.

/// splitmix64 step: also used on its own to derive independent seeds from (seed, stream id).
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Mixes a seed with a stream tag so that each part of the simulation (a node, a job template,
/// a job) draws from its own stream and does not shift when another part draws more or less.
pub fn derive(seed: u64, tag: u64, index: u64) -> u64 {
    let mut s = seed ^ tag.wrapping_mul(0xA24B_AED4_963E_E407);
    let a = splitmix64(&mut s);
    let mut t = a ^ index.wrapping_mul(0x9FB2_1C65_1E98_DF25);
    splitmix64(&mut t)
}

#[derive(Debug, Clone)]
pub struct Rng {
    s: [u64; 4],
}

/// Characters Kubernetes uses for generated name suffixes (no vowels, no look-alikes).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
const HEX: &[u8] = b"0123456789abcdef";

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut sm = seed;
        let s = [
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
            splitmix64(&mut sm),
        ];
        Rng { s }
    }

    pub fn stream(seed: u64, tag: u64, index: u64) -> Self {
        Rng::new(derive(seed, tag, index))
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform integer in [lo, hi] (inclusive). `hi < lo` returns `lo`.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = (hi - lo) as u64 + 1;
        lo + (self.next_u64() % span) as i64
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.f64()
    }

    /// Log-uniform in [lo, hi): durations spread over orders of magnitude.
    pub fn log_uniform(&mut self, lo: f64, hi: f64) -> f64 {
        (lo.ln() + (hi.ln() - lo.ln()) * self.f64()).exp()
    }

    /// Exponential with the given mean.
    pub fn exp(&mut self, mean: f64) -> f64 {
        -mean * (1.0 - self.f64()).ln()
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.f64() < p
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        // Callers never pass an empty slice; index 0 of a one-element slice is the common case.
        let i = (self.next_u64() % items.len().max(1) as u64) as usize;
        &items[i.min(items.len().saturating_sub(1))]
    }

    /// A Kubernetes generateName-style suffix of `n` characters.
    pub fn name_suffix(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| NAME_ALPHABET[(self.next_u64() % NAME_ALPHABET.len() as u64) as usize] as char)
            .collect()
    }

    pub fn hex(&mut self, n: usize) -> String {
        (0..n)
            .map(|_| HEX[(self.next_u64() & 15) as usize] as char)
            .collect()
    }

    /// A version-4 UUID in its usual text form.
    pub fn uuid(&mut self) -> String {
        let a = self.next_u64();
        let b = self.next_u64();
        let b = (b & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000;
        let a = (a & 0xFFFF_FFFF_FFFF_0FFF) | 0x0000_0000_0000_4000;
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xFFFF,
            a & 0xFFFF,
            b >> 48,
            b & 0xFFFF_FFFF_FFFF
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_stream_and_known_first_value() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        assert_ne!(Rng::new(43).next_u64(), xs[0]);
        // splitmix64 reference value for seed 0 (from the algorithm's published test vector).
        let mut s = 0u64;
        assert_eq!(splitmix64(&mut s), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn ranges_stay_in_bounds() {
        let mut r = Rng::new(7);
        for _ in 0..10_000 {
            let v = r.range(3, 9);
            assert!((3..=9).contains(&v));
            let f = r.uniform(0.2, 0.98);
            assert!((0.2..0.98).contains(&f));
        }
        let u = r.uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }
}
