//! The history store: what left the live state (`Event::Evicted`), kept on
//! disk so that reads past the history tail still find it.
//!
//! It is derived data: everything in it comes from the journal, and
//! replaying the journal from seq 1 writes it again. Files, in one folder:
//!
//! - `orders.dat`: one slot of [`ORDER_SLOT`] bytes per order id, at
//!   `(id - 1) * ORDER_SLOT`: the order as it ended.
//! - `fills.dat`: one slot of [`FILL_SLOT`] bytes per fill id: the fill and
//!   the id of the account's fill evicted before it, so an account's fills
//!   page newest first by following the chain.
//! - `trades.dat`: each settled market's trades as one record, appended
//!   (once: a record already in place for the market is kept);
//!   `trades.idx`: one slot of 16 bytes per market id: where its record is.
//! - `tickers.dat`: one slot of [`TICKER_SLOT`] bytes per market id: its
//!   ticker (written at listing), so a reader can show a stored order's or
//!   fill's market without the live state.
//! - `synced`: the seq through which everything evicted is on disk, and
//!   the length of each file then (files only grow, so a file shorter than
//!   that lost records: it was truncated, or deleted and made anew).
//! - `damaged`: present once a read found the store wrong (a checksum that
//!   does not match, a record an eviction should have written missing);
//!   it says why.
//!
//! A store found damaged at open (a `damaged` file, or a file shorter than
//! `synced` says) is set aside (its files moved into `set-aside-N/`, kept
//! for whoever wants to look) and started anew with `synced` at 0, when
//! the journal still starts at seq 1: the node then replays it whole,
//! which writes the store anew. When the journal's first segments were
//! removed, nothing could write it anew: it is kept as it is, with an
//! error at every start. Either way a read that meets the damage answers
//! an error (the server's 503), never "not found" for a record that was
//! lost.
//!
//! A slot or record is `[length u32][CRC-32 u32][rkyv payload]`; a slot of
//! zeros is empty. Writing is idempotent (a replay after a crash writes the
//! same bytes at the same places), so no write is ever undone.
//!
//! Durability: snapshots hold only the live state, so a snapshot at seq S
//! may be used at start only if the store holds everything evicted through
//! S. The snapshot writer syncs the store first and raises `synced`; start
//! picks the newest snapshot not past `synced` (older data folders without
//! a store replay from seq 1, which fills it).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use rkyv::rancor::Error as RkyvError;
use rkyv::util::AlignedVec;
use rkyv::{Archive, Deserialize, Serialize};
use sequencer::query::Rest;
use sequencer::retention::Evicted;
use sequencer::state::{Fill, Order, Trade};
use sequencer::types::MarketId;
use sequencer::Event;

/// Bytes per order slot.
pub const ORDER_SLOT: usize = 256;
/// Bytes per fill slot.
pub const FILL_SLOT: usize = 160;
/// Bytes per market ticker slot (tickers are at most 100 bytes).
pub const TICKER_SLOT: usize = 128;
const SLOT_HEAD: usize = 8;
const INDEX_SLOT: usize = 16;
/// History records a fills page looks at before it answers with a cursor
/// and fewer items (a filter that matches rarely must not scan for ever).
pub const SCAN_MAX: usize = 10_000;

/// A fill as stored, with the account's previous evicted fill.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
struct FillRecord {
    fill: Fill,
    prev: u64,
}

/// The store, open for writing (one writer) and reading (any thread).
pub struct History {
    dir: PathBuf,
    orders: File,
    fills: File,
    trades: File,
    trades_idx: File,
    tickers: File,
    /// End of `trades.dat` (the writer appends there).
    trades_end: Mutex<u64>,
    /// Seq of the newest evictions handed to the writer.
    sent: AtomicU64,
    /// Seq through which every eviction is written (not necessarily synced).
    written: Mutex<u64>,
    written_cv: Condvar,
    synced: AtomicU64,
    /// A write failed: the store is behind the journal until a restart
    /// rebuilds it, and reads past the tail must not trust it.
    failed: std::sync::atomic::AtomicBool,
    /// A read found the store wrong (the `damaged` file is written once).
    damaged: std::sync::atomic::AtomicBool,
    /// Why the store was set aside at open, and where it went, if it was.
    emptied: Option<String>,
    /// The files' lengths as `synced` last recorded them: files only grow,
    /// so a sync that finds one shorter (cut while the venue ran) marks
    /// the store damaged instead of recording the loss as the new normal.
    recorded: Mutex<[u64; 5]>,
}

/// The store's files, in the order `synced` records their lengths.
const FILES: [&str; 5] = [
    "orders.dat",
    "fills.dat",
    "trades.dat",
    "trades.idx",
    "tickers.dat",
];
const DAMAGED: &str = "damaged";

fn slot_of(id: u64, slot: usize) -> Option<u64> {
    id.checked_sub(1)?.checked_mul(slot as u64)
}

/// `[len][crc][payload]`, padded to `size` when given.
fn frame(payload: &[u8], size: Option<usize>) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(size.unwrap_or(SLOT_HEAD + payload.len() + 15));
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    match size {
        Some(size) if out.len() > size => {
            return Err(io::Error::other(format!(
                "a history record of {} bytes does not fit a {size}-byte slot",
                out.len()
            )))
        }
        Some(size) => out.resize(size, 0),
        None => out.resize(out.len().next_multiple_of(16), 0),
    }
    Ok(out)
}

/// The payload of a frame, checked; `None` for an empty slot.
fn unframe(bytes: &[u8], what: &str) -> io::Result<Option<AlignedVec>> {
    let len = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    if len == 0 && crc == 0 {
        return Ok(None);
    }
    let payload = bytes
        .get(SLOT_HEAD..SLOT_HEAD + len)
        .ok_or_else(|| io::Error::other(format!("history {what}: record runs past its slot")))?;
    if crc32fast::hash(payload) != crc {
        return Err(io::Error::other(format!(
            "history {what}: checksum mismatch"
        )));
    }
    let mut aligned = AlignedVec::with_capacity(len);
    aligned.extend_from_slice(payload);
    Ok(Some(aligned))
}

fn decode_err(what: &str, e: RkyvError) -> io::Error {
    io::Error::other(format!("history {what}: {e}"))
}

/// A checked payload decoded, then judged by `wrong`, which names what is
/// wrong with a whole record that is not the one asked for (copied into
/// another's slot, or the file shifted): that is damage too.
fn decoded<T>(
    payload: io::Result<Option<AlignedVec>>,
    what: &str,
    wrong: impl FnOnce(&T) -> Option<String>,
) -> io::Result<Option<T>>
where
    T: Archive,
    T::Archived: for<'a> rkyv::bytecheck::CheckBytes<rkyv::api::high::HighValidator<'a, RkyvError>>
        + Deserialize<T, rkyv::rancor::Strategy<rkyv::de::Pool, RkyvError>>,
{
    let Some(bytes) = payload? else {
        return Ok(None);
    };
    let value = rkyv::from_bytes::<T, RkyvError>(&bytes).map_err(|e| decode_err(what, e))?;
    match wrong(&value) {
        Some(why) => Err(io::Error::other(format!("history {what}: {why}"))),
        None => Ok(Some(value)),
    }
}

/// Reads exactly `buf.len()` bytes at `at`; `false` when the file ends first.
fn read_full(file: &File, buf: &mut [u8], at: u64) -> io::Result<bool> {
    match file.read_exact_at(buf, at) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(false),
        Err(e) => Err(e),
    }
}

/// Moves the store's files (and `synced`, `damaged`) into a new folder
/// `set-aside-N` of `dir`, the first N free; returns it.
fn set_aside(dir: &Path) -> io::Result<PathBuf> {
    let mut n = 1;
    let aside = loop {
        let aside = dir.join(format!("set-aside-{n}"));
        match fs::create_dir(&aside) {
            Ok(()) => break aside,
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => n += 1,
            Err(e) => return Err(e),
        }
    };
    for name in FILES.iter().chain(&["synced", DAMAGED]) {
        match fs::rename(dir.join(name), aside.join(name)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    File::open(dir)?.sync_all()?;
    Ok(aside)
}

/// Where market `market`'s slot of `size` bytes is in a per-market file.
fn market_slot(market: MarketId, size: usize) -> u64 {
    u64::from(market) * size as u64
}

/// The seq recorded in `dir`'s `synced` file (0 when there is none), and
/// the files' lengths then (none in a file of an older build: 8 bytes).
fn synced_through(dir: &Path) -> (u64, Option<[u64; 5]>) {
    let Ok(bytes) = fs::read(dir.join("synced")) else {
        return (0, None);
    };
    let word = |i: usize| -> Option<u64> {
        Some(u64::from_le_bytes(
            bytes.get(i * 8..i * 8 + 8)?.try_into().ok()?,
        ))
    };
    let seq = word(0).unwrap_or(0);
    let mut lengths = [0u64; 5];
    for (i, length) in lengths.iter_mut().enumerate() {
        match word(i + 1) {
            Some(n) => *length = n,
            None => return (seq, None),
        }
    }
    (seq, Some(lengths))
}

/// Why the store in `dir` cannot be trusted, if it cannot: a read found it
/// damaged, or a file is shorter than when it was last synced.
fn untrusted(dir: &Path, synced: (u64, Option<[u64; 5]>)) -> io::Result<Option<String>> {
    if fs::symlink_metadata(dir.join(DAMAGED)).is_ok() {
        let why = fs::read(dir.join(DAMAGED)).unwrap_or_default();
        return Ok(Some(format!(
            "a read found it damaged: {}",
            String::from_utf8_lossy(&why).trim()
        )));
    }
    let (seq, Some(lengths)) = synced else {
        return Ok(None);
    };
    for (name, &synced) in FILES.iter().zip(&lengths) {
        let now = match fs::metadata(dir.join(name)) {
            Ok(meta) => meta.len(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        if now < synced {
            return Ok(Some(format!(
                "{name} has {now} bytes, {synced} when the store was synced through seq {seq}"
            )));
        }
    }
    Ok(None)
}

impl History {
    /// Opens (creating when missing) the store in `dir`.
    pub fn open(dir: &Path) -> io::Result<History> {
        Self::open_with(dir, true, u64::MAX)
    }

    /// Opens the store; `rebuildable` when the journal still starts at
    /// seq 1, so that a replay can write a damaged store anew (see the
    /// module's notes).
    ///
    /// A store synced past `journal_end` (the journal lost its tail, or
    /// `synced` was damaged upward) is taken as synced through the
    /// journal's end only: what it holds up to there is on disk, and the
    /// next sync records again (it writes only a seq above the one held).
    pub fn open_with(dir: &Path, rebuildable: bool, journal_end: u64) -> io::Result<History> {
        fs::create_dir_all(dir)?;
        let mut emptied = None;
        let mut synced = synced_through(dir);
        if synced.0 > journal_end {
            tracing::warn!(
                dir = %dir.display(),
                synced = synced.0,
                journal_end,
                "the history store says it was synced past the journal's end: taken as synced through the journal's end"
            );
            synced.0 = journal_end;
        }
        if let Some(why) = untrusted(dir, synced)? {
            if rebuildable {
                // Its `synced` goes to 0 with it, so no snapshot past it
                // starts the node: the replay starts at seq 1.
                let aside = set_aside(dir)?;
                synced = (0, None);
                tracing::warn!(
                    dir = %dir.display(),
                    set_aside = %aside.display(),
                    "the history store cannot be trusted ({why}): it is set aside and written anew by a replay of the whole journal"
                );
                emptied = Some(format!("{why}; set aside in {}", aside.display()));
            } else {
                tracing::error!(
                    dir = %dir.display(),
                    "the history store cannot be trusted ({why}), and cannot be written anew: the journal no longer starts at seq 1. It is kept as it is; reads that meet the damage answer 503. Restore the store, or the journal's first segments, from a backup"
                );
            }
        }
        let open = |name: &str| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(dir.join(name))
        };
        let trades = open("trades.dat")?;
        let trades_end = trades.metadata()?.len().next_multiple_of(16);
        Ok(History {
            dir: dir.to_path_buf(),
            orders: open("orders.dat")?,
            fills: open("fills.dat")?,
            trades,
            trades_idx: open("trades.idx")?,
            tickers: open("tickers.dat")?,
            trades_end: Mutex::new(trades_end),
            sent: AtomicU64::new(0),
            written: Mutex::new(0),
            written_cv: Condvar::new(),
            synced: AtomicU64::new(synced.0),
            failed: std::sync::atomic::AtomicBool::new(false),
            damaged: std::sync::atomic::AtomicBool::new(false),
            emptied,
            recorded: Mutex::new(synced.1.unwrap_or_default()),
        })
    }

    /// Opens an existing store for reading only (an auditor's tool beside
    /// a venue, which owns it): nothing is made, emptied or marked.
    pub fn open_read(dir: &Path) -> io::Result<History> {
        let open = |name: &str| File::open(dir.join(name));
        Ok(History {
            dir: dir.to_path_buf(),
            orders: open("orders.dat")?,
            fills: open("fills.dat")?,
            trades: open("trades.dat")?,
            trades_idx: open("trades.idx")?,
            tickers: open("tickers.dat")?,
            trades_end: Mutex::new(0),
            sent: AtomicU64::new(0),
            written: Mutex::new(0),
            written_cv: Condvar::new(),
            synced: AtomicU64::new(synced_through(dir).0),
            failed: std::sync::atomic::AtomicBool::new(false),
            // Never recorded from here: the venue's own reads do that.
            damaged: std::sync::atomic::AtomicBool::new(true),
            emptied: None,
            recorded: Mutex::new([0; 5]),
        })
    }

    /// Why the store was emptied at open (to be written anew), if it was.
    pub fn emptied(&self) -> Option<&str> {
        self.emptied.as_deref()
    }

    /// Records that the store is wrong, `e` saying how, so that the next
    /// start empties it and writes it anew; returns `e`. Every failed read
    /// goes through here, and so must a caller that finds a record missing
    /// that an eviction wrote (`missing`).
    pub fn damaged(&self, e: io::Error) -> io::Error {
        if !self.damaged.swap(true, Ordering::AcqRel) {
            tracing::error!(
                dir = %self.dir.display(),
                error = %e,
                "the history store is damaged: reads that meet the damage answer 503 until a restart, which sets the store aside and writes it anew from the journal (when the journal still starts at seq 1)"
            );
            // Best effort: without it, the store stays as it is.
            let _ = fs::write(self.dir.join(DAMAGED), e.to_string())
                .and_then(|()| File::open(self.dir.join(DAMAGED))?.sync_all());
        }
        e
    }

    /// A record the store must hold and does not: the store is damaged.
    pub fn missing(&self, what: &str) -> io::Error {
        self.damaged(io::Error::other(format!(
            "{what} is missing from the history store"
        )))
    }

    /// A read's result, the store marked damaged when it failed.
    fn checked<T>(&self, result: io::Result<T>) -> io::Result<T> {
        result.map_err(|e| self.damaged(e))
    }

    /// The seq through which the store is known to be on disk (0 for a
    /// new store): a snapshot past it may not start the node.
    pub fn synced(&self) -> u64 {
        self.synced.load(Ordering::Acquire)
    }

    /// The folder of the store.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// True for the events the store keeps.
    pub fn keeps(event: &Event) -> bool {
        matches!(event, Event::Evicted(_) | Event::MarketListed { .. })
    }

    /// Stores every event of `events` the store keeps.
    pub fn store_events(&self, events: &[Event]) -> io::Result<()> {
        for event in events {
            match event {
                Event::Evicted(evicted) => self.store(evicted)?,
                Event::MarketListed { market, ticker, .. } => {
                    self.tickers.write_all_at(
                        &frame(ticker.as_bytes(), Some(TICKER_SLOT))?,
                        market_slot(*market, TICKER_SLOT),
                    )?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// A market's ticker; `None` when the store does not hold it.
    pub fn ticker(&self, market: MarketId) -> io::Result<Option<String>> {
        let at = market_slot(market, TICKER_SLOT);
        Ok(self
            .checked(Self::slot_at(&self.tickers, at, TICKER_SLOT, "ticker"))?
            .map(|b| String::from_utf8_lossy(&b).into_owned()))
    }

    /// Stores one evicted record.
    pub fn store(&self, evicted: &Evicted) -> io::Result<()> {
        match evicted {
            Evicted::Order(order) => {
                let bytes =
                    rkyv::to_bytes::<RkyvError>(order).map_err(|e| decode_err("order", e))?;
                let at =
                    slot_of(order.id, ORDER_SLOT).ok_or_else(|| io::Error::other("order id 0"))?;
                self.orders
                    .write_all_at(&frame(&bytes, Some(ORDER_SLOT))?, at)
            }
            Evicted::Fill { fill, prev } => {
                let record = FillRecord {
                    fill: *fill,
                    prev: *prev,
                };
                let bytes =
                    rkyv::to_bytes::<RkyvError>(&record).map_err(|e| decode_err("fill", e))?;
                let at =
                    slot_of(fill.id, FILL_SLOT).ok_or_else(|| io::Error::other("fill id 0"))?;
                self.fills
                    .write_all_at(&frame(&bytes, Some(FILL_SLOT))?, at)
            }
            Evicted::Trades { market, trades } => {
                let bytes =
                    rkyv::to_bytes::<RkyvError>(trades).map_err(|e| decode_err("trades", e))?;
                let record = frame(&bytes, None)?;
                let mut end = self.trades_end.lock().expect("trades end");
                // A replay stores the same record again: it is kept where
                // it is, so the file does not grow at every restart.
                if let Some((at, len)) = self.trades_record(*market)? {
                    let mut stored = vec![0u8; len];
                    if len == record.len()
                        && read_full(&self.trades, &mut stored, at)?
                        && stored == record
                    {
                        return Ok(());
                    }
                }
                let at = *end;
                self.trades.write_all_at(&record, at)?;
                *end += record.len() as u64;
                self.set_trades_record(*market, at, record.len() as u64)
            }
        }
    }

    /// Marks the store as behind the journal (a write failed).
    pub fn fail(&self) {
        self.failed.store(true, Ordering::Release);
        // Wake readers and the snapshot writer waiting for progress.
        let _guard = self.written.lock().expect("written");
        self.written_cv.notify_all();
    }

    /// True once a write failed: the store misses records until a restart.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Records that the evictions of `seq` were handed to the writer.
    pub fn mark_sent(&self, seq: u64) {
        self.sent.fetch_max(seq, Ordering::AcqRel);
    }

    /// Seq of the newest evictions handed to the writer: a reader that
    /// waits until this is written sees everything evicted before its read.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Acquire)
    }

    /// Records that everything evicted through `seq` is written.
    pub fn mark_written(&self, seq: u64) {
        let mut written = self.written.lock().expect("written");
        if seq > *written {
            *written = seq;
            self.written_cv.notify_all();
        }
    }

    /// Waits until everything evicted through `seq` is written; `false`
    /// when `timeout` passed first or the store failed.
    pub fn wait_written(&self, seq: u64, timeout: Duration) -> bool {
        let written = self.written.lock().expect("written");
        let (written, _) = self
            .written_cv
            .wait_timeout_while(written, timeout, |w| *w < seq && !self.failed())
            .expect("written");
        *written >= seq && !self.failed()
    }

    /// Makes everything written durable and records `seq` as synced.
    pub fn sync(&self, seq: u64) -> io::Result<()> {
        let files = [
            &self.orders,
            &self.fills,
            &self.trades,
            &self.trades_idx,
            &self.tickers,
        ];
        // The lengths before the sync: the writer may go on extending a
        // file meanwhile, and a length past what the sync covered could
        // be lost in a crash, making the store look cut short.
        let mut record = seq.to_le_bytes().to_vec();
        let mut lengths = [0u64; 5];
        for (file, length) in files.iter().zip(&mut lengths) {
            *length = file.metadata()?.len();
            record.extend_from_slice(&length.to_le_bytes());
        }
        let mut recorded = self.recorded.lock().expect("recorded");
        if let Some((name, (now, was))) = FILES
            .iter()
            .zip(lengths.iter().zip(recorded.iter()))
            .find(|(_, (now, was))| now < was)
        {
            return Err(self.damaged(io::Error::other(format!(
                "{name} has {now} bytes, {was} when the store was last synced"
            ))));
        }
        for file in files {
            file.sync_data()?;
        }
        *recorded = lengths;
        if seq > self.synced.load(Ordering::Acquire) {
            let temporary = self.dir.join("synced.tmp");
            fs::write(&temporary, record)?;
            File::open(&temporary)?.sync_all()?;
            fs::rename(&temporary, self.dir.join("synced"))?;
            File::open(&self.dir)?.sync_all()?;
            self.synced.store(seq, Ordering::Release);
        }
        Ok(())
    }

    /// An evicted order; `None` when the store does not hold it.
    pub fn order(&self, id: u64) -> io::Result<Option<Order>> {
        let slot = Self::slot(&self.orders, id, ORDER_SLOT, "order");
        self.checked(decoded(slot, "order", |order: &Order| {
            (order.id != id).then(|| format!("slot {id} holds order {}", order.id))
        }))
    }

    /// The checked payload of slot `id` of a fixed-slot file; `None` for an
    /// empty slot or one past the end.
    fn slot(file: &File, id: u64, size: usize, what: &str) -> io::Result<Option<AlignedVec>> {
        match slot_of(id, size) {
            Some(at) => Self::slot_at(file, at, size, what),
            None => Ok(None),
        }
    }

    /// The checked payload of the `size`-byte slot at byte `at`.
    fn slot_at(file: &File, at: u64, size: usize, what: &str) -> io::Result<Option<AlignedVec>> {
        let mut buf = vec![0u8; size];
        if !read_full(file, &mut buf, at)? {
            return Ok(None);
        }
        unframe(&buf, what)
    }

    /// An evicted fill and the account's fill evicted before it.
    pub fn fill(&self, id: u64) -> io::Result<Option<(Fill, u64)>> {
        let slot = Self::slot(&self.fills, id, FILL_SLOT, "fill");
        // Its own slot, and a chain that only goes to older fills (a cycle
        // would walk for ever).
        let record = decoded(slot, "fill", |r: &FillRecord| {
            (r.fill.id != id || r.prev >= id)
                .then(|| format!("slot {id} holds fill {} after fill {}", r.fill.id, r.prev))
        });
        Ok(self.checked(record)?.map(|r| (r.fill, r.prev)))
    }

    /// The rest of an account's fills page: from the chain head in `rest`,
    /// older than `cursor`, of `rest.market` when set. Returns the fills
    /// and the next page's cursor (`None` at the end of the history).
    pub fn fills_page(
        &self,
        rest: &Rest,
        cursor: Option<u64>,
    ) -> io::Result<(Vec<Fill>, Option<u64>)> {
        let missing = |id: u64| self.missing(&format!("fill {id}"));
        // A cursor that names one of this account's stored fills (the last
        // fill of the previous page, or the last one a scan looked at)
        // resumes the chain right below it; any other cursor walks from the
        // head, passing over what is not below it.
        let mut id = rest.from;
        if let Some(c) = cursor.filter(|&c| c <= rest.from) {
            if let Some((at, prev)) = self.fill(c)? {
                let (head, _) = self.fill(rest.from)?.ok_or_else(|| missing(rest.from))?;
                if at.account == head.account {
                    id = prev;
                }
            }
        }
        let mut items = Vec::new();
        let mut scanned = 0;
        let mut last_looked = None;
        while id != 0 {
            let Some((fill, prev)) = self.fill(id)? else {
                return Err(missing(id));
            };
            if cursor.is_some_and(|c| id >= c) {
                id = prev;
                continue;
            }
            if scanned == SCAN_MAX {
                // Answer what was found; the cursor (a fill looked at, so
                // strictly older than the one given) resumes the scan.
                return Ok((items, last_looked));
            }
            scanned += 1;
            if rest.market.is_none_or(|m| fill.market == m) {
                if items.len() == rest.wanted {
                    let last = items.last().map(|f: &Fill| f.id);
                    return Ok((items, last));
                }
                items.push(fill);
            }
            last_looked = Some(id);
            id = prev;
        }
        Ok((items, None))
    }

    /// Points a market's index entry at its trades record: at `at` in
    /// `trades.dat`, `len` bytes long (read back by `trades_record`; the
    /// offset is stored plus one, so that zeros are no entry).
    fn set_trades_record(&self, market: MarketId, at: u64, len: u64) -> io::Result<()> {
        let mut slot = [0u8; INDEX_SLOT];
        slot[0..8].copy_from_slice(&(at + 1).to_le_bytes());
        slot[8..16].copy_from_slice(&len.to_le_bytes());
        self.trades_idx
            .write_all_at(&slot, market_slot(market, INDEX_SLOT))
    }

    /// Where a market's trades record is in `trades.dat` and its length;
    /// `None` when the index has none.
    fn trades_record(&self, market: MarketId) -> io::Result<Option<(u64, usize)>> {
        let mut slot = [0u8; INDEX_SLOT];
        if !read_full(&self.trades_idx, &mut slot, market_slot(market, INDEX_SLOT))? {
            return Ok(None);
        }
        let at = u64::from_le_bytes(slot[0..8].try_into().expect("8 bytes"));
        let len = u64::from_le_bytes(slot[8..16].try_into().expect("8 bytes"));
        if at == 0 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(io::Error::other)?;
        Ok(Some((at - 1, len)))
    }

    /// A settled market's trades, oldest first; `None` when not stored.
    pub fn trades(&self, market: MarketId) -> io::Result<Option<Vec<Trade>>> {
        self.checked(self.trades_unchecked(market))
    }

    fn trades_unchecked(&self, market: MarketId) -> io::Result<Option<Vec<Trade>>> {
        let Some((at, len)) = self.trades_record(market)? else {
            return Ok(None);
        };
        let mut buf = vec![0u8; len];
        if len < SLOT_HEAD || !read_full(&self.trades, &mut buf, at)? {
            return Err(io::Error::other(format!(
                "history trades of market {market}: record cut short"
            )));
        }
        // The index names a record: an empty one there is damage (the
        // index pointed elsewhere), not a market without trades.
        let payload = unframe(&buf, "trades")?.ok_or_else(|| {
            io::Error::other(format!(
                "history trades of market {market}: the index points at an empty record"
            ))
        });
        decoded(Ok(Some(payload?)), "trades", |trades: &Vec<Trade>| {
            trades.iter().find(|t| t.market != market).map(|other| {
                format!(
                    "the record of market {market} holds a trade of market {}",
                    other.market
                )
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sequencer::types::{Action, ClientOrderId, OrderStatus, Outcome, TimeInForce};

    fn order(id: u64) -> Order {
        Order {
            id,
            account: 3,
            key: 1,
            market: 2,
            outcome: Outcome::Up,
            action: Action::Buy,
            price: 55,
            time_in_force: TimeInForce::GoodTillCanceled,
            post_only: false,
            status: OrderStatus::Canceled,
            count: 10_000,
            filled: 7,
            fill_cost: 385,
            fees: 12,
            created_ts_ms: u64::MAX - 1,
            updated_ts_ms: u64::MAX,
            client_order_id: ClientOrderId::new(&"x".repeat(64)).expect("64 chars"),
            hold: i64::MAX,
            max_fee_per_contract: i64::MAX,
            node: u32::MAX,
            account_slot: 0,
        }
    }

    fn fill(id: u64, account: u32, market: u32) -> Fill {
        Fill {
            id,
            order: id * 10,
            account,
            market,
            outcome: Outcome::Down,
            action: Action::Sell,
            price: 40,
            count: 3,
            cost: 120,
            fee: 1,
            is_taker: true,
            trade_id: id,
            ts_ms: 1_000 + id,
        }
    }

    #[test]
    fn records_come_back_as_stored_and_slots_hold_the_largest() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        assert_eq!(history.order(5).expect("read"), None);
        history.store(&Evicted::Order(order(5))).expect("store");
        history.store(&Evicted::Order(order(2))).expect("store");
        assert_eq!(history.order(5).expect("read"), Some(order(5)));
        assert_eq!(history.order(2).expect("read"), Some(order(2)));
        assert_eq!(history.order(3).expect("read"), None);
        assert_eq!(history.order(0).expect("read"), None);
        // Fills of account 1 chain 1 <- 4 <- 6; account 2 has 5.
        for (id, account, market, prev) in [(1, 1, 7, 0), (4, 1, 8, 1), (5, 2, 7, 0), (6, 1, 7, 4)]
        {
            history
                .store(&Evicted::Fill {
                    fill: fill(id, account, market),
                    prev,
                })
                .expect("store");
        }
        let rest = |wanted, market| Rest {
            from: 6,
            wanted,
            market,
        };
        let ids = |page: (Vec<Fill>, Option<u64>)| {
            (page.0.iter().map(|f| f.id).collect::<Vec<_>>(), page.1)
        };
        assert_eq!(
            ids(history.fills_page(&rest(10, None), None).expect("page")),
            (vec![6, 4, 1], None)
        );
        assert_eq!(
            ids(history.fills_page(&rest(2, None), None).expect("page")),
            (vec![6, 4], Some(4))
        );
        assert_eq!(
            ids(history.fills_page(&rest(2, None), Some(4)).expect("page")),
            (vec![1], None)
        );
        assert_eq!(
            ids(history.fills_page(&rest(10, Some(7)), None).expect("page")),
            (vec![6, 1], None)
        );
        let trades = vec![Trade {
            trade_id: 9,
            market: 4,
            up_price: 61,
            count: 2,
            taker_outcome: Outcome::Up,
            taker_action: Action::Buy,
            ts_ms: 77,
        }];
        history
            .store(&Evicted::Trades {
                market: 4,
                trades: trades.clone(),
            })
            .expect("store");
        history
            .store(&Evicted::Trades {
                market: 1,
                trades: Vec::new(),
            })
            .expect("store");
        assert_eq!(history.trades(4).expect("read"), Some(trades.clone()));
        assert_eq!(history.trades(1).expect("read"), Some(Vec::new()));
        assert_eq!(history.trades(2).expect("read"), None);
        history
            .store_events(&[Event::MarketListed {
                market: 4,
                ticker: "btc-15m-26nov22-0215".into(),
                series: "btc-15m".into(),
            }])
            .expect("store");
        assert_eq!(
            history.ticker(4).expect("read").as_deref(),
            Some("btc-15m-26nov22-0215")
        );
        assert_eq!(history.ticker(3).expect("read"), None);
        // Reopened, the store reads the same and appends after its end.
        history.sync(42).expect("sync");
        drop(history);
        let history = History::open(dir.path()).expect("reopen");
        assert_eq!(history.synced(), 42);
        assert_eq!(history.order(5).expect("read"), Some(order(5)));
        assert_eq!(history.trades(4).expect("read"), Some(trades.clone()));
        // A replay after a restart stores the same records again: same
        // bytes in place, and the trades file does not grow.
        let trades_len = || fs::metadata(dir.path().join("trades.dat")).unwrap().len();
        let before = trades_len();
        history.store(&Evicted::Order(order(5))).expect("store");
        history
            .store(&Evicted::Trades {
                market: 4,
                trades: trades.clone(),
            })
            .expect("store");
        assert_eq!(trades_len(), before);
        assert_eq!(history.trades(4).expect("read"), Some(trades.clone()));
        // Different trades for the market (never from one journal) take a
        // new record, and the index follows it.
        let fewer: Vec<Trade> = Vec::new();
        history
            .store(&Evicted::Trades {
                market: 4,
                trades: fewer.clone(),
            })
            .expect("store");
        assert!(trades_len() > before);
        assert_eq!(history.trades(4).expect("read"), Some(fewer));
    }

    /// Paging through more stored fills than one scan looks at reaches
    /// every one, newest first, each cursor older than the one before,
    /// with and without a market filter that matches rarely.
    #[test]
    fn paging_reaches_every_stored_fill_past_the_scan_limit() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        let n = SCAN_MAX as u64 * 2 + 37;
        let mut prev = 0;
        for id in 1..=n {
            // Account 1's fills are the odd ids; market 9 every 7,000th.
            let account = if id % 2 == 1 { 1 } else { 2 };
            let market = if id % 14_000 == 1 { 9 } else { 3 };
            history
                .store(&Evicted::Fill {
                    fill: fill(id, account, market),
                    prev: if account == 1 { prev } else { 0 },
                })
                .expect("store");
            if account == 1 {
                prev = id;
            }
        }
        for (market, wanted) in [(None, 500), (Some(9), 2)] {
            let rest = Rest {
                from: prev,
                wanted,
                market,
            };
            let mut seen = Vec::new();
            let mut cursor = None;
            for _ in 0..1_000 {
                let (page, next) = history.fills_page(&rest, cursor).expect("page");
                seen.extend(page.iter().map(|f| f.id));
                if let (Some(c), Some(n)) = (cursor, next) {
                    assert!(n < c, "the cursor moves older: {n} after {c}");
                }
                cursor = next;
                if cursor.is_none() {
                    break;
                }
            }
            assert!(cursor.is_none(), "paging ended");
            let expected: Vec<u64> = (1..=n)
                .rev()
                .filter(|id| id % 2 == 1 && market.is_none_or(|_| id % 14_000 == 1))
                .collect();
            assert_eq!(seen, expected, "market {market:?}");
        }
    }

    #[test]
    fn readers_wait_for_the_writer_and_never_trust_a_failed_store() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = std::sync::Arc::new(History::open(dir.path()).expect("open"));
        history.mark_sent(7);
        assert_eq!(history.sent(), 7);
        assert!(!history.wait_written(7, Duration::from_millis(10)));
        let writer = history.clone();
        let done = std::thread::spawn(move || writer.mark_written(7));
        assert!(history.wait_written(7, Duration::from_secs(60)));
        done.join().expect("writer");
        history.fail();
        assert!(history.failed());
        assert!(!history.wait_written(1, Duration::from_secs(5)));
    }

    #[test]
    fn a_damaged_slot_is_an_error_not_a_wrong_record() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        history.store(&Evicted::Order(order(1))).expect("store");
        let file = OpenOptions::new()
            .write(true)
            .open(dir.path().join("orders.dat"))
            .expect("open");
        file.write_all_at(&[0xff], 40).expect("flip");
        assert!(history.order(1).is_err());
        // Recorded, so the next open empties the store to be written anew.
        assert!(dir.path().join(DAMAGED).exists());
        drop(history);
        let history = History::open(dir.path()).expect("reopen");
        assert!(
            history.emptied().unwrap().contains("checksum"),
            "{:?}",
            history.emptied()
        );
        assert_eq!(history.order(1).expect("read"), None);
        assert!(!dir.path().join(DAMAGED).exists());
        // Set aside, not deleted: whoever wants to look finds it.
        let aside = dir.path().join("set-aside-1");
        assert!(aside.join("orders.dat").exists() && aside.join(DAMAGED).exists());
    }

    /// A whole record in the wrong place (another's slot copied over, a
    /// fill chain turned into a cycle, a market's trades index pointing at
    /// another's record) is damage, never the record asked for; a file
    /// cut while the store is open is damage at the next sync.
    #[test]
    fn records_in_the_wrong_place_and_files_cut_while_open_are_damage() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        history.store(&Evicted::Order(order(1))).expect("store");
        history.store(&Evicted::Order(order(2))).expect("store");
        let orders = OpenOptions::new()
            .read(true)
            .write(true)
            .open(dir.path().join("orders.dat"))
            .expect("open");
        let mut slot = vec![0u8; ORDER_SLOT];
        orders.read_exact_at(&mut slot, 0).expect("read");
        orders.write_all_at(&slot, ORDER_SLOT as u64).expect("copy");
        assert!(history.order(2).is_err(), "order 1 answered as order 2");
        // A fill whose chain goes to a newer fill: a cycle.
        history
            .store(&Evicted::Fill {
                fill: fill(3, 1, 1),
                prev: 5,
            })
            .expect("store");
        assert!(history.fill(3).is_err());
        history
            .store(&Evicted::Trades {
                market: 4,
                trades: vec![Trade {
                    trade_id: 1,
                    market: 5,
                    up_price: 50,
                    count: 1,
                    taker_outcome: Outcome::Up,
                    taker_action: Action::Buy,
                    ts_ms: 1,
                }],
            })
            .expect("store");
        assert!(history.trades(4).is_err());
        assert!(dir.path().join(DAMAGED).exists());
        // An index entry pointed past the records, at zeros: damage, not a
        // market without trades.
        history
            .trades
            .write_all_at(&[0u8; 64], 4096)
            .expect("zeros");
        history.set_trades_record(6, 4096, 64).expect("index");
        let err = history
            .trades(6)
            .expect_err("an empty record read as no trades");
        assert!(err.to_string().contains("empty record"), "{err}");
        assert_eq!(history.trades(7).expect("no entry"), None);
        drop(history);

        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        history.store(&Evicted::Order(order(3))).expect("store");
        history.sync(1).expect("sync");
        orders_cut(dir.path(), ORDER_SLOT as u64);
        assert!(
            history.sync(2).is_err(),
            "a cut file recorded as the new length"
        );
        assert_eq!(history.synced(), 1);
        assert!(dir.path().join(DAMAGED).exists());
    }

    /// A store synced past the journal's end is taken as synced through
    /// that end, and its next sync is recorded (a `synced` above every
    /// seq to come was never written again: the length check was off).
    #[test]
    fn a_store_synced_past_the_journal_is_synced_through_its_end() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        history.store(&Evicted::Order(order(1))).expect("store");
        history.sync(1_000_000).expect("sync");
        drop(history);
        let history = History::open_with(dir.path(), true, 5).expect("reopen");
        assert_eq!((history.synced(), history.emptied()), (5, None));
        assert!(history.order(1).expect("read").is_some());
        history.store(&Evicted::Order(order(2))).expect("store");
        history.sync(7).expect("sync");
        drop(history);
        let (seq, lengths) = synced_through(dir.path());
        assert_eq!(seq, 7);
        assert_eq!(lengths.expect("lengths")[0], 2 * ORDER_SLOT as u64);
    }

    fn orders_cut(dir: &Path, len: u64) {
        OpenOptions::new()
            .write(true)
            .open(dir.join("orders.dat"))
            .expect("open")
            .set_len(len)
            .expect("cut");
    }

    /// `synced` records each file's length: a file shorter at open (cut,
    /// or deleted and made anew) empties the store and sets `synced` to 0,
    /// so the node replays from seq 1; a `synced` of an older build (the
    /// seq alone) is trusted as before.
    #[test]
    fn a_file_shorter_than_synced_empties_the_store() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        for id in 1..=3 {
            history.store(&Evicted::Order(order(id))).expect("store");
        }
        history.sync(9).expect("sync");
        drop(history);
        let history = History::open(dir.path()).expect("reopen");
        assert_eq!((history.synced(), history.emptied()), (9, None));
        assert_eq!(history.order(3).expect("read"), Some(order(3)));
        drop(history);

        let orders = dir.path().join("orders.dat");
        OpenOptions::new()
            .write(true)
            .open(&orders)
            .expect("open")
            .set_len(ORDER_SLOT as u64)
            .expect("cut");
        // A journal whose first segments were removed cannot write the
        // store anew: it is kept as it is (what is left still reads).
        let history = History::open_with(dir.path(), false, u64::MAX).expect("reopen");
        assert_eq!((history.synced(), history.emptied()), (9, None));
        assert_eq!(history.order(1).expect("read"), Some(order(1)));
        drop(history);
        let history = History::open(dir.path()).expect("reopen");
        assert_eq!(history.synced(), 0);
        assert!(history.emptied().unwrap().contains("orders.dat"));
        assert_eq!(history.order(1).expect("read"), None);
        drop(history);

        // An older build's `synced`: the seq alone.
        let history = History::open(dir.path()).expect("open");
        history.store(&Evicted::Order(order(2))).expect("store");
        drop(history);
        fs::write(dir.path().join("synced"), 5u64.to_le_bytes()).expect("old synced");
        let history = History::open(dir.path()).expect("reopen");
        assert_eq!((history.synced(), history.emptied()), (5, None));
    }

    /// A record that fills its slot to the last byte is stored and reads
    /// back; one a byte larger is refused, never cut to fit.
    #[test]
    fn a_record_filling_its_slot_is_kept_and_a_larger_one_refused() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        let listed = |market, ticker: &str| Event::MarketListed {
            market,
            ticker: ticker.into(),
            series: "s".into(),
        };
        let fits = "f".repeat(TICKER_SLOT - SLOT_HEAD);
        history
            .store_events(&[listed(1, &fits)])
            .expect("a record the size of its slot");
        assert_eq!(history.ticker(1).expect("read"), Some(fits));
        let larger = "l".repeat(TICKER_SLOT - SLOT_HEAD + 1);
        let err = history
            .store_events(&[listed(2, &larger)])
            .expect_err("a record larger than its slot");
        assert!(err.to_string().contains("does not fit"), "{err}");
        assert_eq!(history.ticker(2).expect("read"), None);
    }

    /// A slot whose length or checksum field alone was zeroed is damage,
    /// not an empty slot ("not found" for a record that was lost).
    #[test]
    fn a_slot_with_a_zeroed_length_or_checksum_is_damage() {
        for field in [0..4, 4..8] {
            let dir = tempfile::tempdir().expect("temp dir");
            let history = History::open(dir.path()).expect("open");
            history.store(&Evicted::Order(order(1))).expect("store");
            history
                .orders
                .write_all_at(&vec![0u8; field.len()], field.start as u64)
                .expect("zero");
            assert!(history.order(1).is_err(), "bytes {field:?} zeroed");
            assert!(dir.path().join(DAMAGED).exists());
        }
    }

    /// A file the reader cannot read (here a folder in its place) is an
    /// error, not the end of the file: never "not found".
    #[test]
    fn a_file_that_cannot_be_read_is_an_error_not_an_empty_store() {
        let dir = tempfile::tempdir().expect("temp dir");
        drop(History::open(dir.path()).expect("open"));
        fs::remove_file(dir.path().join("orders.dat")).expect("remove");
        fs::create_dir(dir.path().join("orders.dat")).expect("a folder");
        let history = History::open_read(dir.path()).expect("open to read");
        assert!(history.order(1).is_err());
    }

    /// A store set aside twice goes to a second folder, the first left as
    /// it was: both read back what they held.
    #[test]
    fn a_store_set_aside_twice_keeps_both() {
        let dir = tempfile::tempdir().expect("temp dir");
        for id in 1..=2 {
            let history = History::open(dir.path()).expect("open");
            history.store(&Evicted::Order(order(id))).expect("store");
            history.missing("a record");
        }
        let history = History::open(dir.path()).expect("reopen");
        let second = dir.path().join("set-aside-2");
        assert!(
            history
                .emptied()
                .is_some_and(|why| why.contains(&second.display().to_string())),
            "{:?}",
            history.emptied()
        );
        for (id, aside) in [(1, "set-aside-1"), (2, "set-aside-2")] {
            let kept = History::open_read(&dir.path().join(aside)).expect("open to read");
            for other in 1..=2 {
                let expected = (other == id).then(|| order(other));
                assert_eq!(kept.order(other).expect("read"), expected, "{aside}");
            }
        }
    }

    /// A file removed since the store was synced counts as cut to 0 bytes:
    /// the store is set aside and written anew, the start goes on.
    #[test]
    fn a_file_removed_since_the_sync_empties_the_store() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        history
            .store(&Evicted::Fill {
                fill: fill(1, 1, 1),
                prev: 0,
            })
            .expect("store");
        history.sync(3).expect("sync");
        drop(history);
        fs::remove_file(dir.path().join("fills.dat")).expect("remove");
        let history = History::open(dir.path()).expect("reopen");
        assert_eq!(history.synced(), 0);
        assert!(
            history
                .emptied()
                .is_some_and(|why| why.contains("fills.dat has 0 bytes")),
            "{:?}",
            history.emptied()
        );
    }

    /// A file whose length cannot be read (a link looping on itself) fails
    /// the open with that error: it is not taken for a file cut short, and
    /// nothing is set aside.
    #[test]
    fn a_file_whose_length_cannot_be_read_fails_the_open() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        history.store(&Evicted::Order(order(1))).expect("store");
        history.sync(1).expect("sync");
        drop(history);
        let orders = dir.path().join("orders.dat");
        fs::remove_file(&orders).expect("remove");
        std::os::unix::fs::symlink(&orders, &orders).expect("a looping link");
        assert!(History::open(dir.path()).is_err());
        assert!(!dir.path().join("set-aside-1").exists());
    }

    /// Other trades for a market, of the same length as its record (never
    /// from one journal), take a new record: the stored one is kept only
    /// when its bytes are the same.
    #[test]
    fn other_trades_of_the_same_length_take_a_new_record() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        let trades = |up_price| {
            vec![Trade {
                trade_id: 1,
                market: 4,
                up_price,
                count: 2,
                taker_outcome: Outcome::Up,
                taker_action: Action::Buy,
                ts_ms: 77,
            }]
        };
        for up_price in [61, 62] {
            history
                .store(&Evicted::Trades {
                    market: 4,
                    trades: trades(up_price),
                })
                .expect("store");
            assert_eq!(history.trades(4).expect("read"), Some(trades(up_price)));
        }
    }

    /// A cursor naming another account's fill pages this account's chain
    /// from its head, passing over what is not older than the cursor (the
    /// other account's fills never show); a cursor of this account's
    /// resumes right below it, reading none of the fills above it again
    /// (here one of them damaged).
    #[test]
    fn a_page_resumes_below_a_cursor_of_its_own_account_only() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        // Account 1's fills chain 1 <- 4 <- 6 <- 8; account 2's 2 <- 5.
        for (id, account, prev) in [
            (1, 1, 0),
            (2, 2, 0),
            (4, 1, 1),
            (5, 2, 2),
            (6, 1, 4),
            (8, 1, 6),
        ] {
            history
                .store(&Evicted::Fill {
                    fill: fill(id, account, 7),
                    prev,
                })
                .expect("store");
        }
        let rest = Rest {
            from: 8,
            wanted: 10,
            market: None,
        };
        let ids = |cursor| {
            let (page, next) = history.fills_page(&rest, cursor).expect("page");
            (page.iter().map(|f| f.id).collect::<Vec<_>>(), next)
        };
        assert_eq!(ids(Some(5)), (vec![4, 1], None));
        history
            .fills
            .write_all_at(&[0xff], FILL_SLOT as u64 * 5 + 20)
            .expect("damage fill 6");
        assert!(history.fill(6).is_err());
        assert_eq!(ids(Some(4)), (vec![1], None));
    }

    /// A page whose filter matches nothing among the next `SCAN_MAX`
    /// fills stops there, answering none and the last fill it looked at;
    /// the next page goes on below it.
    #[test]
    fn a_page_looks_at_scan_max_fills_at_most() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        let n = SCAN_MAX as u64 + 10;
        for id in 1..=n {
            let market = if id == 1 { 9 } else { 3 };
            history
                .store(&Evicted::Fill {
                    fill: fill(id, 1, market),
                    prev: id - 1,
                })
                .expect("store");
        }
        let rest = Rest {
            from: n,
            wanted: 10,
            market: Some(9),
        };
        let (page, next) = history.fills_page(&rest, None).expect("page");
        let last_looked = n + 1 - SCAN_MAX as u64;
        assert!(page.is_empty(), "{page:?}");
        assert_eq!(next, Some(last_looked));
        let (page, next) = history.fills_page(&rest, next).expect("page");
        assert_eq!((page, next), (vec![fill(1, 1, 9)], None));
    }

    /// An index entry naming a record shorter than a record's head (its
    /// length field damaged) is damage, answered as an error.
    #[test]
    fn an_index_entry_shorter_than_a_record_head_is_damage() {
        let dir = tempfile::tempdir().expect("temp dir");
        let history = History::open(dir.path()).expect("open");
        history
            .store(&Evicted::Trades {
                market: 4,
                trades: Vec::new(),
            })
            .expect("store");
        let (at, _) = history.trades_record(4).expect("index").expect("entry");
        for len in [0u64, 4] {
            history.set_trades_record(4, at, len).expect("index");
            let err = history
                .trades(4)
                .expect_err("a record shorter than its head");
            assert!(err.to_string().contains("cut short"), "{err}");
        }
    }
}
