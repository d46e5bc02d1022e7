//! Kill it: `updown serve` under load from several client threads is killed
//! with SIGKILL at seeded random moments (20 times in CI, `UPDOWN_KILLS=N`
//! for more; `UPDOWN_CRASH_SEED=S` to reproduce), sometimes again while it
//! starts up, and restarted on the same data directory each time.
//!
//! After every kill, with the server down, the journal is checked as an
//! auditor would: it verifies (at most a torn tail), replaying it gives a
//! state whose invariants hold (money is conserved, contracts pair up,
//! books and holds agree), replaying through the snapshots gives the same
//! state hash, the history replayed at the previous kill is unchanged, and
//! every acknowledged fact is in it: each order answered 201 exists with the
//! same account, client_order_id, side, count and price and has not filled
//! less than was acknowledged; each cancel answered 200 stays canceled; each
//! list of fills read from the server is a prefix of the account's fills.
//! After every restart, the server answers the orders acknowledged since the
//! last kill, each account's fills and balance exactly as the replay says.
//!
//! The venue runs with a 2-second history tail, so that orders and fills
//! leave the live state for the history store all through the run: the
//! offline checks follow them through the replay's `Event::Evicted`
//! records, and the checks over REST read them from the server's store
//! (which a kill may leave behind the journal; the restart rebuilds it).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use replay::Until;
use sequencer::retention::Evicted;
use sequencer::state::{Fill, Order};
use sequencer::types::OrderStatus;
use sequencer::{Event, State};
use serde_json::Value;

/// Client threads, one per account.
const CLIENTS: usize = 4;

/// What a client saw acknowledged.
#[derive(Debug)]
enum Ack {
    /// 201 to a new order: the order as answered.
    Placed { account: u64, order: Value },
    /// 200 to a cancel: the order as answered.
    Canceled { account: u64, order: Value },
    /// 200 to every page of the account's fills, oldest first.
    Fills { account: u64, fills: Vec<Value> },
}

/// Everything acknowledged so far.
#[derive(Default)]
struct Model {
    /// order id -> (account, the order as first answered, fill count last
    /// acknowledged, canceled by an acknowledged cancel).
    orders: BTreeMap<u64, (u64, Value, u64, bool)>,
    /// Orders acknowledged since the last restart (checked over REST).
    fresh: BTreeSet<u64>,
    /// The last complete list of fills read per account.
    fills: BTreeMap<u64, Vec<Value>>,
    acks: u64,
}

fn id_of(order: &Value) -> u64 {
    order["order_id"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("order id in {order}"))
}

fn count_of(order: &Value, field: &str) -> u64 {
    order[field]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("{field} in {order}"))
}

impl Model {
    fn absorb(&mut self, acks: Vec<Ack>) {
        for ack in acks {
            self.acks += 1;
            match ack {
                Ack::Placed { account, order } => {
                    let id = id_of(&order);
                    let filled = count_of(&order, "fill_count");
                    let previous = self.orders.insert(id, (account, order, filled, false));
                    assert!(previous.is_none(), "order id {id} acknowledged twice");
                    self.fresh.insert(id);
                }
                Ack::Canceled { account, order } => {
                    let id = id_of(&order);
                    let entry = self
                        .orders
                        .get_mut(&id)
                        .unwrap_or_else(|| panic!("a cancel of unknown order {id}"));
                    assert_eq!(entry.0, account);
                    entry.2 = entry.2.max(count_of(&order, "fill_count"));
                    entry.3 |= order["status"] == "canceled";
                }
                Ack::Fills { account, fills } => {
                    let known = self.fills.entry(account).or_default();
                    // Fills only grow: what was read before is a prefix of
                    // what is read later (kills included).
                    assert!(
                        fills.len() >= known.len() && fills[..known.len()] == known[..],
                        "account {account}: fills read earlier are not a prefix of fills read later: {}",
                        {
                            let at = known.iter().zip(&fills).position(|(a, b)| a != b);
                            format!(
                                "{} then {} fills; first difference at {at:?}: {:?} / {:?}",
                                known.len(),
                                fills.len(),
                                at.map(|i| &known[i]),
                                at.map(|i| &fills[i])
                            )
                        }
                    );
                    *known = fills;
                }
            }
        }
    }

    /// Every acknowledged fact is in the replayed state.
    fn check(&self, replayed: &Replayed) {
        let state = &replayed.state;
        for (&id, (account, answered, filled, canceled)) in &self.orders {
            let order = replayed
                .order(id)
                .unwrap_or_else(|| panic!("order {id} was answered 201 and is lost: {answered}"));
            let rendered = gateway::api::json::order(state, order);
            assert_eq!(u64::from(order.account), *account, "order {id}");
            for field in [
                "client_order_id",
                "market_ticker",
                "outcome",
                "action",
                "price",
                "count",
                "time_in_force",
                "post_only",
                "created_ts_ms",
            ] {
                assert_eq!(
                    rendered[field], answered[field],
                    "order {id}: {field} differs from the acknowledgement"
                );
            }
            assert!(
                u64::from(order.filled) >= *filled,
                "order {id} filled {} < acknowledged {filled}",
                order.filled
            );
            match answered["status"].as_str() {
                Some("executed") => assert_eq!(order.status, OrderStatus::Executed, "{id}"),
                Some("canceled") => assert_eq!(order.status, OrderStatus::Canceled, "{id}"),
                _ => {}
            }
            if *canceled {
                assert_eq!(order.status, OrderStatus::Canceled, "order {id}");
                assert_eq!(u64::from(order.filled), *filled, "a canceled order filled");
            }
        }
        let all_fills: Vec<u64> = replayed
            .fills
            .keys()
            .copied()
            .chain(state.fills.iter().map(|f| f.id))
            .collect();
        for (i, &id) in all_fills.iter().enumerate() {
            assert_eq!(id, i as u64 + 1, "fill ids are unique and in sequence");
        }
        for (&account, seen) in &self.fills {
            let replayed = replayed.fills_json(account);
            assert!(
                replayed.len() >= seen.len() && replayed[..seen.len()] == seen[..],
                "account {account}: the acknowledged fills ({}) are not a prefix of the replayed ones ({})",
                seen.len(),
                replayed.len()
            );
        }
    }
}

/// A replay with what left the live state on the way: the whole history
/// of orders and fills, as the venue's live state plus its history store
/// would show it.
struct Replayed {
    state: State,
    orders: BTreeMap<u64, Order>,
    fills: BTreeMap<u64, Fill>,
}

impl Replayed {
    fn of(journal: &Path, snapshots: Option<&Path>) -> Replayed {
        let (mut orders, mut fills) = (BTreeMap::new(), BTreeMap::new());
        let outcome = replay::replay_with(journal, snapshots, Until::End, |_, events| {
            for event in events {
                if let Event::Evicted(evicted) = event {
                    match &**evicted {
                        Evicted::Order(o) => {
                            orders.insert(o.id, *o);
                        }
                        Evicted::Fill { fill, .. } => {
                            fills.insert(fill.id, *fill);
                        }
                        Evicted::Trades { .. } => {}
                    }
                }
            }
        })
        .expect("the journal replays");
        Replayed {
            state: outcome.state,
            orders,
            fills,
        }
    }

    /// An order, live or evicted.
    fn order(&self, id: u64) -> Option<&Order> {
        self.state.order(id).or_else(|| self.orders.get(&id))
    }

    /// An account's fills as REST renders them, oldest first: the evicted
    /// ones, then the live ones.
    fn fills_json(&self, account: u64) -> Vec<Value> {
        let state = &self.state;
        let id = u32::try_from(account).expect("account id");
        let live = state
            .account(id)
            .expect("account")
            .fills
            .iter()
            .map(|&f| state.fill(f).expect("fill"));
        self.fills
            .values()
            .filter(|f| f.account == id)
            .chain(live)
            .map(|f| gateway::api::json::fill(state, f))
            .collect()
    }
}

/// One client thread: buys, sells and cancels for one account until told to
/// stop; returns what was acknowledged.
fn client(
    addr: String,
    trader: Trader,
    market: String,
    seed: u64,
    tag: String,
    stop: Arc<AtomicBool>,
) -> Vec<Ack> {
    let mut rng = Rng::new(seed);
    let mut http = Http::new(&addr);
    http.timeout = Duration::from_secs(10);
    let bearer = format!("Bearer {}", trader.key);
    let auth = [("Authorization", bearer.as_str())];
    let mut acks = Vec::new();
    let mut resting: Vec<u64> = Vec::new();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let roll = rng.range(0, 100);
        let result = if roll < 70 {
            n += 1;
            let outcome = if rng.percent(50) { "up" } else { "down" };
            let (action, count) = if roll < 58 {
                ("buy", rng.range(1, 9))
            } else {
                ("sell", rng.range(1, 4))
            };
            let tif = if rng.percent(20) {
                "immediate_or_cancel"
            } else {
                "good_till_canceled"
            };
            let body = order_body(
                &market,
                outcome,
                action,
                rng.range(35, 66),
                count,
                tif,
                &format!("{tag}-{n}"),
            );
            http.try_send("POST", "/v1/portfolio/orders", &auth, Some(&body))
                .map(|resp| {
                    if resp.status == 201 {
                        let order = resp.json["order"].clone();
                        if order["status"] == "resting" {
                            resting.push(id_of(&order));
                        }
                        acks.push(Ack::Placed {
                            account: trader.account,
                            order,
                        });
                    }
                })
        } else if roll < 92 && !resting.is_empty() {
            let id = resting.swap_remove(rng.range(0, resting.len() as u64) as usize);
            http.try_send("DELETE", &format!("/v1/portfolio/orders/{id}"), &auth, None)
                .map(|resp| {
                    if resp.status == 200 {
                        acks.push(Ack::Canceled {
                            account: trader.account,
                            order: resp.json["order"].clone(),
                        });
                    }
                })
        } else {
            all_fills(&mut http, &trader.key).map(|fills| {
                acks.push(Ack::Fills {
                    account: trader.account,
                    fills,
                })
            })
        };
        if result.is_err() {
            // Down (killed or starting): try again shortly.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    acks
}

/// The checks with the server down. Returns the replayed state's last seq
/// and hash, and how many orders and fills had left its live state.
fn check_offline(
    data_dir: &Path,
    model: &Model,
    before: Option<(u64, u64)>,
) -> ((u64, u64), (usize, usize)) {
    let journal = data_dir.join("journal");
    let report = journal::verify(&journal).expect("verify reads the journal");
    if let Some(problem) = &report.problem {
        assert_eq!(
            problem.kind,
            journal::ProblemKind::TornTail,
            "a kill may leave at most a torn tail: {problem:?}"
        );
    }
    let replayed = Replayed::of(&journal, None);
    let state = &replayed.state;
    if let Err(broken) = state.check_invariants() {
        panic!("after a kill, at seq {}: {broken}", state.last_seq);
    }
    let hash = state.state_hash();
    assert_eq!(
        Some(state.last_seq),
        report.last_seq,
        "replay reads every valid record"
    );
    let via = replay::replay(&journal, Some(&data_dir.join("snapshots")), Until::End)
        .expect("the journal replays from a snapshot");
    assert!(
        via.skipped_snapshots.is_empty(),
        "{:?}",
        via.skipped_snapshots
    );
    assert_eq!(
        via.state.state_hash(),
        hash,
        "replay from snapshot {:?} differs from a full replay",
        via.from_snapshot
    );
    if let Some((seq, previous)) = before {
        let again = replay::replay(&journal, None, Until::Seq(seq)).expect("replay");
        assert_eq!(
            again.state.last_seq, seq,
            "records up to the last check are kept"
        );
        assert_eq!(
            again.state.state_hash(),
            previous,
            "the history up to seq {seq} changed after a restart"
        );
    }
    model.check(&replayed);
    (
        (state.last_seq, hash),
        (replayed.orders.len(), replayed.fills.len()),
    )
}

/// The checks over REST after a restart, against the replayed state.
fn check_restarted(serve: &Serve, model: &mut Model, traders: &[Trader]) {
    let journal = serve.data_dir.join("journal");
    // The restarted server's own state and event hashes, at the seq it has
    // reached, equal an offline replay of the same journal to that seq.
    let live = serve.admin().call("GET", "/admin/state", None);
    let live = live.ok(200);
    let seq = live["seq"].as_u64().expect("seq");
    let offline = replay::replay(&journal, None, Until::Seq(seq)).expect("replay to the live seq");
    assert_eq!(offline.state.last_seq, seq);
    assert_eq!(
        (live["state_hash"].as_str(), live["event_hash"].as_str()),
        (
            Some(format!("{:016x}", offline.state.state_hash()).as_str()),
            Some(format!("{:016x}", offline.state.event_hash).as_str())
        ),
        "the restarted server at seq {seq} against an offline replay"
    );
    // What the server had when it started is what the journal had: compare
    // against a replay up to the seq the server reported (it may have
    // appended ticks and prints since, which change no order or balance).
    let replayed = Replayed::of(&journal, None);
    let state = &replayed.state;
    let mut http = serve.api();
    for trader in traders {
        let key = Some(trader.key.as_str());
        let account = state
            .account(u32::try_from(trader.account).expect("id"))
            .expect("account");
        let balance = http.get("/portfolio/balance", key);
        assert_eq!(
            balance.ok(200)["balance"]["cash"],
            sequencer::wire::dollars(account.cash),
            "{}",
            balance.text
        );
        assert_eq!(
            balance.json["balance"]["held"],
            sequencer::wire::dollars(account.held)
        );
        let fills = all_fills(&mut http, &trader.key).expect("fills");
        assert_eq!(
            fills,
            replayed.fills_json(trader.account),
            "account {} fills",
            trader.account
        );
        model.fills.insert(trader.account, fills);
    }
    let by_account: BTreeMap<u64, &Trader> = traders.iter().map(|t| (t.account, t)).collect();
    for id in std::mem::take(&mut model.fresh) {
        let (account, answered, _, _) = &model.orders[&id];
        let key = by_account[account].key.as_str();
        let resp = http.get(&format!("/portfolio/orders/{id}"), Some(key));
        let order = &resp.ok(200)["order"];
        assert_eq!(order["client_order_id"], answered["client_order_id"]);
        assert_eq!(order["count"], answered["count"]);
        assert_eq!(order["price"], answered["price"]);
        let rendered = gateway::api::json::order(state, replayed.order(id).expect("order"));
        assert_eq!(order, &rendered, "order {id} over REST and in the replay");
    }
}

#[test]
fn sigkill_under_load_loses_no_acknowledged_order_cancel_or_fill() {
    let started = Instant::now();
    let seed = seed_from_env("UPDOWN_CRASH_SEED", 20_261_121);
    let kills: usize = std::env::var("UPDOWN_KILLS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let mut rng = Rng::new(seed);
    let work = tempfile::tempdir().expect("temporary directory");
    let data_dir = work.path().join("data");
    let settings = Settings {
        price_simulator: true,
        price_interval_ms: 20,
        // Small segments and frequent snapshots: kills land in segment
        // rolls and snapshot writes too.
        segment_mib: 1,
        snapshot_every: 400,
        history_tail_secs: 2,
        ..Settings::default()
    };
    let config = settings.write(&work.path().join("updown.toml"));
    let launch = Launch::new(&data_dir, Some(&config));

    let mut serve = launch.start();
    let traders: Vec<Trader> = {
        let mut admin = serve.admin();
        (0..CLIENTS).map(|_| admin.trader("50000")).collect()
    };
    let market = open_market(&mut serve.api(), &settings.series);
    let mut model = Model::default();
    let mut checkpoint = None;
    let mut startup_kills = 0;
    for cycle in 0..kills {
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = traders
            .iter()
            .enumerate()
            .map(|(i, trader)| {
                let (addr, trader, market, stop) = (
                    serve.addr.clone(),
                    trader.clone(),
                    market.clone(),
                    stop.clone(),
                );
                let client_seed = rng.next_u64();
                let tag = format!("k{cycle}-c{i}");
                std::thread::spawn(move || client(addr, trader, market, client_seed, tag, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.range(50, 900)));
        serve.kill();
        stop.store(true, Ordering::Relaxed);
        for handle in clients {
            model.absorb(handle.join().expect("client thread"));
        }
        checkpoint = Some(check_offline(&data_dir, &model, checkpoint).0);

        // Now and then, kill it again while it recovers and starts.
        if rng.percent(25) {
            let mut early = launch.spawn();
            std::thread::sleep(Duration::from_millis(rng.range(0, 250)));
            early.kill();
            startup_kills += 1;
            checkpoint = Some(check_offline(&data_dir, &model, checkpoint).0);
        }
        serve = launch.start();
        check_restarted(&serve, &mut model, &traders);
    }
    // A graceful stop at the end: the journal verifies whole, and the
    // replay agrees with every acknowledgement once more.
    assert!(serve.sigterm().success(), "{}", serve.stderr.text());
    let report = journal::verify(&data_dir.join("journal")).expect("verify");
    assert!(report.is_ok(), "{report:?}");
    let (ok, out, err) = updown(&[
        "journal",
        "verify",
        "--data-dir",
        data_dir.to_str().unwrap(),
    ]);
    assert!(ok, "updown journal verify: {out}{err}");
    let (_, (evicted_orders, evicted_fills)) = check_offline(&data_dir, &model, checkpoint);
    let placed = model.orders.len();
    let canceled = model.orders.values().filter(|o| o.3).count();
    let fills: usize = model.fills.values().map(Vec::len).sum();
    eprintln!(
        "{kills} kills under load (+{startup_kills} during start-up), {} acknowledgements: \
         {placed} orders, {canceled} cancels, {fills} fills, last seq {}, in {:.1?}",
        model.acks,
        report.last_seq.unwrap_or(0),
        started.elapsed()
    );
    assert!(
        placed > kills * 5,
        "too little load to mean anything: {placed} orders"
    );
    assert!(fills > 0, "no fills: the clients never crossed");
    // The history tail was crossed: the checks above went through the
    // history store, not only the live state.
    assert!(
        evicted_orders > 0 && evicted_fills > 0,
        "nothing left the live state: {evicted_orders} orders, {evicted_fills} fills evicted"
    );
}
