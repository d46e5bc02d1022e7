//! `updown journal dump|find|tail|stats|verify`: what exactly happened, read
//! from the journal alone. Every subcommand only reads (a `journal::Reader`
//! and `journal::verify`), so each is safe on a journal the server is
//! writing. See `scan.rs` for the selections and the replay alongside.

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufWriter, Stdout, Write};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};
use journal::{ProblemKind, Reader};
use replay::codec;
use sequencer::{Command, Event, Reply};
use serde_json::{json, Map, Value};

use crate::describe::{command_json, event_json, outcome_text, reply_json, summary};
use crate::scan::{segments, Item, Scanner, Selection, Sink, Source};
use crate::timefmt::{iso, parse_duration_ms};
use crate::Finding;

#[derive(Args)]
pub struct JournalArgs {
    #[command(subcommand)]
    command: JournalCommand,
}

#[derive(Args, Clone)]
struct Output {
    /// One JSON object per record (seq, ts_ms, kind, command, and with the
    /// state replayed alongside: context, result).
    #[arg(long)]
    json: bool,
    /// Also show the events each command caused (needs the replay alongside).
    #[arg(long)]
    events: bool,
}

#[derive(Subcommand)]
enum JournalCommand {
    /// Print records, one line each (or JSON lines); selections apply.
    Dump {
        #[command(flatten)]
        source: Source,
        #[command(flatten)]
        selection: Selection,
        #[command(flatten)]
        output: Output,
    },
    /// Like dump, but requires a selection and prints the count of matching
    /// records on stderr.
    Find {
        #[command(flatten)]
        source: Source,
        #[command(flatten)]
        selection: Selection,
        #[command(flatten)]
        output: Output,
    },
    /// The last records, and with -f the ones being written.
    Tail {
        #[command(flatten)]
        source: Source,
        #[command(flatten)]
        selection: Selection,
        #[command(flatten)]
        output: Output,
        /// How many records (of the selection) to print first.
        #[arg(short = 'n', long = "lines", default_value_t = 10)]
        lines: usize,
        /// Keep following the journal as it grows (stop with Ctrl-C).
        #[arg(short = 'f', long)]
        follow: bool,
        /// How often to look for new records when following, in ms.
        #[arg(long, default_value_t = 200)]
        poll_ms: u64,
    },
    /// Counts by kind and market, rates over time, segment files.
    Stats {
        #[command(flatten)]
        source: Source,
        #[command(flatten)]
        selection: Selection,
        /// Width of the rate buckets: 10s, 1m, 1h, ...
        #[arg(long, default_value = "1m", value_parser = parse_duration_ms)]
        bucket: u64,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Checks every segment header, record checksum and seq; then decodes
    /// every payload. Names the first bad record and exits non-zero.
    Verify {
        #[command(flatten)]
        source: Source,
        /// Only the byte-level check (no decoding of payloads).
        #[arg(long)]
        bytes_only: bool,
        /// Print one JSON object (`ok`, counts, the problem) instead of text.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: JournalArgs) -> Result<()> {
    let result = match args.command {
        JournalCommand::Dump {
            source,
            selection,
            output,
        } => dump(&source, &selection, &output, false),
        JournalCommand::Find {
            source,
            selection,
            output,
        } => dump(&source, &selection, &output, true),
        JournalCommand::Tail {
            source,
            selection,
            output,
            lines,
            follow,
            poll_ms,
        } => tail(&source, &selection, &output, lines, follow, poll_ms),
        JournalCommand::Stats {
            source,
            selection,
            bucket,
            json,
        } => stats(&source, &selection, bucket, json),
        JournalCommand::Verify {
            source,
            bytes_only,
            json,
        } => verify(&source, bytes_only, json),
    };
    quiet_broken_pipe(result)
}

/// `updown journal dump | head` is not an error.
pub fn quiet_broken_pipe(result: Result<()>) -> Result<()> {
    match result {
        Err(e)
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) =>
        {
            Ok(())
        }
        other => other,
    }
}

fn check_output(output: &Output, selection: &Selection) -> Result<()> {
    if output.events && selection.raw {
        bail!("--events needs the state replayed alongside; drop --raw");
    }
    Ok(())
}

/// Prints records as lines, optionally keeping only the last `keep` until
/// the first time the scan reaches the end.
struct Printer {
    out: BufWriter<Stdout>,
    json: bool,
    events: bool,
    follow: bool,
    keep: Option<(usize, VecDeque<String>)>,
}

impl Printer {
    fn new(output: &Output) -> Printer {
        Printer {
            out: BufWriter::new(std::io::stdout()),
            json: output.json,
            events: output.events,
            follow: false,
            keep: None,
        }
    }

    fn format(&self, item: &Item<'_>) -> String {
        if self.json {
            record_json(item, self.events).to_string()
        } else {
            record_text(item, self.events)
        }
    }
}

impl Sink for Printer {
    fn item(&mut self, item: &Item<'_>) -> Result<()> {
        let line = self.format(item);
        match &mut self.keep {
            Some((n, lines)) => {
                if *n > 0 {
                    if lines.len() == *n {
                        lines.pop_front();
                    }
                    lines.push_back(line);
                }
            }
            None => writeln!(self.out, "{line}")?,
        }
        Ok(())
    }

    fn idle(&mut self) -> Result<()> {
        if let Some((_, lines)) = self.keep.take() {
            for line in lines {
                writeln!(self.out, "{line}")?;
            }
        }
        if self.follow {
            self.out.flush()?;
        }
        Ok(())
    }
}

/// The readable line of a record (with its events indented below it).
pub fn record_text(item: &Item<'_>, with_events: bool) -> String {
    let command = &item.stamped.command;
    let state = item.applied.as_ref().map(|a| a.state);
    let mut line = format!(
        "{:>9} {} {} {:<20}",
        item.seq,
        iso(item.ts_ms),
        item.ts_ms,
        Command::kind_name(item.kind)
    );
    let text = summary(command, state);
    if !text.is_empty() {
        line.push(' ');
        line.push_str(&text);
    }
    if let Some(a) = &item.applied {
        line.push_str(" => ");
        line.push_str(&outcome_text(command, a.reply, a.events, a.state));
        if with_events {
            for e in a.events {
                line.push_str("\n          ");
                line.push_str(&event_json(e, a.state).to_string());
            }
        }
    }
    line.trim_end().to_string()
}

/// Names a record's ids when the state is there: the key's id and account,
/// the market's ticker.
fn context_json(command: &Command, a: &crate::scan::Applied<'_>) -> Value {
    let mut map = Map::new();
    let key = match command {
        Command::PlaceOrder { key, .. }
        | Command::CancelOrder { key, .. }
        | Command::CancelAll { key, .. } => a.state.key(*key),
        Command::RevokeKey { key_id } | Command::SetKeyLimits { key_id, .. } => {
            a.state.key_by_id(key_id)
        }
        Command::IssueKey(_) => match a.reply {
            Reply::KeyIssued { key } => a.state.key(*key),
            _ => None,
        },
        _ => None,
    };
    if let Some(k) = key {
        map.insert("key".into(), k.idx.into());
        map.insert("key_id".into(), k.key_id.clone().into());
        map.insert("account".into(), k.account.into());
    }
    let market = match command {
        Command::PlaceOrder { order, .. } => Some(order.market),
        Command::CancelOrder { order_id, .. } => a.state.order(*order_id).map(|o| o.market),
        _ => None,
    };
    if let Some(m) = market.and_then(|m| a.state.market(m)) {
        map.insert("market_ticker".into(), m.ticker.clone().into());
    }
    Value::Object(map)
}

/// The JSON line of a record.
pub fn record_json(item: &Item<'_>, with_events: bool) -> Value {
    let mut v = json!({
        "seq": item.seq,
        "ts_ms": item.ts_ms,
        "time": iso(item.ts_ms),
        "kind": Command::kind_name(item.kind),
        "segment": item.segment,
        "offset": item.offset,
        "command": command_json(&item.stamped.command),
    });
    if let Some(a) = &item.applied {
        v["context"] = context_json(&item.stamped.command, a);
        v["result"] = reply_json(a.reply, a.state);
        v["events_count"] = a.events.len().into();
        if with_events {
            v["events"] = a.events.iter().map(|e| event_json(e, a.state)).collect();
        }
    }
    v
}

fn dump(source: &Source, selection: &Selection, output: &Output, find: bool) -> Result<()> {
    check_output(output, selection)?;
    if find && !selection.has_content_filter() && !has_range(selection) {
        bail!("find needs a selection (--kind, --account, --key, --market, --order-id, --client-order-id, --from-seq, ...); dump prints everything");
    }
    let mut scanner = Scanner::open(source, selection, None)?;
    let mut printer = Printer::new(output);
    let result = scanner.run(&mut printer, None);
    printer.out.flush()?;
    if find {
        eprintln!(
            "{} matching records of {} read",
            scanner.matched, scanner.read
        );
    } else if result.is_ok() && scanner.matched == 0 && selection.has_content_filter() {
        // An empty answer and a misspelt ticker or id look alike otherwise.
        eprintln!(
            "no record of the {} read matches the selection (check the ticker, key or id given)",
            scanner.read
        );
    } else if result.is_ok() && scanner.matched == 0 && has_range(selection) {
        eprintln!("no record in the seq or time range given");
    }
    result
}

fn has_range(s: &Selection) -> bool {
    s.from_seq.is_some() || s.to_seq.is_some() || s.from_time.is_some() || s.to_time.is_some()
}

fn tail(
    source: &Source,
    selection: &Selection,
    output: &Output,
    lines: usize,
    follow: bool,
    poll_ms: u64,
) -> Result<()> {
    check_output(output, selection)?;
    // Without a content or time selection the last N records are the N
    // seqs up to the end (or up to --to-seq): start there. Otherwise scan
    // the range and keep the last N matches.
    let by_time = selection.from_time.is_some() || selection.to_time.is_some();
    let start = if selection.has_content_filter() || by_time {
        None
    } else {
        let dir = source.checked_journal_dir()?;
        crate::scan::last_seq(&dir)?.map(|last| {
            let end = selection.to_seq.map_or(last, |to| to.min(last));
            (end + 1).saturating_sub(lines as u64).max(1)
        })
    };
    let mut scanner = Scanner::open(source, selection, start)?;
    let mut printer = Printer::new(output);
    printer.follow = follow;
    printer.keep = Some((lines, VecDeque::with_capacity(lines.min(100_000))));
    let poll = follow.then(|| Duration::from_millis(poll_ms.max(1)));
    let result = scanner.run(&mut printer, poll);
    if result.is_err() {
        // The last whole records before the damage, then what stopped it
        // (the scan's error, not one of printing them).
        let _ = printer.idle();
    }
    printer.out.flush()?;
    result
}

#[derive(Default)]
struct MarketStats {
    orders: u64,
    rejected: u64,
    cancels: u64,
    trades: u64,
    contracts: u64,
    fills: u64,
}

#[derive(Default)]
struct Stats {
    records: u64,
    first: Option<(u64, u64)>,
    last: Option<(u64, u64)>,
    kinds: BTreeMap<u16, u64>,
    markets: BTreeMap<String, MarketStats>,
    rejections: BTreeMap<&'static str, u64>,
    buckets: BTreeMap<u64, u64>,
    bucket_ms: u64,
    events: u64,
    /// Earliest and latest stamps seen.
    min_ts: u64,
    max_ts: u64,
}

impl Sink for Stats {
    fn item(&mut self, item: &Item<'_>) -> Result<()> {
        self.records += 1;
        self.first.get_or_insert((item.seq, item.ts_ms));
        self.last = Some((item.seq, item.ts_ms));
        self.min_ts = if self.records == 1 {
            item.ts_ms
        } else {
            self.min_ts.min(item.ts_ms)
        };
        self.max_ts = self.max_ts.max(item.ts_ms);
        *self.kinds.entry(item.kind).or_default() += 1;
        *self
            .buckets
            .entry(item.ts_ms / self.bucket_ms * self.bucket_ms)
            .or_default() += 1;
        let command = &item.stamped.command;
        let state = item.applied.as_ref().map(|a| a.state);
        let name = |m: u32| crate::describe::market_name(state, m);
        match command {
            Command::PlaceOrder { order, .. } => {
                let m = self.markets.entry(name(order.market)).or_default();
                m.orders += 1;
                if item.applied.as_ref().is_some_and(|a| a.reply.is_rejected()) {
                    m.rejected += 1;
                }
            }
            Command::CancelOrder { order_id, .. } => {
                if let Some(o) = state.and_then(|s| s.order(*order_id)) {
                    self.markets.entry(name(o.market)).or_default().cancels += 1;
                }
            }
            Command::CancelAll {
                market: Some(t), ..
            } => self.markets.entry(t.clone()).or_default().cancels += 1,
            _ => {}
        }
        if let Some(a) = &item.applied {
            self.events += a.events.len() as u64;
            if let Some(r) = a.reply.rejection() {
                *self.rejections.entry(r.code.as_str()).or_default() += 1;
            }
            for e in a.events {
                match e {
                    Event::Trade(t) => {
                        let m = self.markets.entry(name(t.market)).or_default();
                        m.trades += 1;
                        m.contracts += u64::from(t.count);
                    }
                    Event::Fill(f) => self.markets.entry(name(f.market)).or_default().fills += 1,
                    _ => {}
                }
            }
        }
        Ok(())
    }
}

/// Most buckets `stats` lists with the empty ones; past it, only the busy.
const BUCKETS_MAX: u64 = 100_000;

fn stats(source: &Source, selection: &Selection, bucket_ms: u64, json: bool) -> Result<()> {
    let dir = source.checked_journal_dir()?;
    let mut scanner = Scanner::open(source, selection, None)?;
    let mut stats = Stats {
        bucket_ms,
        ..Stats::default()
    };
    scanner.run(&mut stats, None)?;
    let segs = segments(&dir)?;
    let span_ms = stats.max_ts - stats.min_ts;
    let rate = |count: u64, ms: u64| {
        if ms == 0 {
            0.0
        } else {
            count as f64 * 1000.0 / ms as f64
        }
    };
    // Every bucket from the first command's to the last's, empty ones
    // included (a stall shows as zeros), each with the time it covers: the
    // first and last are cut at the first and last command, so their rates
    // are over that time, not over the whole bucket.
    // The earliest and latest stamps (a journal's stamps can go back across
    // a restart if the clock did, so not the first and last records').
    let stamped = (stats.records > 0).then_some((stats.min_ts, stats.max_ts));
    let rows: Vec<(u64, u64, u64)> = match stamped {
        Some((first, last)) => {
            // (start, commands, the part of the bucket the journal covers)
            let row = |start: u64| {
                let n = stats.buckets.get(&start).copied().unwrap_or(0);
                (
                    start,
                    n,
                    (start + bucket_ms).min(last + 1) - start.max(first),
                )
            };
            let (from, to) = (first / bucket_ms, last / bucket_ms);
            if to - from < BUCKETS_MAX {
                (from..=to).map(|b| row(b * bucket_ms)).collect()
            } else {
                // Too many to list with the empty ones: the busy ones only.
                stats.buckets.keys().map(|&start| row(start)).collect()
            }
        }
        None => Vec::new(),
    };
    // The peak among whole buckets only: a partial one of a few
    // milliseconds says little (one command in the last millisecond read
    // as 1,000/s). With no whole bucket there is no peak; the average is
    // the figure.
    let faster =
        |a: &&(u64, u64, u64), b: &&(u64, u64, u64)| rate(a.1, a.2).total_cmp(&rate(b.1, b.2));
    let peak = rows.iter().filter(|r| r.2 == bucket_ms).max_by(faster);
    if json {
        let v = json!({
            "journal": dir.display().to_string(),
            "records": stats.records,
            "records_read": scanner.read,
            "replayed_from_snapshot": scanner.from_snapshot,
            "first_seq": stats.first.map(|f| f.0),
            "last_seq": stats.last.map(|l| l.0),
            "first_ts_ms": stats.first.map(|f| f.1),
            "last_ts_ms": stats.last.map(|l| l.1),
            "span_ms": span_ms,
            "commands_per_second": (span_ms > 0).then(|| rate(stats.records, span_ms)),
            "events": stats.events,
            "kinds": stats.kinds.iter().map(|(&k, &n)| (Command::kind_name(k).to_string(), Value::from(n))).collect::<Map<_, _>>(),
            "markets": stats.markets.iter().map(|(t, m)| (t.clone(), json!({
                "orders": m.orders, "rejected": m.rejected, "cancels": m.cancels,
                "trades": m.trades, "contracts": m.contracts, "fills": m.fills,
            }))).collect::<Map<_, _>>(),
            "rejections": stats.rejections,
            "bucket_ms": bucket_ms,
            "peak": peak.map(|&(t, n, covered)| json!({
                "start_ts_ms": t, "start": iso(t), "commands": n, "covered_ms": covered,
                "commands_per_second": rate(n, covered), "whole_bucket": covered == bucket_ms,
            })),
            "buckets": rows.iter().map(|&(t, n, covered)| json!({
                "start_ts_ms": t, "start": iso(t), "commands": n,
                "covered_ms": covered,
                "commands_per_second": rate(n, covered),
            })).collect::<Vec<_>>(),
            "segments": segs.iter().map(|s| {
                let counted = scanner.segments.get(&s.index);
                json!({
                    "file": s.path.file_name().map(|n| n.to_string_lossy().to_string()),
                    "index": s.index, "bytes": s.bytes, "first_seq": s.first_seq,
                    "header_error": s.header_error,
                    "records_read": counted.map_or(0, |c| c.0),
                    "last_seq_read": counted.map(|c| c.2),
                    "bytes_used_through_last_read": counted.map(|c| c.3),
                })
            }).collect::<Vec<_>>(),
        });
        println!("{v}");
        return Ok(());
    }
    let mut out = BufWriter::new(std::io::stdout());
    let total_bytes: u64 = segs.iter().map(|s| s.bytes).sum();
    writeln!(
        out,
        "journal {} ({} segment files, {})",
        dir.display(),
        segs.len(),
        size(total_bytes)
    )?;
    if let Some(s) = scanner.from_snapshot {
        writeln!(out, "replayed alongside from snapshot {s}")?;
    }
    match (stats.first, stats.last) {
        (Some((fs, ft)), Some((ls, lt))) => {
            let average = if span_ms == 0 {
                "all stamped within one millisecond".to_string()
            } else {
                format!("{:.1} commands/s on average", rate(stats.records, span_ms))
            };
            writeln!(
                out,
                "records {}: seq {fs} .. {ls}, {} .. {} ({}), {average}",
                stats.records,
                iso(ft),
                iso(lt),
                span(span_ms),
            )?;
        }
        _ => writeln!(out, "no records selected")?,
    }
    if stats.events > 0 {
        writeln!(out, "events {}", stats.events)?;
    }
    writeln!(out, "\nby kind:")?;
    for (&k, &n) in &stats.kinds {
        writeln!(
            out,
            "  {:<22}{n:>12}  {:>5.1}%",
            Command::kind_name(k),
            n as f64 * 100.0 / stats.records.max(1) as f64
        )?;
    }
    if !stats.markets.is_empty() {
        writeln!(
            out,
            "\nby market:\n  {:<36}{:>9}{:>9}{:>9}{:>9}{:>11}{:>9}",
            "ticker", "orders", "refused", "cancels", "trades", "contracts", "fills"
        )?;
        for (t, m) in &stats.markets {
            writeln!(
                out,
                "  {t:<36}{:>9}{:>9}{:>9}{:>9}{:>11}{:>9}",
                m.orders, m.rejected, m.cancels, m.trades, m.contracts, m.fills
            )?;
        }
    }
    if !stats.rejections.is_empty() {
        writeln!(out, "\nrefusals by code:")?;
        for (code, n) in &stats.rejections {
            writeln!(out, "  {code:<22}{n:>12}")?;
        }
    }
    writeln!(
        out,
        "\nper {} (bucket start, commands, commands/s over the time covered):",
        span(bucket_ms)
    )?;
    for &(t, n, covered) in &rows {
        let part = if covered < bucket_ms {
            format!("  (over the {:.3} s it covers)", covered as f64 / 1000.0)
        } else {
            String::new()
        };
        writeln!(
            out,
            "  {}  {n:>10}  {:>10.1}{part}",
            iso(t),
            rate(n, covered)
        )?;
    }
    match peak {
        Some(&(t, n, covered)) => writeln!(
            out,
            "  peak {:.1} commands/s in the bucket at {} (among whole buckets: the first and last cover part of theirs)",
            rate(n, covered),
            iso(t),
        )?,
        None if !rows.is_empty() => writeln!(
            out,
            "  no peak: no bucket is whole (the records span less than two; the average above is the figure)"
        )?,
        None => {}
    }
    writeln!(out, "\nsegments:")?;
    for s in &segs {
        let counted = scanner.segments.get(&s.index);
        let name = s
            .path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().to_string());
        let first = s
            .first_seq
            .map_or_else(|| "?".to_string(), |f| f.to_string());
        write!(
            out,
            "  {name}  {:>10} file  first seq {first}",
            size(s.bytes)
        )?;
        if let Some((n, a, b, end)) = counted {
            write!(
                out,
                ", {n} records read (seq {a} .. {b}), {} used through the last",
                size(*end)
            )?;
        }
        if let Some(e) = &s.header_error {
            write!(out, "  BAD HEADER: {e}")?;
        }
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

fn size(bytes: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if bytes >= 1024 * 1024 {
        format!("{:.1} MiB", bytes as f64 / MIB)
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

fn span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0 => format!("{ms}ms"),
        1..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m{:02}s", s / 3600, s / 60 % 60, s % 60),
    }
}

fn verify(source: &Source, bytes_only: bool, json: bool) -> Result<()> {
    let dir = source.checked_journal_dir()?;
    // The newest snapshot, listed before the journal is read: a running
    // venue publishes one only once the journal holds its seq, so it can
    // never be past what is read next (listed after, a snapshot published
    // meanwhile could be).
    let newest_snapshot = source
        .snapshot_dir()
        .and_then(|d| replay::snapshot::list(&d).into_iter().next());
    // Every snapshot's seq and the journal record it names, to compare
    // with the records as they are read.
    let ties: BTreeMap<u64, (std::path::PathBuf, u32)> = source
        .snapshot_dir()
        .map(|d| replay::snapshot::list(&d))
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(_, path)| match replay::snapshot::journal_tie(&path) {
            Ok((seq, Some(crc))) => Some((seq, (path, crc))),
            _ => None,
        })
        .collect();
    let mut mismatched = Vec::new();
    let mut report = journal::verify(&dir)?;
    // On a journal being written, the record in flight (payload written,
    // marker not yet) looks like a torn tail: look again before saying so.
    for _ in 0..3 {
        match &report.problem {
            Some(p) if p.kind == ProblemKind::TornTail => {
                std::thread::sleep(Duration::from_millis(100));
                let again = journal::verify(&dir)?;
                let moved = again.problem.as_ref().is_none_or(|q| {
                    q.kind != ProblemKind::TornTail
                        || (q.segment_index, q.offset) != (p.segment_index, p.offset)
                });
                if !moved {
                    break;
                }
                report = again;
            }
            _ => break,
        }
    }
    if let Some(p) = &report.problem {
        let kind = match p.kind {
            ProblemKind::TornTail => "torn tail",
            ProblemKind::Corrupt => "corrupt record",
            ProblemKind::BadSegmentHeader => "bad segment header",
            ProblemKind::SeqGap { .. } => "sequence gap",
            ProblemKind::MissingSegment => "missing segment",
            ProblemKind::CutAfterSeal => "segment cut after its seal",
        };
        let good = match (report.first_seq, report.last_seq) {
            (Some(a), Some(b)) => format!(
                "{} valid records before it (seq {a} .. {b})",
                report.records
            ),
            _ => "no valid record before it".into(),
        };
        let note = match p.kind {
            ProblemKind::TornTail => "; the next open cuts it off, unless a snapshot holds it (then it is damage: start-up refuses) (on a journal being written this can also be a record still in flight)",
            ProblemKind::CutAfterSeal => "; every record of that segment is whole: start-up refuses it, and --truncate-corrupt-journal writes the file back to its full length, losing nothing",
            _ => "",
        };
        if json {
            println!(
                "{}",
                json!({
                    "ok": false, "problem": kind, "segment": p.segment.display().to_string(),
                    "segment_index": p.segment_index, "offset": p.offset, "reason": p.reason,
                    "records": report.records, "first_seq": report.first_seq, "last_seq": report.last_seq,
                })
            );
        } else {
            println!(
                "DAMAGED: {kind} in segment {} at byte offset {}: {}",
                p.segment.display(),
                p.offset,
                p.reason.strip_prefix("torn tail: ").unwrap_or(&p.reason)
            );
            println!("{good}{note}");
        }
        return Err(Finding(format!(
            "journal {} is damaged: {kind} in {} at byte offset {}",
            dir.display(),
            p.segment.display(),
            p.offset
        ))
        .into());
    }
    // Every payload decodes to a command of the kind in its header, stamped
    // with its seq, at times that never go back.
    let mut times = None::<(u64, u64)>;
    if !bytes_only {
        let mut reader = Reader::open(&dir)?;
        let mut last_ts = 0;
        while let Some(r) = reader.next()? {
            let bad = |reason: String| {
                let path = journal::segment_path(&dir, r.segment);
                if json {
                    println!(
                        "{}",
                        json!({ "ok": false, "problem": "bad payload", "segment": path.display().to_string(),
                                "segment_index": r.segment, "offset": r.offset, "seq": r.seq, "reason": reason })
                    );
                } else {
                    println!(
                        "DAMAGED: record seq {} in segment {} at byte offset {}: {reason}",
                        r.seq,
                        path.display(),
                        r.offset
                    );
                }
                anyhow::Error::from(Finding(format!(
                    "journal {} is damaged: seq {} in {} at byte offset {}: {reason}",
                    dir.display(),
                    r.seq,
                    path.display(),
                    r.offset
                )))
            };
            let stamped = codec::decode(r.seq, r.payload).map_err(|e| bad(e.to_string()))?;
            if stamped.command.kind() != r.kind {
                return Err(bad(format!(
                    "header says kind {} ({}), the payload is a {}",
                    r.kind,
                    Command::kind_name(r.kind),
                    Command::kind_name(stamped.command.kind())
                )));
            }
            if stamped.ts_ms < last_ts {
                return Err(bad(format!(
                    "time {} goes back from {}",
                    stamped.ts_ms, last_ts
                )));
            }
            last_ts = stamped.ts_ms;
            times = Some((times.map_or(stamped.ts_ms, |t| t.0), stamped.ts_ms));
            if let Some((path, tied)) = ties.get(&r.seq).filter(|(_, tied)| *tied != r.crc) {
                mismatched.push((r.seq, path.clone(), *tied, r.crc));
            }
        }
    }
    // A snapshot is written only once the journal holds its seq: one past
    // the journal's end proves that acknowledged records are gone (start-up
    // refuses such a journal).
    let end = report.last_seq.unwrap_or(0);
    if let Some((seq, path)) = newest_snapshot.filter(|(seq, _)| *seq > end) {
        if json {
            println!(
                "{}",
                json!({
                    "ok": false, "problem": "records missing", "snapshot": path.display().to_string(),
                    "snapshot_seq": seq, "records": report.records, "first_seq": report.first_seq,
                    "last_seq": report.last_seq,
                })
            );
        } else {
            println!(
                "DAMAGED: records missing: snapshot {} holds seq {seq}, but the journal ends at seq {end} \
                 (a lost segment or tail)",
                path.display()
            );
        }
        return Err(Finding(format!(
            "journal {} is damaged: records {} .. {seq} are missing (snapshot {} holds them)",
            dir.display(),
            end + 1,
            path.display()
        ))
        .into());
    }
    // Not damage of the journal (which of the two is foreign, this
    // output cannot know), and no start goes on from such a snapshot: a
    // warning, beside the verdict.
    for (seq, path, tied, found) in &mismatched {
        let other = replay::snapshot::SnapshotError::OtherJournal {
            path: path.clone(),
            seq: *seq,
            tied: *tied,
            found: *found,
        };
        eprintln!("warning: {other}");
    }
    if json {
        let other: Vec<_> = mismatched
            .iter()
            .map(|(seq, path, _, _)| json!({ "snapshot": path.display().to_string(), "seq": seq }))
            .collect();
        println!(
            "{}",
            json!({
                "ok": true, "segments": report.segments, "records": report.records,
                "first_seq": report.first_seq, "last_seq": report.last_seq,
                "first_ts_ms": times.map(|t| t.0), "last_ts_ms": times.map(|t| t.1),
                "payloads_decoded": !bytes_only,
                // Compared only as the records are decoded.
                "snapshots_of_other_journals": (!bytes_only).then_some(other),
            })
        );
    } else {
        let seqs = match (report.first_seq, report.last_seq) {
            (Some(a), Some(b)) => format!(", seq {a} .. {b}"),
            _ => String::new(),
        };
        let when = times.map_or(String::new(), |(a, b)| {
            format!(", {} .. {}", iso(a), iso(b))
        });
        println!(
            "OK: {} records in {} segments{seqs}{when}{}",
            report.records,
            report.segments,
            if bytes_only {
                " (checksums only)"
            } else {
                ", every payload decoded"
            }
        );
    }
    Ok(())
}
