//! A cache-warming hint: start loading a value's cache line without waiting.
//!
//! A replay knows the accesses ahead of the one it runs. Asking the memory
//! system for the next few accesses' slab nodes overlaps their cache misses
//! with the current access's work, which is what bounds a large cache's
//! simulation speed (see `docs/benchmarks.md`).
//!
//! The only `unsafe` in this crate, and why it is sound: a prefetch
//! instruction has no architectural effect (it cannot fault, even on an invalid
//! address, and it writes nothing); the pointer comes from a live reference.
#![allow(unsafe_code)]

/// Hints that `value` will be read soon. No effect on other architectures.
#[inline]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        let pointer: *const i8 = std::ptr::from_ref(value).cast();
        // SAFETY: PREFETCHT0 has no architectural effect and cannot fault; SSE is
        // part of the x86_64 baseline. `pointer` comes from a live reference.
        unsafe {
            core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(pointer);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
