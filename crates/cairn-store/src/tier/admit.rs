//! Promotion filters the tier runs on read misses.

/// Promote a block on its n-th miss within a recent window (Open CAS's
/// `nhit`): a direct-mapped table of (block, misses) of fixed size, so
/// memory is bounded and nothing allocates; a block whose entry another
/// block took starts counting again.
pub(super) struct NHit {
    n: u32,
    table: Box<[(u64, u32)]>,
}

impl NHit {
    pub(super) fn new(n: u32, entries: usize) -> Self {
        Self {
            n: n.max(1),
            table: vec![(u64::MAX, 0); entries.max(1).next_power_of_two()].into_boxed_slice(),
        }
    }

    /// Counts a miss of `block`; whether it is to be promoted now.
    pub(super) fn admit(&mut self, block: u64) -> bool {
        if self.n <= 1 {
            return true;
        }
        let mask = self.table.len() - 1;
        let at = (block.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize & mask;
        let e = &mut self.table[at];
        if e.0 != block {
            *e = (block, 0);
        }
        e.1 += 1;
        if e.1 >= self.n {
            *e = (u64::MAX, 0);
            true
        } else {
            false
        }
    }
}
