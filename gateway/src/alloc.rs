//! The process's allocator: the system allocator for small blocks; blocks
//! of 2 MiB and more mapped on their own and advised onto transparent huge
//! pages.
//!
//! The sequencer's tables (orders, fills, the idempotency index) grow into
//! fresh memory while the venue runs; on 4 KiB pages every new page is a
//! fault, about one per 15 commands, a quarter of the core's cycles in the
//! benchmark (`benches/README.md`, "Huge pages"). Where the kernel's
//! transparent huge pages are in `madvise` mode (the common default), only
//! memory advised with `MADV_HUGEPAGE` gets 2 MiB pages. Advising what
//! `malloc` returns is not enough: glibc serves blocks of up to 32 MiB from
//! its heap once a large block was freed, and fills them (the copy of a
//! `realloc`, the zeroing of a `calloc`) before the advice could come. So a
//! large block is an anonymous mapping of its own, advised before anything
//! touches it, grown in place or moved by `mremap` (no copy, the advice
//! kept) and unmapped when freed. Small blocks are left to the system
//! allocator (a huge page for a small block would waste memory). With THP
//! `never` the advice does nothing. The venue's answers never depend on any
//! of this.
//!
//! Set in the binaries (`updown`, the benchmarks) with
//! `#[global_allocator] static ALLOC: gateway::alloc::HugePages = gateway::alloc::HugePages;`.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks this large or larger are mapped on their own (on Linux).
pub const MAPPED_BYTES: usize = 2 << 20;

const PAGE: usize = 4096;

/// The system allocator, large blocks on transparent huge pages.
pub struct HugePages;

/// Whether a block of this size and alignment is a mapping of its own.
fn mapped(size: usize, align: usize) -> bool {
    cfg!(target_os = "linux") && size >= MAPPED_BYTES && align <= PAGE
}

// SAFETY: a block is either the system allocator's (passed through
// unchanged) or an anonymous mapping of whole pages, page-aligned, at least
// `size` bytes, zeroed by the kernel; which one is decided by `mapped` on
// the layout, which the caller passes back unchanged to `dealloc` and
// `realloc`, so every block is freed or grown by the side that made it.
unsafe impl GlobalAlloc for HugePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if mapped(layout.size(), layout.align()) {
            // SAFETY: a new mapping of a non-zero size.
            return unsafe { map(layout.size()) };
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if mapped(layout.size(), layout.align()) {
            // A fresh anonymous mapping reads as zeros.
            // SAFETY: a new mapping of a non-zero size.
            return unsafe { map(layout.size()) };
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if mapped(layout.size(), layout.align()) {
            // SAFETY: the layout says `map` made this block (see `mapped`).
            unsafe { unmap(ptr, layout.size()) };
            return;
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let align = layout.align();
        match (mapped(layout.size(), align), mapped(new_size, align)) {
            // SAFETY: the caller's contract, passed on.
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            // SAFETY: the old layout says `map` made this block.
            (true, true) => unsafe { remap(ptr, layout.size(), new_size) },
            (was, _) => {
                // Across the threshold: a new block of the other kind, the
                // contents copied, the old block freed by its own side.
                // SAFETY: `new_size` is non-zero and, rounded to `align`,
                // fits `isize` (the caller's contract); the copy is of the
                // smaller of the two sizes, inside both blocks.
                unsafe {
                    let new_layout = Layout::from_size_align_unchecked(new_size, align);
                    let block = self.alloc(new_layout);
                    if !block.is_null() {
                        std::ptr::copy_nonoverlapping(ptr, block, layout.size().min(new_size));
                        if was {
                            // The old layout says `map` made it.
                            unmap(ptr, layout.size());
                        } else {
                            System.dealloc(ptr, layout);
                        }
                    }
                    block
                }
            }
        }
    }
}

fn pages(size: usize) -> usize {
    size.next_multiple_of(PAGE)
}

/// A new anonymous mapping of `size` bytes (rounded up to whole pages),
/// advised onto huge pages; null if the kernel refuses.
///
/// # Safety
/// `size` is non-zero.
#[cfg(target_os = "linux")]
unsafe fn map(size: usize) -> *mut u8 {
    // SAFETY: a new private anonymous mapping; nothing else refers to it.
    unsafe {
        let block = libc::mmap(
            std::ptr::null_mut(),
            pages(size),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if block == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        // A hint: refused (THP off, an old kernel), the pages are 4 KiB.
        libc::madvise(block, pages(size), libc::MADV_HUGEPAGE);
        block.cast()
    }
}

/// Grows or shrinks a mapping, moving it if need be; null if the kernel
/// refuses (the old mapping then stays as it was).
///
/// # Safety
/// `ptr` is a mapping of `old` bytes made by `map` or `remap`, and `new` is
/// non-zero.
#[cfg(target_os = "linux")]
unsafe fn remap(ptr: *mut u8, old: usize, new: usize) -> *mut u8 {
    // SAFETY: the kernel moves or grows the mapping whole, keeping its
    // contents and its advice.
    unsafe {
        let block = libc::mremap(ptr.cast(), pages(old), pages(new), libc::MREMAP_MAYMOVE);
        if block == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        block.cast()
    }
}

/// Frees a mapping.
///
/// # Safety
/// `ptr` is a mapping of `size` bytes made by `map` or `remap`, no longer
/// used by anyone.
#[cfg(target_os = "linux")]
unsafe fn unmap(ptr: *mut u8, size: usize) {
    // SAFETY: the caller's contract.
    unsafe {
        libc::munmap(ptr.cast(), pages(size));
    }
}

// Elsewhere nothing is mapped (`mapped` is false): never called.
#[cfg(not(target_os = "linux"))]
unsafe fn map(_: usize) -> *mut u8 {
    std::ptr::null_mut()
}
#[cfg(not(target_os = "linux"))]
unsafe fn remap(_: *mut u8, _: usize, _: usize) -> *mut u8 {
    std::ptr::null_mut()
}
#[cfg(not(target_os = "linux"))]
unsafe fn unmap(_: *mut u8, _: usize) {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks from the allocator keep their contents through growth and
    /// come back zeroed when asked, advised or not.
    #[test]
    fn blocks_behave_as_the_system_allocators() {
        let a = HugePages;
        for size in [16, MAPPED_BYTES - 1, MAPPED_BYTES, 3 * MAPPED_BYTES + 5] {
            let layout = Layout::from_size_align(size, 16).unwrap();
            // SAFETY: non-zero layouts; every block is freed with its layout.
            unsafe {
                let zeroed = a.alloc_zeroed(layout);
                assert!(!zeroed.is_null());
                assert!(std::slice::from_raw_parts(zeroed, size)
                    .iter()
                    .all(|&b| b == 0));
                a.dealloc(zeroed, layout);

                let block = a.alloc(layout);
                assert!(!block.is_null());
                for i in (0..size).step_by(4093) {
                    *block.add(i) = (i % 251) as u8;
                }
                for i in 1..16 {
                    *block.add(i) = i as u8;
                }
                let grown = a.realloc(block, layout, size * 2 + MAPPED_BYTES);
                assert!(!grown.is_null());
                for i in (0..size).step_by(4093) {
                    assert_eq!(*grown.add(i), (i % 251) as u8);
                }
                // And back below the threshold: the first bytes kept.
                let grown_layout = Layout::from_size_align(size * 2 + MAPPED_BYTES, 16).unwrap();
                let shrunk = a.realloc(grown, grown_layout, 64);
                assert!(!shrunk.is_null());
                let first: Vec<u8> = (0..16).collect();
                assert_eq!(std::slice::from_raw_parts(shrunk, 16), &first[..]);
                a.dealloc(shrunk, Layout::from_size_align(64, 16).unwrap());
            }
        }
    }
}
