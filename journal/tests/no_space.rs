//! A full disk is reported as `NoSpace` when a segment is created, never as a
//! SIGBUS later. Needs a tiny tmpfs; skipped (with a message) when mounting
//! is not permitted.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use journal::{Journal, JournalError};

/// Held by each test here for its whole run: a test's `mount` or `umount`
/// child, forked while the other test holds a journal's `LOCK` open,
/// holds that lock too until it execs, and the other test's next open of
/// the journal is refused as if another writer ran.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A mounted tmpfs that is unmounted when dropped, even if the test panics.
struct TinyFs {
    dir: tempfile::TempDir,
}

impl TinyFs {
    fn mount(size: &str) -> Option<TinyFs> {
        let dir = tempfile::tempdir().ok()?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .ok()?;
        if !status.status.success() {
            eprintln!(
                "skipping: cannot mount a tmpfs: {}",
                String::from_utf8_lossy(&status.stderr).trim()
            );
            return None;
        }
        Some(TinyFs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for TinyFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn full_disk_is_no_space_at_segment_creation() {
    // 50 pages: three 16-page segments, a 1-page ballast file, and one free
    // page, so the fourth segment's header fits but the rest does not (without
    // preallocation, stores into its holes would raise SIGBUS).
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fs) = TinyFs::mount("200k") else {
        return;
    };
    let jdir: PathBuf = fs.path().join("journal");
    let ballast = fs.path().join("ballast");
    std::fs::write(&ballast, vec![1u8; 4096]).unwrap();
    let (mut j, _) = Journal::open(config(&jdir, SEG)).unwrap();
    let mut seq = 0;
    let err = loop {
        seq += 1;
        match j.append(seq, 1, &payload(seq, 4000)) {
            Ok(()) => assert!(seq < 1000, "the disk never filled up"),
            Err(e) => break e,
        }
    };
    match &err {
        JournalError::NoSpace { path, .. } => assert_eq!(path, &seg_path(&jdir, 3)),
        other => panic!("expected NoSpace, got {other:?}"),
    }
    assert!(
        err.to_string().contains("00000000000000000003.seg"),
        "{err}"
    );
    // Nothing was lost or half-made: three full segments, no temporary file
    // (beside them only the writer's lock).
    assert_eq!(j.last_seq(), Some(seq - 1));
    let files: Vec<String> = std::fs::read_dir(&jdir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != journal::LOCK_FILE)
        .collect();
    assert_eq!(files.len(), 3, "{files:?}");
    assert!(matches!(
        j.append(seq, 1, &payload(seq, 4000)),
        Err(JournalError::NoSpace { .. })
    ));
    assert_records_sized(&jdir, seq - 1);
    // Once space is freed, the same append succeeds.
    std::fs::remove_file(&ballast).unwrap();
    let freed = (0..3).map(|i| seg_path(&jdir, i)).collect::<Vec<_>>();
    std::fs::remove_file(&freed[0]).unwrap();
    j.append(seq, 1, &payload(seq, 4000)).unwrap();
    j.close().unwrap();
    assert!(seg_path(&jdir, 3).exists());
}

fn assert_records_sized(dir: &Path, last: u64) {
    let recs = read_all(dir);
    assert_eq!(recs.len() as u64, last);
    for r in recs {
        assert_eq!(r.payload, payload(r.seq, 4000));
    }
}

/// A segment file cut short is made whole again at the length its header
/// names (its checksum good) only when a venue could have made that size:
/// a multiple of the size unit, at most `SEGMENT_BYTES_MAX`. Any other is
/// refused before a byte is written; the largest is taken (on a small
/// file system the fill then fails for room, naming the segment).
#[test]
fn a_cut_makes_a_segment_whole_only_at_a_size_a_venue_makes() {
    let _serial = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(fs) = TinyFs::mount("1m") else {
        return;
    };
    let jdir: PathBuf = fs.path().join("journal");
    make_journal(&jdir, SEG, 1200);
    let recs = read_all(&jdir);
    assert!(recs.last().unwrap().segment >= 2);
    let in_1: Vec<&Owned> = recs.iter().filter(|r| r.segment == 1).collect();
    let cut_len = in_1[in_1.len() / 2].offset + 37;
    let path = seg_path(&jdir, 1);
    cut_file(&path, cut_len);
    let says = |bytes: u64| {
        patch_file(&path, |b| {
            let mut h = journal::format::SegmentHeader::decode(&b[..64]).unwrap();
            h.segment_bytes = bytes;
            b[..64].copy_from_slice(&h.encode());
        })
    };
    let mut cfg = config(&jdir, SEG);
    cfg.truncate_on_corruption = true;
    for bytes in [SEG + 2048, journal::SEGMENT_BYTES_MAX + SEG] {
        says(bytes);
        match Journal::open(cfg.clone()) {
            Err(JournalError::Invalid(why)) => {
                let want = format!("its header says {bytes} bytes");
                assert!(why.contains(&want), "{why}");
                assert!(why.contains(&path.display().to_string()), "{why}");
            }
            other => panic!("{bytes}: {other:?}"),
        }
        assert_eq!(std::fs::metadata(&path).unwrap().len(), cut_len);
    }
    says(journal::SEGMENT_BYTES_MAX);
    match Journal::open(cfg) {
        Err(JournalError::NoSpace { path: at, .. }) => assert_eq!(at, path),
        other => panic!("{other:?}"),
    }
}
