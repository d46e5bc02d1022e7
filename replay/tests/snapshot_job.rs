//! A snapshot job forks a child that writes the snapshot. It lives in a
//! test binary of its own: a forked child holds every descriptor of the
//! process until its first steps close them, the journal locks of tests
//! running beside it among them, so a test that reopened its journal
//! just then was refused as if another venue held it.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{node_config, scenario};
use replay::{snapshot, Node};
use sequencer::Command;
use tests::harness::T0;

/// A snapshot job holds the state as of the moment it was taken, however
/// far the node has gone on by the time it is written (on Linux a forked
/// child writes it from its copy-on-write image); a writer that cannot
/// write reports it, and publishes nothing; a snapshot left half-written
/// under its temporary name is removed when the node next opens.
#[test]
fn a_snapshot_job_holds_the_state_it_was_taken_at() {
    // Counts the panics that reach the hook in place before any job.
    let panics = Arc::new(AtomicUsize::new(0));
    let previous = std::panic::take_hook();
    let seen = panics.clone();
    std::panic::set_hook(Box::new(move |info| {
        seen.fetch_add(1, Ordering::SeqCst);
        previous(info);
    }));
    let dir = tempfile::tempdir().unwrap();
    let commands = scenario();
    let (mut node, _) = Node::open(node_config(dir.path()), T0).unwrap();
    let (first, rest) = commands.split_at(commands.len() / 2);
    for stamped in first {
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
    }
    node.commit().unwrap();
    let taken = node.state().clone();
    let job = node.snapshot_job().unwrap().expect("a snapshot folder");
    assert_eq!(job.seq(), taken.last_seq);
    let snapshots = dir.path().join("snapshots");
    // On Linux a child forked with the job writes the file under its
    // temporary name at once, before `write` is called.
    if cfg!(target_os = "linux") {
        let temporary = snapshots.join(format!("{}.tmp", snapshot::file_name(job.seq())));
        let started = std::time::Instant::now();
        while !temporary.exists() {
            assert!(
                started.elapsed() < std::time::Duration::from_secs(30),
                "no writer forked: nothing under {}",
                temporary.display()
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    for stamped in rest {
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
    }
    node.commit().unwrap();
    assert!(node.state().last_seq > taken.last_seq);
    let path = job.write().unwrap();
    assert_eq!(
        snapshot::list(&snapshots),
        vec![(taken.last_seq, path.clone())]
    );
    let (loaded, tie) = snapshot::load_tied(&path).unwrap();
    assert_eq!(loaded.state_hash(), taken.state_hash());
    assert_eq!(loaded, taken);
    // Tied to the journal record it was taken after, as a replay to that
    // seq reads it (here the forked writer's; the copy is given the same
    // value).
    let upto = replay::replay(
        &dir.path().join("journal"),
        None,
        replay::Until::Seq(taken.last_seq),
    )
    .unwrap();
    assert_eq!(tie, upto.last_record_crc);
    assert!(tie.is_some());

    // A job never written (the snapshot thread gone): its writer is
    // stopped and its file removed, no snapshot appears.
    let before = std::fs::read_dir(&snapshots).unwrap().count();
    drop(node.snapshot_job().unwrap().unwrap());
    assert_eq!(std::fs::read_dir(&snapshots).unwrap().count(), before);
    drop(node);

    // A writer that cannot write: the folder is a file now.
    let blocked = tempfile::tempdir().unwrap();
    let mut config = node_config(blocked.path());
    let not_a_folder = blocked.path().join("file");
    std::fs::write(&not_a_folder, b"x").unwrap();
    config.snapshot_dir = Some(not_a_folder.clone());
    let (mut node, _) = Node::open(config, T0).unwrap();
    node.submit(T0, Command::Tick).unwrap();
    node.commit().unwrap();
    let failed = node.snapshot_job().unwrap().unwrap().write();
    // The writer names the system's error (as making the folder there
    // does).
    let cause = std::fs::create_dir_all(&not_a_folder).unwrap_err();
    match &failed {
        Err(e) => assert!(e.to_string().contains(&cause.to_string()), "{e}"),
        Ok(path) => panic!("written at {}", path.display()),
    }
    assert_eq!(std::fs::read(&not_a_folder).unwrap(), b"x");
    drop(node);

    // Left under its temporary name: removed at the next open.
    let leftover = snapshots.join(format!("{}.tmp", snapshot::file_name(99)));
    std::fs::write(&leftover, b"half").unwrap();
    drop(node_reopen(dir.path()));
    assert!(!leftover.exists());
    assert_eq!(snapshot::list(&snapshots).len(), 1);

    // The hook a job installs (silent in a forked writer) still hands the
    // venue's own panics to the hook before it.
    let before = panics.load(Ordering::SeqCst);
    assert!(std::panic::catch_unwind(|| panic!("a panic of the venue's own")).is_err());
    assert_eq!(panics.load(Ordering::SeqCst), before + 1);
}

fn node_reopen(dir: &Path) -> Node {
    Node::open(node_config(dir), T0).unwrap().0
}
