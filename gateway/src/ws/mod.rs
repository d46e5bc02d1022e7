//! The websocket: live books, tickers, trades, windows, prices and the
//! private channels, at `/v1/ws` (protocol in `gateway/asyncapi.json`).
//!
//! Pipeline (numbered as it runs):
//! 1. on the sequencer thread, after each committed batch, the [`EventSink`]
//!    clones the batch's public and private events (the first time, a
//!    [`publisher::Picture`] of the state instead) and `try_send`s them into
//!    one bounded channel: it never waits and never serializes;
//! 2. the publisher thread keeps a mirror of every unsettled book from the
//!    `BookDelta`s, the market directory, each market's top and each
//!    symbol's last price; it serializes each event once per channel and
//!    hands the shared bytes with a per-subscription `seq` to every
//!    subscribed connection's bounded queue (`try_send`, never waiting);
//! 3. each connection's task writes the envelope `{type, sid, seq, ts_ms,
//!    msg}` around the shared `msg`, answers commands (subscription changes
//!    go through the publisher, so a snapshot and the deltas after it are
//!    always consistent), pings, and enforces the limits.
//!
//! Overload, decided: a connection whose queue is full loses that message,
//! and its subscription's `seq` still advances, so the client sees a gap
//! and recovers with `get_snapshot` (SPEC "Recovery"). If the publisher
//! itself falls behind the sequencer (its input channel full), the batch is
//! dropped, the next batch is replaced by a fresh picture of the state, and
//! every subscription's `seq` skips one number before fresh snapshots, so
//! again every client sees a gap. Memory stays bounded either way.

mod conn;
mod masked;
pub mod protocol;
pub mod publisher;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::TrySendError;
use sequencer::limits::WS_CONNECTIONS_PER_IP;
use sequencer::{Event, State};
use tokio::sync::watch;

pub use conn::handler;

use crate::bell::{BellSender, Doorbell};
use crate::engine::EventSink;
use publisher::{Control, Input, Picture};

/// Subscriptions per connection (SPEC Limits).
pub const SUBSCRIPTIONS_MAX: usize = sequencer::limits::WS_SUBSCRIPTIONS_PER_CONNECTION as usize;
/// Batches waiting between the sequencer thread and the publisher.
pub const INPUT_BATCHES_MAX: usize = 16_384;
/// Websocket connections on the whole server (the venue's own bound; the
/// spec's is per address).
pub const CONNECTIONS_MAX: u32 = 10_000;
/// Default length of a connection's outgoing queue, in messages.
pub const QUEUE_CAPACITY_DEFAULT: usize = 4_096;

/// Settings of the websocket.
#[derive(Clone, Debug)]
pub struct WsSettings {
    /// Messages a connection may have waiting to be written; past it,
    /// messages are dropped for that connection (a seq gap).
    pub queue_capacity: usize,
    /// The server pings every this long; a connection silent for two
    /// intervals is closed.
    pub ping_interval: Duration,
}

/// Counters of the publisher, for metrics and tests.
#[derive(Default, Debug)]
pub struct Stats {
    /// Messages dropped because a connection's queue was full.
    pub dropped: AtomicU64,
    /// Batches the publisher could not take (each one forces a resync).
    pub lost_batches: AtomicU64,
    /// Messages handed to connection queues.
    pub sent: AtomicU64,
    /// Batches (and fresh pictures) handed to the publisher, and those it
    /// has taken in: equal when it has caught up with the sequencer.
    pub batches_handed: AtomicU64,
    pub batches_taken: AtomicU64,
}

/// What the gateway's handlers share about the websocket.
pub struct Hub {
    control: BellSender<Control>,
    pub settings: WsSettings,
    pub stats: Arc<Stats>,
    connections: Mutex<HashMap<IpAddr, u32>>,
    next_conn: AtomicU64,
    shutdown: watch::Sender<bool>,
}

/// The running publisher thread.
pub struct Publisher {
    pub handle: std::thread::JoinHandle<()>,
}

/// Starts the publisher thread; returns the hub for the handlers and the
/// sink to give the sequencer thread.
pub fn start(settings: WsSettings) -> std::io::Result<(Arc<Hub>, EventSink, Publisher)> {
    let bell = Doorbell::new();
    let (input_tx, input_rx) = bell.bounded::<Input>(INPUT_BATCHES_MAX);
    // Unbounded, but each connection has at most one command in flight and
    // connections are bounded: its length is bounded by them.
    let (control_tx, control_rx) = bell.unbounded::<Control>();
    let stats = Arc::new(Stats::default());
    let thread_stats = stats.clone();
    let handle = std::thread::Builder::new()
        .name("ws-publisher".into())
        .spawn(move || publisher::run(bell, input_rx, control_rx, thread_stats))?;
    let (shutdown, _) = watch::channel(false);
    let hub = Arc::new(Hub {
        control: control_tx,
        settings,
        stats: stats.clone(),
        connections: Mutex::new(HashMap::new()),
        next_conn: AtomicU64::new(1),
        shutdown,
    });
    Ok((hub, sink(input_tx, stats), Publisher { handle }))
}

/// Events the publisher uses; the rest (keys, account flags, pauses) stay
/// on the sequencer thread.
fn published(event: &Event) -> bool {
    !matches!(
        event,
        Event::Key(_) | Event::Account { .. } | Event::Trading { .. } | Event::Evicted(_)
    )
}

/// The closure the sequencer thread calls after each batch. It clones what
/// the publisher needs (a picture only the first time and after a lost
/// batch) and returns the delivery, a `try_send` that the commit thread runs
/// once the batch is durable.
///
/// Deliveries run in the sequencer's order, but one may fail (the
/// publisher's input is full) after later batches were prepared as plain
/// events: `lost` makes every delivery of events drop until a picture has
/// gone through, so the publisher never applies events to a stale mirror.
fn sink(tx: BellSender<Input>, stats: Arc<Stats>) -> EventSink {
    let lost = Arc::new(AtomicBool::new(true));
    let dead = Arc::new(AtomicBool::new(false));
    Box::new(move |state: &State, batch: &[Event]| {
        if dead.load(Ordering::Acquire) {
            return None;
        }
        let input = if lost.load(Ordering::Acquire) {
            // The state already holds this batch's events.
            Input::Picture(Picture::of(state))
        } else {
            let events: Vec<Event> = batch.iter().filter(|e| published(e)).cloned().collect();
            if events.is_empty() {
                return None;
            }
            // Order events carry what changed; the publisher writes whole
            // records, rebuilt here from the state (their fixed fields).
            let orders = events
                .iter()
                .filter_map(|e| match e {
                    Event::Order(update) => Some(update.order_in(state, batch)),
                    _ => None,
                })
                .collect();
            Input::Events(events, orders)
        };
        let (tx, stats, lost, dead) = (tx.clone(), stats.clone(), lost.clone(), dead.clone());
        Some(Box::new(move || {
            let picture = matches!(input, Input::Picture(_));
            if !picture && lost.load(Ordering::Acquire) {
                stats.lost_batches.fetch_add(1, Ordering::Relaxed);
                return;
            }
            match tx.try_send(input) {
                Ok(()) => {
                    stats.batches_handed.fetch_add(1, Ordering::Relaxed);
                    if picture {
                        lost.store(false, Ordering::Release);
                    }
                }
                Err(TrySendError::Full(_)) => {
                    lost.store(true, Ordering::Release);
                    stats.lost_batches.fetch_add(1, Ordering::Relaxed);
                }
                Err(TrySendError::Disconnected(_)) => dead.store(true, Ordering::Release),
            }
        }) as crate::engine::Delivery)
    })
}

impl Hub {
    fn send(&self, control: Control) -> bool {
        self.control.send(control).is_ok()
    }

    fn next_conn_id(&self) -> u64 {
        self.next_conn.fetch_add(1, Ordering::Relaxed)
    }

    /// A connection slot for `ip`, or `None` at the per-address limit. An
    /// IPv6 address counts with its /64, as for the lockout: one host can
    /// hold a whole /64, and would otherwise take every slot of the venue.
    fn acquire(self: &Arc<Self>, ip: IpAddr) -> Option<Slot> {
        let ip = crate::auth::party(ip);
        let mut connections = self.connections.lock().expect("connections lock");
        let total: u32 = connections.values().sum();
        let count = connections.get(&ip).copied().unwrap_or(0);
        if count >= WS_CONNECTIONS_PER_IP || total >= CONNECTIONS_MAX {
            // Refused: no entry is made for an address that holds none.
            return None;
        }
        connections.insert(ip, count + 1);
        Some(Slot {
            hub: self.clone(),
            ip,
        })
    }

    /// Open websocket connections from `ip`.
    pub fn connections_from(&self, ip: IpAddr) -> u32 {
        self.connections
            .lock()
            .map_or(0, |c| c.get(&crate::auth::party(ip)).copied().unwrap_or(0))
    }

    /// Open websocket connections (upgrades accepted and not yet ended).
    pub fn connections(&self) -> u32 {
        self.connections.lock().map_or(0, |c| c.values().sum())
    }

    /// Tells every connection to close (1001) at shutdown.
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }
}

/// One connection's place in the per-address count; released on drop.
struct Slot {
    hub: Arc<Hub>,
    ip: IpAddr,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut connections) = self.hub.connections.lock() {
            if let Some(count) = connections.get_mut(&self.ip) {
                *count -= 1;
                if *count == 0 {
                    connections.remove(&self.ip);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The publisher counts what it is handed and what it has taken in:
    /// equal once it has caught up (the websocket benchmark waits on it).
    #[test]
    fn the_publisher_counts_the_batches_handed_and_taken() {
        let (hub, mut sink, _publisher) = start(WsSettings {
            queue_capacity: 16,
            ping_interval: Duration::from_secs(10),
        })
        .expect("the publisher thread starts");
        let stats = &hub.stats;
        assert_eq!(stats.batches_handed.load(Ordering::Relaxed), 0);
        // The first batch is a picture of the state.
        let deliver = sink(&State::default(), &[]).expect("a first picture");
        deliver();
        assert_eq!(stats.batches_handed.load(Ordering::Relaxed), 1);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while stats.batches_taken.load(Ordering::Acquire) < 1 {
            assert!(std::time::Instant::now() < deadline, "never taken");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(stats.batches_taken.load(Ordering::Relaxed), 1);
    }

    /// 20 connections per address, an IPv6 address counting with its /64;
    /// a refused upgrade leaves no entry behind; a closed one frees its
    /// place.
    #[test]
    fn connection_slots_count_ipv6_by_slash_64() {
        let (hub, _sink, _publisher) = start(WsSettings {
            queue_capacity: 16,
            ping_interval: Duration::from_secs(10),
        })
        .expect("the publisher thread starts");
        let host = |i: u16| -> IpAddr { format!("2001:db8:7:1::{i:x}").parse().unwrap() };
        let slots: Vec<Slot> = (0..WS_CONNECTIONS_PER_IP as u16)
            .map(|i| hub.acquire(host(i)).expect("a place"))
            .collect();
        assert!(hub.acquire(host(999)).is_none(), "the /64 is full");
        assert_eq!(hub.connections_from(host(5)), WS_CONNECTIONS_PER_IP);
        // Another /64 and an IPv4 address are counted apart.
        let other = hub.acquire("2001:db8:7:2::1".parse().unwrap());
        assert!(other.is_some());
        assert!(hub.acquire("198.51.100.4".parse().unwrap()).is_some());
        drop(slots);
        assert_eq!(hub.connections_from(host(5)), 0);
        assert!(!hub
            .connections
            .lock()
            .unwrap()
            .contains_key(&crate::auth::party(host(1))));
        assert!(hub.acquire(host(3)).is_some());
    }

    /// A closed connection frees its own place only: the address's other
    /// connections still count, so it cannot open past the limit by
    /// closing one.
    #[test]
    fn a_closed_connection_frees_one_place_of_its_address() {
        let (hub, _sink, _publisher) = start(WsSettings {
            queue_capacity: 16,
            ping_interval: Duration::from_secs(10),
        })
        .expect("the publisher thread starts");
        let ip: IpAddr = "198.51.100.7".parse().unwrap();
        let mut slots: Vec<Slot> = (0..WS_CONNECTIONS_PER_IP)
            .map(|_| hub.acquire(ip).expect("a place"))
            .collect();
        slots.pop();
        assert_eq!(hub.connections_from(ip), WS_CONNECTIONS_PER_IP - 1);
        assert_eq!(hub.connections(), WS_CONNECTIONS_PER_IP - 1);
        slots.push(hub.acquire(ip).expect("the freed place"));
        assert!(hub.acquire(ip).is_none(), "the address is full again");
    }

    /// Account flags, pauses and evictions (like keys) stay on the
    /// sequencer thread: a batch of only those is not handed to the
    /// publisher (nothing cloned, no delivery), one with a published event
    /// beside them is.
    #[test]
    fn batches_of_only_unpublished_events_are_not_handed_over() {
        let (_hub, mut sink, _publisher) = start(WsSettings {
            queue_capacity: 16,
            ping_interval: Duration::from_secs(10),
        })
        .expect("the publisher thread starts");
        let state = State::default();
        sink(&state, &[]).expect("a first picture")();
        let unpublished = [
            Event::Account {
                account: 1,
                terms_accepted: true,
                trading_allowed: true,
                suspended: false,
            },
            Event::Trading {
                paused: true,
                until_ts_ms: None,
            },
            Event::Evicted(Box::new(sequencer::retention::Evicted::Trades {
                market: 1,
                trades: Vec::new(),
            })),
        ];
        assert!(sink(&state, &unpublished).is_none());
        let mut mixed = unpublished.to_vec();
        mixed.push(Event::Balance {
            account: 1,
            cash: 100,
            held: 0,
        });
        assert!(sink(&state, &mixed).is_some());
    }
}
