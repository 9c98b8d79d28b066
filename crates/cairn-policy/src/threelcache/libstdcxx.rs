//! The libstdc++ pieces libCacheSim's `ThreeLCache` draws and orders with,
//! replicated so its marks and ties are ours: `minstd_rand0` through
//! `uniform_int_distribution<size_t>`, and `std::push_heap`/`pop_heap`.

/// libstdc++'s `std::default_random_engine` (`minstd_rand0`, seeded 1)
/// drawn through `uniform_int_distribution<size_t>` over its whole range,
/// as libCacheSim's `ThreeLCache` draws.
#[derive(Clone, Debug)]
pub(super) struct MinStd(u64);

impl MinStd {
    /// `max − min` of `minstd_rand0`.
    const RANGE: u64 = 2_147_483_645;

    pub(super) fn new() -> Self {
        Self(1)
    }

    #[inline]
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0 * 16_807 % 2_147_483_647;
        self.0 - 1
    }

    /// One `_distribution(_generator)`: libstdc++'s
    /// `uniform_int_distribution` over `[0, 2^64 − 1]`, which stacks three
    /// draws in base `RANGE + 1` (the top one, on `[0, 4]`, downscaled by
    /// rejection), rejecting a stack that overflows its range.
    #[inline]
    pub(super) fn draw(&mut self) -> u64 {
        const SPAN: u64 = MinStd::RANGE + 1;
        const MIDDLE: u64 = u64::MAX / SPAN;
        const TOP: u64 = MIDDLE / SPAN;
        const SCALING: u64 = MinStd::RANGE / (TOP + 1);
        loop {
            let middle = loop {
                let top = loop {
                    let draw = self.next();
                    if draw < (TOP + 1) * SCALING {
                        break draw / SCALING;
                    }
                };
                let high = SPAN * top;
                let draw = high + self.next();
                if draw <= MIDDLE {
                    break draw;
                }
            };
            let high = SPAN * middle;
            if let Some(draw) = high.checked_add(self.next()) {
                return draw;
            }
        }
    }
}

/// A prediction in the max-heap (libCacheSim's `HeapUint`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Predicted {
    pub(super) reuse: f32,
    pub(super) key: u64,
}

/// libstdc++'s `__push_heap`: `value` into the hole at `hole`, moving up
/// towards `top` past smaller parents.
pub(super) fn sift_up(heap: &mut [Predicted], mut hole: usize, top: usize, value: Predicted) {
    while hole > top {
        let parent = (hole - 1) / 2;
        if heap[parent].reuse >= value.reuse {
            break;
        }
        heap[hole] = heap[parent];
        hole = parent;
    }
    heap[hole] = value;
}

/// `std::push_heap` of a max-heap by reuse.
pub(super) fn heap_push(heap: &mut Vec<Predicted>, value: Predicted) {
    heap.push(value);
    let last = heap.len() - 1;
    sift_up(heap, last, 0, value);
}

/// `front()`, `std::pop_heap` and `pop_back()` of a max-heap by reuse.
pub(super) fn heap_pop(heap: &mut Vec<Predicted>) -> Option<Predicted> {
    let top = *heap.first()?;
    let len = heap.len() - 1;
    if len > 0 {
        let value = heap[len];
        heap[len] = top;
        // libstdc++'s `__adjust_heap` on heap[..len].
        let mut hole = 0;
        let mut second = 0;
        while second < (len - 1) / 2 {
            second = 2 * (second + 1);
            if heap[second].reuse < heap[second - 1].reuse {
                second -= 1;
            }
            heap[hole] = heap[second];
            hole = second;
        }
        if len.is_multiple_of(2) && second == (len - 2) / 2 {
            second = 2 * (second + 1);
            heap[hole] = heap[second - 1];
            hole = second - 1;
        }
        sift_up(&mut heap[..len], hole, 0, value);
    }
    heap.pop();
    Some(top)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_are_libstdcxx_minstd_rand0_through_uniform_int_distribution() {
        // `std::default_random_engine g; std::uniform_int_distribution<size_t>
        // d; d(g)` eight times, compiled with g++ (libstdc++).
        let expected = [
            606_610_977_102_444_280,
            11_680_327_234_415_193_037,
            3_130_710_918_123_035_464,
            13_055_523_280_712_283_859,
            2_442_810_971_443_284_618,
            1_768_192_591_358_509_605,
            12_390_552_129_798_094_868,
            9_647_485_219_232_062_217,
        ];
        let mut rng = MinStd::new();
        let drawn: Vec<u64> = (0..8).map(|_| rng.draw()).collect();
        assert_eq!(drawn, expected);
    }

    #[test]
    fn heap_pops_ties_in_libstdcxx_order() {
        // Values 0..5 with many ties, pushed with `std::push_heap`, one popped
        // (`front`, `std::pop_heap`, `pop_back`) after every seventh push,
        // then all: the keys in the order g++'s libstdc++ pops them.
        let expected = [
            1, 2, 5, 27, 28, 33, 35, 13, 26, 3, 22, 25, 23, 8, 9, 37, 34, 29, 12, 14, 6, 38, 36, 7,
            39, 18, 0, 21, 16, 19, 20, 17, 15, 4, 30, 24, 31, 10, 11, 32,
        ];
        let mut heap = Vec::new();
        let mut popped = Vec::new();
        let mut s: u64 = 12345;
        for key in 0..40u64 {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            heap_push(
                &mut heap,
                Predicted {
                    reuse: ((s >> 60) % 5) as f32,
                    key,
                },
            );
            if key % 7 == 6 {
                popped.push(heap_pop(&mut heap).unwrap().key);
            }
        }
        while let Some(top) = heap_pop(&mut heap) {
            popped.push(top.key);
        }
        assert_eq!(popped, expected);
    }
}
