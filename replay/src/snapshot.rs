//! Snapshots: the whole state as of a seq, rkyv-encoded, in one file named
//! by that seq (`{seq:020}.snap`) with a header holding a magic, the format
//! version, the seq, the payload length and a CRC-32 of the payload. Written
//! to a temporary name, synced, then renamed, so a snapshot file is either
//! whole or absent. The newest valid one at or before a seq is picked
//! automatically; damaged ones are skipped and reported.

use std::fs;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use rkyv::rancor::Error as RkyvError;
use rkyv::util::AlignedVec;
use sequencer::State;

const MAGIC: &[u8; 8] = b"UPDNSNAP";
const VERSION: u32 = 1;
const HEADER_LEN: usize = 32;

/// Errors of snapshot files.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("snapshot {path} is damaged: {reason}")]
    Damaged { path: PathBuf, reason: String },
    #[error("snapshot at seq {seq} could not be encoded: {reason}")]
    Encode { seq: u64, reason: String },
}

/// Bytes read and checksummed at a time when loading.
const LOAD_CHUNK: usize = 4 << 20;

/// The file name of the snapshot as of `seq`.
pub fn file_name(seq: u64) -> String {
    format!("{seq:020}.snap")
}

/// Writes a snapshot of `state` into `dir`; returns its path.
pub fn write(dir: &Path, state: &State) -> Result<PathBuf, SnapshotError> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SnapshotError::Io { path, source }
    };
    fs::create_dir_all(dir).map_err(io(dir))?;
    // rkyv's 32-bit relative pointers cap an archive at 2 GiB, and going
    // past the cap panics inside the encoder; a snapshot that cannot be
    // written must be an error for the caller, never the end of the
    // sequencer thread.
    let encoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rkyv::to_bytes::<RkyvError>(state)
    }));
    let payload = match encoded {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => {
            return Err(SnapshotError::Encode {
                seq: state.last_seq,
                reason: e.to_string(),
            })
        }
        Err(_) => {
            return Err(SnapshotError::Encode {
                seq: state.last_seq,
                reason:
                    "the state is too large for one snapshot (the archive format's 2 GiB limit)"
                        .into(),
            })
        }
    };
    let mut header = [0u8; HEADER_LEN];
    header[..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    header[16..24].copy_from_slice(&state.last_seq.to_le_bytes());
    header[24..32].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    let path = dir.join(file_name(state.last_seq));
    let temporary = dir.join(format!("{}.tmp", file_name(state.last_seq)));
    let mut file = fs::File::create(&temporary).map_err(io(&temporary))?;
    file.write_all(&header).map_err(io(&temporary))?;
    file.write_all(&payload).map_err(io(&temporary))?;
    file.sync_all().map_err(io(&temporary))?;
    fs::rename(&temporary, &path).map_err(io(&path))?;
    if let Ok(d) = fs::File::open(dir) {
        // Makes the rename durable; a failure here loses only the snapshot.
        let _ = d.sync_all();
    }
    Ok(path)
}

/// Reads and checks one snapshot file.
pub fn load(path: &Path) -> Result<State, SnapshotError> {
    load_chunked(path, LOAD_CHUNK)
}

fn load_chunked(path: &Path, chunk_len: usize) -> Result<State, SnapshotError> {
    let damaged = |reason: String| SnapshotError::Damaged {
        path: path.to_path_buf(),
        reason,
    };
    let io = |source| SnapshotError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = fs::File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    let mut header = [0u8; HEADER_LEN];
    if file_len < HEADER_LEN as u64
        || file.read_exact(&mut header).is_err()
        || &header[..8] != MAGIC
    {
        return Err(damaged("no snapshot header".into()));
    }
    let word = |range: std::ops::Range<usize>| {
        header[range]
            .iter()
            .rev()
            .fold(0u64, |n, &b| (n << 8) | u64::from(b))
    };
    if word(8..12) != u64::from(VERSION) {
        return Err(damaged(format!(
            "format version {} is not {VERSION}",
            word(8..12)
        )));
    }
    let (crc, seq, len) = (word(12..16) as u32, word(16..24), word(24..32));
    let payload_len = file_len - HEADER_LEN as u64;
    if len != payload_len {
        return Err(damaged(format!(
            "payload is {payload_len} bytes, header says {len}"
        )));
    }
    let len = usize::try_from(len).map_err(|_| damaged("too large for this machine".into()))?;
    // Straight into the aligned buffer the decoder needs, checksumming each
    // chunk while it is still in the cache: one pass over the bytes.
    let mut payload = AlignedVec::<16>::with_capacity(len);
    payload.resize(len, 0);
    let mut hasher = crc32fast::Hasher::new();
    for chunk in payload.chunks_mut(chunk_len) {
        file.read_exact(chunk).map_err(io)?;
        hasher.update(chunk);
    }
    if hasher.finalize() != crc {
        return Err(damaged("checksum mismatch".into()));
    }
    let state =
        rkyv::from_bytes::<State, RkyvError>(&payload).map_err(|e| damaged(e.to_string()))?;
    if state.last_seq != seq {
        return Err(damaged(format!(
            "holds seq {}, header says {seq}",
            state.last_seq
        )));
    }
    Ok(state)
}

/// Snapshot files in `dir` with their seq, newest first.
pub fn list(dir: &Path) -> Vec<(u64, PathBuf)> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let seq = name.strip_suffix(".snap")?.parse().ok()?;
            Some((seq, e.path()))
        })
        .collect();
    found.sort_by_key(|entry| std::cmp::Reverse(entry.0));
    found
}

/// The newest valid snapshot at or before `max_seq`, and the damaged ones
/// that were skipped on the way.
pub fn newest(dir: &Path, max_seq: u64) -> (Option<State>, Vec<SnapshotError>) {
    let mut skipped = Vec::new();
    for (seq, path) in list(dir) {
        if seq > max_seq {
            continue;
        }
        match load(&path) {
            Ok(state) => return (Some(state), skipped),
            Err(e) => skipped.push(e),
        }
    }
    (None, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn damaged(path: &Path) -> String {
        match load(path) {
            Err(SnapshotError::Damaged { reason, .. }) => reason,
            other => panic!("expected a damaged snapshot, got {other:?}"),
        }
    }

    #[test]
    fn load_reads_back_what_write_wrote_and_names_every_damage() {
        let dir = tempfile::tempdir().unwrap();
        let state = State {
            last_seq: 77,
            ..State::default()
        };
        let path = write(dir.path(), &state).unwrap();
        assert_eq!(load(&path).unwrap(), state);
        for chunk in [1, 7, 16, 4096] {
            assert_eq!(
                load_chunked(&path, chunk).unwrap(),
                state,
                "chunks of {chunk}"
            );
        }
        let good = fs::read(&path).unwrap();
        let broken = dir.path().join("broken.snap");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (good[..HEADER_LEN - 1].to_vec(), "no snapshot header"),
            (
                [b"NOTASNAP".as_slice(), &good[8..]].concat(),
                "no snapshot header",
            ),
            (
                [&good[..8], &[9, 0, 0, 0], &good[12..]].concat(),
                "format version",
            ),
            (good[..good.len() - 1].to_vec(), "header says"),
            ([good.as_slice(), &[0]].concat(), "header says"),
            (
                {
                    let mut b = good.clone();
                    let last = b.len() - 1;
                    b[last] ^= 1;
                    b
                },
                "checksum mismatch",
            ),
        ];
        for (bytes, expected) in cases {
            fs::write(&broken, &bytes).unwrap();
            let reason = damaged(&broken);
            assert!(
                reason.contains(expected),
                "{reason:?} should say {expected:?}"
            );
        }
    }
}
