//! CPU time of the process's threads, summed by role (the thread's name),
//! from `/proc/self/task/*/schedstat` (nanoseconds on the CPU). Read
//! before and after a phase, the difference says which thread spent what.

use std::collections::BTreeMap;

/// The roles, in the order they are printed.
pub const ROLES: [&str; 7] = [
    "sequencer",
    "ws-publisher",
    "gateway",
    "ws-bare",
    "ws-driver",
    "ws-clients",
    "other",
];

/// The role of a thread named `comm`.
fn role(comm: &str) -> &'static str {
    ROLES
        .iter()
        .find(|r| **r != "other" && comm.starts_with(**r))
        .copied()
        .unwrap_or("other")
}

/// Nanoseconds on the CPU per role, for the threads alive now.
#[derive(Clone, Debug, Default)]
pub struct CpuTimes(pub BTreeMap<&'static str, u64>);

impl CpuTimes {
    pub fn now() -> CpuTimes {
        let mut times = BTreeMap::new();
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return CpuTimes(times);
        };
        for task in tasks.flatten() {
            let path = task.path();
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            let ns = std::fs::read_to_string(path.join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0);
            *times.entry(role(comm.trim())).or_insert(0) += ns;
        }
        CpuTimes(times)
    }

    /// What each role spent since `before` (threads that ended in between
    /// are not counted; the benchmark's threads live through the run).
    pub fn since(&self, before: &CpuTimes) -> CpuTimes {
        CpuTimes(
            self.0
                .iter()
                .map(|(&role, &ns)| {
                    (
                        role,
                        ns.saturating_sub(before.0.get(role).copied().unwrap_or(0)),
                    )
                })
                .collect(),
        )
    }

    pub fn get(&self, role: &str) -> u64 {
        self.0.get(role).copied().unwrap_or(0)
    }

    pub fn total(&self) -> u64 {
        self.0.values().sum()
    }
}
