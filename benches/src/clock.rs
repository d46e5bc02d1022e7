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
