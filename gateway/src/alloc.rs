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
//!
//! **Faulting in ahead.** A page's first touch is a fault that takes the
//! touching thread out for the time the kernel needs to find, zero and map
//! it: on the virtual machines measured here about 1.2 ms for a 2 MiB page,
//! a stall of every request behind it when the thread is the sequencer's
//! (its order table alone takes a new huge page every 11,000 orders). A
//! thread that asks for it (`populate_ahead_on_this_thread`, the
//! sequencer's) has each large block it maps, and each part a growth adds,
//! queued for the `populate` thread (started then), which faults the
//! pages in with `MADV_POPULATE_WRITE`, front to back, while the owner
//! still fills the front. It never reads or writes the memory, so it
//! cannot race with the owner. A block unmapped or moved meanwhile makes
//! the call fail, which ends that request, unless a later mapping took
//! the same addresses: then that memory is faulted in, which costs only
//! resident memory (the venue's other large mappings, the journal's
//! segments, are preallocated and populated already). Cost: a growing
//! table's spare capacity is resident at once (at most the size of the
//! part in use).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};

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

thread_local! {
    /// Whether this thread's new large blocks are queued for the populator.
    static POPULATE_AHEAD: Cell<bool> = const { Cell::new(false) };
}

/// Requests to the populator: a ring of (start, length) pairs, each slot
/// stamped like a sequence lock (the request's number + 1 once written,
/// `BUSY` while being written). A request's number is claimed with one
/// `fetch_add`; its slot is then taken with a compare-and-swap to `BUSY`,
/// so that two requests a lap apart, written at once, never write one slot
/// together (the one that comes second is dropped, and an older one never
/// overwrites a later one): a range the populator reads is
/// always one some thread asked for, never one request's start with
/// another's length. The allocator must not allocate or block, hence no
/// channel and no waiting for a slot. A request lost to an overflow or a
/// race only leaves its pages to be faulted by their owner, as without a
/// populator.
const RING: usize = 64;
static RING_STAMP: [AtomicU64; RING] = [const { AtomicU64::new(0) }; RING];
/// The stamp of a slot being written.
const BUSY: u64 = u64::MAX;
static RING_START: [AtomicUsize; RING] = [const { AtomicUsize::new(0) }; RING];
static RING_LEN: [AtomicUsize; RING] = [const { AtomicUsize::new(0) }; RING];
/// Requests claimed so far.
static RING_CLAIMED: AtomicU64 = AtomicU64::new(0);
/// Whether the populator thread runs (requests are queued only then).
static POPULATOR: AtomicBool = AtomicBool::new(false);
/// Bytes the populator has faulted in, for tests and curiosity.
static POPULATED_BYTES: AtomicU64 = AtomicU64::new(0);

/// Queues the pages of new large blocks made or grown on this thread for
/// the populator (see the module comment), starting it if it is not yet
/// running. For the sequencer's thread and the threads that replay.
pub fn populate_ahead_on_this_thread() {
    start_populator();
    POPULATE_AHEAD.with(|on| on.set(true));
}

/// Bytes faulted in by the populator since the process started.
pub fn populated_bytes() -> u64 {
    POPULATED_BYTES.load(Ordering::Relaxed)
}

/// Starts the `populate` thread, once per process (later calls do nothing).
/// Only on Linux, where `MADV_POPULATE_WRITE` exists (5.14 and later; on
/// an older kernel the calls fail and the pages fault as before).
fn start_populator() {
    if !cfg!(target_os = "linux") || POPULATOR.swap(true, Ordering::SeqCst) {
        return;
    }
    let started = std::thread::Builder::new()
        .name("populate".into())
        .spawn(populate_loop);
    if started.is_err() {
        POPULATOR.store(false, Ordering::SeqCst);
    }
}

/// Queues `[start, start + len)` when this thread asked for it.
fn request_populate(start: *mut u8, len: usize) {
    if len == 0
        || !POPULATOR.load(Ordering::Relaxed)
        || !POPULATE_AHEAD.try_with(Cell::get).unwrap_or(false)
    {
        return;
    }
    let n = RING_CLAIMED.fetch_add(1, Ordering::AcqRel);
    let slot = (n % RING as u64) as usize;
    let stamp = RING_STAMP[slot].load(Ordering::Relaxed);
    if stamp == BUSY
        || stamp > n
        || RING_STAMP[slot]
            .compare_exchange(stamp, BUSY, Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
    {
        // A request a lap ahead or behind is writing this slot right now,
        // or a later one has written it: this one, the older, is dropped.
        return;
    }
    fence(Ordering::Release);
    RING_START[slot].store(start as usize, Ordering::Relaxed);
    RING_LEN[slot].store(len, Ordering::Relaxed);
    RING_STAMP[slot].store(n + 1, Ordering::Release);
}

/// What the ring holds for request `n`.
enum Request {
    /// Written: the range.
    Ready(usize, usize),
    /// Claimed, not written yet (or its slot is being written for
    /// another request): look again later.
    Pending,
    /// Overwritten by a later request (the ring was lapped): lost.
    Lost,
}

fn read_request(n: u64) -> Request {
    let slot = (n % RING as u64) as usize;
    let stamp = RING_STAMP[slot].load(Ordering::Acquire);
    if stamp == BUSY || stamp < n + 1 {
        return Request::Pending;
    }
    if stamp > n + 1 {
        return Request::Lost;
    }
    let start = RING_START[slot].load(Ordering::Relaxed);
    let len = RING_LEN[slot].load(Ordering::Relaxed);
    fence(Ordering::Acquire);
    if RING_STAMP[slot].load(Ordering::Relaxed) == n + 1 {
        Request::Ready(start, len)
    } else {
        Request::Lost
    }
}

/// Huge pages are faulted in one call at a time, so that a request for a
/// block freed meanwhile ends at its first failing call.
const POPULATE_STEP: usize = MAPPED_BYTES;
/// How often the populator looks for requests (they come at a growth of a
/// large table, a few times in a run; the owner faults at most the pages it
/// fills in the meantime).
const POPULATE_POLL: std::time::Duration = std::time::Duration::from_millis(5);

fn populate_loop() {
    let mut next = 0u64;
    let mut pending_polls = 0;
    loop {
        std::thread::sleep(POPULATE_POLL);
        let claimed = RING_CLAIMED.load(Ordering::Acquire);
        // Lapped: the oldest requests were overwritten.
        next = next.max(claimed.saturating_sub(RING as u64));
        while next < claimed {
            match read_request(next) {
                Request::Ready(start, len) => populate(start, len),
                // A claim is written within nanoseconds: one still not
                // written a poll later lost its slot to a race of two
                // writers, and waiting on it would stop the populator.
                Request::Pending if pending_polls < 2 => {
                    pending_polls += 1;
                    break;
                }
                Request::Pending | Request::Lost => {}
            }
            pending_polls = 0;
            next += 1;
        }
    }
}

/// Faults in `[start, start + len)` front to back; stops at the first
/// failure (the block was unmapped or moved). Paced, at most 2 MiB per
/// `POPULATE_PACE` and at most half the time: a doubling table adds
/// hundreds of MiB at once (a quarter of a second of kernel time here),
/// which taken in one go starved the other threads of a small machine for
/// that long; the owner fills its tables far more slowly (the order table
/// some 10 MB/s at 50,000 orders a second).
fn populate(start: usize, len: usize) {
    let mut at = 0;
    while at < len {
        let step = POPULATE_STEP.min(len - at);
        let began = std::time::Instant::now();
        if !populate_range(start + at, step) {
            return;
        }
        POPULATED_BYTES.fetch_add(step as u64, Ordering::Relaxed);
        at += step;
        std::thread::sleep(began.elapsed().max(POPULATE_PACE));
    }
}

/// Time per 2 MiB step of the populator at least: 100 MiB/s.
const POPULATE_PACE: std::time::Duration = std::time::Duration::from_millis(20);

#[cfg(target_os = "linux")]
fn populate_range(start: usize, len: usize) -> bool {
    // SAFETY: MADV_POPULATE_WRITE only faults pages in: it reads and writes
    // nothing of their contents, and on a range that is not (or no longer)
    // a writable mapping it fails without effect.
    unsafe { libc::madvise(start as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) == 0 }
}

#[cfg(not(target_os = "linux"))]
fn populate_range(_: usize, _: usize) -> bool {
    false
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
        request_populate(block.cast(), pages(size));
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
        if new > old {
            request_populate(block.cast::<u8>().add(pages(old)), pages(new) - pages(old));
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

    /// A thread that asked for it has its new large blocks, and the part a
    /// growth adds, faulted in by the populator while it writes them; the
    /// contents are never touched. Requests for blocks freed or moved
    /// before their turn fail quietly, and a lapped ring loses requests,
    /// never mixes two.
    #[cfg(target_os = "linux")]
    #[test]
    fn the_populator_faults_blocks_in_and_leaves_their_contents() {
        let a = HugePages;
        populate_ahead_on_this_thread();
        let resident = |ptr: *mut u8, len: usize| -> usize {
            let mut vec = vec![0u8; len.div_ceil(PAGE)];
            // SAFETY: a mapping of this process, page-aligned; `vec` has a
            // byte per page.
            let rc = unsafe { libc::mincore(ptr.cast(), len, vec.as_mut_ptr()) };
            assert_eq!(rc, 0);
            vec.iter().filter(|b| *b & 1 == 1).count()
        };
        let size = 3 * MAPPED_BYTES;
        let layout = Layout::from_size_align(size, 16).unwrap();
        // SAFETY: a non-zero layout; freed with it below.
        unsafe {
            // Freed at once: its request finds nothing to fault in.
            let gone = a.alloc(layout);
            a.dealloc(gone, layout);
            let wait_resident = |block: *mut u8, len: usize| {
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                while resident(block, len) < len / PAGE {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "{} of {} pages resident",
                        resident(block, len),
                        len / PAGE
                    );
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            };
            let block = a.alloc(layout);
            assert!(!block.is_null());
            *block = 7;
            *block.add(size - 1) = 9;
            wait_resident(block, size);
            // Grown (moved or not): the part added is faulted in too.
            let grown_size = size + 2 * MAPPED_BYTES;
            let block = a.realloc(block, layout, grown_size);
            assert!(!block.is_null());
            wait_resident(block, grown_size);
            assert!(populated_bytes() >= grown_size as u64 - size as u64);
            let bytes = std::slice::from_raw_parts(block, grown_size);
            assert_eq!((bytes[0], bytes[size - 1]), (7, 9));
            assert!(bytes[1..size - 1].iter().all(|&b| b == 0));
            assert!(bytes[size..].iter().all(|&b| b == 0));
            a.dealloc(block, Layout::from_size_align(grown_size, 16).unwrap());
        }
        // More requests than the ring holds, written at once: each one the
        // populator reads is a range as requested (a block of this size).
        for _ in 0..3 * RING {
            request_populate(std::ptr::null_mut::<u8>().wrapping_add(PAGE), PAGE);
        }
        let claimed = RING_CLAIMED.load(Ordering::Acquire);
        for n in claimed.saturating_sub(RING as u64)..claimed {
            if let Request::Ready(start, len) = read_request(n) {
                assert_eq!((start, len), (PAGE, PAGE));
            }
        }
        racing_writers_never_mix_two_requests();
    }

    /// Threads lapping the ring many times over, at once, each asking for
    /// ranges whose length says which start it goes with: every range
    /// read, while they write and after, is one that was asked for. A
    /// stress check: the race the slot's compare-and-swap shuts out (a
    /// writer stopped between its two stores while others lap it) did not
    /// show in runs of the former code either, being a few instructions
    /// wide. (The addresses are in the first 4 GiB, below any mapping of
    /// this process's heap or stacks here: the populator's calls on them
    /// fail.)
    #[cfg(target_os = "linux")]
    fn racing_writers_never_mix_two_requests() {
        // The length that goes with a start.
        fn len_of(start: usize) -> usize {
            (start / PAGE % 97 + 1) * PAGE
        }
        let pairs = |writer: usize, i: usize| {
            let start = ((writer * 1_000_003 + i) % 1_000_000 + 1) * PAGE;
            (start, len_of(start))
        };
        // Ours: requests from here on, in the first 4 GiB (other tests'
        // threads may queue real blocks meanwhile).
        let base = RING_CLAIMED.load(Ordering::Acquire);
        let check = move |n: u64| {
            if let Request::Ready(start, len) = read_request(n) {
                if n >= base && start <= 1_000_000 * PAGE {
                    assert_eq!(len, len_of(start), "request {n} mixed");
                    return true;
                }
            }
            false
        };
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let reader = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut read = 0u64;
                // A pass after the writers are done, too: on a busy
                // machine this thread may not run at all while they write.
                loop {
                    let stopping = stop.load(Ordering::Acquire);
                    let claimed = RING_CLAIMED.load(Ordering::Acquire);
                    for n in claimed.saturating_sub(RING as u64)..claimed {
                        read += u64::from(check(n));
                    }
                    if stopping {
                        break read;
                    }
                }
            })
        };
        let writers: Vec<_> = (0..4)
            .map(|writer| {
                std::thread::spawn(move || {
                    populate_ahead_on_this_thread();
                    for i in 0..50_000 {
                        let (start, len) = pairs(writer, i);
                        request_populate(std::ptr::null_mut::<u8>().wrapping_add(start), len);
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        stop.store(true, Ordering::Release);
        let read = reader.join().expect("no request read was mixed");
        assert!(read > 0, "the reader saw requests");
        let claimed = RING_CLAIMED.load(Ordering::Acquire);
        for n in claimed - RING as u64..claimed {
            check(n);
        }
    }
}
