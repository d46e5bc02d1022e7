//! The auditor's scan: read a journal record by record (read-only, safe on a
//! journal the server is writing), decode each command, and, unless told
//! `--raw`, replay it alongside so each record comes with its reply, its
//! events and the state it left. Selections are checked here.
//!
//! Replaying alongside starts from the newest valid snapshot that lies wholly
//! before the first selected record (seq below `--from-seq`, time below
//! `--from-time`), else from the journal's first record; the commands before
//! the selection are applied but not shown.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use journal::format::{SegmentHeader, SEGMENT_HEADER_LEN};
use journal::Reader;
use replay::{codec, snapshot};
use sequencer::{Command, Event, Reply, Stamped, State};

use crate::describe::{kind_names, kind_of};
use crate::timefmt::parse_time;

/// Where the journal (and its snapshots) are.
#[derive(Args, Clone, Debug)]
pub struct Source {
    /// Data directory of the venue: the journal is DIR/journal, the
    /// snapshots DIR/snapshots. Default `updown-data`, as for `serve`.
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// The journal directory itself (instead of --data-dir; no snapshots
    /// unless --snapshots is given).
    #[arg(long, value_name = "DIR", conflicts_with = "data_dir")]
    pub journal: Option<PathBuf>,
    /// Snapshot directory (default DIR/snapshots with --data-dir).
    #[arg(long, value_name = "DIR")]
    pub snapshots: Option<PathBuf>,
    /// Never start from a snapshot: rebuild from the journal's first record.
    #[arg(long)]
    pub no_snapshots: bool,
}

impl Source {
    pub fn journal_dir(&self) -> PathBuf {
        match (&self.journal, &self.data_dir) {
            (Some(j), _) => j.clone(),
            (None, Some(d)) => d.join("journal"),
            (None, None) => PathBuf::from("updown-data").join("journal"),
        }
    }

    pub fn snapshot_dir(&self) -> Option<PathBuf> {
        if self.no_snapshots {
            return None;
        }
        if let Some(s) = &self.snapshots {
            return Some(s.clone());
        }
        match (&self.journal, &self.data_dir) {
            (Some(_), _) => None,
            (None, Some(d)) => Some(replay::rebuild::default_snapshot_dir(d)),
            (None, None) => Some(PathBuf::from("updown-data").join("snapshots")),
        }
    }

    /// The journal directory, checked to exist.
    pub fn checked_journal_dir(&self) -> Result<PathBuf> {
        let dir = self.journal_dir();
        if !dir.is_dir() {
            bail!(
                "no journal at {} (give --data-dir DIR or --journal DIR)",
                dir.display()
            );
        }
        Ok(dir)
    }
}

/// Which records to show. Selections of different kinds must all hold; the
/// `--kind` values are alternatives.
#[derive(Args, Clone, Debug, Default)]
pub struct Selection {
    /// First seq shown.
    #[arg(long, value_name = "SEQ")]
    pub from_seq: Option<u64>,
    /// Last seq shown.
    #[arg(long, value_name = "SEQ")]
    pub to_seq: Option<u64>,
    /// First time shown: epoch ms or RFC 3339 (2026-11-21T21:00:00Z).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub from_time: Option<u64>,
    /// Last time shown (inclusive): epoch ms or RFC 3339.
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub to_time: Option<u64>,
    /// Command kinds (place_order, cancel_order, tick, ...); repeat or
    /// separate with commas.
    #[arg(long, value_name = "KIND", value_delimiter = ',')]
    pub kind: Vec<String>,
    /// Records that concern this account: its admin commands, commands
    /// through its keys, and commands whose events touch it (fills of its
    /// resting orders, settlement of its positions, ...).
    #[arg(long, value_name = "ID")]
    pub account: Option<u32>,
    /// Records that concern a key, given as its key_id or its registry
    /// index: its issue, revocation and limits, orders placed through it and
    /// what happened to them.
    #[arg(long, value_name = "KEY")]
    pub key: Option<String>,
    /// Records that concern a market (ticker): orders in it, cancels of its
    /// orders, and commands whose events touch it (listing, open, close,
    /// settlement, trades).
    #[arg(long, value_name = "TICKER")]
    pub market: Option<String>,
    /// Records that concern an order: its placement, cancels of it, fills of it.
    #[arg(long, value_name = "ID")]
    pub order_id: Option<u64>,
    /// Records that concern orders with this client_order_id (of any
    /// account; add --account to narrow).
    #[arg(long, value_name = "ID")]
    pub client_order_id: Option<String>,
    /// Do not replay alongside: ids are not resolved, no replies or events,
    /// and the selections that need the state (--account, --key, --market,
    /// --order-id) are refused. Fast, and works on a journal whose start
    /// no snapshot covers.
    #[arg(long)]
    pub raw: bool,
}

impl Selection {
    /// True when a selection beyond seq and time ranges is given.
    pub fn has_content_filter(&self) -> bool {
        !self.kind.is_empty()
            || self.account.is_some()
            || self.key.is_some()
            || self.market.is_some()
            || self.order_id.is_some()
            || self.client_order_id.is_some()
    }

    fn compile(&self) -> Result<Filter> {
        let mut kinds = Vec::new();
        for name in &self.kind {
            match kind_of(name.trim()) {
                Some(k) => kinds.push(k),
                None => bail!(
                    "unknown kind {name:?}; kinds are {}",
                    kind_names().join(", ")
                ),
            }
        }
        if self.raw {
            for (given, flag) in [
                (self.account.is_some(), "--account"),
                (self.key.is_some(), "--key"),
                (self.market.is_some(), "--market"),
                (self.order_id.is_some(), "--order-id"),
            ] {
                if given {
                    bail!("{flag} needs the state replayed alongside; drop --raw");
                }
            }
        }
        if let (Some(a), Some(b)) = (self.from_seq, self.to_seq) {
            if a > b {
                bail!("--from-seq {a} is after --to-seq {b}");
            }
        }
        if let (Some(a), Some(b)) = (self.from_time, self.to_time) {
            if a > b {
                bail!("--from-time is after --to-time");
            }
        }
        Ok(Filter {
            kinds,
            account: self.account,
            key: self.key.clone().map(|k| {
                let idx = k.parse().ok();
                (k, idx)
            }),
            market: self.market.clone(),
            order_id: self.order_id,
            client_order_id: self.client_order_id.clone(),
        })
    }
}

/// A selection made ready to test records.
#[derive(Debug)]
struct Filter {
    kinds: Vec<u16>,
    account: Option<u32>,
    /// The text given and, when it is a number, the key index it may mean.
    key: Option<(String, Option<u32>)>,
    market: Option<String>,
    order_id: Option<u64>,
    client_order_id: Option<String>,
}

/// What replaying one command alongside produced.
pub struct Applied<'a> {
    pub reply: &'a Reply,
    pub events: &'a [Event],
    /// The state just after the command.
    pub state: &'a State,
}

/// One record for a sink.
pub struct Item<'a> {
    pub seq: u64,
    pub ts_ms: u64,
    pub kind: u16,
    /// Segment index and byte offset of the record.
    pub segment: u64,
    pub offset: u64,
    pub stamped: &'a Stamped,
    /// `None` in raw mode.
    pub applied: Option<Applied<'a>>,
}

/// Receives the selected records.
pub trait Sink {
    fn item(&mut self, item: &Item<'_>) -> Result<()>;
    /// The scan reached the current end of the journal (in follow mode it
    /// will look again).
    fn idle(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Records read per segment: (records, first seq, last seq, byte offset
/// where the last of them ends).
pub type SegmentCounts = BTreeMap<u64, (u64, u64, u64, u64)>;

/// A scan over a journal with a selection.
pub struct Scanner {
    dir: PathBuf,
    reader: Reader,
    state: Option<State>,
    events: Vec<Event>,
    filter: Filter,
    from_seq: u64,
    to_seq: u64,
    from_time: u64,
    to_time: u64,
    /// Seq of the snapshot the state started from.
    pub from_snapshot: Option<u64>,
    /// Every record read, by segment.
    pub segments: SegmentCounts,
    /// Records read and records handed to the sink.
    pub read: u64,
    pub matched: u64,
}

impl Scanner {
    /// Opens a scan of `source` for `selection`; `start_seq` (if given)
    /// moves the start past `--from-seq` (for `tail -n`).
    pub fn open(source: &Source, selection: &Selection, start_seq: Option<u64>) -> Result<Scanner> {
        let filter = selection.compile()?;
        let dir = source.checked_journal_dir()?;
        let from_seq = selection.from_seq.unwrap_or(0).max(start_seq.unwrap_or(0));
        let from_time = selection.from_time.unwrap_or(0);
        let mut reader = Reader::open(&dir)?;
        let (state, from_snapshot) = if selection.raw {
            (None, None)
        } else {
            let snap = source.snapshot_dir().and_then(|d| {
                newest_snapshot_before(
                    &d,
                    &dir,
                    (from_seq > 0).then_some(from_seq),
                    selection.from_time,
                )
            });
            let from = snap.as_ref().map(|s| s.last_seq);
            (Some(snap.unwrap_or_default()), from)
        };
        let seek = match &state {
            Some(s) => s.last_seq + 1,
            None => from_seq.max(1),
        };
        reader.seek(seek)?;
        Ok(Scanner {
            dir,
            reader,
            state,
            events: Vec::with_capacity(64),
            filter,
            from_seq,
            to_seq: selection.to_seq.unwrap_or(u64::MAX),
            from_time,
            to_time: selection.to_time.unwrap_or(u64::MAX),
            from_snapshot,
            segments: BTreeMap::new(),
            read: 0,
            matched: 0,
        })
    }

    /// Hands every selected record to `sink` until the end of the journal
    /// (or of the selection). With `follow`, waits at the end and polls
    /// every so long for more, until the selection's end (never without one).
    pub fn run(&mut self, sink: &mut dyn Sink, follow: Option<Duration>) -> Result<()> {
        loop {
            let record = match self.reader.next() {
                Ok(Some(r)) => r,
                Ok(None) => {
                    sink.idle()?;
                    match follow {
                        Some(poll) => {
                            std::thread::sleep(poll);
                            continue;
                        }
                        None => return Ok(()),
                    }
                }
                Err(e) => {
                    let after = match self.state.as_ref().map(|s| s.last_seq) {
                        Some(seq) if seq > 0 => format!(" after seq {seq}"),
                        _ => String::new(),
                    };
                    return Err(anyhow!(e)
                        .context(format!("reading the journal {}{after}", self.dir.display())));
                }
            };
            let (seq, kind, segment, offset) =
                (record.seq, record.kind, record.segment, record.offset);
            if let Some(state) = &self.state {
                if seq != state.last_seq + 1 {
                    bail!(
                        "cannot replay alongside: the state needs seq {} next but the journal {} \
                         has seq {seq} there (its start was removed and no snapshot covers it); \
                         use --raw",
                        state.last_seq + 1,
                        self.dir.display()
                    );
                }
            }
            self.read += 1;
            let end = offset + journal::format::record_len(record.payload.len()) as u64;
            let entry = self.segments.entry(segment).or_insert((0, seq, seq, end));
            entry.0 += 1;
            entry.2 = seq;
            entry.3 = end;
            // In raw mode a record outside the kinds is skipped undecoded,
            // unless its time is needed to know where to stop.
            if self.state.is_none()
                && !self.filter.kinds.is_empty()
                && !self.filter.kinds.contains(&kind)
                && self.to_time == u64::MAX
                && seq <= self.to_seq
            {
                continue;
            }
            let stamped = codec::decode(seq, record.payload).map_err(|e| {
                anyhow!(
                    "{e} (segment {}, byte offset {offset})",
                    journal::segment_path(&self.dir, segment).display()
                )
            })?;
            if seq > self.to_seq || stamped.ts_ms > self.to_time {
                // Times never go backwards: nothing later can be selected.
                sink.idle()?;
                return Ok(());
            }
            let reply = match &mut self.state {
                Some(state) => {
                    // Replies and events past a newer build's rules would be
                    // this build's guesses, not what the venue did.
                    replay::rebuild::known_rules(&stamped)?;
                    self.events.clear();
                    Some(state.apply(&stamped, &mut self.events))
                }
                None => None,
            };
            if seq < self.from_seq || stamped.ts_ms < self.from_time {
                continue;
            }
            let applied = match (&reply, &self.state) {
                (Some(reply), Some(state)) => Some(Applied {
                    reply,
                    events: &self.events,
                    state,
                }),
                _ => None,
            };
            let item = Item {
                seq,
                ts_ms: stamped.ts_ms,
                kind,
                segment,
                offset,
                stamped: &stamped,
                applied,
            };
            if self.filter.matches(&item) {
                self.matched += 1;
                sink.item(&item)?;
            }
        }
    }
}

/// The newest valid snapshot holding only commands before `seq` and before
/// `time`, whichever are given (none when neither is: the scan starts at
/// the first record), taken from the journal in `journal_dir`.
fn newest_snapshot_before(
    dir: &Path,
    journal_dir: &Path,
    seq: Option<u64>,
    time: Option<u64>,
) -> Option<State> {
    if seq.is_none() && time.is_none() {
        return None;
    }
    for (snap_seq, path) in snapshot::list(dir) {
        if seq.is_some_and(|seq| snap_seq >= seq) {
            continue;
        }
        match snapshot::load_for(&path, journal_dir) {
            Ok((state, _)) if time.is_none_or(|time| state.now_ms < time) => return Some(state),
            Ok(_) => {}
            Err(e) => eprintln!("warning: skipping {e}"),
        }
    }
    None
}

impl Filter {
    fn matches(&self, item: &Item<'_>) -> bool {
        if !self.kinds.is_empty() && !self.kinds.contains(&item.kind) {
            return false;
        }
        let command = &item.stamped.command;
        let applied = item.applied.as_ref();
        if let Some(cid) = &self.client_order_id {
            let named = matches!(command, Command::PlaceOrder { order, .. }
                if order.client_order_id.as_str() == cid);
            // Its events name the order, or its reply does: a cancel that
            // found the order ended (it changes nothing and emits nothing)
            // and a place retried are answered with the order.
            let touched = applied.is_some_and(|a| {
                matches!(a.reply, Reply::Order { order, .. } if order.client_order_id.as_str() == cid)
                    || a.events.iter().any(|e| {
                        matches!(e, Event::Order(o) if a.state.order(o.id)
                            .is_some_and(|o| o.client_order_id.as_str() == cid))
                    })
            });
            if !named && !touched {
                return false;
            }
        }
        // The remaining selections need the state (refused in raw mode).
        let Some(a) = applied else {
            return true;
        };
        if let Some(account) = self.account {
            if !concerns_account(command, a, account) {
                return false;
            }
        }
        if let Some((text, idx)) = &self.key {
            if !concerns_key(command, a, text, *idx) {
                return false;
            }
        }
        if let Some(ticker) = &self.market {
            if !concerns_market(command, a, ticker) {
                return false;
            }
        }
        if let Some(id) = self.order_id {
            if !concerns_order(command, a, id) {
                return false;
            }
        }
        true
    }
}

fn key_account(state: &State, key: u32) -> Option<u32> {
    state.key(key).map(|k| k.account)
}

fn concerns_account(command: &Command, a: &Applied<'_>, account: u32) -> bool {
    let direct = match command {
        Command::Deposit { account: x, .. }
        | Command::Withdraw { account: x, .. }
        | Command::SetAccountFlag { account: x, .. }
        | Command::SetAccountRiskCap { account: x, .. } => *x == account,
        Command::IssueKey(k) => k.account == account,
        Command::RevokeKey { key_id } | Command::SetKeyLimits { key_id, .. } => a
            .state
            .key_by_id(key_id)
            .is_some_and(|k| k.account == account),
        Command::PlaceOrder { key, .. }
        | Command::CancelOrder { key, .. }
        | Command::CancelAll { key, .. } => key_account(a.state, *key) == Some(account),
        _ => false,
    };
    direct
        || matches!(a.reply, Reply::AccountCreated { account: x } if *x == account)
        || a.events.iter().any(|e| e.account() == Some(account))
}

fn concerns_key(command: &Command, a: &Applied<'_>, text: &str, idx: Option<u32>) -> bool {
    let is = |i: u32| Some(i) == idx || a.state.key(i).is_some_and(|k| k.key_id == text);
    let direct = match command {
        Command::PlaceOrder { key, .. }
        | Command::CancelOrder { key, .. }
        | Command::CancelAll { key, .. } => is(*key),
        Command::IssueKey(k) => k.key_id == text,
        Command::RevokeKey { key_id } | Command::SetKeyLimits { key_id, .. } => {
            key_id == text || a.state.key_ids.get(key_id).is_some_and(|&i| is(i))
        }
        _ => false,
    };
    direct
        || matches!(a.reply, Reply::KeyIssued { key } if is(*key))
        || a.events.iter().any(|e| match e {
            Event::Key(k) => is(k.idx),
            Event::Order(o) => a.state.order(o.id).is_some_and(|o| is(o.key)),
            _ => false,
        })
}

fn concerns_market(command: &Command, a: &Applied<'_>, ticker: &str) -> bool {
    let id = a.state.market_ids.get(ticker).copied();
    let direct = match command {
        Command::PlaceOrder { order, .. } => Some(order.market) == id,
        Command::CancelOrder { order_id, .. } => {
            id.is_some() && a.state.order(*order_id).map(|o| o.market) == id
        }
        Command::CancelAll { market, .. } => market.as_deref() == Some(ticker),
        _ => false,
    };
    direct || (id.is_some() && a.events.iter().any(|e| e.market() == id))
}

fn concerns_order(command: &Command, a: &Applied<'_>, id: u64) -> bool {
    matches!(command, Command::CancelOrder { order_id, .. } if *order_id == id)
        || match a.reply {
            Reply::Order { order, .. } => order.id == id,
            Reply::Canceled { order_ids } => order_ids.contains(&id),
            Reply::OrderInHistory { order_id, .. } => *order_id == id,
            _ => false,
        }
        || a.events.iter().any(|e| match e {
            Event::Order(o) => o.id == id,
            Event::Fill(f) => f.order == id,
            _ => false,
        })
}

/// A segment file as found on disk.
#[derive(Debug, Clone)]
pub struct SegmentInfo {
    pub index: u64,
    pub path: PathBuf,
    pub bytes: u64,
    /// From the header; `None` when the header is unreadable.
    pub first_seq: Option<u64>,
    pub header_error: Option<String>,
}

/// The segment files of a journal directory, in index order.
pub fn segments(dir: &Path) -> Result<Vec<SegmentInfo>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(digits) = name.strip_suffix(".seg") else {
            continue;
        };
        if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let index: u64 = digits.parse()?;
        let path = entry.path();
        let bytes = entry.metadata()?.len();
        let mut header = [0u8; SEGMENT_HEADER_LEN];
        let decoded = File::open(&path)
            .and_then(|mut f| f.read_exact(&mut header))
            .map_err(|e| e.to_string())
            .and_then(|()| SegmentHeader::decode(&header));
        let (first_seq, header_error) = match decoded {
            Ok(h) => (Some(h.first_seq), None),
            Err(e) => (None, Some(e)),
        };
        found.push(SegmentInfo {
            index,
            path,
            bytes,
            first_seq,
            header_error,
        });
    }
    found.sort_by_key(|s| s.index);
    Ok(found)
}

/// The last seq of the journal, reading only its last segments. Damage
/// after a whole record of the last segment (a torn tail after a crash,
/// most often) ends the count there: the records before it are the last
/// ones that can be shown, and the scan that shows them reports the
/// damage after them.
pub fn last_seq(dir: &Path) -> Result<Option<u64>> {
    let segs = segments(dir)?;
    for (i, seg) in segs.iter().enumerate().rev() {
        let Some(first) = seg.first_seq else { continue };
        let mut reader = Reader::open(dir)?;
        reader.seek(first)?;
        let mut last = None;
        loop {
            match reader.next() {
                Ok(Some(r)) => last = Some(r.seq),
                Ok(None) => break,
                Err(_) if last.is_some() => break,
                // Damage before any whole record of this segment (a crash
                // at a roll): the segment before ends the count.
                Err(_) if i > 0 => break,
                Err(e) => return Err(e.into()),
            }
        }
        if last.is_some() {
            return Ok(last);
        }
    }
    Ok(None)
}
