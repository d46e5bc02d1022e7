//! `updown replay` and `updown snapshot`: what the venue looked like at a
//! moment, rebuilt from the journal (from the newest valid snapshot not past
//! that moment), with exports in the REST shapes, a comparison of two
//! journals event by event, and snapshots written offline.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use gateway::api::json as rest;
use journal::Reader;
use replay::{codec, replay_with, snapshot, ReplayOutcome, Until};
use sequencer::hash::stable_hash;
use sequencer::query::{BalanceView, PositionView};
use sequencer::state::position_parts;
use sequencer::types::MarketStatus;
use sequencer::wire::dollars;
use sequencer::{Command, State};
use serde_json::{json, Value};

use crate::describe::summary;
use crate::scan::Source;
use crate::timefmt::{iso, parse_time};
use crate::Finding;

#[derive(Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    source: Source,
    /// Rebuild the state as of this seq (inclusive).
    #[arg(long, value_name = "SEQ", conflicts_with = "until_time")]
    until_seq: Option<u64>,
    /// Rebuild the state as of this time: every command stamped at or
    /// before it (epoch ms or RFC 3339).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    until_time: Option<u64>,
    /// Export a market's order book as GET /v1/markets/{ticker}/orderbook
    /// answers it (repeatable).
    #[arg(long, value_name = "TICKER")]
    book: Vec<String>,
    /// Levels per side in --book exports (all by default).
    #[arg(long, value_name = "N")]
    depth: Option<u32>,
    /// Export an account: balance, positions, and the orders and fills of
    /// the live state at that moment (every resting order, and those that
    /// ended within the history tail before it; older ones are in the
    /// venue's history store), in the records of the REST portfolio
    /// endpoints (repeatable).
    #[arg(long, value_name = "ID")]
    account: Vec<u32>,
    /// Export a market: its record, book and trades, as REST shows them
    /// (a settled market's trades past the history tail from the venue's
    /// history store, with --data-dir; `trades_from` says where they came
    /// from) (repeatable).
    #[arg(long, value_name = "TICKER")]
    market: Vec<String>,
    /// Compare with another journal (a data directory or a journal
    /// directory): report the first seq whose events differ, and the first
    /// whose command differs with the same events (another stamp, a
    /// client_order_id). IDENTICAL exits 0; DIFFERENT and SAME EVENTS exit
    /// 1. Always replays both from their first record.
    #[arg(long, value_name = "DIR")]
    compare: Option<PathBuf>,
    /// Show a progress line on stderr even when it is not a terminal.
    #[arg(long)]
    progress: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct SnapshotArgs {
    #[command(flatten)]
    source: Source,
    /// Snapshot the state as of this seq (default: the journal's end).
    #[arg(long, value_name = "SEQ")]
    until_seq: Option<u64>,
    /// Show a progress line on stderr even when it is not a terminal.
    #[arg(long)]
    progress: bool,
}

/// A progress line on stderr: seq reached, rate, time left.
/// `[#####-----]` for a share in percent, 30 marks wide.
fn bar(pct: f64) -> String {
    const WIDTH: usize = 30;
    let filled = ((pct / 100.0) * WIDTH as f64)
        .round()
        .clamp(0.0, WIDTH as f64) as usize;
    format!("[{}{}]", "#".repeat(filled), "-".repeat(WIDTH - filled))
}

struct Progress {
    enabled: bool,
    start: Instant,
    last: Instant,
    first_seq: Option<u64>,
    last_seq: u64,
    target: Option<u64>,
    calls: u64,
    label: &'static str,
}

impl Progress {
    fn new(forced: bool, target: Option<u64>, label: &'static str) -> Progress {
        let now = Instant::now();
        Progress {
            enabled: forced || std::io::stderr().is_terminal(),
            start: now,
            last: now,
            first_seq: None,
            last_seq: 0,
            target,
            calls: 0,
            label,
        }
    }

    fn tick(&mut self, seq: u64) {
        if !self.enabled {
            return;
        }
        self.first_seq.get_or_insert(seq);
        self.last_seq = seq;
        self.calls += 1;
        if !self.calls.is_multiple_of(4096) {
            return;
        }
        let now = Instant::now();
        if now.duration_since(self.last).as_millis() < 250 {
            return;
        }
        self.last = now;
        let done = seq + 1 - self.first_seq.unwrap_or(seq);
        let secs = now.duration_since(self.start).as_secs_f64().max(1e-9);
        let rate = done as f64 / secs;
        let label = self.label;
        match self.target.filter(|&t| t >= seq) {
            Some(target) => {
                let pct = done as f64 * 100.0 / (target + 1 - self.first_seq.unwrap_or(seq)) as f64;
                let left = (target - seq) as f64 / rate.max(1.0);
                eprint!(
                    "\r{label} {} seq {seq} of {target} ({pct:.0}%), {rate:.0} commands/s, {left:.0}s left   ",
                    bar(pct)
                );
            }
            None => eprint!("\r{label} seq {seq}, {rate:.0} commands/s   "),
        }
    }

    /// The last line: where the run ended, at what rate.
    fn finish(&self) {
        if !self.enabled || self.calls == 0 {
            return;
        }
        let secs = self.start.elapsed().as_secs_f64();
        eprintln!(
            "\r{} seq {}, {} commands in {secs:.2}s, {:.0} commands/s   ",
            self.label,
            self.last_seq,
            self.calls,
            self.calls as f64 / secs.max(1e-9)
        );
    }
}

fn until_of(seq: Option<u64>, time: Option<u64>) -> Until {
    match (seq, time) {
        (Some(s), _) => Until::Seq(s),
        (None, Some(t)) => Until::TimeMs(t),
        (None, None) => Until::End,
    }
}

/// Replays with a progress line; checks the target was reached.
fn rebuild(
    journal: &Path,
    snapshots: Option<&Path>,
    until: Until,
    forced_progress: bool,
) -> Result<(ReplayOutcome, f64)> {
    let target = match until {
        Until::Seq(s) => Some(s),
        _ => crate::scan::last_seq(journal).ok().flatten(),
    };
    let mut progress = Progress::new(forced_progress, target, "replaying:");
    let start = Instant::now();
    let outcome = replay_with(journal, snapshots, until, |stamped, _| {
        progress.tick(stamped.seq)
    })
    .with_context(|| format!("replaying {}", journal.display()))?;
    progress.finish();
    let secs = start.elapsed().as_secs_f64();
    for skipped in &outcome.skipped_snapshots {
        eprintln!("warning: skipped a snapshot: {skipped}");
    }
    let reached = outcome.state.last_seq;
    if let Some(from) = outcome.from_snapshot {
        // A snapshot is written only once the journal holds its seq: one
        // past the journal's last readable record means records are gone.
        // The end is read again, after the replay: on a live journal a
        // snapshot published during it is past an end read before.
        match crate::scan::last_seq(journal) {
            Err(e) => eprintln!(
                "warning: the end of the journal {} could not be read to check it against snapshot {from}: {e:#}",
                journal.display()
            ),
            Ok(end) if end.unwrap_or(0) < from => {
                let journal_end = end.unwrap_or(0);
                eprintln!(
                    "warning: the state comes from snapshot {from}, but the journal {} ends at seq \
                     {journal_end}: records {} .. {from}, acknowledged, are missing from it (a lost \
                     segment or tail; `updown journal verify` and `updown serve` refuse it)",
                    journal.display(),
                    journal_end + 1
                );
            }
            Ok(_) => {}
        }
    }
    match until {
        Until::Seq(s) if reached < s => bail!(
            "the journal {} ends at seq {reached}, before seq {s}",
            journal.display()
        ),
        Until::TimeMs(t) if reached == 0 => bail!(
            "the journal {} has no command at or before {} ({t})",
            journal.display(),
            iso(t)
        ),
        _ => {}
    }
    Ok((outcome, secs))
}

pub fn run(args: ReplayArgs) -> Result<()> {
    let journal = args.source.checked_journal_dir()?;
    let until = until_of(args.until_seq, args.until_time);
    if let Some(other) = &args.compare {
        return compare(
            &journal,
            &other_journal(other),
            until,
            args.progress,
            args.json,
        );
    }
    let snapshots = args.source.snapshot_dir();
    let (outcome, secs) = rebuild(&journal, snapshots.as_deref(), until, args.progress)?;
    let state = &outcome.state;
    // Exports first, so an unknown ticker or account fails before anything
    // is printed.
    let mut exports = Vec::new();
    for ticker in &args.book {
        let book = state
            .query_orderbook(ticker, args.depth)
            .map_err(|_| anyhow!("no market {ticker} as of seq {}", state.last_seq))?;
        exports.push(json!({ "orderbook": rest::orderbook(&book) }));
    }
    for &id in &args.account {
        exports.push(account_export(state, id)?);
    }
    // A settled market's trades leave for the venue's history store one
    // history tail after settlement: read from there (read only) when the
    // data directory is given.
    let history = args
        .source
        .data_dir
        .as_ref()
        .map(|d| replay::history::History::open_read(&d.join("history")));
    for ticker in &args.market {
        exports.push(market_export(state, ticker, history.as_ref())?);
    }
    let summary = summary_json(&outcome, &journal, secs);
    if exports.is_empty() {
        if args.json {
            println!("{summary}");
        } else {
            print!("{}", summary_text(&summary, state));
        }
    } else {
        // stdout holds only the exports, one JSON document a line; the
        // summary goes to stderr.
        eprint!("{}", summary_text(&summary, state));
        for e in exports {
            println!("{e}");
        }
    }
    Ok(())
}

fn other_journal(dir: &Path) -> PathBuf {
    let inner = dir.join("journal");
    if inner.is_dir() {
        inner
    } else {
        dir.to_path_buf()
    }
}

fn hex64(v: u64) -> String {
    format!("{v:016x}")
}

fn summary_json(outcome: &ReplayOutcome, journal: &Path, secs: f64) -> Value {
    let s = &outcome.state;
    let count_status =
        |status: MarketStatus| s.markets.iter().filter(|m| m.status == status).count();
    let cash: i64 = s.accounts.iter().map(|a| a.cash).sum();
    let held: i64 = s.accounts.iter().map(|a| a.held).sum();
    let position_cost: i64 = s.accounts.iter().map(|a| a.position_cost).sum();
    let collateral: i64 = s
        .markets
        .iter()
        .filter(|m| m.status != MarketStatus::Settled)
        .map(|m| m.collateral())
        .sum();
    let active_keys = s.keys.iter().filter(|k| k.is_active(s.now_ms)).count();
    let revoked_keys = s.keys.iter().filter(|k| k.revoked_ts_ms.is_some()).count();
    let resting = s.orders.iter().filter(|o| o.is_resting()).count();
    json!({
        "journal": journal.display().to_string(),
        "seq": s.last_seq,
        "ts_ms": s.now_ms,
        "time": iso(s.now_ms),
        "from_snapshot": outcome.from_snapshot,
        "applied": outcome.applied,
        "seconds": secs,
        "environment": s.config.environment.as_str(),
        "paused": s.is_paused(),
        "pause_until_ts_ms": s.pause.and_then(|p| p.until_ts_ms),
        "accounts": s.accounts.len(),
        "suspended_accounts": s.accounts.iter().filter(|a| a.suspended).count(),
        "keys": s.keys.len(),
        "active_keys": active_keys,
        "revoked_keys": revoked_keys,
        "series": s.series.len(),
        "markets": s.markets.len(),
        "markets_by_status": {
            "scheduled": count_status(MarketStatus::Scheduled),
            "open": count_status(MarketStatus::Open),
            "closed": count_status(MarketStatus::Closed),
            "settled": count_status(MarketStatus::Settled),
        },
        "orders": s.orders.total(),
        "orders_in_memory": s.orders.len(),
        "resting_orders": resting,
        "fills": s.fills.total(),
        "fills_in_memory": s.fills.len(),
        "trades": s.trades_total,
        "money": {
            "cash": dollars(cash),
            "held": dollars(held),
            "buying_power": dollars(cash - held),
            "position_cost": dollars(position_cost),
            "collateral_unsettled": dollars(collateral),
            "deposits": dollars(s.ledger.deposits),
            "withdrawals": dollars(s.ledger.withdrawals),
            "fees": dollars(s.ledger.fees),
            "payouts": dollars(s.ledger.payouts),
        },
        "events_total": s.events_total,
        "state_hash": hex64(s.state_hash()),
        "event_hash": hex64(s.event_hash),
    })
}

fn summary_text(v: &Value, state: &State) -> String {
    let mut t = String::new();
    let from = match v["from_snapshot"].as_u64() {
        Some(s) => format!("snapshot {s} + "),
        None => String::new(),
    };
    let secs = v["seconds"].as_f64().unwrap_or(0.0);
    let applied = v["applied"].as_u64().unwrap_or(0);
    t.push_str(&format!(
        "state as of seq {} at {} ({})\n",
        v["seq"],
        v["time"].as_str().unwrap_or(""),
        v["ts_ms"]
    ));
    t.push_str(&format!(
        "  rebuilt from {from}{applied} journal records in {secs:.2}s ({:.0} commands/s)\n",
        applied as f64 / secs.max(1e-9)
    ));
    if let Some(s) = v["from_snapshot"].as_u64() {
        t.push_str(&format!(
            "  (the records up to seq {s} were not applied: `updown journal verify` checks them, \
             `--no-snapshots` replays them)\n"
        ));
    }
    let pause = if state.is_paused() {
        match state.pause.and_then(|p| p.until_ts_ms) {
            Some(u) => format!("paused until {}", iso(u)),
            None => "paused".into(),
        }
    } else {
        "trading".into()
    };
    t.push_str(&format!(
        "  venue: environment {}, {pause}\n",
        v["environment"].as_str().unwrap_or("")
    ));
    t.push_str(&format!(
        "  accounts {} ({} suspended), keys {} ({} active, {} revoked)\n",
        v["accounts"], v["suspended_accounts"], v["keys"], v["active_keys"], v["revoked_keys"]
    ));
    let by = &v["markets_by_status"];
    t.push_str(&format!(
        "  series {}, markets {}: scheduled {}, open {}, closed {}, settled {}\n",
        v["series"], v["markets"], by["scheduled"], by["open"], by["closed"], by["settled"]
    ));
    t.push_str(&format!(
        "  orders {} ({} in memory, {} resting), fills {} ({} in memory), trades {}\n",
        v["orders"],
        v["orders_in_memory"],
        v["resting_orders"],
        v["fills"],
        v["fills_in_memory"],
        v["trades"]
    ));
    let m = &v["money"];
    let s = |k: &str| m[k].as_str().unwrap_or("").to_string();
    t.push_str(&format!(
        "  money: cash {} (held {}, buying power {}), position cost {}, collateral in unsettled markets {}\n",
        s("cash"), s("held"), s("buying_power"), s("position_cost"), s("collateral_unsettled")
    ));
    t.push_str(&format!(
        "         deposits {}, withdrawals {}, fees {}, payouts {}\n",
        s("deposits"),
        s("withdrawals"),
        s("fees"),
        s("payouts")
    ));
    t.push_str(&format!(
        "  state hash {}, event hash {} ({} events)\n",
        v["state_hash"].as_str().unwrap_or(""),
        v["event_hash"].as_str().unwrap_or(""),
        v["events_total"]
    ));
    t
}

/// An account as of the state: the REST records of balance, positions,
/// orders and fills (those in the live state: the history tail, 24 hours
/// by default; older ones are in the server's history store), newest
/// first, plus its flags.
pub fn account_export(state: &State, id: u32) -> Result<Value> {
    let account = state
        .account(id)
        .ok_or_else(|| anyhow!("no account {id} as of seq {}", state.last_seq))?;
    let balance = BalanceView {
        cash: account.cash,
        held: account.held,
        buying_power: account.buying_power(),
    };
    let positions: Vec<Value> = account
        .positions
        .iter()
        .filter(|(_, p)| p.count > 0)
        .map(|(&k, p)| {
            let (market, outcome) = position_parts(k);
            rest::position(&PositionView {
                market_ticker: state
                    .market(market)
                    .map_or_else(String::new, |m| m.ticker.clone()),
                outcome,
                count: p.count,
                cost: p.cost,
            })
        })
        .collect();
    let orders: Vec<Value> = account
        .orders
        .iter()
        .rev()
        .filter_map(|&o| state.order(o))
        .map(|o| rest::order(state, o))
        .collect();
    let fills: Vec<Value> = account
        .fills
        .iter()
        .rev()
        .filter_map(|&f| state.fill(f))
        .map(|f| rest::fill(state, f))
        .collect();
    let keys: Vec<Value> = state
        .keys
        .iter()
        .filter(|k| k.account == id)
        .map(|k| {
            json!({
                "key_id": k.key_id, "name": k.name, "scopes": k.scopes.names(),
                "active": k.is_active(state.now_ms), "revoked_ts_ms": k.revoked_ts_ms,
            })
        })
        .collect();
    Ok(json!({
        "account_id": id,
        "seq": state.last_seq,
        "ts_ms": state.now_ms,
        "balance": rest::balance(&balance),
        "positions": positions,
        "orders": orders,
        "fills": fills,
        "terms_accepted": account.terms_accepted,
        "trading_allowed": account.trading_allowed,
        "suspended": account.suspended,
        "keys": keys,
    }))
}

/// A market as of the state: its REST record, book and trades (newest
/// first), and its resting orders with their accounts. The trades of a
/// settled market that left the live state come from the venue's history
/// store (`history`, opened from the data directory; they do not change
/// after settlement); without it they are `null`, and `trades_from` says
/// why.
pub fn market_export(
    state: &State,
    ticker: &str,
    history: Option<&std::io::Result<replay::history::History>>,
) -> Result<Value> {
    let market = state
        .market_by_ticker(ticker)
        .ok_or_else(|| anyhow!("no market {ticker} as of seq {}", state.last_seq))?;
    let book = state
        .query_orderbook(ticker, None)
        .map_err(|e| anyhow!("{e}"))?;
    let newest_first = |trades: &[sequencer::state::Trade]| -> Vec<Value> {
        trades.iter().rev().map(|t| rest::trade(state, t)).collect()
    };
    let (trades, trades_from) = if !market.history {
        (
            Some(newest_first(&market.trades)),
            "the live state".to_string(),
        )
    } else {
        match history {
            None => (
                None,
                "the history store, not read: give --data-dir to read it".to_string(),
            ),
            Some(Err(e)) => (
                None,
                format!("the history store, which could not be opened: {e}"),
            ),
            Some(Ok(store)) => match store.trades(market.id) {
                Ok(Some(trades)) => (Some(newest_first(&trades)), "the history store".to_string()),
                Ok(None) => (
                    None,
                    "the history store, which does not hold them (not yet written, or lost)"
                        .to_string(),
                ),
                Err(e) => (
                    None,
                    format!("the history store, which could not be read: {e}"),
                ),
            },
        }
    };
    let resting: Vec<Value> = state
        .orders
        .iter()
        .filter(|o| o.market == market.id && o.is_resting())
        .map(|o| {
            let mut v = rest::order(state, o);
            v["account"] = o.account.into();
            v
        })
        .collect();
    Ok(json!({
        "market": rest::market(state, market),
        "seq": state.last_seq,
        "ts_ms": state.now_ms,
        "orderbook": rest::orderbook(&book),
        "trades": trades,
        "trades_from": trades_from,
        "resting_orders": resting,
        "pairs": market.pairs,
        "open_interest": { "up": market.open_interest[0], "down": market.open_interest[1] },
    }))
}

/// Per-seq hashes of one journal, sent in batches: of the command as
/// journaled (its stamp and every field) and of the events it caused. The
/// thread ends with the final (seq, state hash, event hash) or the error
/// that stopped the replay, after sending every pair before it.
type HashBatch = Vec<(u64, u64, u64)>;

fn hash_stream(
    journal: PathBuf,
    until: Until,
    tx: mpsc::SyncSender<HashBatch>,
) -> std::thread::JoinHandle<Result<(u64, u64, u64)>> {
    std::thread::spawn(move || {
        let mut batch = Vec::with_capacity(4096);
        let mut open = true;
        let outcome = replay_with(&journal, None, until, |stamped, events| {
            let command = stable_hash(&codec::encode(stamped)[..]);
            batch.push((stamped.seq, command, stable_hash(events)));
            if batch.len() == 4096 && open {
                open = tx.send(std::mem::take(&mut batch)).is_ok();
                batch.reserve(4096);
            }
        });
        if open && !batch.is_empty() {
            let _ = tx.send(batch);
        }
        let outcome = outcome.with_context(|| format!("replaying {}", journal.display()))?;
        let s = &outcome.state;
        Ok((s.last_seq, s.state_hash(), s.event_hash))
    })
}

/// Pulls (seq, command hash, events hash) one at a time from a batch stream.
struct Pairs {
    rx: mpsc::Receiver<HashBatch>,
    batch: std::vec::IntoIter<(u64, u64, u64)>,
}

impl Pairs {
    fn next(&mut self) -> Option<(u64, u64, u64)> {
        loop {
            if let Some(p) = self.batch.next() {
                return Some(p);
            }
            self.batch = self.rx.recv().ok()?.into_iter();
        }
    }
}

/// A replay thread that has ended: its result, or why it stopped.
fn ended(thread: std::thread::JoinHandle<Result<(u64, u64, u64)>>) -> Result<(u64, u64, u64)> {
    thread
        .join()
        .map_err(|_| anyhow!("replay thread panicked"))?
}

fn command_at(journal: &Path, seq: u64) -> String {
    let found = (|| -> Result<Option<String>> {
        let mut reader = Reader::open(journal)?;
        reader.seek(seq)?;
        let Some(r) = reader.next()? else {
            return Ok(None);
        };
        if r.seq != seq {
            return Ok(None);
        }
        let s = codec::decode(r.seq, r.payload)?;
        Ok(Some(format!(
            "{} {} {} {}",
            iso(s.ts_ms),
            s.ts_ms,
            Command::kind_name(s.command.kind()),
            summary(&s.command, None)
        )))
    })();
    match found {
        Ok(Some(text)) => text,
        Ok(None) => "(no record)".into(),
        Err(e) => format!("(unreadable: {e:#})"),
    }
}

fn compare(a: &Path, b: &Path, until: Until, forced_progress: bool, json: bool) -> Result<()> {
    // A directory without a segment is a wrong path, not an empty journal
    // that differs: a script must not read a typo as a difference.
    for dir in [a, b] {
        if !crate::scan::segments(dir).is_ok_and(|s| !s.is_empty()) {
            bail!("no journal at {} (no segment file in it)", dir.display());
        }
    }
    let (tx_a, rx_a) = mpsc::sync_channel(8);
    let (tx_b, rx_b) = mpsc::sync_channel(8);
    let thread_a = hash_stream(a.to_path_buf(), until, tx_a);
    let thread_b = hash_stream(b.to_path_buf(), until, tx_b);
    let empty = Vec::new().into_iter();
    let mut pa = Pairs {
        rx: rx_a,
        batch: empty.clone(),
    };
    let mut pb = Pairs {
        rx: rx_b,
        batch: empty,
    };
    let target = match until {
        Until::Seq(s) => Some(s),
        _ => crate::scan::last_seq(a).ok().flatten(),
    };
    let mut progress = Progress::new(forced_progress, target, "comparing:");
    // Commands whose events are the same: compared up to the first seq
    // whose events differ, which is what the comparison reports; the first
    // command that differs without changing its events (another stamp, a
    // client_order_id) is reported beside it.
    let mut same_events = 0u64;
    let mut through = 0u64;
    let mut first_command_difference = None::<u64>;
    // How the walk stopped: at events that differ, at the end of one
    // stream while the other goes on with `goes_on`, or at the end of both.
    enum Stop {
        EventsDiffer { seq: u64, commands_too: bool },
        Ended { a_ended: bool, goes_on: u64 },
        Both,
    }
    let stop = loop {
        match (pa.next(), pb.next()) {
            (Some((sa, ca, ea)), Some((sb, cb, eb))) => {
                if sa != sb || ea != eb {
                    break Stop::EventsDiffer {
                        seq: sa.min(sb),
                        commands_too: ca != cb,
                    };
                }
                if ca != cb {
                    first_command_difference.get_or_insert(sa);
                }
                same_events += 1;
                through = sa;
                progress.tick(sa);
            }
            (None, None) => break Stop::Both,
            (Some((s, _, _)), None) => {
                break Stop::Ended {
                    a_ended: false,
                    goes_on: s,
                }
            }
            (None, Some((s, _, _))) => {
                break Stop::Ended {
                    a_ended: true,
                    goes_on: s,
                }
            }
        }
    };
    progress.finish();
    // A stream that ended ended on its journal's end or on an error
    // (damage, a gap): an error is reported as such, never as a divergence.
    let read = |thread: std::thread::JoinHandle<Result<(u64, u64, u64)>>, journal: &Path| {
        ended(thread).map_err(|e| {
            let message = format!(
                "cannot compare past seq {through}: {} could not be replayed further: {e:#}",
                journal.display()
            );
            if json {
                println!(
                    "{}",
                    json!({
                        "result": "error", "a": a.display().to_string(), "b": b.display().to_string(),
                        "compared_through_seq": through, "error": message,
                    })
                );
            }
            anyhow!(message)
        })
    };
    let mut report = json!({
        "a": a.display().to_string(),
        "b": b.display().to_string(),
        "commands_with_the_same_events": same_events,
        "first_command_difference_seq": first_command_difference,
    });
    let mut lines = Vec::new();
    let differs_at = match stop {
        Stop::EventsDiffer { seq, commands_too } => {
            report["result"] = "different".into();
            report["first_event_difference_seq"] = seq.into();
            lines.push(format!(
                "DIFFERENT: the events first differ at seq {seq}{}",
                if commands_too {
                    " (and so do the commands)"
                } else {
                    " (the commands are the same: the states had diverged)"
                }
            ));
            Some(seq)
        }
        Stop::Ended { a_ended, goes_on } => {
            let (short, thread, long) = if a_ended {
                (a, thread_a, b)
            } else {
                (b, thread_b, a)
            };
            read(thread, short)?;
            report["result"] = "different".into();
            report["ends_after_seq"] = (goes_on - 1).into();
            report["shorter"] = short.display().to_string().into();
            lines.push(format!(
                "DIFFERENT: {} ends after seq {}; {} goes on with seq {goes_on}",
                short.display(),
                goes_on - 1,
                long.display()
            ));
            Some(goes_on)
        }
        Stop::Both => {
            let ra = read(thread_a, a)?;
            let rb = read(thread_b, b)?;
            report["through_seq"] = ra.0.into();
            report["state_hash"] = json!([hex64(ra.1), hex64(rb.1)]);
            report["event_hash"] = json!([hex64(ra.2), hex64(rb.2)]);
            if ra != rb {
                report["result"] = "different".into();
                lines.push(format!(
                    "DIFFERENT: the events agree for every seq but the final states differ: {} has state hash {}, {} has {}",
                    a.display(),
                    hex64(ra.1),
                    b.display(),
                    hex64(rb.1)
                ));
            } else if first_command_difference.is_some() {
                report["result"] = "same events".into();
                lines.push(format!(
                    "SAME EVENTS: no seq's events differ through seq {}; state hash {}, event hash {}",
                    ra.0,
                    hex64(ra.1),
                    hex64(ra.2)
                ));
            } else {
                report["result"] = "identical".into();
                lines.push(format!(
                    "IDENTICAL: {same_events} commands, the same and with the same events, through seq {}; state hash {}, event hash {}",
                    ra.0,
                    hex64(ra.1),
                    hex64(ra.2)
                ));
            }
            None
        }
    };
    if differs_at.is_some() {
        lines.push(format!(
            "  the same events for the {same_events} commands before it"
        ));
    }
    if let Some(c) = first_command_difference {
        lines.push(format!(
            "  the commands first differ at seq {c}, with the same events (a stamp, a client_order_id, ...)"
        ));
    }
    for seq in differs_at.iter().chain(first_command_difference.iter()) {
        lines.push(format!(
            "  seq {seq} in {}: {}",
            a.display(),
            command_at(a, *seq)
        ));
        lines.push(format!(
            "  seq {seq} in {}: {}",
            b.display(),
            command_at(b, *seq)
        ));
    }
    if let Some(seq) = differs_at.or(first_command_difference) {
        lines.push(format!(
            "  see both with: updown journal dump --journal DIR --from-seq {seq} --to-seq {seq} --events"
        ));
    }
    if json {
        println!("{report}");
    } else {
        for line in lines {
            println!("{line}");
        }
    }
    // The replays may still be running past the difference; the process
    // exits without waiting for them.
    let finding = match (differs_at, report["result"].as_str()) {
        (Some(seq), _) => format!("the journals differ at seq {seq}"),
        (None, Some("different")) => "the journals' final states differ".to_string(),
        (None, Some("same events")) => format!(
            "the journals' commands differ (first at seq {}) but not their events",
            first_command_difference.unwrap_or_default()
        ),
        _ => return Ok(()),
    };
    Err(Finding(finding).into())
}

pub fn snapshot_cmd(args: SnapshotArgs) -> Result<()> {
    let journal = args.source.checked_journal_dir()?;
    let Some(dir) = args
        .source
        .snapshots
        .clone()
        .or_else(|| args.source.data_dir.as_ref().map(|d| d.join("snapshots")))
        .or_else(|| {
            args.source
                .journal
                .is_none()
                .then(|| PathBuf::from("updown-data").join("snapshots"))
        })
    else {
        bail!("where should the snapshot go? give --data-dir DIR or --snapshots DIR");
    };
    // Into a running venue's own snapshots: it could hold records the venue
    // has not made durable yet, and after a power loss the venue would
    // find a snapshot past its journal and refuse to start.
    // Compared as absolute paths with links resolved, as far as they exist
    // (a venue makes its snapshots directory at its first snapshot).
    let resolved = |p: &Path| -> PathBuf {
        let absolute = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        let mut missing = Vec::new();
        let mut existing = absolute.as_path();
        loop {
            if let Ok(found) = existing.canonicalize() {
                return missing
                    .iter()
                    .rev()
                    .fold(found, |path, part| path.join(part));
            }
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    missing.push(name.to_os_string());
                    existing = parent;
                }
                _ => return absolute,
            }
        }
    };
    let venue_snapshots = resolved(&journal).parent().map(|d| d.join("snapshots"));
    if venue_snapshots.is_some_and(|v| v == resolved(&dir)) && journal::writer_running(&journal)? {
        bail!(
            "a venue is running on {}: a snapshot written into its snapshots now could hold records it has not made durable yet, and after a power loss it would refuse to start on it. The venue writes its own (every snapshot_every commands, and at shutdown); stop it first, or write this one elsewhere with --snapshots DIR",
            journal.display()
        );
    }
    let from = args.source.snapshot_dir();
    let until = until_of(args.until_seq, None);
    let (mut outcome, secs) = rebuild(&journal, from.as_deref(), until, args.progress)?;
    let path = snapshot::write(&dir, &mut outcome.state, outcome.last_record_crc)
        .with_context(|| format!("writing a snapshot into {}", dir.display()))?;
    let state = &outcome.state;
    println!(
        "snapshot {} at seq {} ({}), state hash {}, rebuilt in {secs:.2}s",
        path.display(),
        state.last_seq,
        iso(state.now_ms),
        hex64(state.state_hash())
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_bar_fills_with_the_share_done() {
        let marks = |b: &str| (b.matches('#').count(), b.matches('-').count());
        assert_eq!(marks(&bar(0.0)), (0, 30));
        assert_eq!(marks(&bar(50.0)), (15, 15));
        assert_eq!(marks(&bar(100.0)), (30, 0));
        assert_eq!(marks(&bar(130.0)), (30, 0));
        assert!(bar(10.0).starts_with("[###-") && bar(10.0).ends_with("-]"));
    }
}
