//! Live runs and replays agree: the same journal rebuilds the same state and
//! the same event stream, from the start or from a snapshot, and a journal
//! cut anywhere inside its last record recovers every record before it.

use std::path::Path;

mod common;

use common::{node_config, scenario};
use journal::JournalConfig;
use replay::history::History;
use replay::{replay, snapshot, Node, Until};
use sequencer::{Command, Stamped, State};
use tests::harness::{Venue, T0};

/// Runs the scenario through a node; returns the live state.
fn run_live(dir: &Path, commands: &[Stamped], snapshot_at: Option<usize>) -> State {
    let (mut node, _) = Node::open(node_config(dir), T0).unwrap();
    for (i, stamped) in commands.iter().enumerate() {
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
        node.drain_events();
        if i % 7 == 0 {
            node.commit().unwrap();
        }
        if Some(i) == snapshot_at {
            node.snapshot().unwrap();
        }
    }
    node.commit().unwrap();
    node.state().clone()
}

#[test]
fn replay_rebuilds_the_same_state_and_event_hashes() {
    let dir = tempfile::tempdir().unwrap();
    let commands = scenario();
    assert!(commands.len() > 100);
    let live = run_live(dir.path(), &commands, None);
    assert!(live.fills.len() > 5, "the scenario trades");
    assert!(
        live.markets.iter().any(|m| m.result.is_some()),
        "the scenario settles a window"
    );
    let replayed = replay(&dir.path().join("journal"), None, Until::End).unwrap();
    assert_eq!(replayed.applied, live.last_seq);
    assert_eq!(replayed.state.state_hash(), live.state_hash());
    assert_eq!(replayed.state.event_hash, live.event_hash);
    assert_eq!(replayed.state, live);
    replayed.state.check_invariants().unwrap();
}

#[test]
fn a_snapshot_plus_the_tail_gives_the_identical_state() {
    let dir = tempfile::tempdir().unwrap();
    let commands = scenario();
    let live = run_live(dir.path(), &commands, Some(commands.len() / 2));
    let snaps = snapshot::list(&dir.path().join("snapshots"));
    assert_eq!(snaps.len(), 1);
    // Found where the tools look for a data directory's snapshots.
    let snapshots = replay::rebuild::default_snapshot_dir(dir.path());
    assert_eq!(snapshots, dir.path().join("snapshots"));
    let from_snapshot = replay(&dir.path().join("journal"), Some(&snapshots), Until::End).unwrap();
    assert_eq!(from_snapshot.from_snapshot, Some(snaps[0].0));
    assert!(from_snapshot.applied < live.last_seq);
    assert_eq!(from_snapshot.state.state_hash(), live.state_hash());
    assert_eq!(from_snapshot.state.event_hash, live.event_hash);
}

#[test]
fn the_state_as_of_any_seq_matches_the_live_state_at_that_seq() {
    let dir = tempfile::tempdir().unwrap();
    let commands = scenario();
    let (mut node, _) = Node::open(node_config(dir.path()), T0).unwrap();
    // The node opened the journal with its own commands (the venue's
    // configuration and this build's rules): hashes[i] is seq base + i.
    let base = node.state().last_seq;
    let mut hashes = vec![node.state().state_hash()];
    for stamped in &commands {
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
        hashes.push(node.state().state_hash());
    }
    node.commit().unwrap();
    node.snapshot().unwrap();
    let journal = dir.path().join("journal");
    let snapshots = dir.path().join("snapshots");
    for seq in [base, base + 1, 17, 50, base + hashes.len() as u64 - 1] {
        let at = replay(&journal, Some(&snapshots), Until::Seq(seq)).unwrap();
        assert_eq!(at.state.last_seq, seq);
        assert_eq!(
            at.state.state_hash(),
            hashes[(seq - base) as usize],
            "seq {seq}"
        );
    }
    let by_time = replay(&journal, Some(&snapshots), Until::TimeMs(T0)).unwrap();
    assert!(by_time.state.now_ms <= T0);
    assert!(by_time.state.last_seq > 1);
}

#[test]
fn a_damaged_snapshot_is_skipped_for_an_older_one_or_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let commands = scenario();
    let live = run_live(dir.path(), &commands, Some(10));
    let (mut node, _) = Node::open(node_config(dir.path()), T0).unwrap();
    let newest = node.snapshot().unwrap().unwrap();
    drop(node);
    let mut bytes = std::fs::read(&newest).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&newest, bytes).unwrap();
    let outcome = replay(
        &dir.path().join("journal"),
        Some(&dir.path().join("snapshots")),
        Until::End,
    )
    .unwrap();
    assert_eq!(
        outcome.skipped_snapshots.len(),
        1,
        "{:?}",
        outcome.skipped_snapshots
    );
    assert!(outcome.skipped_snapshots[0].contains("checksum"));
    // After command 10 of the scenario, behind the node's two opening
    // commands (configuration and rules).
    assert_eq!(outcome.from_snapshot, Some(13));
    assert_eq!(outcome.state.state_hash(), live.state_hash());
}

/// A snapshot copied in from another venue, at a seq this journal holds,
/// is passed over and named (its journal record's checksum is not the
/// one this journal has there), by a node's start and by a replay alike;
/// the venue's own snapshots are tied to its journal and still used.
#[test]
fn a_snapshot_of_another_journal_is_passed_over() {
    let commands = scenario();
    let half = commands.len() / 2;
    let other = tempfile::tempdir().unwrap();
    run_live(other.path(), &commands, Some(half));
    let theirs = snapshot::list(&other.path().join("snapshots"));
    let (seq, path) = theirs.first().expect("a snapshot of the other venue");
    // This venue ran the same commands a millisecond later: the same
    // seqs, other records.
    let later: Vec<Stamped> = commands
        .iter()
        .map(|c| Stamped {
            ts_ms: c.ts_ms + 1,
            ..c.clone()
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let live = run_live(dir.path(), &later, Some(3));
    let ours = snapshot::list(&dir.path().join("snapshots"));
    let (own_seq, own) = ours.first().expect("a snapshot of its own");
    assert!(own_seq < seq, "the copied one is the newest");
    assert!(snapshot::load_tied(own).unwrap().1.is_some(), "tied");
    // Its tie, read from its head alone: its seq and the checksum of the
    // journal's record there.
    let mut reader = journal::Reader::open(&dir.path().join("journal")).unwrap();
    reader.seek(*own_seq).unwrap();
    let record = reader.next().unwrap().unwrap();
    assert_eq!(record.seq, *own_seq);
    assert_eq!(
        snapshot::journal_tie(own).unwrap(),
        (*own_seq, Some(record.crc))
    );
    assert_eq!(snapshot::load_tied(own).unwrap().1, Some(record.crc));
    std::fs::copy(
        path,
        dir.path().join("snapshots").join(snapshot::file_name(*seq)),
    )
    .unwrap();

    let outcome = replay(
        &dir.path().join("journal"),
        Some(&dir.path().join("snapshots")),
        Until::End,
    )
    .unwrap();
    assert_eq!(outcome.from_snapshot, Some(*own_seq));
    assert_eq!(outcome.skipped_snapshots.len(), 1);
    assert!(
        outcome.skipped_snapshots[0].contains("was not taken from this journal"),
        "{:?}",
        outcome.skipped_snapshots
    );
    assert_eq!(outcome.state, live);

    let (node, report) = Node::open(node_config(dir.path()), T0).unwrap();
    assert_eq!(report.from_snapshot, Some(*own_seq));
    assert!(report.skipped_snapshots[0].contains(&format!("at seq {seq}")));
    assert_eq!(node.state(), &live);
    // A snapshot it writes now names the journal's last record, as a
    // replay to the end knows it.
    drop(node);
    let (mut node, _) = Node::open(node_config(dir.path()), T0).unwrap();
    let written = node.snapshot().unwrap().unwrap();
    drop(node);
    let again = replay(&dir.path().join("journal"), None, Until::End).unwrap();
    assert_eq!(
        snapshot::load_tied(&written).unwrap().1,
        again.last_record_crc
    );
    assert!(again.last_record_crc.is_some());

    // With a history store synced short of the copied snapshot (a crash
    // after the last snapshot), the start passes it over unread: it is
    // named all the same.
    let stored = tempfile::tempdir().unwrap();
    let mut config = node_config(stored.path());
    config.history_dir = Some(stored.path().join("history"));
    let (mut node, _) = Node::open(config.clone(), T0).unwrap();
    for (i, stamped) in later.iter().enumerate() {
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
        node.drain_events();
        if i == 3 {
            node.snapshot().unwrap();
        }
    }
    node.commit().unwrap();
    // No snapshot since: the store was last synced at that one.
    drop(node);
    std::fs::copy(
        path,
        stored
            .path()
            .join("snapshots")
            .join(snapshot::file_name(*seq)),
    )
    .unwrap();
    let (_, report) = Node::open(config, T0).unwrap();
    assert_eq!(report.from_snapshot, Some(*own_seq));
    assert!(
        report
            .skipped_snapshots
            .iter()
            .any(|s| s.contains("was not taken from this journal")),
        "{:?}",
        report.skipped_snapshots
    );
}

/// A node reopened on a host whose clock is behind its journal stamps
/// its commands at the journal's time, never before it: the journal's
/// times stay in order.
#[test]
fn a_clock_behind_the_journal_never_stamps_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let commands = scenario();
    let live = run_live(dir.path(), &commands, None);
    let (mut node, _) = Node::open(node_config(dir.path()), T0).unwrap();
    assert!(live.now_ms > T0 + 1_000, "the scenario moves time on");
    let (seq, _) = node.submit(T0, commands[0].command.clone()).unwrap();
    node.commit().unwrap();
    drop(node);
    let mut reader = journal::Reader::open(&dir.path().join("journal")).unwrap();
    let mut last = 0;
    while let Some(record) = reader.next().unwrap() {
        let stamped = replay::codec::decode(record.seq, record.payload).unwrap();
        assert!(stamped.ts_ms >= last, "seq {} goes back", record.seq);
        last = stamped.ts_ms;
        if record.seq == seq {
            assert_eq!(stamped.ts_ms, live.now_ms);
        }
    }
}

#[test]
fn a_restarted_node_continues_where_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let commands = scenario();
    let (first, second) = commands.split_at(commands.len() / 2);
    run_live(dir.path(), first, None);
    let (mut node, report) = Node::open(node_config(dir.path()), T0).unwrap();
    // The scenario's first half and the node's two opening commands.
    assert_eq!(report.replayed, first.len() as u64 + 2);
    for stamped in second {
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
    }
    node.commit().unwrap();
    let other = tempfile::tempdir().unwrap();
    let straight = run_live(other.path(), &commands, None);
    assert_eq!(node.state().state_hash(), straight.state_hash());
}

#[test]
fn cutting_the_journal_inside_its_last_record_recovers_the_records_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let commands = scenario();
    let commands = &commands[..40];
    let (mut node, _) = Node::open(node_config(dir.path()), T0).unwrap();
    for stamped in &commands[..commands.len() - 1] {
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
    }
    node.commit().unwrap();
    let before = node.state().clone();
    let before_len = journal_bytes_used(&dir.path().join("journal"));
    let last = commands.last().unwrap();
    node.submit(last.ts_ms, last.command.clone()).unwrap();
    node.commit().unwrap();
    let after = node.state().clone();
    drop(node);
    let segment = single_segment(&dir.path().join("journal"));
    let whole = std::fs::read(&segment).unwrap();
    let after_len = journal_bytes_used(&dir.path().join("journal"));
    assert!(after_len > before_len);
    for cut in before_len..after_len {
        let copy = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(copy.path().join("journal")).unwrap();
        let mut bytes = whole.clone();
        bytes[cut..after_len].fill(0);
        std::fs::write(
            copy.path()
                .join("journal")
                .join(segment.file_name().unwrap()),
            &bytes,
        )
        .unwrap();
        let (node, _) = Node::open(node_config(copy.path()), T0).unwrap();
        assert_eq!(node.state(), &before, "cut at byte {cut}");
    }
    let copy = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(copy.path().join("journal")).unwrap();
    std::fs::write(
        copy.path()
            .join("journal")
            .join(segment.file_name().unwrap()),
        &whole,
    )
    .unwrap();
    let (node, _) = Node::open(node_config(copy.path()), T0).unwrap();
    assert_eq!(node.state(), &after);
}

#[test]
fn a_journal_from_a_tick_only_stream_replays_window_transitions_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (mut node, _) = Node::open(node_config(dir.path()), T0).unwrap();
    let series = tests::harness::Venue::new()
        .log
        .into_iter()
        .find(|s| matches!(s.command, Command::CreateSeries(_)))
        .expect("the harness creates a series")
        .command;
    node.submit(
        T0,
        Command::Price {
            symbol: "X:BTCUSD".into(),
            price_e8: 1,
            t_ms: T0,
        },
    )
    .unwrap();
    node.submit(T0, series).unwrap();
    for i in 1..=300u64 {
        let now = T0 + i * 1_000;
        node.submit(now, Command::Tick).unwrap();
        if i % 10 == 0 {
            node.submit(
                now,
                Command::Price {
                    symbol: "X:BTCUSD".into(),
                    price_e8: i as i64,
                    t_ms: now,
                },
            )
            .unwrap();
        }
    }
    node.commit().unwrap();
    let settled = node
        .state()
        .markets
        .iter()
        .filter(|m| m.result.is_some())
        .count();
    assert!(
        settled >= 4,
        "windows settle on ticks and prints alone: {settled}"
    );
    let replayed = replay(&dir.path().join("journal"), None, Until::End).unwrap();
    assert_eq!(&replayed.state, node.state());
}

fn single_segment(dir: &Path) -> std::path::PathBuf {
    let mut segments: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    segments.retain(|p| p.extension().is_some_and(|e| e == "seg"));
    assert_eq!(
        segments.len(),
        1,
        "the test journal fits one segment: {segments:?}"
    );
    segments.pop().unwrap()
}

/// Offset just past the last written record (the rest of a segment is zero).
fn journal_bytes_used(dir: &Path) -> usize {
    let bytes = std::fs::read(single_segment(dir)).unwrap();
    bytes.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1)
}

/// Every simulated journal replays to the identical state and event hashes,
/// and a snapshot taken anywhere plus the tail gives the identical state.
#[test]
fn simulated_journals_replay_to_identical_hashes() {
    use tests::sim::{Sim, SimConfig};
    for seed in [1u64, 2, 3] {
        let dir = tempfile::tempdir().unwrap();
        let (mut node, _) = Node::open(node_config(dir.path()), tests::sim::SIM_T0).unwrap();
        let mut sim = Sim::new(seed, SimConfig::default());
        for i in 0..20_000u32 {
            let (ts, command) = sim.next(node.state());
            node.submit(ts, command).unwrap();
            node.drain_events();
            if i % 64 == 0 {
                node.commit().unwrap();
            }
            if i == 7_777 {
                node.snapshot().unwrap();
            }
        }
        node.commit().unwrap();
        let live = node.state().clone();
        assert!(live.fills.len() > 100, "seed {seed} trades");
        drop(node);
        let journal = dir.path().join("journal");
        let full = replay(&journal, None, Until::End).unwrap();
        assert_eq!(full.state.state_hash(), live.state_hash(), "seed {seed}");
        assert_eq!(full.state.event_hash, live.event_hash, "seed {seed}");
        assert_eq!(full.state.events_total, live.events_total, "seed {seed}");
        let from_snapshot =
            replay(&journal, Some(&dir.path().join("snapshots")), Until::End).unwrap();
        assert!(from_snapshot.from_snapshot.is_some());
        assert_eq!(from_snapshot.state, live, "seed {seed}");
        full.state.check_invariants().unwrap();
        full.state.check_all_orders().unwrap();
    }
}

/// A journal from a newer build (rules this build does not know) is not
/// replayed under older rules: replay and a node's open stop at that seq.
#[test]
fn a_journal_with_newer_rules_is_refused_not_replayed_under_older_ones() {
    let dir = tempfile::tempdir().unwrap();
    let newer = sequencer::limits::RULES_CURRENT + 1;
    let seq = {
        let (mut node, _) = Node::open(node_config(dir.path()), T0).unwrap();
        let (seq, _) = node
            .submit(T0, Command::SetRules { version: newer })
            .unwrap();
        node.commit().unwrap();
        seq
    };
    // Replay, from the journal alone or with the snapshot folder, and a
    // node's open all stop at that seq.
    let journal = dir.path().join("journal");
    let refused_everywhere = |snapshots: Option<&Path>| {
        let refused = replay(&journal, snapshots, Until::End)
            .err()
            .expect("refused");
        assert!(
            refused.to_string().starts_with(&format!(
                "seq {seq} moves the venue to business rules version {newer}"
            )),
            "{refused}"
        );
        let refused = Node::open(node_config(dir.path()), T0)
            .err()
            .expect("refused");
        assert!(
            refused.to_string().contains("newer than this build's"),
            "{refused}"
        );
    };
    refused_everywhere(None);
    // A newer build's snapshot taken after that seq is passed over, not
    // started from (an older build would otherwise serve the newer rules'
    // state under its own, replaying nothing).
    let snapshots = dir.path().join("snapshots");
    let mut state = replay(&journal, None, Until::Seq(seq - 1)).unwrap().state;
    state.last_seq = seq;
    state.rules = newer;
    let path = snapshot::write(&snapshots, &mut state, None).unwrap();
    let skipped = snapshot::load(&path).expect_err("passed over");
    assert!(
        skipped.to_string().contains(&format!(
            "under business rules version {newer}, newer than this build's"
        )),
        "{skipped}"
    );
    refused_everywhere(Some(&snapshots));
}

/// A journal an older build wrote (rules 1) moves to this build's rules
/// when a node opens it, once: the move is journaled, does what the new
/// rules say of the state it finds (a suspended account's resting order is
/// cancelled) and is reported for the operator; a new journal's first
/// commands set the rules, which is no move.
#[test]
fn a_journal_of_older_rules_moves_to_this_builds_once_and_says_so() {
    use sequencer::command::AccountFlag;
    use sequencer::types::OrderStatus;
    let dir = tempfile::tempdir().unwrap();
    let mut older = Venue::with_series_under(1, Venue::default_series());
    let a = older.trader(100_00);
    let order = older.place(a, "buy up 0.40 x5").unwrap();
    older.ok(Command::SetAccountFlag {
        account: a.account,
        flag: AccountFlag::Suspended,
        value: true,
    });
    {
        let mut config = JournalConfig::new(dir.path().join("journal"));
        config.segment_bytes = 64 * 1024;
        let (mut journal, _) = journal::Journal::open(config).unwrap();
        for stamped in &older.log {
            let payload = replay::codec::encode(stamped);
            journal
                .append(stamped.seq, stamped.command.kind(), &payload)
                .unwrap();
        }
        journal.commit().unwrap();
    }
    let last = older.log.last().unwrap();
    let (node, report) = Node::open(node_config(dir.path()), last.ts_ms).unwrap();
    let moved_at = last.seq + 1;
    assert_eq!(
        report.rules_moved,
        Some((1, sequencer::limits::RULES_CURRENT, moved_at))
    );
    let state = node.state();
    assert_eq!(state.order(order.id).unwrap().status, OrderStatus::Canceled);
    assert_eq!(state.last_seq, moved_at);
    drop(node);
    let (node, again) = Node::open(node_config(dir.path()), last.ts_ms).unwrap();
    assert_eq!(again.rules_moved, None, "moved once");
    assert_eq!(node.state().last_seq, moved_at);

    let fresh = tempfile::tempdir().unwrap();
    let (_, report) = Node::open(node_config(fresh.path()), T0).unwrap();
    assert_eq!(report.rules_moved, None, "a new journal is no move");
}

fn segment_files(journal: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    files.sort();
    files
}

/// An operator removed the older segments (keeping snapshots), and the
/// crash tore the only record of the segment left, a record never
/// acknowledged. The node starts from the snapshot through the seq before
/// it, and the next command takes that record's seq in a segment of the
/// same name. With no snapshot that far, it refuses, naming the gap,
/// rather than append seqs the removed segments already hold.
#[test]
fn a_torn_only_record_after_removed_segments_restarts_from_the_snapshot_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let journal_dir = dir.path().join("journal");
    let mut config = node_config(dir.path());
    config.journal.segment_bytes = 4096;
    let (mut node, _) = Node::open(config.clone(), T0).unwrap();
    let commands = scenario();
    let mut rolled = None;
    for (i, stamped) in commands.iter().enumerate() {
        let segments = segment_files(&journal_dir).len();
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
        node.commit().unwrap();
        if i > 20 && segment_files(&journal_dir).len() > segments {
            rolled = Some(i);
            break;
        }
    }
    let rolled = rolled.expect("a segment roll within the scenario");
    let last = node.state().last_seq;
    drop(node);
    let files = segment_files(&journal_dir);
    let (newest, older) = files.split_last().unwrap();
    for file in older {
        std::fs::remove_file(file).unwrap();
    }
    let mut bytes = std::fs::read(newest).unwrap();
    bytes[64 + 40] ^= 0xff;
    std::fs::write(newest, &bytes).unwrap();
    let damaged = tempfile::tempdir().unwrap();
    copy_tree(dir.path(), damaged.path());

    // No snapshot through `last - 1`: the state cannot reach the journal,
    // at this start and the next (the first must not forget the seq).
    let mut refused = config.clone();
    refused.journal.dir = damaged.path().join("journal");
    refused.snapshot_dir = Some(damaged.path().join("snapshots"));
    for attempt in 0..2 {
        match Node::open(refused.clone(), T0) {
            Err(e) => assert!(
                e.to_string().contains(&format!(
                    "journal starts at seq {last} but the state needs seq 1 next"
                )),
                "attempt {attempt}: {e}"
            ),
            Ok(_) => panic!("attempt {attempt} started without the removed history"),
        }
    }

    // A snapshot through `last - 1`, as the operator kept before trimming.
    let copy = replay(
        &journal_dir_of_copy(&dir, &commands, rolled),
        None,
        Until::End,
    )
    .unwrap();
    let mut before = copy.state;
    assert_eq!(before.last_seq, last - 1);
    snapshot::write(
        &dir.path().join("snapshots"),
        &mut before,
        copy.last_record_crc,
    )
    .unwrap();
    let (mut node, report) = Node::open(config, T0).unwrap();
    assert_eq!(report.from_snapshot, Some(last - 1));
    assert_eq!(report.recovery.next_seq, Some(last));
    assert!(report.recovery.truncated_tail.is_some());
    assert_eq!(node.state().state_hash(), before.state_hash());
    // The journal holds no record now; a snapshot of this state still
    // names the record its start followed.
    let again = node.snapshot().unwrap().unwrap();
    assert_eq!(snapshot::load_tied(&again).unwrap().1, copy.last_record_crc);
    assert!(copy.last_record_crc.is_some());
    let redo = &commands[rolled];
    let (seq, _) = node.submit(redo.ts_ms, redo.command.clone()).unwrap();
    assert_eq!(seq, last);
    node.commit().unwrap();
    drop(node);
    assert_eq!(segment_files(&journal_dir), vec![newest.clone()]);
}

/// The journal of the scenario's first `upto` commands (the node's opening
/// commands before them), written afresh in a directory of its own.
fn journal_dir_of_copy(
    dir: &tempfile::TempDir,
    commands: &[Stamped],
    upto: usize,
) -> std::path::PathBuf {
    let fresh = dir.path().join("fresh");
    let mut config = node_config(&fresh);
    config.journal.segment_bytes = 4096;
    config.snapshot_dir = None;
    let (mut node, _) = Node::open(config, T0).unwrap();
    for stamped in &commands[..upto] {
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
    }
    node.commit().unwrap();
    fresh.join("journal")
}

fn copy_tree(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// The node's configuration with segments of 4 KiB, so that the
/// scenario's journal spans several.
fn small_segments_config(dir: &Path) -> replay::NodeConfig {
    let mut config = node_config(dir);
    config.journal.segment_bytes = 4096;
    config
}

/// Runs the whole scenario through a node under `config`, committed;
/// returns the live state.
fn run_all(config: &replay::NodeConfig) -> State {
    let (mut node, _) = Node::open(config.clone(), T0).unwrap();
    for stamped in scenario() {
        node.submit(stamped.ts_ms, stamped.command).unwrap();
        node.drain_events();
    }
    node.commit().unwrap();
    node.state().clone()
}

/// [`run_all`], then a snapshot by a node reopened on the journal; the
/// state it holds.
fn run_all_and_snapshot(config: &replay::NodeConfig) -> State {
    run_all(config);
    let (mut node, _) = Node::open(config.clone(), T0).unwrap();
    node.snapshot().unwrap().unwrap();
    node.state().clone()
}

/// A journal whose first segments were removed (an operator's trim)
/// does not replay without a snapshot that reaches its first record: the
/// replay stops naming the gap, instead of applying the records that are
/// left to an empty venue and showing that as the venue's state.
#[test]
fn a_journal_whose_first_segments_were_removed_does_not_replay_without_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    run_all(&small_segments_config(dir.path()));
    let journal_dir = dir.path().join("journal");
    let files = segment_files(&journal_dir);
    assert!(files.len() >= 3, "{files:?}");
    std::fs::remove_file(&files[0]).unwrap();
    let mut reader = journal::Reader::open(&journal_dir).unwrap();
    let first = reader.next().unwrap().unwrap().seq;
    assert!(first > 1);
    match replay(&journal_dir, None, Until::End) {
        Err(replay::ReplayError::Gap {
            expected,
            first: found,
        }) => assert_eq!((expected, found), (1, first)),
        Err(other) => panic!("{other}"),
        Ok(outcome) => panic!(
            "replayed to seq {} without seqs 1..{first}",
            outcome.state.last_seq
        ),
    }
}

/// The operator's trim: a snapshot at the last record of the segments
/// removed (a record the journal no longer holds) still starts a replay
/// and a node. The check that ties a snapshot to its journal compares the
/// record at the snapshot's seq only, never the next one the journal has.
#[test]
fn a_snapshot_at_the_last_record_of_removed_segments_still_starts_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_segments_config(dir.path());
    let live = run_all(&config);
    let journal_dir = dir.path().join("journal");
    let snapshots = dir.path().join("snapshots");
    let mut last_in_0 = 0;
    let mut reader = journal::Reader::open(&journal_dir).unwrap();
    while let Some(record) = reader.next().unwrap() {
        if record.segment > 0 {
            break;
        }
        last_in_0 = record.seq;
    }
    let at = replay(&journal_dir, None, Until::Seq(last_in_0)).unwrap();
    let mut state = at.state;
    snapshot::write(&snapshots, &mut state, at.last_record_crc).unwrap();
    std::fs::remove_file(&segment_files(&journal_dir)[0]).unwrap();

    let outcome = replay(&journal_dir, Some(&snapshots), Until::End).unwrap();
    assert!(
        outcome.skipped_snapshots.is_empty(),
        "{:?}",
        outcome.skipped_snapshots
    );
    assert_eq!(outcome.from_snapshot, Some(last_in_0));
    assert_eq!(outcome.state, live);
    let (node, report) = Node::open(config, T0).unwrap();
    assert_eq!(report.from_snapshot, Some(last_in_0));
    assert_eq!(node.state(), &live);
}

/// The journal's last record, which the newest snapshot holds (it was
/// acknowledged), damaged as a torn write would leave it: the node's
/// start refuses to cut it, naming the snapshot's seq, and changes
/// nothing on disk, so the record can still be looked at or restored.
#[test]
fn a_torn_record_the_newest_snapshot_holds_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (mut node, _) = Node::open(node_config(dir.path()), T0).unwrap();
    for stamped in &scenario()[..40] {
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
    }
    node.commit().unwrap();
    let held = node.state().last_seq;
    node.snapshot().unwrap().unwrap();
    drop(node);
    let journal_dir = dir.path().join("journal");
    let segment = single_segment(&journal_dir);
    let mut reader = journal::Reader::open(&journal_dir).unwrap();
    reader.seek(held).unwrap();
    let last = reader.next().unwrap().unwrap().offset as usize;
    let mut bytes = std::fs::read(&segment).unwrap();
    bytes[last + 32] ^= 0xff;
    std::fs::write(&segment, &bytes).unwrap();
    match Node::open(node_config(dir.path()), T0) {
        Err(replay::NodeError::Journal(journal::JournalError::CutWouldDrop {
            keep_through,
            ..
        })) => assert_eq!(keep_through, held),
        Err(other) => panic!("{other}"),
        Ok(_) => panic!("started without the acknowledged record"),
    }
    assert_eq!(
        std::fs::read(&segment).unwrap(),
        bytes,
        "the refused start changed the journal"
    );
}

/// A snapshot syncs the journal first whatever its durability policy
/// (`never` included): it must never describe records a power loss could
/// still take from the journal.
#[test]
fn a_snapshot_syncs_the_journal_first_whatever_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = node_config(dir.path());
    config.journal.durability = journal::Durability::Never;
    let (mut node, _) = Node::open(config, T0).unwrap();
    for stamped in &scenario()[..20] {
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
    }
    node.commit().unwrap();
    let before = node.journal_syncs().syncs;
    node.snapshot().unwrap().unwrap();
    assert_eq!(node.journal_syncs().syncs, before + 1);
}

/// A command whose journal append fails (here a record larger than a
/// segment holds) never reaches the state: the node keeps the state of
/// before it and stops, and a restart rebuilds that same state.
#[test]
fn a_command_whose_append_fails_leaves_the_state_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_segments_config(dir.path());
    let (mut node, _) = Node::open(config.clone(), T0).unwrap();
    for stamped in &scenario()[..10] {
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
    }
    node.commit().unwrap();
    let before = node.state().clone();
    let huge = Command::Price {
        symbol: "X".repeat(8192),
        price_e8: 1,
        t_ms: T0,
    };
    let err = node.submit(before.now_ms, huge).unwrap_err();
    assert!(
        matches!(
            err,
            replay::NodeError::Journal(journal::JournalError::RecordTooLarge { .. })
        ),
        "{err}"
    );
    assert_eq!(node.state(), &before);
    assert!(node.is_stopped());
    drop(node);
    let (node, _) = Node::open(config, T0).unwrap();
    assert_eq!(node.state(), &before);
}

/// The state as of a time names the checksum of its own last record (what
/// a snapshot of it names, to be tied to the journal), not that of the
/// first record past the time, which the replay read to find its end.
#[test]
fn the_state_as_of_a_time_names_the_checksum_of_its_last_record() {
    let dir = tempfile::tempdir().unwrap();
    let live = run_live(dir.path(), &scenario(), None);
    let journal_dir = dir.path().join("journal");
    let at = replay(&journal_dir, None, Until::TimeMs(T0)).unwrap();
    let seq = at.state.last_seq;
    assert!(seq > 1 && seq < live.last_seq, "seq {seq}");
    let mut reader = journal::Reader::open(&journal_dir).unwrap();
    reader.seek(seq).unwrap();
    let record = reader.next().unwrap().unwrap();
    assert_eq!(record.seq, seq);
    assert_eq!(at.last_record_crc, Some(record.crc));
}

/// The state as of the very time of a snapshot starts from that
/// snapshot, not from an older one or the journal's start.
#[test]
fn the_state_as_of_a_snapshots_time_starts_from_that_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let commands = scenario();
    let live = run_live(dir.path(), &commands, Some(commands.len() / 2));
    let snapshots = dir.path().join("snapshots");
    let (seq, path) = snapshot::list(&snapshots).remove(0);
    let time = snapshot::load(&path).unwrap().now_ms;
    assert!(time < live.now_ms);
    let at = replay(
        &dir.path().join("journal"),
        Some(&snapshots),
        Until::TimeMs(time),
    )
    .unwrap();
    assert_eq!(at.from_snapshot, Some(seq));
    assert!(at.state.last_seq >= seq);
    assert_eq!(at.state.now_ms, time);
}

/// A history store removed (or lost) since the last snapshot holds
/// nothing that snapshot may rely on: the next start replays the whole
/// journal, which writes the store again, instead of going on from the
/// snapshot with everything evicted before it lost.
#[test]
fn a_start_without_its_history_store_replays_the_whole_journal() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = node_config(dir.path());
    config.history_dir = Some(dir.path().join("history"));
    let live = run_all_and_snapshot(&config);
    let (node, report) = Node::open(config.clone(), T0).unwrap();
    assert_eq!(
        report.from_snapshot,
        Some(live.last_seq),
        "the store holds it"
    );
    drop(node);
    std::fs::remove_dir_all(dir.path().join("history")).unwrap();
    let (node, report) = Node::open(config, T0).unwrap();
    assert_eq!(report.from_snapshot, None);
    assert_eq!(report.replayed, live.last_seq);
    assert_eq!(node.state(), &live);
    assert_eq!(node.history().unwrap().synced(), live.last_seq);
}

/// A history store found damaged on a journal whose first segments were
/// removed cannot be written anew (no replay from seq 1 is possible): it
/// is kept as it is and the node starts from its snapshot, instead of the
/// store being set aside with everything evicted before the trim, and the
/// start then failing on the gap.
#[test]
fn a_damaged_history_store_of_a_trimmed_journal_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = small_segments_config(dir.path());
    config.history_dir = Some(dir.path().join("history"));
    let live = run_all_and_snapshot(&config);
    let files = segment_files(&dir.path().join("journal"));
    assert!(files.len() >= 3, "{files:?}");
    std::fs::remove_file(&files[0]).unwrap();
    let history = dir.path().join("history");
    std::fs::write(history.join("damaged"), "a read found it wrong").unwrap();
    let (node, report) = Node::open(config, T0).unwrap();
    assert_eq!(report.from_snapshot, Some(live.last_seq));
    assert_eq!(node.state(), &live);
    assert_eq!(node.history().unwrap().emptied(), None);
    assert!(history.join("damaged").exists());
    assert!(!history.join("set-aside-1").exists());
}

/// A journal cut back past the newest snapshot (damage cut away, with
/// truncation allowed): that start sets the snapshot aside as `.stale`
/// and says so, and the next start, truncation no longer allowed, goes on
/// instead of refusing a snapshot past the journal's end.
#[test]
fn a_snapshot_past_a_journal_cut_back_is_set_aside_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = node_config(dir.path());
    let (mut node, _) = Node::open(config.clone(), T0).unwrap();
    for stamped in &scenario()[..40] {
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
    }
    node.commit().unwrap();
    let held = node.state().last_seq;
    let snapshot = node.snapshot().unwrap().unwrap();
    drop(node);
    let journal_dir = dir.path().join("journal");
    let mut reader = journal::Reader::open(&journal_dir).unwrap();
    reader.seek(held - 5).unwrap();
    let (segment, offset) = {
        let record = reader.next().unwrap().unwrap();
        (record.segment, record.offset)
    };
    journal::truncate_after(&journal_dir, segment, offset).unwrap();
    let mut truncating = config.clone();
    truncating.journal.truncate_on_corruption = true;
    let (node, report) = Node::open(truncating, T0).unwrap();
    assert_eq!(node.state().last_seq, held - 6);
    let stale = snapshot.with_extension("snap.stale");
    assert_eq!(report.stale_snapshots, vec![stale.clone()]);
    assert!(stale.exists() && !snapshot.exists());
    drop(node);
    let (node, _) = Node::open(config, T0).unwrap();
    assert_eq!(node.state().last_seq, held - 6);
}

/// Runs the scenario under a history tail of one second, so that orders,
/// fills and settled markets' trades leave the live state; returns the
/// live state and every event the history store keeps, in order.
fn run_with_short_tail(config: &replay::NodeConfig) -> (State, Vec<sequencer::Event>) {
    let (mut node, _) = Node::open(config.clone(), T0).unwrap();
    let (_, reply) = node
        .submit(T0, Command::SetRetention { tail_ms: 1_000 })
        .unwrap();
    assert_eq!(reply, sequencer::Reply::Ok);
    let mut kept = Vec::new();
    for stamped in scenario() {
        node.submit(stamped.ts_ms, stamped.command).unwrap();
        kept.extend(node.drain_events().filter(History::keeps));
    }
    node.commit().unwrap();
    (node.state().clone(), kept)
}

/// The store holds each of `kept` as it left the live state: orders,
/// fills with the account's fill before them, settled markets' trades,
/// listed markets' tickers (each kind at least once).
fn assert_store_holds(store: &History, kept: &[sequencer::Event]) {
    use sequencer::retention::Evicted;
    use sequencer::Event;
    let mut kinds = [0; 4];
    for event in kept {
        let evicted = match event {
            Event::Evicted(evicted) => Some(&**evicted),
            _ => None,
        };
        match (evicted, event) {
            (Some(Evicted::Order(order)), _) => {
                kinds[0] += 1;
                assert_eq!(store.order(order.id).unwrap().as_ref(), Some(order));
            }
            (Some(Evicted::Fill { fill, prev }), _) => {
                kinds[1] += 1;
                assert_eq!(store.fill(fill.id).unwrap(), Some((*fill, *prev)));
            }
            (Some(Evicted::Trades { market, trades }), _) => {
                kinds[2] += 1;
                assert_eq!(store.trades(*market).unwrap().as_ref(), Some(trades));
            }
            (_, Event::MarketListed { market, ticker, .. }) => {
                kinds[3] += 1;
                assert_eq!(store.ticker(*market).unwrap().as_ref(), Some(ticker));
            }
            (_, other) => panic!("the store keeps {other:?}"),
        }
    }
    assert!(kinds.iter().all(|&n| n > 0), "kinds kept: {kinds:?}");
}

/// What leaves the live state reaches the history store, written by the
/// node as it runs (all of it once the node is gone) and written again by
/// the replay of the whole journal when the store is gone.
#[test]
fn a_node_stores_what_leaves_the_live_state_and_a_replay_stores_it_again() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = node_config(dir.path());
    config.history_dir = Some(dir.path().join("history"));
    let (live, kept) = run_with_short_tail(&config);
    // The node is gone: its writer wrote everything sent to it first.
    let store = History::open_read(&dir.path().join("history")).unwrap();
    assert_store_holds(&store, &kept);
    drop(store);

    std::fs::remove_dir_all(dir.path().join("history")).unwrap();
    let (node, report) = Node::open(config, T0).unwrap();
    assert_eq!(report.from_snapshot, None);
    assert_eq!(node.state(), &live);
    let store = node.history().unwrap();
    assert_eq!(store.synced(), live.last_seq);
    assert_store_holds(&store, &kept);
}

/// Snapshots of another journal are named once each at a start: the one
/// at the seq the history store holds (which the replay looked at and
/// passed over) and the one past it (which the start only checks).
#[test]
fn each_snapshot_of_another_journal_is_named_once() {
    let commands = scenario();
    let other = tempfile::tempdir().unwrap();
    run_live(other.path(), &commands, None);
    // This venue ran the same commands a millisecond later.
    let dir = tempfile::tempdir().unwrap();
    let mut config = node_config(dir.path());
    config.history_dir = Some(dir.path().join("history"));
    let (mut node, _) = Node::open(config.clone(), T0).unwrap();
    let mut synced = None;
    for (i, stamped) in commands.iter().enumerate() {
        node.submit(stamped.ts_ms + 1, stamped.command.clone())
            .unwrap();
        node.drain_events();
        if i == 3 {
            node.snapshot().unwrap().unwrap();
            synced = Some(node.state().last_seq);
        }
    }
    node.commit().unwrap();
    drop(node);
    let synced = synced.unwrap();
    let snapshots = dir.path().join("snapshots");
    let foreign = [synced, synced + 20];
    for seq in foreign {
        let at = replay(&other.path().join("journal"), None, Until::Seq(seq)).unwrap();
        let mut state = at.state;
        snapshot::write(&snapshots, &mut state, at.last_record_crc).unwrap();
    }
    let (_, report) = Node::open(config, T0).unwrap();
    assert_eq!(report.from_snapshot, None);
    assert_eq!(
        report.skipped_snapshots.len(),
        2,
        "{:?}",
        report.skipped_snapshots
    );
    for seq in foreign {
        let named = report
            .skipped_snapshots
            .iter()
            .filter(|s| {
                s.contains("was not taken from this journal")
                    && s.contains(&format!("at seq {seq},"))
            })
            .count();
        assert_eq!(named, 1, "seq {seq}: {:?}", report.skipped_snapshots);
    }
}

/// A node's commit and sync go through its journal (each one counted
/// sync under group commit); a deferred commit hands back the point for
/// another thread to sync instead. Its pending events are there to read
/// until drained. Once a deferred sync failed and the node was stopped
/// (for the first reason given), every write is refused with that reason.
#[test]
fn a_node_syncs_through_its_journal_and_refuses_writes_once_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let config = node_config(dir.path());
    let (mut node, _) = Node::open(config.clone(), T0).unwrap();
    assert_eq!(node.snapshot_dir(), config.snapshot_dir.as_deref());
    let commands = scenario();
    for stamped in &commands[..10] {
        node.submit(stamped.ts_ms, stamped.command.clone()).unwrap();
    }
    let pending = node.events().to_vec();
    assert!(!pending.is_empty());
    assert_eq!(node.drain_events().collect::<Vec<_>>(), pending);
    assert!(node.events().is_empty());
    let syncs = |node: &Node| node.journal_syncs().syncs;
    let before = syncs(&node);
    node.commit().unwrap();
    assert_eq!(syncs(&node), before + 1, "commit");
    node.submit(commands[10].ts_ms, commands[10].command.clone())
        .unwrap();
    node.sync().unwrap();
    assert_eq!(syncs(&node), before + 2, "sync");
    let (seq, _) = node
        .submit(commands[11].ts_ms, commands[11].command.clone())
        .unwrap();
    let point = node.commit_deferred().unwrap().expect("a point to sync");
    assert_eq!(point.seq(), seq);
    point.sync().unwrap();
    assert_eq!(syncs(&node), before + 2, "the point was synced elsewhere");
    assert!(!node.is_stopped());
    assert_eq!(node.next_segment_problem(), None);

    node.fail("the deferred sync failed".into());
    node.fail("a later reason".into());
    assert!(node.is_stopped());
    let stopped = |result: Result<(), replay::NodeError>| match result {
        Err(replay::NodeError::Stopped(why)) => assert_eq!(why, "the deferred sync failed"),
        other => panic!("{other:?}"),
    };
    stopped(node.submit(T0, Command::Tick).map(|_| ()));
    stopped(node.commit());
    stopped(node.commit_deferred().map(|_| ()));
    stopped(node.snapshot_job().map(|_| ()));
    assert!(matches!(
        node.sync(),
        Err(replay::NodeError::Journal(journal::JournalError::Poisoned))
    ));
    assert_eq!(node.state().last_seq, seq);
}
