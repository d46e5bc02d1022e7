//! A cheap clock for timing single commands. `Instant::now()` costs 50-100
//! ns a call on this kind of virtual machine, as much as a whole `lobster`
//! operation; the x86 time-stamp counter costs a few nanoseconds. The
//! counter runs at a constant rate on CPUs that advertise `constant_tsc`
//! (every x86-64 server of the last decade), so one calibration against
//! `Instant` converts ticks to nanoseconds. Elsewhere `Instant` is used.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Ticks of the counter since an arbitrary origin.
#[inline(always)]
pub fn ticks() -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86-64 CPU and has no preconditions.
        #[allow(unused_unsafe)]
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        static ORIGIN: OnceLock<Instant> = OnceLock::new();
        ORIGIN.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }
}

/// Nanoseconds per tick, measured once (20 ms) on first use.
fn ns_per_tick() -> f64 {
    static RATE: OnceLock<f64> = OnceLock::new();
    *RATE.get_or_init(|| {
        if cfg!(not(target_arch = "x86_64")) {
            return 1.0;
        }
        let (t0, c0) = (Instant::now(), ticks());
        while t0.elapsed() < Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        let (t1, c1) = (t0.elapsed(), ticks());
        t1.as_nanos() as f64 / (c1 - c0).max(1) as f64
    })
}

/// Nanoseconds between two readings of [`ticks`].
#[inline]
pub fn nanos_between(start: u64, end: u64) -> u64 {
    (end.saturating_sub(start) as f64 * ns_per_tick()) as u64
}

/// Calibrates now, so that the first timed command does not pay for it.
pub fn calibrate() {
    ns_per_tick();
}

/// Mean cost of one reading pair, the overhead inside each latency sample.
pub fn overhead_ns() -> f64 {
    const N: u64 = 200_000;
    calibrate();
    let mut sum = 0;
    for _ in 0..N {
        let start = ticks();
        sum += nanos_between(start, ticks());
    }
    sum as f64 / N as f64
}

/// CPU time and page faults of the calling thread so far: what a timed
/// loop spent computing (`user`) and in the kernel (`sys`, on this machine
/// mostly first touches of fresh memory, `faults`). Wall time on this
/// shared virtual machine moves by a third between runs, and most of that
/// is `sys`: a huge page's fault took from 0.02 to 0.5 s per round of the
/// same two million commands. `None` where the kernel does not count per
/// thread (not Linux).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ThreadCpu {
    pub user: Duration,
    pub sys: Duration,
    /// Minor page faults (first touches of memory).
    pub faults: u64,
}

impl ThreadCpu {
    /// The calling thread's counters now.
    #[cfg(target_os = "linux")]
    pub fn now() -> Option<Self> {
        // SAFETY: getrusage writes the struct it is given and nothing else;
        // an all-zero rusage is a valid value of it.
        let usage = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            if libc::getrusage(libc::RUSAGE_THREAD, &mut usage) != 0 {
                return None;
            }
            usage
        };
        let time = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec.max(0) as u64)
                + Duration::from_micros(t.tv_usec.max(0) as u64)
        };
        Some(Self {
            user: time(usage.ru_utime),
            sys: time(usage.ru_stime),
            faults: usage.ru_minflt.max(0) as u64,
        })
    }

    /// The calling thread's counters now.
    #[cfg(not(target_os = "linux"))]
    pub fn now() -> Option<Self> {
        None
    }

    /// What was spent between `earlier` and `self`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            user: self.user.saturating_sub(earlier.user),
            sys: self.sys.saturating_sub(earlier.sys),
            faults: self.faults.saturating_sub(earlier.faults),
        }
    }
}

/// Runs `f` and says how long it took and what the calling thread spent.
pub fn timed<R>(f: impl FnOnce() -> R) -> (R, Duration, Option<ThreadCpu>) {
    let before = ThreadCpu::now();
    let start = Instant::now();
    let result = f();
    let elapsed = start.elapsed();
    let cpu = ThreadCpu::now()
        .zip(before)
        .map(|(after, before)| after.since(before));
    (result, elapsed, cpu)
}
