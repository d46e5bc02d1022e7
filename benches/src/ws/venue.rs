//! The venue side: `gateway::Server` in-process with one series, one
//! trader set up through internal commands, and the driver's target that
//! turns each event of the plan into a `PlaceOrder` or `CancelOrder` pushed
//! straight into the sequencer's queue (`Job::Internal`, as the price feed
//! does): no HTTP in front, so the figures are the websocket path's.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use gateway::config::{DurabilityPolicy, SeriesEntry};
use gateway::engine::Job;
use gateway::{Server, ServerConfig};
use sequencer::command::{AccountFlag, NewKey, NewOrder};
use sequencer::limits::MONEY_CENTS_MAX;
use sequencer::types::{
    Action, ClientOrderId, Environment, KeyIdx, KeyLimits, MarketId, MarketStatus, OrderId,
    OrderStatus, Outcome, Scopes, TimeInForce,
};
use sequencer::{Command, Reply};
use serde_json::json;
use tokio::sync::oneshot;

use crate::engines::BenchError;
use crate::ws::client::{self, Stamps};
use crate::ws::plan::{self, Step};

/// The one series of the venue, on this underlying.
pub const SERIES: &str = "ws-a";
pub const SYMBOL: &str = "X:BTCUSD";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A window length, in minutes, whose current window still has at least
/// an hour to run: no window opens, closes or settles during the run.
fn window_minutes() -> u64 {
    let now = now_ms();
    (1440..1440 + 240)
        .find(|minutes| {
            let window = minutes * 60_000;
            window - now % window >= 60 * 60 * 1000
        })
        .expect("some window length leaves an hour")
}

/// The venue's configuration: loopback ports chosen by the OS, no price
/// simulator, one series, `workers` gateway workers (the venue's default
/// is 1), the default websocket queue (4,096 messages per connection),
/// `durability`, and a request timeout (the longest a command waits for
/// room in the sequencer's queue, or a read for its answer) of 30 s instead
/// of 2 s, so that a stall of this shared machine does not fail the set-up.
pub fn venue_config(data_dir: &Path, durability: DurabilityPolicy, workers: usize) -> ServerConfig {
    ServerConfig {
        listen: "127.0.0.1:0".parse().expect("address"),
        admin_listen: "127.0.0.1:0".parse().expect("address"),
        data_dir: data_dir.to_path_buf(),
        durability,
        snapshot_every: 0,
        account_risk_cap_usd: 1_000_000_000,
        price_simulator: false,
        workers,
        request_timeout_ms: 30_000,
        series: vec![SeriesEntry {
            ticker: SERIES.into(),
            symbol: SYMBOL.into(),
            window_minutes: window_minutes(),
            list_ahead: 1,
            taker_fee: 0.07,
            maker_fee: 0.0,
            market_cap_usd: 1_000_000_000,
            sim_start_price: None,
        }],
        ..ServerConfig::default()
    }
}

/// Where an order's id is.
enum Placed {
    Known(OrderId),
    Waiting(u64, oneshot::Receiver<Reply>),
}

/// The running venue, its trader's key and its open market, and what the
/// driver has in flight.
pub struct Venue {
    pub server: Server,
    pub key: KeyIdx,
    pub market: MarketId,
    pub ticker: String,
    /// Submits the driver's jobs (`Submitter::push` on a thread of its own).
    rt: tokio::runtime::Runtime,
    /// Orders placed and not yet canceled, oldest first.
    placed: VecDeque<Placed>,
    /// Replies to cancels not yet checked.
    cancels: VecDeque<(u64, oneshot::Receiver<Reply>)>,
}

fn internal(
    server: &Server,
    rt: &tokio::runtime::Runtime,
    command: Command,
) -> Result<Reply, BenchError> {
    let text = format!("{command:?}");
    match rt.block_on(server.submitter.internal(command)) {
        Ok(Reply::Rejected(r)) => Err(format!("{text}: {r:?}").into()),
        Ok(reply) => Ok(reply),
        Err(e) => Err(format!("{text}: {}", e.message).into()),
    }
}

fn new_order(market: MarketId, k: u64) -> NewOrder {
    NewOrder {
        market,
        outcome: Outcome::Up,
        action: Action::Buy,
        price: plan::price_of(k),
        count: plan::count_of(k),
        time_in_force: TimeInForce::GoodTillCanceled,
        post_only: true,
        client_order_id: ClientOrderId::new(&format!("ws{k}")).expect("a valid client order id"),
    }
}

/// Checks a place's reply: created and resting; returns the order's id.
fn placed_id(k: u64, reply: Reply) -> Result<OrderId, BenchError> {
    match reply {
        Reply::Order { order, created } if created && order.status == OrderStatus::Resting => {
            Ok(order.id)
        }
        other => Err(format!("order {k} did not rest: {other:?}").into()),
    }
}

impl Venue {
    pub fn start(
        data_dir: &Path,
        durability: DurabilityPolicy,
        workers: usize,
    ) -> Result<Venue, BenchError> {
        let server = Server::start(venue_config(data_dir, durability, workers))?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()?;
        let Reply::AccountCreated { account } = internal(&server, &rt, Command::CreateAccount)?
        else {
            return Err("CreateAccount answered no account".into());
        };
        internal(
            &server,
            &rt,
            Command::Deposit {
                account,
                cents: 100_000_000_00,
            },
        )?;
        for flag in [AccountFlag::TermsAccepted, AccountFlag::TradingAllowed] {
            internal(
                &server,
                &rt,
                Command::SetAccountFlag {
                    account,
                    flag,
                    value: true,
                },
            )?;
        }
        let Reply::KeyIssued { key } = internal(
            &server,
            &rt,
            Command::IssueKey(NewKey {
                account,
                key_id: "wsbench".into(),
                fingerprint: [7; 32],
                name: "websocket benchmark".into(),
                environment: Environment::Test,
                scopes: Scopes {
                    read: true,
                    trade: true,
                },
                limits: KeyLimits {
                    max_order_cents: Some(MONEY_CENTS_MAX as u64),
                    max_daily_cents: Some(MONEY_CENTS_MAX as u64),
                    max_open_orders: None,
                    series: None,
                },
                ip_allowlist: Vec::new(),
                expires_days: None,
            }),
        )?
        else {
            return Err("IssueKey answered no key".into());
        };
        // The current window opens on the first print.
        internal(
            &server,
            &rt,
            Command::Price {
                symbol: SYMBOL.into(),
                price_e8: 97_000_50_000_000,
                t_ms: now_ms(),
            },
        )?;
        let read = rt.block_on(server.submitter.read(None, |state, _| {
            let open = state.series_by_ticker(SERIES).and_then(|s| {
                s.markets
                    .iter()
                    .filter_map(|&id| state.market(id))
                    .find(|m| m.status == MarketStatus::Open)
            });
            Ok(match open {
                Some(m) => (StatusCode::OK, json!({ "id": m.id, "ticker": m.ticker })),
                None => (StatusCode::NOT_FOUND, json!(null)),
            })
        }));
        let (market, ticker) = match read {
            Ok((StatusCode::OK, body)) => (
                body["id"].as_u64().ok_or("market id")? as MarketId,
                body["ticker"].as_str().ok_or("market ticker")?.to_string(),
            ),
            other => return Err(format!("no open market in {SERIES}: {other:?}").into()),
        };
        let mut venue = Venue {
            server,
            key,
            market,
            ticker,
            rt,
            placed: VecDeque::new(),
            cancels: VecDeque::new(),
        };
        for k in 0..plan::SEED_ORDERS {
            let reply = internal(
                &venue.server,
                &venue.rt,
                Command::PlaceOrder {
                    key,
                    order: new_order(market, k),
                },
            )?;
            venue.placed.push_back(Placed::Known(placed_id(k, reply)?));
        }
        // A batch's events are handed to the publisher before its replies
        // leave, but the publisher may not have taken them yet: wait until
        // it has, so that the first snapshot holds every seed order (a
        // client's check would catch it otherwise). Later subscriber sets
        // connect after every client has had every event.
        wait_for_publisher(&venue.server)?;
        Ok(venue)
    }

    fn push(&self, command: Command) -> Result<oneshot::Receiver<Reply>, BenchError> {
        let (reply, rx) = oneshot::channel();
        self.rt
            .block_on(self.server.submitter.push(Job::Internal {
                command,
                reply: Some(reply),
            }))
            .map_err(|e| e.message)?;
        Ok(rx)
    }

    /// Submits event `g`, stamped just before it enters the queue.
    pub fn send(&mut self, g: u64, stamps: &Stamps) -> Result<(), BenchError> {
        match plan::step(g) {
            Step::Place(k) => {
                let order = new_order(self.market, k);
                let command = Command::PlaceOrder {
                    key: self.key,
                    order,
                };
                stamps.stamp(g);
                let rx = self.push(command)?;
                self.placed.push_back(Placed::Waiting(k, rx));
            }
            Step::Cancel(k) => {
                let order_id = match self.placed.pop_front() {
                    Some(Placed::Known(id)) => id,
                    Some(Placed::Waiting(placed, rx)) if placed == k => {
                        let reply = self
                            .rt
                            .block_on(rx)
                            .map_err(|_| format!("no reply to order {k}"))?;
                        placed_id(k, reply)?
                    }
                    _ => return Err(format!("order {k} is not the oldest placed").into()),
                };
                let command = Command::CancelOrder {
                    key: self.key,
                    order_id,
                };
                stamps.stamp(g);
                let rx = self.push(command)?;
                self.cancels.push_back((k, rx));
                self.check_cancels(false)?;
            }
        }
        Ok(())
    }

    fn check_cancels(&mut self, wait: bool) -> Result<(), BenchError> {
        while let Some((k, rx)) = self.cancels.front_mut() {
            let reply = match rx.try_recv() {
                Ok(reply) => reply,
                Err(oneshot::error::TryRecvError::Empty) if !wait => return Ok(()),
                Err(oneshot::error::TryRecvError::Empty) => {
                    let k = *k;
                    let (_, rx) = self.cancels.pop_front().expect("front");
                    let reply = self
                        .rt
                        .block_on(rx)
                        .map_err(|_| format!("no reply to the cancel of order {k}"))?;
                    check_cancel(k, reply)?;
                    continue;
                }
                Err(oneshot::error::TryRecvError::Closed) => {
                    return Err(format!("no reply to the cancel of order {k}").into())
                }
            };
            check_cancel(*k, reply)?;
            self.cancels.pop_front();
        }
        Ok(())
    }

    /// Waits for the reply to every command submitted so far and checks it
    /// (orders rested, cancels canceled).
    pub fn settle(&mut self) -> Result<(), BenchError> {
        self.check_cancels(true)?;
        for placed in &mut self.placed {
            if let Placed::Waiting(k, rx) = placed {
                let reply = self
                    .rt
                    .block_on(rx)
                    .map_err(|_| format!("no reply to order {k}"))?;
                *placed = Placed::Known(placed_id(*k, reply)?);
            }
        }
        Ok(())
    }

    /// Messages the publisher dropped (full connection queues) so far.
    pub fn dropped(&self) -> u64 {
        self.server.ws.stats.dropped.load(Ordering::Relaxed)
    }

    /// Batches the publisher could not take so far.
    pub fn lost_batches(&self) -> u64 {
        self.server.ws.stats.lost_batches.load(Ordering::Relaxed)
    }

    /// Open websocket connections from `ip`.
    pub fn connections_from(&self, ip: std::net::IpAddr) -> u32 {
        self.server.ws.connections_from(ip)
    }
}

fn check_cancel(k: u64, reply: Reply) -> Result<(), BenchError> {
    match reply {
        Reply::Order { order, .. } if order.status == OrderStatus::Canceled => Ok(()),
        other => Err(format!("the cancel of order {k} failed: {other:?}").into()),
    }
}

/// How long the driver waits for the venue to go quiet between phases.
pub const QUIET: Duration = Duration::from_millis(100);
/// How long the publisher is given to take the seed orders' events.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Waits (at most [`SETTLE_TIMEOUT`]) until the websocket publisher has
/// taken in every batch handed to it.
fn wait_for_publisher(server: &Server) -> Result<(), BenchError> {
    let stats = &server.ws.stats;
    let caught_up = client::wait_until(SETTLE_TIMEOUT, || {
        stats.batches_taken.load(Ordering::Acquire) >= stats.batches_handed.load(Ordering::Acquire)
    });
    if !caught_up {
        return Err(format!(
            "the websocket publisher did not take the seed orders' events within {SETTLE_TIMEOUT:?}"
        )
        .into());
    }
    Ok(())
}
