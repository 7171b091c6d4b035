//! Helpers shared by the test binaries in `local/tests/`.
#![allow(
    dead_code,
    reason = "test support: not every test binary uses every item"
)]

/// A small deterministic generator (xorshift64*), so a failing run can be replayed by seed.
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
