//! Cache hints: loads started early, so that a later access finds its line
//! in cache. A hint reads nothing into the program, cannot fault whatever
//! the address, and changes no result: it is no part of the business
//! rules, and a driver that never calls one gets the same answers.

/// Starts loading the cache lines of `item` (at most three: the records the
/// sequencer looks up at random are smaller than that).
#[inline(always)]
pub(crate) fn prefetch<T>(item: &T) {
    let start = (item as *const T).cast::<u8>();
    let lines = std::mem::size_of::<T>().div_ceil(64).clamp(1, 3);
    for line in 0..lines {
        prefetch_line(start.wrapping_add(line * 64));
    }
}

#[inline(always)]
fn prefetch_line(at: *const u8) {
    // SAFETY: a prefetch is a hint: it reads nothing into the program and
    // cannot fault, whatever the address; SSE is in every x86-64 CPU.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
