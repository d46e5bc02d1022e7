//! The auditor's tools as a person runs them: `updown journal ...`,
//! `updown replay ...` and `updown snapshot ...` on (a) a journal written by
//! the seeded simulation through a real `replay::Node`, with the live state
//! recorded along the way, and (b) the journal of a real `updown serve`
//! driven over HTTP. The key check: what `replay --until-seq N` answers is
//! what the live venue was at seq N (state and event hashes, and the REST
//! answers the server gave right after the command). Damaged journals are
//! named by segment file and offset and make the commands fail.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{copy_dir, http, updown, updown_exit, updown_status, Launch, Serve, BIN};
use journal::{Durability, JournalConfig};
use replay::{snapshot, Node, NodeConfig};
use sequencer::query::OrderFilter;
use sequencer::{Command as Cmd, Stamped, State, VenueConfig};
use serde_json::Value;
use tests::sim::{Sim, SimConfig, SIM_T0};

fn updown_ok(args: &[&str]) -> String {
    let (ok, out, err) = updown(args);
    assert!(ok, "updown {args:?} failed: {err}\n{out}");
    out
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The seqs of JSON journal lines, in order.
fn seqs(lines: &[Value]) -> Vec<u64> {
    lines.iter().map(|l| l["seq"].as_u64().unwrap()).collect()
}

/// Every record of the journal in data directory `d`, as `journal dump
/// --json --events` prints it.
fn dump_with_events(d: &str) -> Vec<Value> {
    json_lines(&updown_ok(&[
        "journal",
        "dump",
        "--data-dir",
        d,
        "--json",
        "--events",
    ]))
}

fn json_one(text: &str) -> Value {
    let lines = json_lines(text);
    assert_eq!(lines.len(), 1, "{text}");
    lines.into_iter().next().unwrap()
}

fn hex(v: u64) -> String {
    format!("{v:016x}")
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// The live venue at one seq, as the REST handlers would have answered.
struct Checkpoint {
    ts_ms: u64,
    state_hash: u64,
    event_hash: u64,
    /// (ticker, GET /markets/{ticker}/orderbook body)
    book: Option<(String, Value)>,
    /// (account, GET balance body, positions, orders page, fills page)
    account: Option<(u32, Value, Value, Value, Value)>,
    /// Whether the next command is stamped later (so `--until-time ts_ms`
    /// means exactly this seq).
    time_unique: bool,
}

/// REST answers for the account behind `key`, from the state, exactly as
/// gateway::api::rest writes them.
fn rest_account(state: &State, key: u32) -> (Value, Value, Value, Value) {
    use gateway::api::json as rest;
    let balance =
        serde_json::json!({ "balance": rest::balance(&state.query_balance(key).unwrap()) });
    let positions: Vec<Value> = state
        .query_positions(key)
        .unwrap()
        .iter()
        .map(rest::position)
        .collect();
    let filter = OrderFilter {
        limit: Some(1000),
        ..OrderFilter::default()
    };
    let orders: Vec<Value> = state
        .query_orders(key, &filter)
        .unwrap()
        .items
        .iter()
        .map(|o| rest::order(state, o))
        .collect();
    let fills: Vec<Value> = state
        .query_fills(key, None, Some(500), None)
        .unwrap()
        .items
        .iter()
        .map(|f| rest::fill(state, f))
        .collect();
    (
        balance,
        Value::Array(positions),
        Value::Array(orders),
        Value::Array(fills),
    )
}

fn checkpoint(state: &State) -> Checkpoint {
    // The market with the most resting orders, and account 3 through its
    // first key.
    let book = state
        .markets
        .iter()
        .max_by_key(|m| m.book.side(sequencer::types::Outcome::Up).top(99).count())
        .map(|m| {
            let view = state.query_orderbook(&m.ticker, None).unwrap();
            (
                m.ticker.clone(),
                serde_json::json!({ "orderbook": gateway::api::json::orderbook(&view) }),
            )
        });
    // An account with many orders, through a key that may read it now.
    let account = state
        .keys
        .iter()
        .filter(|k| state.query_balance(k.idx).is_ok())
        .max_by_key(|k| {
            (
                state.account(k.account).map_or(0, |a| a.orders.len()),
                k.idx,
            )
        })
        .map(|k| {
            let (b, pos, o, f) = rest_account(state, k.idx);
            (k.account, b, pos, o, f)
        });
    Checkpoint {
        ts_ms: state.now_ms,
        state_hash: state.state_hash(),
        event_hash: state.event_hash,
        book,
        account,
        time_unique: false,
    }
}

struct SimRun {
    dir: tempfile::TempDir,
    node: Option<Node>,
    stamped: Vec<Stamped>,
    checkpoints: BTreeMap<u64, Checkpoint>,
    snapshot_seq: u64,
    /// place_order records that concern account 3 (its key, or its events).
    place_orders_of_3: u64,
    last_seq: u64,
}

fn node_config(dir: &Path) -> NodeConfig {
    let mut journal = JournalConfig::new(dir.join("journal"));
    journal.segment_bytes = 512 * 1024;
    journal.durability = Durability::Never;
    NodeConfig {
        journal,
        snapshot_dir: Some(dir.join("snapshots")),
        venue: VenueConfig::default(),
        history_dir: None,
    }
}

/// `simulate`, its node closed (the journal as a stopped venue leaves
/// it), with its data directory as an argument for `--data-dir`. Keep the
/// run (as `_run` where it is not read): the directory goes with it.
fn simulate_closed(seed: u64, commands: u32) -> (SimRun, String) {
    let mut run = simulate(seed, commands);
    drop(run.node.take());
    let d = p(run.dir.path()).to_string();
    (run, d)
}

/// Drives a node with the simulation, recording the live state at
/// checkpoints; a snapshot is written on the way.
fn simulate(seed: u64, commands: u32) -> SimRun {
    let dir = tempfile::tempdir().unwrap();
    let (mut node, _) = Node::open(node_config(dir.path()), SIM_T0).unwrap();
    let mut sim = Sim::new(seed, SimConfig::default());
    let mut checkpoints = BTreeMap::new();
    let mut snapshot_seq = 0;
    let mut place_orders_of_3 = 0;
    let mut pending: Option<(u64, Checkpoint)> = None;
    for i in 0..commands {
        let (ts, command) = sim.next(node.state());
        let is_place = matches!(command, Cmd::PlaceOrder { .. });
        let key = match &command {
            Cmd::PlaceOrder { key, .. } => Some(*key),
            _ => None,
        };
        if let Some((seq, mut c)) = pending.take() {
            c.time_unique = ts > c.ts_ms;
            checkpoints.insert(seq, c);
        }
        let (seq, _) = node.submit(ts, command).unwrap();
        if is_place {
            let state = node.state();
            let by_key = key
                .and_then(|k| state.key(k))
                .is_some_and(|k| k.account == 3);
            let touched = node.events().iter().any(|e| e.account() == Some(3));
            if by_key || touched {
                place_orders_of_3 += 1;
            }
        }
        node.drain_events();
        if i % 64 == 0 {
            node.commit().unwrap();
        }
        if i == commands / 2 {
            node.commit().unwrap();
            node.snapshot().unwrap();
            snapshot_seq = seq;
        }
        if i % 1500 == 777 || i == commands / 2 || i == commands / 2 + 1 {
            pending = Some((seq, checkpoint(node.state())));
        }
    }
    node.commit().unwrap();
    let last_seq = node.state().last_seq;
    if let Some((seq, c)) = pending.take() {
        checkpoints.insert(seq, c);
    }
    checkpoints.insert(last_seq, checkpoint(node.state()));
    // The stamped commands as journaled, for expectations.
    let stamped = read_all(&dir.path().join("journal"));
    assert_eq!(stamped.len() as u64, last_seq);
    SimRun {
        dir,
        node: Some(node),
        stamped,
        checkpoints,
        snapshot_seq,
        place_orders_of_3,
        last_seq,
    }
}

fn read_all(journal: &Path) -> Vec<Stamped> {
    let mut reader = journal::Reader::open(journal).unwrap();
    let mut all = Vec::new();
    while let Some(r) = reader.next().unwrap() {
        all.push(replay::codec::decode(r.seq, r.payload).unwrap());
    }
    all
}

fn segment_files(journal: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    files.sort();
    files
}

/// Flips one byte of the payload of record `seq`; returns its segment file
/// and the record's offset.
fn damage(data_dir: &Path, seq: u64) -> (String, u64) {
    let line = updown_ok(&[
        "journal",
        "dump",
        "--raw",
        "--json",
        "--journal",
        p(&data_dir.join("journal")),
        "--from-seq",
        &seq.to_string(),
        "--to-seq",
        &seq.to_string(),
    ]);
    let record = json_one(&line);
    let segment = journal::segment_path(
        &data_dir.join("journal"),
        record["segment"].as_u64().unwrap(),
    );
    let offset = record["offset"].as_u64().unwrap();
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&segment)
        .unwrap();
    let mut byte = [0u8; 1];
    file.read_at(&mut byte, offset + 32 + 5).unwrap();
    byte[0] ^= 0x5a;
    file.write_at(&byte, offset + 32 + 5).unwrap();
    (
        segment.file_name().unwrap().to_string_lossy().into(),
        offset,
    )
}

#[test]
fn simulated_journal_every_subcommand() {
    let mut run = simulate(7, 12_000);
    let data = run.dir.path().to_path_buf();
    let d = p(&data);
    let journal_dir = data.join("journal");
    let total = run.last_seq;
    assert!(segment_files(&journal_dir).len() > 2, "several segments");

    // verify: OK with the counts.
    let ok = updown_ok(&["journal", "verify", "--data-dir", d]);
    assert!(ok.starts_with(&format!("OK: {total} records")), "{ok}");
    let v = json_one(&updown_ok(&[
        "journal",
        "verify",
        "--data-dir",
        d,
        "--json",
    ]));
    assert_eq!(v["ok"], true);
    assert_eq!(v["last_seq"], total);
    assert_eq!(v["segments"], segment_files(&journal_dir).len());

    // dump --json: every record, in order, with the full command and the
    // replayed result.
    let lines = json_lines(&updown_ok(&["journal", "dump", "--data-dir", d, "--json"]));
    assert_eq!(lines.len() as u64, total);
    for (i, (line, stamped)) in lines.iter().zip(&run.stamped).enumerate() {
        assert_eq!(line["seq"], i as u64 + 1);
        assert_eq!(line["ts_ms"], stamped.ts_ms);
        assert_eq!(line["kind"], Cmd::kind_name(stamped.command.kind()));
        assert_eq!(line["command"]["type"], line["kind"]);
        assert!(line["result"]["status"].is_string(), "{line}");
    }
    let placed = lines
        .iter()
        .find(|l| l["kind"] == "place_order" && l["result"]["created"] == true)
        .unwrap();
    assert!(placed["context"]["market_ticker"].is_string(), "{placed}");
    assert!(
        placed["result"]["order"]["order_id"].is_string(),
        "{placed}"
    );
    // Raw mode decodes the same commands without the state.
    let raw = json_lines(&updown_ok(&[
        "journal",
        "dump",
        "--data-dir",
        d,
        "--json",
        "--raw",
    ]));
    assert_eq!(raw.len(), lines.len());
    assert_eq!(raw[100]["command"], lines[100]["command"]);
    assert!(raw[100].get("result").is_none());

    // The readable form: one line per record, ids resolved.
    let text = updown_ok(&["journal", "dump", "--data-dir", d]);
    assert_eq!(text.lines().count() as u64, total);
    let order_line = text
        .lines()
        .find(|l| l.contains(" place_order ") && l.contains("=> order"))
        .expect("a placed order");
    assert!(
        order_line.contains("key=") && order_line.contains("market="),
        "{order_line}"
    );
    assert!(order_line.contains("Z "), "ISO time: {order_line}");

    // Selections: kind + account against what the live run saw.
    let found = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        d,
        "--json",
        "--kind",
        "place_order",
        "--account",
        "3",
    ]));
    assert_eq!(found.len() as u64, run.place_orders_of_3);
    assert!(found.iter().all(|l| l["kind"] == "place_order"));
    // Seq and time ranges.
    let (from, to) = (run.stamped[2000].ts_ms, run.stamped[5000].ts_ms);
    let in_time = json_lines(&updown_ok(&[
        "journal",
        "dump",
        "--data-dir",
        d,
        "--json",
        "--raw",
        "--from-time",
        &from.to_string(),
        "--to-time",
        &to.to_string(),
    ]));
    let expected = run
        .stamped
        .iter()
        .filter(|s| (from..=to).contains(&s.ts_ms))
        .count();
    assert_eq!(in_time.len(), expected);
    let iso_from = in_time[0]["time"].as_str().unwrap().to_string();
    let same = json_lines(&updown_ok(&[
        "journal",
        "dump",
        "--data-dir",
        d,
        "--json",
        "--raw",
        "--from-time",
        &iso_from,
        "--to-time",
        &to.to_string(),
    ]));
    assert_eq!(same.len(), expected, "RFC 3339 times select the same");
    // A time range starts from the newest snapshot before it, as a seq
    // range does, rather than replaying the journal from its first record
    // (which an operator may have removed).
    let after_snapshot = run.stamped[run.snapshot_seq as usize + 10].ts_ms;
    let stats = serde_json::from_str::<serde_json::Value>(&updown_ok(&[
        "journal",
        "stats",
        "--data-dir",
        d,
        "--json",
        "--from-time",
        &after_snapshot.to_string(),
    ]))
    .unwrap();
    assert_eq!(stats["replayed_from_snapshot"], run.snapshot_seq, "{stats}");
    let ranged = json_lines(&updown_ok(&[
        "journal",
        "dump",
        "--data-dir",
        d,
        "--json",
        "--from-seq",
        "9000",
        "--to-seq",
        "9009",
    ]));
    assert_eq!(seqs(&ranged), (9000..=9009).collect::<Vec<_>>());
    // An order id: its placement comes first, every record names it.
    let order_id = placed["result"]["order"]["order_id"].as_str().unwrap();
    let about = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        d,
        "--json",
        "--events",
        "--order-id",
        order_id,
    ]));
    assert_eq!(about[0]["seq"], placed["seq"]);
    assert!(about.iter().all(|l| l
        .to_string()
        .contains(&format!("\"order_id\":\"{order_id}\""))
        || l["command"]["order_id"] == order_id.parse::<u64>().unwrap()));
    // A market: every record names it in its command, context or events.
    let ticker = placed["context"]["market_ticker"].as_str().unwrap();
    let in_market = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        d,
        "--json",
        "--events",
        "--market",
        ticker,
    ]));
    assert!(in_market.len() > 1);
    assert!(in_market.iter().all(|l| l.to_string().contains(ticker)));
    // A key (by index) and a client order id.
    let key = placed["command"]["key"].as_u64().unwrap().to_string();
    let cid = placed["command"]["client_order_id"].as_str().unwrap();
    let by_key = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        d,
        "--json",
        "--key",
        &key,
        "--client-order-id",
        cid,
    ]));
    assert!(by_key.iter().any(|l| l["seq"] == placed["seq"]));
    let key_id = placed["context"]["key_id"].as_str().unwrap();
    let by_key_id = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        d,
        "--json",
        "--key",
        key_id,
        "--client-order-id",
        cid,
    ]));
    assert_eq!(by_key, by_key_id);
    // A cancel that found its order ended changes nothing and emits
    // nothing; its reply names the order, so the order's client_order_id
    // finds it (it was left out).
    let cancels = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        d,
        "--json",
        "--events",
        "--kind",
        "cancel_order",
    ]));
    let idle = cancels
        .iter()
        .find(|l| {
            l["result"]["status"] == "order" && l["events"].as_array().is_some_and(Vec::is_empty)
        })
        .expect("the simulation sends a cancel of an ended order");
    let idle_cid = idle["result"]["order"]["client_order_id"].as_str().unwrap();
    let by_cid = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        d,
        "--json",
        "--client-order-id",
        idle_cid,
    ]));
    assert!(
        by_cid.iter().any(|l| l["seq"] == idle["seq"]),
        "{idle} not found by {idle_cid}"
    );
    // Refusals: unknown kinds, state selections in raw mode, find without selection.
    for (args, message) in [
        (
            vec!["journal", "dump", "--data-dir", d, "--kind", "nope"],
            "unknown kind",
        ),
        (
            vec![
                "journal",
                "dump",
                "--data-dir",
                d,
                "--raw",
                "--account",
                "1",
            ],
            "drop --raw",
        ),
        (
            vec!["journal", "find", "--data-dir", d],
            "find needs a selection",
        ),
        (
            vec![
                "replay",
                "--data-dir",
                d,
                "--until-seq",
                &(total + 5).to_string(),
            ],
            "ends at seq",
        ),
        (
            vec!["replay", "--data-dir", d, "--book", "no-such-market"],
            "no market",
        ),
    ] {
        let (ok, _, err) = updown(&args);
        assert!(!ok && err.contains(message), "{args:?}: {err}");
    }

    // stats: counts per kind add up; segments are listed.
    let stats = json_one(&updown_ok(&["journal", "stats", "--data-dir", d, "--json"]));
    assert_eq!(stats["records"], total);
    assert_eq!(stats["first_seq"], 1);
    assert_eq!(stats["last_seq"], total);
    let mut kinds: BTreeMap<&str, u64> = BTreeMap::new();
    for s in &run.stamped {
        *kinds.entry(Cmd::kind_name(s.command.kind())).or_default() += 1;
    }
    for (k, n) in &kinds {
        assert_eq!(stats["kinds"][*k], *n, "{k}");
    }
    let bucketed: u64 = stats["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["commands"].as_u64().unwrap())
        .sum();
    assert_eq!(bucketed, total);
    // Every bucket from the first command's to the last's, each rate over
    // the time it covers (the first and last are cut at the commands), and
    // the covered times add up to the journal's span.
    let bucket_ms = stats["bucket_ms"].as_u64().unwrap();
    let buckets = stats["buckets"].as_array().unwrap();
    let (first_ts, last_ts) = (run.stamped[0].ts_ms, run.stamped.last().unwrap().ts_ms);
    assert_eq!(
        buckets.len() as u64,
        last_ts / bucket_ms - first_ts / bucket_ms + 1
    );
    for pair in buckets.windows(2) {
        assert_eq!(
            pair[1]["start_ts_ms"].as_u64().unwrap() - pair[0]["start_ts_ms"].as_u64().unwrap(),
            bucket_ms
        );
    }
    let covered: u64 = buckets
        .iter()
        .map(|b| b["covered_ms"].as_u64().unwrap())
        .sum();
    assert_eq!(covered, last_ts - first_ts + 1);
    for b in buckets {
        let (n, ms) = (
            b["commands"].as_f64().unwrap(),
            b["covered_ms"].as_f64().unwrap(),
        );
        assert!((b["commands_per_second"].as_f64().unwrap() - n * 1000.0 / ms).abs() < 1e-6);
    }
    assert_eq!(
        stats["segments"].as_array().unwrap().len(),
        segment_files(&journal_dir).len()
    );
    // Each segment's bytes in use end where its last record ends, inside
    // the preallocated file.
    for seg in stats["segments"].as_array().unwrap() {
        let used = seg["bytes_used_through_last_read"].as_u64().unwrap();
        assert!(used > 64 && used <= seg["bytes"].as_u64().unwrap(), "{seg}");
        assert_eq!(used % 16, 0, "{seg}");
    }
    // The peak is the fastest whole bucket, and says so.
    let peak = &stats["peak"];
    assert_eq!(peak["whole_bucket"], true, "{peak}");
    let fastest_whole = buckets
        .iter()
        .filter(|b| b["covered_ms"] == bucket_ms)
        .map(|b| b["commands_per_second"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert_eq!(peak["commands_per_second"].as_f64().unwrap(), fastest_whole);
    assert!(stats["markets"].as_object().unwrap().len() > 3);
    let text = updown_ok(&["journal", "stats", "--data-dir", d]);
    assert!(text.contains("by kind:") && text.contains("place_order") && text.contains(".seg"));
    assert!(
        text.contains("among whole buckets") && text.contains("used through the last"),
        "{text}"
    );
    // Two records fill no bucket: no peak (a partial bucket's rate said
    // 2,000/s for two commands), and the average says what it can.
    let narrow: Value = serde_json::from_str(&updown_ok(&[
        "journal",
        "stats",
        "--data-dir",
        d,
        "--json",
        "--from-seq",
        "100",
        "--to-seq",
        "101",
    ]))
    .unwrap();
    assert_eq!(narrow["records"], 2, "{narrow}");
    assert!(narrow["peak"].is_null(), "{narrow}");
    let text = updown_ok(&[
        "journal",
        "stats",
        "--data-dir",
        d,
        "--from-seq",
        "100",
        "--to-seq",
        "101",
    ]);
    assert!(
        text.contains("no peak") && !text.contains("peak 2"),
        "{text}"
    );
    // A selection nothing matches (a misspelt ticker) says so on stderr.
    let (ok, out, err) = updown(&[
        "journal",
        "dump",
        "--data-dir",
        d,
        "--market",
        "nosuch-ticker",
    ]);
    assert!(ok && out.is_empty(), "{out}{err}");
    assert!(err.contains("no record of the"), "{err}");
    // So does a range past the journal's end.
    let (ok, out, err) = updown(&["journal", "dump", "--data-dir", d, "--from-seq", "99999999"]);
    assert!(ok && out.is_empty(), "{out}{err}");
    assert!(err.contains("no record in the seq or time range"), "{err}");

    // replay --until-seq N is the live state at N: hashes, book, account.
    for (&seq, c) in &run.checkpoints {
        let s = seq.to_string();
        let summary = json_one(&updown_ok(&[
            "replay",
            "--data-dir",
            d,
            "--until-seq",
            &s,
            "--json",
        ]));
        assert_eq!(summary["seq"], seq);
        assert_eq!(summary["state_hash"], hex(c.state_hash), "seq {seq}");
        assert_eq!(summary["event_hash"], hex(c.event_hash), "seq {seq}");
        if seq >= run.snapshot_seq {
            assert_eq!(summary["from_snapshot"], run.snapshot_seq, "seq {seq}");
        } else {
            assert!(summary["from_snapshot"].is_null());
        }
        let mut args = vec!["replay", "--data-dir", d, "--until-seq", &s];
        if let Some((ticker, _)) = &c.book {
            args.extend(["--book", ticker.as_str()]);
        }
        let id = c.account.as_ref().map(|a| a.0.to_string());
        if let Some(id) = &id {
            args.extend(["--account", id.as_str()]);
        }
        let exports = json_lines(&updown_ok(&args));
        let mut exports = exports.iter();
        if let Some((_, book)) = &c.book {
            assert_eq!(exports.next().unwrap(), book, "book at seq {seq}");
        }
        if let Some((_, balance, positions, orders, fills)) = &c.account {
            let a = exports.next().unwrap();
            assert_eq!(a["balance"], balance["balance"], "seq {seq}");
            assert_eq!(&a["positions"], positions, "seq {seq}");
            // REST pages hold the newest; the export holds them all.
            let n = orders.as_array().unwrap().len();
            assert_eq!(
                a["orders"].as_array().unwrap()[..n],
                orders.as_array().unwrap()[..]
            );
            let n = fills.as_array().unwrap().len();
            assert_eq!(
                a["fills"].as_array().unwrap()[..n],
                fills.as_array().unwrap()[..]
            );
        }
        if c.time_unique {
            let at_time = json_one(&updown_ok(&[
                "replay",
                "--data-dir",
                d,
                "--until-time",
                &c.ts_ms.to_string(),
                "--json",
            ]));
            assert_eq!(at_time["seq"], seq);
            assert_eq!(at_time["state_hash"], hex(c.state_hash));
        }
    }
    // Without snapshots, the same answer.
    let (&seq, c) = run.checkpoints.iter().last().unwrap();
    let summary = json_one(&updown_ok(&[
        "replay",
        "--data-dir",
        d,
        "--no-snapshots",
        "--until-seq",
        &seq.to_string(),
        "--json",
    ]));
    assert!(summary["from_snapshot"].is_null());
    assert_eq!(summary["state_hash"], hex(c.state_hash));
    let text = updown_ok(&["replay", "--data-dir", d]);
    assert!(text.contains(&format!("state as of seq {total}")), "{text}");
    assert!(text.contains(&hex(c.state_hash)), "{text}");
    // --progress: a progress line on stderr (not a terminal here), ending
    // with where the run stopped and its rate; the answer is unchanged.
    let (ok, progressed, err) =
        updown(&["replay", "--data-dir", d, "--no-snapshots", "--progress"]);
    assert!(ok, "{err}");
    assert!(progressed.contains(&hex(c.state_hash)), "{progressed}");
    let last = err.rsplit('\r').next().unwrap_or("");
    assert!(
        last.contains(&format!("replaying: seq {total},")) && last.contains("commands/s"),
        "{err:?}"
    );
    // --market: its record, book and trades.
    let ticker = c.book.as_ref().unwrap().0.clone();
    let market = json_one(&updown_ok(&[
        "replay",
        "--data-dir",
        d,
        "--market",
        &ticker,
    ]));
    assert_eq!(market["market"]["ticker"], ticker.as_str());
    assert_eq!(market["orderbook"], c.book.as_ref().unwrap().1["orderbook"]);

    // snapshot: refused into the snapshots of the journal's live writer
    // (the node is still open); written into another directory, then used
    // by replay.
    let target = *run.checkpoints.keys().rev().nth(1).unwrap();
    let (ok, _, err) = updown(&[
        "snapshot",
        "--data-dir",
        d,
        "--until-seq",
        &target.to_string(),
    ]);
    assert!(!ok && err.contains("a venue is running on"), "{err}");
    let elsewhere = tempfile::tempdir().unwrap();
    let shots = p(elsewhere.path());
    let out = updown_ok(&[
        "snapshot",
        "--data-dir",
        d,
        "--snapshots",
        shots,
        "--until-seq",
        &target.to_string(),
    ]);
    let path = elsewhere.path().join(snapshot::file_name(target));
    assert!(
        out.contains(p(&path)) && out.contains(&format!("at seq {target}")),
        "{out}"
    );
    let loaded = snapshot::load(&path).unwrap();
    assert_eq!(loaded.state_hash(), run.checkpoints[&target].state_hash);
    let summary = json_one(&updown_ok(&[
        "replay",
        "--data-dir",
        d,
        "--snapshots",
        shots,
        "--until-seq",
        &target.to_string(),
        "--json",
    ]));
    assert_eq!(summary["from_snapshot"], target);

    // tail -n: the last records; tail -f: the ones the node writes next.
    let tail = json_lines(&updown_ok(&[
        "journal",
        "tail",
        "-n",
        "3",
        "--data-dir",
        d,
        "--json",
    ]));
    assert_eq!(seqs(&tail), vec![total - 2, total - 1, total]);
    let tail = updown_ok(&[
        "journal",
        "tail",
        "-n",
        "2",
        "--data-dir",
        d,
        "--kind",
        "place_order",
    ]);
    assert_eq!(tail.lines().count(), 2);
    assert!(tail.lines().all(|l| l.contains(" place_order ")));
    // -n counts back from --to-seq when one is given.
    let tail = json_lines(&updown_ok(&[
        "journal",
        "tail",
        "-n",
        "3",
        "--to-seq",
        "40",
        "--data-dir",
        d,
        "--json",
    ]));
    assert_eq!(seqs(&tail), vec![38, 39, 40]);
    let mut follower = Killed(
        Command::new(BIN)
            .args([
                "journal",
                "tail",
                "-f",
                "-n",
                "1",
                "--json",
                "--poll-ms",
                "20",
                "--data-dir",
                d,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let lines = read_lines(&mut follower.0, 1);
    assert_eq!(lines[0]["seq"], total);
    let node = run.node.as_mut().unwrap();
    for i in 0..5u64 {
        node.submit(SIM_T0 + 10_000_000 + i, Cmd::CreateAccount)
            .unwrap();
    }
    node.commit().unwrap();
    let lines = read_lines(&mut follower.0, 5);
    drop(follower);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line["seq"], total + 1 + i as u64);
        assert_eq!(line["kind"], "create_account");
        assert_eq!(line["result"]["status"], "account_created");
    }
    drop(run.node.take());

    // compare: a journal with itself, and with one that differs at a seq.
    let same = updown_ok(&["replay", "--data-dir", d, "--compare", d]);
    assert!(same.starts_with("IDENTICAL"), "{same}");
    let other = tempfile::tempdir().unwrap();
    let diverge_at = 6001u64;
    {
        let (mut copy, _) = Node::open(node_config(other.path()), SIM_T0).unwrap();
        // The copy's node wrote its opening commands (configuration, rules)
        // itself, as the original's did.
        let opened = copy.state().last_seq as usize;
        for s in run.stamped.iter().skip(opened) {
            if s.seq == diverge_at {
                copy.submit(
                    s.ts_ms,
                    Cmd::Deposit {
                        account: 1,
                        cents: 1,
                    },
                )
                .unwrap();
            }
            copy.submit(s.ts_ms, s.command.clone()).unwrap();
            copy.drain_events();
        }
        copy.commit().unwrap();
    }
    let (ok, out, err) = updown(&["replay", "--data-dir", d, "--compare", p(other.path())]);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("events first differ at seq {diverge_at}")),
        "{out}"
    );
    assert!(out.contains("deposit"), "{out}");
    assert!(
        err.contains(&format!("differ at seq {diverge_at}")),
        "{err}"
    );
    // A command that differs in a field its events do not show (the
    // client_order_id of an order) is found at its own seq too.
    let renamed = tempfile::tempdir().unwrap();
    let renamed_at = {
        let (mut copy, _) = Node::open(node_config(renamed.path()), SIM_T0).unwrap();
        let opened = copy.state().last_seq as usize;
        let mut renamed_at = None;
        for s in run.stamped.iter().skip(opened) {
            let mut command = s.command.clone();
            if let Cmd::PlaceOrder { order, .. } = &mut command {
                if renamed_at.is_none() && s.seq > 5000 {
                    let mut text = order.client_order_id.as_str().to_string();
                    text.push('x');
                    if let Some(id) = sequencer::types::ClientOrderId::new(&text) {
                        order.client_order_id = id;
                        renamed_at = Some(s.seq);
                    }
                }
            }
            copy.submit(s.ts_ms, command).unwrap();
            copy.drain_events();
            if renamed_at == Some(s.seq) {
                // A snapshot right after the command the journals differ
                // by: it names a record the original does not hold.
                copy.snapshot().unwrap();
            }
        }
        copy.commit().unwrap();
        renamed_at.expect("an order to rename")
    };
    // What the comparison reports is the first seq whose events differ:
    // none here; the command that differs is named beside it.
    // (Up to a seq both journals hold: the original has five more
    // commands at its end.)
    let until = (renamed_at + 100).to_string();
    let compare_renamed = |extra: &[&str]| {
        let mut args = vec![
            "replay",
            "--data-dir",
            d,
            "--compare",
            p(renamed.path()),
            "--until-seq",
            &until,
        ];
        args.extend_from_slice(extra);
        updown(&args)
    };
    let (ok, out, _) = compare_renamed(&[]);
    assert!(!ok, "{out}");
    assert_eq!(
        updown_status(&[
            "replay",
            "--data-dir",
            d,
            "--compare",
            p(renamed.path()),
            "--until-seq",
            &until
        ]),
        Some(1)
    );
    assert!(out.starts_with("SAME EVENTS"), "{out}");
    assert!(
        out.contains(&format!(
            "the commands first differ at seq {renamed_at}, with the same events"
        )),
        "{out}"
    );
    let (ok, out, _) = compare_renamed(&["--json"]);
    assert!(!ok);
    let report: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON document");
    assert_eq!(report["result"], "same events", "{report}");
    assert_eq!(report["first_command_difference_seq"], renamed_at);
    assert!(report["first_event_difference_seq"].is_null(), "{report}");
    let same = updown_ok(&["replay", "--data-dir", d, "--compare", d, "--json"]);
    let report: serde_json::Value = serde_json::from_str(same.trim()).expect("one JSON document");
    assert_eq!(report["result"], "identical", "{report}");

    // A damaged journal: verify names the segment and offset and fails;
    // dump prints what comes before and stops with the same place.
    let broken = tempfile::tempdir().unwrap();
    copy_dir(&data, broken.path());
    let bad_seq = 3000;
    let (segment, offset) = damage(broken.path(), bad_seq);
    let b = p(broken.path());
    // Exit status: 1 for what a check finds, 2 when it cannot check.
    assert_eq!(
        updown_status(&["journal", "verify", "--data-dir", b]),
        Some(1)
    );
    assert_eq!(
        updown_status(&["journal", "verify", "--data-dir", "/nonexistent"]),
        Some(2)
    );
    assert_eq!(
        updown_status(&["journal", "verify", "--data-dir", p(renamed.path())]),
        Some(0)
    );
    assert_eq!(
        updown_status(&["replay", "--data-dir", d, "--compare", b]),
        Some(2)
    );
    // An empty directory is a wrong path, not a journal that differs.
    let empty = tempfile::tempdir().unwrap();
    let (ok, _, err) = updown(&["replay", "--data-dir", d, "--compare", p(empty.path())]);
    assert!(!ok && err.contains("no journal at"), "{err}");
    assert_eq!(
        updown_status(&["replay", "--data-dir", d, "--compare", p(empty.path())]),
        Some(2)
    );
    // A snapshot of the original at the seq the journals differ by,
    // written by the offline tool, put in place of the renamed journal's
    // own: verify warns and names it (the journal itself is whole), and a
    // replay passes it over.
    let mixed = tempfile::tempdir().unwrap();
    copy_dir(renamed.path(), mixed.path());
    let m = p(mixed.path());
    let foreign = snapshot::file_name(renamed_at);
    let theirs = tempfile::tempdir().unwrap();
    updown_ok(&[
        "snapshot",
        "--data-dir",
        d,
        "--snapshots",
        p(theirs.path()),
        "--until-seq",
        &renamed_at.to_string(),
    ]);
    std::fs::copy(
        theirs.path().join(&foreign),
        mixed.path().join("snapshots").join(&foreign),
    )
    .unwrap();
    let (ok, out, err) = updown(&["journal", "verify", "--data-dir", m]);
    assert!(ok && out.starts_with("OK"), "{out}");
    assert!(
        err.contains("was not taken from this journal") && err.contains(&foreign),
        "{err}"
    );
    let v = json_one(&updown_ok(&[
        "journal",
        "verify",
        "--data-dir",
        m,
        "--json",
    ]));
    assert_eq!(
        v["snapshots_of_other_journals"][0]["seq"], renamed_at,
        "{v}"
    );
    let (ok, out, err) = updown(&["replay", "--data-dir", m, "--json"]);
    assert!(ok, "{err}");
    let summary = json_one(&out);
    assert!(summary["from_snapshot"].is_null(), "{summary}");
    assert!(err.contains("was not taken from this journal"), "{err}");
    let own = json_one(&updown_ok(&[
        "replay",
        "--data-dir",
        p(renamed.path()),
        "--json",
    ]));
    assert_eq!(own["from_snapshot"], renamed_at, "its own is tied to it");
    assert_eq!(summary["state_hash"], own["state_hash"]);
    let (ok, out, err) = updown(&["journal", "verify", "--data-dir", b]);
    assert!(!ok);
    assert!(
        out.contains(&segment) && out.contains(&format!("byte offset {offset}")),
        "{out}"
    );
    assert!(err.contains(&segment), "{err}");
    let (ok, out, err) = updown(&["journal", "dump", "--data-dir", b, "--json"]);
    assert!(!ok);
    assert_eq!(json_lines(&out).len() as u64, bad_seq - 1);
    assert!(
        err.contains(&segment) && err.contains(&format!("byte offset {offset}")),
        "{err}"
    );
    let (ok, _, err) = updown(&["replay", "--data-dir", b, "--no-snapshots"]);
    assert!(!ok && err.contains(&segment), "{err}");
    // Compared with the whole journal, the damaged copy is an error that
    // names the damage, never a divergence.
    let (ok, out, err) = updown(&["replay", "--data-dir", d, "--compare", b]);
    assert!(!ok);
    assert!(!out.contains("DIFFERENT"), "{out}");
    assert!(
        err.contains(&format!("cannot compare past seq {}", bad_seq - 1))
            && err.contains("could not be replayed further")
            && err.contains(&segment),
        "{err}"
    );
    let (ok, out, _) = updown(&["replay", "--data-dir", d, "--compare", b, "--json"]);
    assert!(!ok);
    let report: serde_json::Value = serde_json::from_str(out.trim()).expect("one JSON document");
    assert_eq!(report["result"], "error", "{report}");
    assert_eq!(report["compared_through_seq"], bad_seq - 1, "{report}");
    // Every other reader that has to go through the damaged record fails
    // the same way, naming where it is, after what comes before it.
    for args in [
        vec!["journal", "stats", "--data-dir", b],
        vec!["journal", "find", "--data-dir", b, "--account", "1"],
        vec![
            "journal",
            "tail",
            "--data-dir",
            b,
            "--no-snapshots",
            "-n",
            "5",
        ],
        vec!["snapshot", "--data-dir", b, "--no-snapshots"],
    ] {
        let (ok, _, err) = updown(&args);
        assert!(
            !ok && err.contains(&segment) && err.contains(&format!("byte offset {offset}")),
            "{args:?}: {err}"
        );
    }
    // Those that need not go through it answer: up to the record before,
    // and from a snapshot taken after it (snapshots carry their own
    // checksum; `verify` is what judges the journal itself).
    let (ok, out, err) = updown(&[
        "replay",
        "--data-dir",
        b,
        "--no-snapshots",
        "--until-seq",
        "2999",
    ]);
    assert!(ok && out.contains("state as of seq 2999"), "{out}{err}");
    let (ok, out, err) = updown(&["journal", "tail", "--data-dir", b, "-n", "5"]);
    assert!(ok && out.lines().count() == 5, "{out}{err}");
}

/// A child process killed when dropped (also when a test fails).
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads `n` JSON lines from a child's stdout, failing after 20 s.
fn read_lines(child: &mut Child, n: usize) -> Vec<Value> {
    let stdout = child.stdout.as_mut().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut lines = Vec::new();
    let mut current = Vec::new();
    let mut byte = [0u8; 1];
    while lines.len() < n {
        assert!(
            Instant::now() < deadline,
            "tail -f printed {} lines",
            lines.len()
        );
        if stdout.read(&mut byte).unwrap() == 0 {
            panic!("tail -f ended");
        }
        if byte[0] == b'\n' {
            lines.push(serde_json::from_slice(&current).unwrap());
            current.clear();
        } else {
            current.push(byte[0]);
        }
    }
    lines
}

// ---- a real server ----

/// `updown serve --demo` in a child, and the demo key it printed.
fn serve(dir: &Path) -> (Serve, String) {
    let serve = Launch::new(dir, None).arg("--demo").start();
    let line = serve.wait_line(|l| l.contains("tk_test_"));
    let at = line.find("tk_test_").expect("a demo key");
    let key = line[at..].split_whitespace().next().unwrap().to_string();
    (serve, key)
}

fn admin_json(dir: &Path, args: &[&str]) -> Value {
    let mut all = vec!["admin", "--data-dir", p(dir), "--json"];
    all.extend_from_slice(args);
    serde_json::from_str(&updown_ok(&all)).unwrap()
}

/// What the REST API answered right after one command.
struct Seen {
    client_order_id: String,
    book: Value,
    balance: Value,
    positions: Value,
    orders: Value,
    fills: Value,
}

fn look(s: &Serve, key: &str, ticker: &str, client_order_id: &str) -> Seen {
    let get = |path: &str| {
        let (status, v) = http(&s.addr, "GET", path, key, None);
        assert_eq!(status, 200, "{path}: {v}");
        v
    };
    Seen {
        client_order_id: client_order_id.into(),
        book: get(&format!("/markets/{ticker}/orderbook")),
        balance: get("/portfolio/balance"),
        positions: get("/portfolio/positions"),
        orders: get("/portfolio/orders"),
        fills: get("/portfolio/fills"),
    }
}

#[test]
fn a_real_server_run_replays_to_what_rest_answered() {
    let dir = tempfile::tempdir().unwrap();
    let d = p(dir.path());
    let (mut server, a_key) = serve(dir.path());
    let demo: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("demo-account.json")).unwrap(),
    )
    .unwrap();
    let a_id = demo["account_id"].as_u64().unwrap();
    let created = admin_json(dir.path(), &["account", "create", "--cash", "1000"]);
    let b_id = created["account_id"].as_u64().unwrap().to_string();
    admin_json(dir.path(), &["account", "accept-terms", &b_id]);
    admin_json(dir.path(), &["account", "allow-trading", &b_id]);
    let issued = admin_json(
        dir.path(),
        &["key", "issue", "--account", &b_id, "--scopes", "read,trade"],
    );
    let b_key = issued["key"].as_str().unwrap().to_string();

    // An open hourly window with two minutes left (just after start-up the
    // window may not be open yet; near its close, wait for the next one).
    let deadline = Instant::now() + Duration::from_secs(240);
    let ticker = loop {
        assert!(Instant::now() < deadline, "no open aapl-60m window");
        let (_, markets) = http(
            &server.addr,
            "GET",
            "/markets?series_ticker=aapl-60m&status=open",
            &a_key,
            None,
        );
        let m = &markets["markets"][0];
        if common::closes_after(m, 120_000) {
            break m["ticker"].as_str().unwrap().to_string();
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let order = |key: &str, outcome: &str, price: &str, count: u32, cid: &str| {
        let body = format!(
            r#"{{"market_ticker":"{ticker}","outcome":"{outcome}","action":"buy","price":"{price}","count":"{count}","client_order_id":"{cid}"}}"#
        );
        let (status, placed) = http(&server.addr, "POST", "/portfolio/orders", key, Some(&body));
        assert_eq!(status, 201, "{placed}");
        placed
    };
    let mut seen = Vec::new();
    order(&a_key, "up", "0.55", 10, "a-1");
    seen.push(look(&server, &a_key, &ticker, "a-1"));
    order(&a_key, "up", "0.50", 3, "a-2");
    seen.push(look(&server, &a_key, &ticker, "a-2"));
    let crossed = order(&b_key, "down", "0.45", 4, "b-1");
    assert_eq!(crossed["order"]["fill_count"], "4", "{crossed}");
    seen.push(look(&server, &a_key, &ticker, "b-1"));

    // Read the live journal while the server writes it.
    let live = updown_ok(&["journal", "verify", "--data-dir", d]);
    assert!(live.starts_with("OK"), "{live}");
    let placed = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        d,
        "--json",
        "--kind",
        "place_order",
    ]));
    assert_eq!(placed.len(), 3);
    let mut seq_of = BTreeMap::new();
    for line in &placed {
        assert_eq!(line["context"]["market_ticker"], ticker.as_str());
        seq_of.insert(
            line["command"]["client_order_id"]
                .as_str()
                .unwrap()
                .to_string(),
            line["seq"].as_u64().unwrap(),
        );
    }
    let text = updown_ok(&["journal", "tail", "-n", "5", "--data-dir", d]);
    assert_eq!(text.lines().count(), 5);
    // A snapshot into the running venue's own snapshots is refused (it
    // could be past what the venue made durable); elsewhere it is made.
    let (ok, _, err) = updown(&["snapshot", "--data-dir", d]);
    assert!(!ok && err.contains("a venue is running on"), "{err}");
    // Named relative to the working directory too, before the venue has
    // made its snapshots directory.
    assert!(!dir.path().join("snapshots").exists());
    let relative = Command::new(BIN)
        .current_dir(dir.path().parent().unwrap())
        .args(["snapshot", "--data-dir"])
        .arg(dir.path().file_name().unwrap())
        .output()
        .unwrap();
    assert_eq!(relative.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&relative.stderr).contains("a venue is running on"),
        "{}",
        String::from_utf8_lossy(&relative.stderr)
    );
    let elsewhere = dir.path().join("elsewhere");
    let shot = updown_ok(&[
        "snapshot",
        "--data-dir",
        d,
        "--snapshots",
        elsewhere.to_str().unwrap(),
    ]);
    assert!(shot.contains("elsewhere"), "{shot}");
    assert!(server.sigterm().success());

    // Each moment, rebuilt, answers what REST answered then.
    for s in &seen {
        let seq = seq_of[&s.client_order_id].to_string();
        let exports = json_lines(&updown_ok(&[
            "replay",
            "--data-dir",
            d,
            "--until-seq",
            &seq,
            "--book",
            &ticker,
            "--account",
            &a_id.to_string(),
        ]));
        assert_eq!(exports[0], s.book, "book after {}", s.client_order_id);
        let account = &exports[1];
        assert_eq!(
            account["balance"], s.balance["balance"],
            "after {}",
            s.client_order_id
        );
        assert_eq!(account["positions"], s.positions["positions"]);
        assert_eq!(account["orders"], s.orders["orders"]);
        assert_eq!(account["fills"], s.fills["fills"]);
    }
    // The readable dump names the accounts' orders with their market.
    let text = updown_ok(&["journal", "dump", "--data-dir", d, "--kind", "place_order"]);
    assert!(
        text.contains(&format!("market={ticker} buy up 0.55 x10 gtc id=a-1")),
        "{text}"
    );
    assert!(text.contains("filled 4/4"), "{text}");
    let by_account = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        d,
        "--json",
        "--kind",
        "place_order",
        "--account",
        &a_id.to_string(),
    ]));
    assert_eq!(
        by_account.len(),
        3,
        "B's order filled A's: it concerns A too"
    );
    let stats = json_one(&updown_ok(&["journal", "stats", "--data-dir", d, "--json"]));
    assert_eq!(stats["kinds"]["place_order"], 3);
    assert_eq!(stats["markets"][&ticker]["trades"], 1);
    let shot = updown_ok(&[
        "snapshot",
        "--data-dir",
        d,
        "--until-seq",
        &seq_of["a-2"].to_string(),
    ]);
    assert!(
        shot.contains(&format!("at seq {}", seq_of["a-2"])),
        "{shot}"
    );

    // Damage the journal of the stopped server.
    let (segment, offset) = damage(dir.path(), seq_of["a-2"]);
    let (ok, out, _) = updown(&["journal", "verify", "--data-dir", d]);
    assert!(
        !ok && out.contains(&segment) && out.contains(&format!("byte offset {offset}")),
        "{out}"
    );
    let (ok, out, err) = updown(&["journal", "dump", "--data-dir", d, "--raw"]);
    assert!(!ok);
    assert_eq!(out.lines().count() as u64, seq_of["a-2"] - 1);
    assert!(
        err.contains(&segment) && err.contains(&format!("byte offset {offset}")),
        "{err}"
    );
}

/// A journal of a newer build's business rules: the tools that apply
/// commands (for replies and events) stop at its `SetRules`, naming the
/// seq, rather than print this build's guesses of what came after; raw
/// reading of the records still works.
#[test]
fn tools_stop_at_a_newer_builds_rules() {
    let dir = tempfile::tempdir().unwrap();
    let newer = sequencer::limits::RULES_CURRENT + 1;
    let seq = {
        let (mut node, _) = Node::open(node_config(dir.path()), SIM_T0).unwrap();
        let (seq, _) = node
            .submit(SIM_T0, Cmd::SetRules { version: newer })
            .unwrap();
        node.submit(SIM_T0 + 1, Cmd::Tick).unwrap();
        node.commit().unwrap();
        seq
    };
    let d = p(dir.path());
    let says = format!("seq {seq} moves the venue to business rules version {newer}");
    for args in [
        vec!["journal", "dump", "--data-dir", d],
        vec!["journal", "find", "--data-dir", d, "--kind", "tick"],
        vec!["replay", "--data-dir", d],
    ] {
        let (ok, out, err) = updown(&args);
        assert!(!ok, "{args:?} went on: {out}");
        assert!(err.contains(&says), "{args:?}: {err}");
    }
    let (ok, out, err) = updown(&["journal", "verify", "--data-dir", d]);
    assert!(ok, "verify reads records only: {out} {err}");
}

/// `replay --market` of a settled market whose trades left the live state
/// (one history tail after settlement) shows them from the venue's
/// history store, read only, when given the data directory; from a bare
/// journal, `null` with a word saying where they are. (It exported an
/// empty list, as if the market never traded.)
#[test]
fn replay_market_reads_a_settled_markets_trades_from_the_history_store() {
    use sequencer::command::{AccountFlag, NewKey, NewOrder, SeriesConfig};
    use sequencer::types::{
        Action, ClientOrderId, Environment, KeyLimits, Outcome, Scopes, TimeInForce,
    };
    use sequencer::Reply;

    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut config = node_config(&data);
    config.history_dir = Some(data.join("history"));
    const MINUTE: u64 = 60_000;
    let t0 = 30_000_000 * MINUTE;
    let (mut node, _) = Node::open(config, t0).expect("open");
    let submit = |node: &mut Node, ts: u64, command: Cmd| {
        let (_, reply) = node.submit(ts, command).expect("append");
        assert!(!reply.is_rejected(), "{reply:?}");
        reply
    };
    submit(&mut node, t0, Cmd::SetRetention { tail_ms: 1_000 });
    submit(
        &mut node,
        t0,
        Cmd::CreateSeries(SeriesConfig {
            ticker: "hist-1m".into(),
            symbol: "X:BTCUSD".into(),
            window_ms: MINUTE,
            list_ahead: 1,
            taker_fee_bps: 700,
            maker_fee_bps: 0,
            market_cap_cents: 100_000_000,
        }),
    );
    let price = |t_ms: u64, dollars: i64| Cmd::Price {
        symbol: "X:BTCUSD".into(),
        price_e8: dollars * 100_000_000,
        t_ms,
    };
    submit(&mut node, t0 + 1, price(t0 + 1, 97_000));
    submit(&mut node, t0 + 2, Cmd::Tick);
    let market = node.state().active_markets[0];
    let ticker = node.state().markets[market as usize].ticker.clone();
    let mut keys = Vec::new();
    for i in 0..2 {
        let Reply::AccountCreated { account } = submit(&mut node, t0 + 3, Cmd::CreateAccount)
        else {
            panic!("no account")
        };
        submit(
            &mut node,
            t0 + 3,
            Cmd::Deposit {
                account,
                cents: 100_000,
            },
        );
        for flag in [AccountFlag::TermsAccepted, AccountFlag::TradingAllowed] {
            submit(
                &mut node,
                t0 + 3,
                Cmd::SetAccountFlag {
                    account,
                    flag,
                    value: true,
                },
            );
        }
        let Reply::KeyIssued { key } = submit(
            &mut node,
            t0 + 3,
            Cmd::IssueKey(NewKey {
                account,
                key_id: format!("hist{i}"),
                fingerprint: gateway::auth::fingerprint(&format!("histsecret{i}abcdefgh")),
                name: "hist".into(),
                environment: Environment::Test,
                scopes: Scopes::parse_list("read,trade").expect("scopes"),
                limits: KeyLimits {
                    max_order_cents: Some(100_000),
                    max_daily_cents: Some(100_000),
                    max_open_orders: None,
                    series: None,
                },
                ip_allowlist: Vec::new(),
                expires_days: None,
            }),
        ) else {
            panic!("no key")
        };
        keys.push(key);
    }
    // Three trades: an up bid crossed by a down bid each time.
    for n in 0..3u8 {
        for (trader, outcome, price) in [(0, Outcome::Up, 40 + n), (1, Outcome::Down, 60 - n)] {
            submit(
                &mut node,
                t0 + 10 + u64::from(n),
                Cmd::PlaceOrder {
                    key: keys[trader],
                    order: NewOrder {
                        market,
                        outcome,
                        action: Action::Buy,
                        price,
                        count: 1,
                        time_in_force: TimeInForce::GoodTillCanceled,
                        post_only: false,
                        client_order_id: ClientOrderId::new(&format!("h{trader}-{n}")).expect("id"),
                    },
                },
            );
        }
    }
    assert_eq!(node.state().markets[market as usize].trades.len(), 3);
    // The window closes and settles; a tail later its trades leave.
    submit(&mut node, t0 + MINUTE, price(t0 + MINUTE, 97_100));
    submit(&mut node, t0 + MINUTE + 1, Cmd::Tick);
    submit(&mut node, t0 + MINUTE + 3_000, Cmd::Tick);
    assert!(
        node.state().markets[market as usize].history,
        "the trades did not leave"
    );
    node.commit().expect("commit");
    node.snapshot().expect("snapshot: the store synced");
    drop(node);

    let d = p(&data);
    let exported = json_one(&updown_ok(&[
        "replay",
        "--data-dir",
        d,
        "--market",
        &ticker,
    ]));
    assert_eq!(exported["trades_from"], "the history store", "{exported}");
    let trades = exported["trades"].as_array().expect("trades");
    assert_eq!(trades.len(), 3, "{exported}");
    assert!(
        trades[0]["trade_id"].as_str() > trades[2]["trade_id"].as_str(),
        "newest first"
    );
    let journal_only = data.join("journal");
    let bare = json_one(&updown_ok(&[
        "replay",
        "--journal",
        p(&journal_only),
        "--market",
        &ticker,
    ]));
    assert!(bare["trades"].is_null(), "{bare}");
    assert!(
        bare["trades_from"].as_str().unwrap().contains("--data-dir"),
        "{bare}"
    );
}

/// A copy of a simulated journal written by its own node (which journals
/// its opening commands itself, as the original's did): each command after
/// those as `edit` returns it, up to seq `until` when given.
fn copy_journal(
    run: &SimRun,
    dir: &Path,
    until: Option<u64>,
    mut edit: impl FnMut(&Stamped) -> Cmd,
) {
    let (mut copy, _) = Node::open(node_config(dir), SIM_T0).unwrap();
    let opened = copy.state().last_seq as usize;
    for s in run.stamped.iter().skip(opened) {
        if until.is_some_and(|u| s.seq > u) {
            break;
        }
        copy.submit(s.ts_ms, edit(s)).unwrap();
        copy.drain_events();
    }
    copy.commit().unwrap();
}

/// The first `n` place_order seqs past `after` whose client_order_id can
/// take one more character (to rename them in a copy).
fn renaming(run: &SimRun, after: u64, n: usize) -> Vec<u64> {
    run.stamped
        .iter()
        .filter(|s| s.seq > after)
        .filter_map(|s| match &s.command {
            Cmd::PlaceOrder { order, .. } => {
                let text = format!("{}x", order.client_order_id.as_str());
                sequencer::types::ClientOrderId::new(&text).map(|_| s.seq)
            }
            _ => None,
        })
        .take(n)
        .collect()
}

/// Two journals whose commands differ at several seqs without their events
/// differing (client_order_ids): `replay --compare` names the first of
/// them (the one to look at first), in its text and its JSON, not the last.
#[test]
fn a_comparison_names_the_first_of_several_commands_that_differ_with_the_same_events() {
    let (run, d) = simulate_closed(7, 12_000);
    let renamed = renaming(&run, 5000, 3);
    assert_eq!(renamed.len(), 3);
    let other = tempfile::tempdir().unwrap();
    copy_journal(&run, other.path(), None, |s| {
        let mut command = s.command.clone();
        if let Cmd::PlaceOrder { order, .. } = &mut command {
            if renamed.contains(&s.seq) {
                let text = format!("{}x", order.client_order_id.as_str());
                order.client_order_id = sequencer::types::ClientOrderId::new(&text).unwrap();
            }
        }
        command
    });
    let until = (renamed[2] + 10).to_string();
    let args = [
        "replay",
        "--data-dir",
        &d,
        "--compare",
        p(other.path()),
        "--until-seq",
        &until,
    ];
    // (Resting orders keep their client_order_id: the final states differ
    // too, which the comparison says beside.)
    let (ok, out, _) = updown(&args);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!(
            "the commands first differ at seq {}, with the same events",
            renamed[0]
        )),
        "{out}"
    );
    let mut json = args.to_vec();
    json.push("--json");
    let (ok, out, _) = updown(&json);
    assert!(!ok);
    let report = json_one(&out);
    assert_eq!(
        report["first_command_difference_seq"], renamed[0],
        "{report}"
    );
}

/// A journal that is the other's first records only: `replay --compare`
/// exits 1 naming the shorter journal and the last seq it holds, in its
/// text and its JSON (`ends_after_seq`).
#[test]
fn a_comparison_with_a_journal_cut_short_names_its_last_seq() {
    let (run, d) = simulate_closed(7, 12_000);
    let cut = 6000u64;
    let short = tempfile::tempdir().unwrap();
    copy_journal(&run, short.path(), Some(cut), |s| s.command.clone());
    let short_journal = short.path().join("journal");
    let args = ["replay", "--data-dir", &d, "--compare", p(short.path())];
    assert_eq!(updown_status(&args), Some(1));
    let (_, out, _) = updown(&args);
    assert!(
        out.contains(&format!(
            "DIFFERENT: {} ends after seq {cut}; {} goes on with seq {}",
            short_journal.display(),
            run.dir.path().join("journal").display(),
            cut + 1
        )),
        "{out}"
    );
    let mut json = args.to_vec();
    json.push("--json");
    let (ok, out, _) = updown(&json);
    assert!(!ok);
    let report = json_one(&out);
    assert_eq!(report["result"], "different", "{report}");
    assert_eq!(report["ends_after_seq"], cut, "{report}");
    assert_eq!(report["shorter"], p(&short_journal), "{report}");
}

/// `--from-time T` where T is the time of a snapshot's own last command
/// shows every record stamped at T, those the snapshot holds too: the
/// replay alongside starts before them (from the snapshot, they were left
/// out).
#[test]
fn a_time_range_from_a_snapshots_own_time_shows_the_records_stamped_then() {
    let (run, d) = simulate_closed(7, 12_000);
    let at = run.stamped[run.snapshot_seq as usize - 1].ts_ms;
    let t = at.to_string();
    let shown = json_lines(&updown_ok(&[
        "journal",
        "dump",
        "--data-dir",
        &d,
        "--json",
        "--from-time",
        &t,
        "--to-time",
        &t,
    ]));
    let expected: Vec<u64> = run
        .stamped
        .iter()
        .filter(|s| s.ts_ms == at)
        .map(|s| s.seq)
        .collect();
    assert!(expected.contains(&run.snapshot_seq));
    assert_eq!(seqs(&shown), expected);
    assert!(shown.iter().all(|l| l["result"].is_object()), "replayed");
}

/// `--from-seq S` where S is a snapshot's own seq shows the record S (the
/// replay alongside starts from an older snapshot, not from the one that
/// already holds S).
#[test]
fn a_seq_range_from_a_snapshots_own_seq_shows_that_record() {
    let (run, d) = simulate_closed(7, 12_000);
    let s = run.snapshot_seq.to_string();
    let shown = json_lines(&updown_ok(&[
        "journal",
        "dump",
        "--data-dir",
        &d,
        "--json",
        "--from-seq",
        &s,
        "--to-seq",
        &s,
    ]));
    assert_eq!(seqs(&shown), vec![run.snapshot_seq]);
    assert!(shown[0]["result"].is_object(), "{}", shown[0]);
}

/// `journal stats` counts, for each market, the orders refused and the
/// contracts traded (a trade's count, not one per trade), as the records
/// and their events say.
#[test]
fn stats_counts_the_refused_orders_and_the_contracts_traded_of_each_market() {
    let (_run, d) = simulate_closed(7, 12_000);
    let lines = dump_with_events(&d);
    let mut refused: BTreeMap<String, u64> = BTreeMap::new();
    let mut contracts: BTreeMap<String, u64> = BTreeMap::new();
    let mut trades = 0;
    for l in &lines {
        if l["kind"] == "place_order" && l["result"]["status"] == "rejected" {
            if let Some(t) = l["context"]["market_ticker"].as_str() {
                *refused.entry(t.to_string()).or_default() += 1;
            }
        }
        for e in l["events"].as_array().unwrap() {
            if e["event"] == "trade" {
                trades += 1;
                let count: u64 = e["count"].as_str().unwrap().parse().unwrap();
                *contracts
                    .entry(e["market_ticker"].as_str().unwrap().to_string())
                    .or_default() += count;
            }
        }
    }
    assert!(!refused.is_empty(), "the simulation has refused orders");
    assert!(
        contracts.values().sum::<u64>() > trades,
        "some trade is of several contracts"
    );
    let stats = json_one(&updown_ok(&[
        "journal",
        "stats",
        "--data-dir",
        &d,
        "--json",
    ]));
    for (ticker, n) in &refused {
        assert_eq!(stats["markets"][ticker]["rejected"], *n, "{ticker}");
    }
    for (ticker, n) in &contracts {
        assert_eq!(stats["markets"][ticker]["contracts"], *n, "{ticker}");
    }
}

/// A snapshot of the journal's very last record (an operator's `updown
/// snapshot`, a venue's snapshot at its stop) is no sign of lost records:
/// `journal verify` says OK and exits 0.
#[test]
fn verify_accepts_a_snapshot_of_the_journals_last_record() {
    let mut run = simulate(7, 3_000);
    {
        let mut node = run.node.take().unwrap();
        node.commit().unwrap();
        node.snapshot().unwrap();
    }
    let d = p(run.dir.path()).to_string();
    let newest = snapshot::list(&run.dir.path().join("snapshots"))[0].0;
    assert_eq!(newest, run.last_seq);
    let (code, out, err) = updown_exit(&["journal", "verify", "--data-dir", &d]);
    assert!(out.starts_with("OK:"), "{out}{err}");
    assert_eq!(code, Some(0));
}

/// A cancel that found its order already ended (its reply is the order,
/// it emits nothing) reads as such: not as an idempotent retry of a
/// placement, which only a place_order can be.
#[test]
fn a_cancel_of_an_ended_order_does_not_read_as_an_idempotent_retry() {
    let (_run, d) = simulate_closed(7, 12_000);
    let idle = idle_cancel(&d);
    let s = idle["seq"].as_u64().unwrap().to_string();
    let text = updown_ok(&[
        "journal",
        "dump",
        "--data-dir",
        &d,
        "--from-seq",
        &s,
        "--to-seq",
        &s,
    ]);
    assert!(
        text.contains(" cancel_order ") && text.contains("=> order "),
        "{text}"
    );
    assert!(!text.contains("idempotent retry"), "{text}");
}

/// The JSON line (with events) of a cancel_order whose order had already
/// ended: its reply names the order, it emits nothing.
fn idle_cancel(d: &str) -> Value {
    json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        d,
        "--json",
        "--events",
        "--kind",
        "cancel_order",
    ]))
    .into_iter()
    .find(|l| l["result"]["status"] == "order" && l["events"].as_array().is_some_and(Vec::is_empty))
    .expect("the simulation sends a cancel of an ended order")
}

/// `find --market T` finds a cancel of an order of T that had already
/// ended: it emits nothing, so only its command says which market it is
/// about.
#[test]
fn find_by_market_finds_a_cancel_of_an_ended_order_of_it() {
    let (_run, d) = simulate_closed(7, 12_000);
    let idle = idle_cancel(&d);
    let ticker = idle["context"]["market_ticker"].as_str().unwrap();
    let found = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        &d,
        "--json",
        "--market",
        ticker,
    ]));
    assert!(
        found.iter().any(|l| l["seq"] == idle["seq"]),
        "{idle} not found by --market {ticker}"
    );
}

/// `find --client-order-id C` finds the records that fill a resting order
/// named C, placed by others (only the resting order's events name it).
#[test]
fn find_by_client_order_id_finds_the_fills_of_its_resting_order() {
    let (_run, d) = simulate_closed(7, 12_000);
    let lines = json_lines(&updown_ok(&[
        "journal",
        "dump",
        "--data-dir",
        &d,
        "--json",
        "--events",
        "--kind",
        "place_order",
    ]));
    // A place_order whose events update an order other than the one it
    // placed: a resting order it filled.
    let (filling, cid) = lines
        .iter()
        .find_map(|l| {
            let placed = l["result"]["order"]["order_id"].as_str()?;
            let own = l["command"]["client_order_id"].as_str()?;
            l["events"].as_array()?.iter().find_map(|e| {
                let cid = e["client_order_id"].as_str()?;
                (e["event"] == "order" && e["order_id"].as_str()? != placed && cid != own)
                    .then(|| (l["seq"].clone(), cid.to_string()))
            })
        })
        .expect("a resting order filled by another's place");
    let found = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        &d,
        "--json",
        "--client-order-id",
        &cid,
    ]));
    assert!(
        found.iter().any(|l| l["seq"] == filling),
        "seq {filling} not found by --client-order-id {cid}"
    );
}

/// Writes `records` (kind in the header, stamp, command) straight into a
/// journal at DIR/journal, as no venue would: for damage only a decoding
/// check can see.
fn write_raw(dir: &Path, records: &[(u16, u64, Cmd)]) {
    let (mut journal, _) = journal::Journal::open(JournalConfig::new(dir.join("journal"))).unwrap();
    for (i, (kind, ts_ms, command)) in records.iter().enumerate() {
        let stamped = Stamped {
            seq: i as u64 + 1,
            ts_ms: *ts_ms,
            command: command.clone(),
        };
        journal
            .append(stamped.seq, *kind, &replay::codec::encode(&stamped))
            .unwrap();
    }
    journal.commit().unwrap();
}

/// A record stamped before the one before it (every checksum right):
/// `journal verify` says DAMAGED naming its seq, and exits 1.
#[test]
fn verify_finds_a_stamp_that_goes_back() {
    let dir = tempfile::tempdir().unwrap();
    let tick = Cmd::Tick.kind();
    write_raw(
        dir.path(),
        &[
            (tick, SIM_T0, Cmd::Tick),
            (tick, SIM_T0 + 2000, Cmd::Tick),
            (tick, SIM_T0 + 1000, Cmd::Tick),
        ],
    );
    let d = p(dir.path());
    let (code, out, _) = updown_exit(&["journal", "verify", "--data-dir", d]);
    assert!(
        out.contains("DAMAGED: record seq 3") && out.contains("goes back"),
        "{out}"
    );
    assert_eq!(code, Some(1), "{out}");
}

/// A record whose header names another kind than its payload holds (every
/// checksum right): `journal verify` says DAMAGED naming its seq, and
/// exits 1 (`--kind` selections read the header's kind).
#[test]
fn verify_finds_a_header_kind_its_payload_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let deposit = Cmd::Deposit {
        account: 1,
        cents: 1,
    }
    .kind();
    write_raw(
        dir.path(),
        &[
            (Cmd::Tick.kind(), SIM_T0, Cmd::Tick),
            (deposit, SIM_T0 + 1, Cmd::Tick),
        ],
    );
    let d = p(dir.path());
    let (code, out, _) = updown_exit(&["journal", "verify", "--data-dir", d]);
    assert!(
        out.contains("DAMAGED: record seq 2") && out.contains("header says kind"),
        "{out}"
    );
    assert_eq!(code, Some(1), "{out}");
}

/// `journal stats` counts, for each market, the cancels of its orders
/// (a cancel_order by the order's market, a cancel_all by the one it names).
#[test]
fn stats_counts_the_cancels_of_each_market() {
    let (_run, d) = simulate_closed(7, 12_000);
    let lines = json_lines(&updown_ok(&["journal", "dump", "--data-dir", &d, "--json"]));
    let mut cancels: BTreeMap<String, u64> = BTreeMap::new();
    for l in &lines {
        let ticker = match l["kind"].as_str().unwrap() {
            "cancel_order" => l["context"]["market_ticker"].as_str(),
            "cancel_all" => l["command"]["market"].as_str(),
            _ => None,
        };
        if let Some(t) = ticker {
            *cancels.entry(t.to_string()).or_default() += 1;
        }
    }
    assert!(!cancels.is_empty(), "the simulation cancels");
    let stats = json_one(&updown_ok(&[
        "journal",
        "stats",
        "--data-dir",
        &d,
        "--json",
    ]));
    for (ticker, n) in &cancels {
        assert_eq!(stats["markets"][ticker]["cancels"], *n, "{ticker}");
    }
}

/// `journal find` takes a seq or time range alone as its selection (as its
/// refusal without one says): the records of the range.
#[test]
fn find_takes_a_range_alone_as_its_selection() {
    let (run, d) = simulate_closed(7, 3_000);
    let found = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        &d,
        "--json",
        "--from-seq",
        "100",
        "--to-seq",
        "102",
    ]));
    assert_eq!(seqs(&found), vec![100, 101, 102]);
    let t = run.stamped[500].ts_ms.to_string();
    let found = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        &d,
        "--json",
        "--raw",
        "--from-time",
        &t,
        "--to-time",
        &t,
    ]));
    assert!(found.iter().any(|l| l["seq"] == 501), "{found:?}");
}

/// Where the events first differ, `replay --compare` says whether the
/// commands there differ too (a command inserted) or not (states that had
/// diverged before).
#[test]
fn a_comparison_says_whether_the_commands_differ_where_the_events_first_do() {
    let (run, d) = simulate_closed(7, 12_000);
    let at = 6001u64;
    let other = tempfile::tempdir().unwrap();
    copy_journal(&run, other.path(), None, |s| {
        if s.seq == at {
            Cmd::Deposit {
                account: 1,
                cents: 1,
            }
        } else {
            s.command.clone()
        }
    });
    let (ok, out, _) = updown(&["replay", "--data-dir", &d, "--compare", p(other.path())]);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!(
            "the events first differ at seq {at} (and so do the commands)"
        )),
        "{out}"
    );
}

/// `journal tail --to-time T -n N` prints the last N records stamped at or
/// before T (not the journal's last N, which are past T, so nothing).
#[test]
fn tail_to_a_time_prints_the_last_records_before_it() {
    let (run, d) = simulate_closed(7, 3_000);
    let at = run.stamped[1500].ts_ms;
    let t = at.to_string();
    let tail = json_lines(&updown_ok(&[
        "journal",
        "tail",
        "--data-dir",
        &d,
        "--json",
        "-n",
        "3",
        "--to-time",
        &t,
    ]));
    let before: Vec<u64> = run
        .stamped
        .iter()
        .filter(|s| s.ts_ms <= at)
        .map(|s| s.seq)
        .collect();
    assert_eq!(seqs(&tail), before[before.len() - 3..].to_vec());
}

/// A replay from a snapshot of the journal's very last record warns of
/// nothing: no record is missing (it said acknowledged records were).
#[test]
fn a_replay_from_a_snapshot_of_the_journals_last_record_does_not_warn() {
    let mut run = simulate(7, 3_000);
    {
        let mut node = run.node.take().unwrap();
        node.commit().unwrap();
        node.snapshot().unwrap();
    }
    let d = p(run.dir.path()).to_string();
    let (ok, out, err) = updown(&["replay", "--data-dir", &d, "--json"]);
    assert!(ok, "{err}");
    assert_eq!(json_one(&out)["from_snapshot"], run.last_seq, "{out}");
    assert!(!err.contains("warning"), "{err}");
}

/// `replay --until-time T` with T before the journal's first command fails
/// saying so, rather than print the summary of an empty venue as if it
/// were the state at T.
#[test]
fn a_replay_until_a_time_before_the_first_command_fails_saying_so() {
    let (run, d) = simulate_closed(7, 1_000);
    let before = (run.stamped[0].ts_ms - 1).to_string();
    let args = ["replay", "--data-dir", d.as_str(), "--until-time", &before];
    let (ok, out, err) = updown(&args);
    assert!(!ok, "{out}");
    assert!(err.contains("has no command at or before"), "{err}");
    assert_eq!(updown_status(&args), Some(2));
}

/// The replay summary's buying power is the cash less what orders hold, as
/// the balance endpoint says.
#[test]
fn the_replay_summarys_buying_power_is_cash_less_what_is_held() {
    let (_run, d) = simulate_closed(7, 12_000);
    let summary = json_one(&updown_ok(&["replay", "--data-dir", &d, "--json"]));
    let cents = |field: &str| -> i64 {
        let text = summary["money"][field].as_str().unwrap();
        (text.parse::<f64>().unwrap() * 100.0).round() as i64
    };
    assert!(cents("held") > 0, "{summary}");
    assert_eq!(
        cents("buying_power"),
        cents("cash") - cents("held"),
        "{summary}"
    );
}

/// `find --key K` finds the records that fill a resting order placed
/// through K, sent through other keys (only the order's events name it).
#[test]
fn find_by_key_finds_the_fills_of_its_resting_orders() {
    let (_run, d) = simulate_closed(7, 12_000);
    let lines = json_lines(&updown_ok(&[
        "journal",
        "dump",
        "--data-dir",
        &d,
        "--json",
        "--events",
        "--kind",
        "place_order",
    ]));
    let key_of_order: BTreeMap<String, u64> = lines
        .iter()
        .filter_map(|l| {
            Some((
                l["result"]["order"]["order_id"].as_str()?.to_string(),
                l["command"]["key"].as_u64()?,
            ))
        })
        .collect();
    // A place_order through one key that updates an order placed through
    // another: a resting order it filled.
    let (filling, key) = lines
        .iter()
        .find_map(|l| {
            let own = l["command"]["key"].as_u64()?;
            l["events"].as_array()?.iter().find_map(|e| {
                let key = *key_of_order.get(e["order_id"].as_str()?)?;
                (e["event"] == "order" && key != own).then(|| (l["seq"].clone(), key))
            })
        })
        .expect("a resting order filled through another key");
    let found = json_lines(&updown_ok(&[
        "journal",
        "find",
        "--data-dir",
        &d,
        "--json",
        "--key",
        &key.to_string(),
    ]));
    assert!(
        found.iter().any(|l| l["seq"] == filling),
        "seq {filling} not found by --key {key}"
    );
}

/// `journal stats` counts the fills of each market: every fill event.
#[test]
fn stats_counts_the_fills_of_each_market() {
    let (_run, d) = simulate_closed(7, 12_000);
    let lines = dump_with_events(&d);
    let fills = lines
        .iter()
        .flat_map(|l| l["events"].as_array().unwrap())
        .filter(|e| e["event"] == "fill")
        .count() as u64;
    assert!(fills > 0);
    let stats = json_one(&updown_ok(&[
        "journal",
        "stats",
        "--data-dir",
        &d,
        "--json",
    ]));
    let counted: u64 = stats["markets"]
        .as_object()
        .unwrap()
        .values()
        .map(|m| m["fills"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, fills);
}

/// Each JSON line's `events_count` is the number of events the command
/// caused (those `--events` lists).
#[test]
fn each_json_line_counts_its_events() {
    let (_run, d) = simulate_closed(7, 3_000);
    let lines = dump_with_events(&d);
    assert!(lines
        .iter()
        .any(|l| l["events_count"].as_u64().unwrap() > 0));
    for l in &lines {
        assert_eq!(
            l["events_count"],
            l["events"].as_array().unwrap().len(),
            "{l}"
        );
    }
}

/// `journal verify --json` and `journal stats --json` name the journal's
/// first and last stamps, as their text does.
#[test]
fn verify_and_stats_name_the_first_and_last_stamps() {
    let (run, d) = simulate_closed(7, 3_000);
    let (first, last) = (run.stamped[0].ts_ms, run.stamped.last().unwrap().ts_ms);
    assert!(first < last);
    for verb in ["verify", "stats"] {
        let v = json_one(&updown_ok(&["journal", verb, "--data-dir", &d, "--json"]));
        assert_eq!(v["first_ts_ms"], first, "{verb}: {v}");
        assert_eq!(v["last_ts_ms"], last, "{verb}: {v}");
    }
}

/// A refusal's JSON gives the HTTP status the venue answered with, the one
/// its readable line shows (not 400 for every code).
#[test]
fn a_refusals_json_gives_the_http_status_its_line_shows() {
    let (_run, d) = simulate_closed(7, 12_000);
    let lines = json_lines(&updown_ok(&["journal", "dump", "--data-dir", &d, "--json"]));
    let text = updown_ok(&["journal", "dump", "--data-dir", &d]);
    let text: Vec<&str> = text.lines().collect();
    let mut statuses = std::collections::BTreeSet::new();
    for (l, line) in lines.iter().zip(&text) {
        if l["result"]["status"] == "rejected" {
            let status = l["result"]["http_status"].as_u64().unwrap();
            let code = l["result"]["code"].as_str().unwrap();
            assert!(
                line.contains(&format!("=> rejected {status} {code}")),
                "{l}\n{line}"
            );
            statuses.insert(status);
        }
    }
    assert!(
        statuses.len() > 1,
        "refusals of several statuses: {statuses:?}"
    );
}

/// The selections of `journal find` that name one thing, and the fields
/// of a record's JSON (at any depth) that name it.
const SELECTIONS: [(&str, &[&str]); 5] = [
    ("--account", &["account"]),
    ("--key", &["key_id"]),
    ("--market", &["market_ticker", "market"]),
    ("--order-id", &["order_id", "order_ids"]),
    ("--client-order-id", &["client_order_id"]),
];

/// `journal find --account/--key/--market/--order-id/--client-order-id`
/// finds exactly the records that name the account, key, market, order or
/// client order id somewhere (command, context, result or events). Asked
/// of what the records that changed nothing name (a refused withdrawal, a
/// refused order, a cancel-all that found nothing, a refused key change:
/// no event names them), of what the most records name, and of an order a
/// window's close cancelled (named by that tick's events alone).
#[test]
fn find_selections_find_exactly_the_records_that_name_what_was_asked() {
    use std::collections::BTreeSet;
    let (_run, d) = simulate_closed(7, 12_000);
    let all = dump_with_events(&d);
    // What each record names, for each selection; and the key indexes it
    // names (a maker's order in a fill names its key by index alone).
    let names_of = |names: &[&str]| -> Vec<BTreeSet<String>> {
        all.iter()
            .map(|l| {
                let mut out = BTreeSet::new();
                named(l, names, &mut out);
                out
            })
            .collect()
    };
    let named_by: BTreeMap<&str, Vec<BTreeSet<String>>> = SELECTIONS
        .iter()
        .map(|&(flag, names)| (flag, names_of(names)))
        .collect();
    let key_indexes_named = names_of(&["key", "idx"]);
    let key_index: BTreeMap<&str, String> = all
        .iter()
        .filter_map(|l| {
            Some((
                l["context"]["key_id"].as_str()?,
                l["context"]["key"].to_string(),
            ))
        })
        .collect();
    let mut asks: BTreeMap<&str, BTreeMap<String, Ask>> = BTreeMap::new();
    let mut ask = |flag: &'static str, value: &Value, seq: Option<u64>| {
        // Null, or nothing a command line can carry (the simulation's bad
        // client order ids hold NUL bytes).
        if value.is_null() || value.as_str().is_some_and(|t| t.contains('\0')) {
            return;
        }
        let text = value
            .as_str()
            .map_or_else(|| value.to_string(), str::to_string);
        let a = asks.entry(flag).or_default().entry(text).or_default();
        match seq {
            Some(seq) => a.seqs.push(seq),
            None => a.busy = true,
        }
    };
    fn either<'a>(first: &'a Value, or: &'a Value) -> &'a Value {
        if first.is_null() {
            or
        } else {
            first
        }
    }
    for l in all.iter().filter(|l| l["events_count"] == 0) {
        let seq = Some(l["seq"].as_u64().unwrap());
        let (command, context) = (&l["command"], &l["context"]);
        ask(
            "--account",
            either(&command["account"], &context["account"]),
            seq,
        );
        ask("--key", either(&command["key_id"], &context["key_id"]), seq);
        let market = if command["market"].is_string() {
            &command["market"]
        } else {
            &context["market_ticker"]
        };
        ask("--market", market, seq);
        let order = match (l["kind"].as_str(), l["result"]["status"].as_str()) {
            (Some("cancel_order"), _) => &command["order_id"],
            (Some("place_order"), Some("order")) => &l["result"]["order"]["order_id"],
            _ => &Value::Null,
        };
        ask("--order-id", order, seq);
        ask("--client-order-id", &command["client_order_id"], seq);
    }
    // And for each selection the value the most records name, which asks
    // for the records events alone tie to it.
    for (&flag, sets) in &named_by {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for text in sets.iter().flatten() {
            *counts.entry(text).or_default() += 1;
        }
        if let Some((text, _)) = counts.into_iter().max_by_key(|(_, n)| *n) {
            ask(flag, &Value::from(text), None);
        }
    }
    // And an order that a window's close cancelled: that tick names it
    // in an order event alone.
    let closed = all.iter().filter(|l| l["kind"] == "tick").find_map(|l| {
        l["events"]
            .as_array()?
            .iter()
            .find(|e| e["event"] == "order" && e["status"] == "canceled")
    });
    let closed = closed.expect("the simulation's windows close on resting orders");
    ask("--order-id", &closed["order_id"], None);
    // A record's kind, and whether it has no context (a command that is not
    // a key's, or names a key or order that does not exist).
    let kinds_of = |flag: &str, seqs: &[u64]| -> Vec<String> {
        seqs.iter()
            .map(|s| {
                let l = &all[*s as usize - 1];
                let bare = l["context"].as_object().is_some_and(|c| c.is_empty());
                let kind = l["kind"].as_str().unwrap();
                format!("{flag} {kind}{}", if bare { " (no context)" } else { "" })
            })
            .collect()
    };
    // Per selection, the two values with the most quiet records, and then
    // any that names a kind of quiet record not yet asked about.
    let mut covered = BTreeSet::new();
    for (flag, values) in asks {
        let mut values: Vec<(String, Ask)> = values.into_iter().collect();
        values.sort_by_key(|(_, a)| std::cmp::Reverse(a.seqs.len()));
        for (n, (text, a)) in values.into_iter().enumerate() {
            let kinds = kinds_of(flag, &a.seqs);
            if n >= 2 && !a.busy && kinds.iter().all(|k| covered.contains(k)) {
                continue;
            }
            let lines = json_lines(&updown_ok(&[
                "journal",
                "find",
                "--data-dir",
                &d,
                "--json",
                "--events",
                &format!("{flag}={text}"),
            ]));
            // Found: exactly the records that name it. A key is named by
            // its id, or by its index where an order of it is.
            let found: BTreeSet<u64> = seqs(&lines).into_iter().collect();
            let idx = key_index.get(text.as_str()).filter(|_| flag == "--key");
            for (i, l) in all.iter().enumerate() {
                let names_it = named_by[flag][i].contains(&text)
                    || idx.is_some_and(|idx| key_indexes_named[i].contains(idx));
                assert_eq!(
                    found.contains(&l["seq"].as_u64().unwrap()),
                    names_it,
                    "{flag} {text}: found (left) and names it (right) disagree on {l}"
                );
            }
            covered.extend(kinds);
        }
    }
    // The quiet records these cover, so that a change of the simulation
    // that stops making them shows here.
    for want in [
        "--account withdraw (no context)",
        "--account deposit (no context)",
        "--account issue_key (no context)",
        "--account place_order",
        "--account revoke_key",
        "--account set_key_limits",
        "--key place_order",
        "--key issue_key (no context)",
        "--key revoke_key",
        "--key revoke_key (no context)",
        "--key set_key_limits",
        "--market place_order",
        "--market cancel_all",
        "--order-id place_order",
        "--order-id cancel_order",
        "--client-order-id place_order",
    ] {
        assert!(
            covered.contains(want),
            "no quiet record for {want}: {covered:?}"
        );
    }
}

/// A value asked of one `journal find` selection: the seqs of the records
/// that changed nothing and name it, and whether it is asked for the
/// records that name it otherwise (the value most records name, an order
/// a window's close cancelled).
#[derive(Default)]
struct Ask {
    seqs: Vec<u64>,
    busy: bool,
}

/// The values (as text) of the fields of `names` anywhere in `v`.
fn named(v: &Value, names: &[&str], out: &mut std::collections::BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                if names.contains(&k.as_str()) {
                    let each = x
                        .as_array()
                        .map_or_else(|| vec![x], |xs| xs.iter().collect());
                    out.extend(each.into_iter().filter_map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .or_else(|| x.as_u64().map(|n| n.to_string()))
                    }));
                }
                named(x, names, out);
            }
        }
        Value::Array(xs) => xs.iter().for_each(|x| named(x, names, out)),
        _ => {}
    }
}
