//! The architecture's boundaries, enforced: a test fails when a crate gains
//! a dependency or a reach into the world that its invariant forbids.

use std::path::{Path, PathBuf};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Dependency names declared in a crate's Cargo.toml (all tables).
fn dependencies(krate: &str) -> Vec<String> {
    let manifest =
        std::fs::read_to_string(workspace().join(krate).join("Cargo.toml")).expect("manifest");
    let mut names = Vec::new();
    let mut in_deps = false;
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line.contains("dependencies");
            continue;
        }
        if in_deps {
            if let Some((name, _)) = line.split_once('=') {
                names.push(name.trim().to_string());
            }
        }
    }
    names
}

fn sources(krate: &str) -> Vec<(PathBuf, String)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        for entry in std::fs::read_dir(dir).expect("source dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("source");
                out.push((path, text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&workspace().join(krate).join("src"), &mut out);
    out
}

#[test]
fn the_sequencer_depends_on_no_async_network_file_time_or_random_crate() {
    let forbidden = [
        "tokio",
        "axum",
        "hyper",
        "memmap2",
        "rand",
        "fastwebsockets",
        "journal",
        "replay",
        "gateway",
        "chrono",
        "time",
        "getrandom",
        "crossbeam",
        "rtrb",
        "tracing",
    ];
    for dep in dependencies("sequencer") {
        assert!(
            !forbidden.contains(&dep.as_str()),
            "sequencer must not depend on {dep}"
        );
    }
}

#[test]
fn the_sequencer_reads_no_clock_disk_network_randomness_or_hash_seed() {
    let forbidden = [
        "std::fs",
        "std::net",
        "std::thread",
        "std::time",
        "SystemTime",
        "Instant",
        "thread_rng",
        "HashMap",
        "HashSet",
        "std::env",
        "std::process",
        "std::io",
    ];
    for (path, text) in sources("sequencer") {
        for word in forbidden {
            assert!(!text.contains(word), "{} mentions {word}", path.display());
        }
    }
}

#[test]
fn the_journal_knows_nothing_of_orders() {
    for dep in dependencies("journal") {
        assert!(
            dep != "sequencer" && dep != "replay" && dep != "gateway",
            "journal must not depend on {dep}"
        );
    }
    for (path, text) in sources("journal") {
        for word in ["sequencer::", "OrderId", "AccountId", "Outcome", "MarketId"] {
            assert!(!text.contains(word), "{} mentions {word}", path.display());
        }
    }
}

#[test]
fn only_the_gateway_uses_the_web_stack() {
    for krate in ["sequencer", "journal", "replay"] {
        for dep in dependencies(krate) {
            assert!(
                !["axum", "hyper", "fastwebsockets", "tokio"].contains(&dep.as_str()),
                "{krate} depends on {dep}"
            );
        }
    }
}
