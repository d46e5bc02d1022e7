//! CPU time of this process's threads, grouped by role, from
//! `/proc/self/task/*/schedstat` (nanoseconds on a CPU). Taken before and
//! after each phase, it says how much CPU each side spent per request: the
//! venue's gateway worker, sequencer, journal sync and websocket publisher threads, the
//! bare handler's worker, and the load generator itself, which shares the
//! same two cores.

use std::collections::BTreeMap;

/// The threads' roles, by the names their runtimes give them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// The venue's tokio workers (`gateway`).
    Gateway,
    /// The venue's sequencer thread.
    Sequencer,
    /// The venue's websocket publisher thread (it mirrors the books from
    /// each batch's events, subscribers or not).
    Publisher,
    /// The venue's commit thread: the journal's fdatasync, then events
    /// and answers released in order.
    Sync,
    /// The bare handler's worker (`bare`).
    Bare,
    /// The load generator: the thread that runs the client's runtime (or
    /// its `load` workers).
    Client,
    Other,
}

impl Role {
    pub const ALL: [Role; 7] = [
        Self::Gateway,
        Self::Sequencer,
        Self::Sync,
        Self::Publisher,
        Self::Bare,
        Self::Client,
        Self::Other,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Gateway => "gateway worker",
            Self::Sequencer => "sequencer",
            Self::Publisher => "ws publisher",
            Self::Sync => "journal sync",
            Self::Bare => "bare worker",
            Self::Client => "load generator",
            Self::Other => "other",
        }
    }
}

/// Nanoseconds on a CPU so far, per role.
#[derive(Clone, Debug, Default)]
pub struct CpuTimes(pub BTreeMap<Role, u64>);

impl CpuTimes {
    /// Reads every thread of the process; `client` is the id of the thread
    /// that runs the load generator's current-thread runtime. Empty where
    /// `/proc` has no schedstat.
    pub fn now(client: Option<u32>) -> Self {
        let mut times = BTreeMap::new();
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return Self(times);
        };
        for task in tasks.flatten() {
            let path = task.path();
            let tid: Option<u32> = task.file_name().to_str().and_then(|t| t.parse().ok());
            let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
            let Some(ns) = std::fs::read_to_string(path.join("schedstat"))
                .ok()
                .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
            else {
                continue;
            };
            let role = match comm.trim() {
                "gateway" => Role::Gateway,
                "sequencer" => Role::Sequencer,
                "ws-publisher" => Role::Publisher,
                "journal-sync" => Role::Sync,
                "bare" => Role::Bare,
                "load" => Role::Client,
                _ if tid.is_some() && tid == client => Role::Client,
                _ => Role::Other,
            };
            *times.entry(role).or_insert(0) += ns;
        }
        Self(times)
    }

    /// Time spent since `before`, per role.
    pub fn since(&self, before: &CpuTimes) -> CpuTimes {
        CpuTimes(
            self.0
                .iter()
                .map(|(&role, &ns)| {
                    (
                        role,
                        ns.saturating_sub(before.0.get(&role).copied().unwrap_or(0)),
                    )
                })
                .collect(),
        )
    }

    pub fn get(&self, role: Role) -> u64 {
        self.0.get(&role).copied().unwrap_or(0)
    }
}

/// The id of the calling thread (Linux), to tell the load generator's
/// thread from the others.
pub fn current_tid() -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no arguments and cannot fail.
        Some(unsafe { libc::gettid() } as u32)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}
