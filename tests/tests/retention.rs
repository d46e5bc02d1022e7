//! The history tail: ended orders, fills and settled markets' books and
//! trades leave the live state after it, as `Event::Evicted` records, by a
//! rule of the state machine (so replay evicts exactly as the live run).

use sequencer::command::SeriesConfig;
use sequencer::event::Event;
use sequencer::query::{OrderFilter, OrderLookup};
use sequencer::retention::Evicted;
use sequencer::types::{MarketStatus, OrderStatus};
use sequencer::{Command, ErrorCode, Reply, State};
use tests::harness::{Venue, SERIES, SYMBOL, T0};

const TAIL_MS: u64 = 5_000;
const WINDOW_MS: u64 = 600_000;

/// A venue with 10-minute windows and a 5-second history tail.
fn venue() -> Venue {
    let mut v = Venue::with_series(SeriesConfig {
        ticker: SERIES.into(),
        symbol: SYMBOL.into(),
        window_ms: WINDOW_MS,
        list_ahead: 1,
        taker_fee_bps: 700,
        maker_fee_bps: 0,
        market_cap_cents: 1_000_000_00,
    });
    v.ok(Command::SetRetention { tail_ms: TAIL_MS });
    v
}

/// The ids of an account's fills in the live state, oldest first.
fn live_fills(v: &Venue, account: u32) -> Vec<u64> {
    v.state
        .account(account)
        .unwrap()
        .fills
        .iter()
        .copied()
        .collect()
}

fn evicted(events: &[Event]) -> Vec<Evicted> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Evicted(ev) => Some((**ev).clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn ended_orders_and_fills_leave_after_the_tail_and_resting_ones_stay() {
    let mut v = venue();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    let maker = v.place(a, "buy down 0.45 x10").unwrap();
    let taker = v.place(b, "buy up 0.60 x10 id=taker-1").unwrap();
    assert_eq!(taker.status, OrderStatus::Executed);
    let resting = v.place(a, "buy up 0.20 x5").unwrap();
    let fill_ids = live_fills(&v, a.account);
    assert_eq!(fill_ids.len(), 1);

    // Inside the tail nothing leaves, and no young resting order is set
    // aside (lookups of live orders stay in the deque).
    v.advance(TAIL_MS - 1);
    assert!(evicted(&v.events).is_empty());
    assert_eq!(v.state.orders.len(), 3);
    assert_eq!(v.state.orders.kept_len(), 0);

    // Past it the ended orders and the fills leave; the resting one stays.
    v.advance(200);
    let gone = evicted(&v.events);
    let gone_orders: Vec<u64> = gone
        .iter()
        .filter_map(|e| match e {
            Evicted::Order(o) => Some(o.id),
            _ => None,
        })
        .collect();
    assert_eq!(gone_orders, vec![maker.id, taker.id]);
    let gone_fills: Vec<(u64, u32, u64)> = gone
        .iter()
        .filter_map(|e| match e {
            Evicted::Fill { fill, prev } => Some((fill.id, fill.account, *prev)),
            _ => None,
        })
        .collect();
    assert_eq!(gone_fills.len(), 2, "{gone:?}");
    assert!(gone_fills.iter().all(|&(_, _, prev)| prev == 0));
    // The evicted order is the order as it ended.
    assert!(gone.iter().any(|e| matches!(e, Evicted::Order(o) if o.id == taker.id && o.filled == 10 && o.status == OrderStatus::Executed)));

    assert_eq!(v.state.orders.len(), 1);
    assert_eq!(v.state.fills.len(), 0);
    assert_eq!(
        v.state.query_order(b.key, taker.id).unwrap(),
        OrderLookup::InHistory { account: b.account }
    );
    // Another account asking for it gets the same answer shape: the
    // history reader shows it only to its account.
    assert_eq!(
        v.state.query_order(a.key, taker.id).unwrap(),
        OrderLookup::InHistory { account: a.account }
    );
    assert_eq!(
        v.state
            .query_order(a.key, resting.id)
            .unwrap()
            .live()
            .unwrap()
            .id,
        resting.id
    );
    // Ids never seen are still refused.
    assert_eq!(
        v.state.query_order(a.key, 999).unwrap_err().code,
        ErrorCode::OrderNotFound
    );
    // A cancel of an evicted order changes nothing and answers from the
    // history store, as a read of it does (DESIGN §5: a retried cancel is
    // always safe); of an id never seen it is still refused.
    assert_eq!(
        v.run(Command::CancelOrder {
            key: b.key,
            order_id: taker.id
        }),
        Reply::OrderInHistory {
            order_id: taker.id,
            account: b.account
        }
    );
    assert!(v.events.is_empty());
    assert_eq!(
        v.run(Command::CancelOrder {
            key: a.key,
            order_id: 999
        })
        .rejection()
        .map(|r| r.code),
        Some(ErrorCode::OrderNotFound)
    );
    assert_eq!(v.state.orders.len(), 1, "nothing came back");
    let account = v.state.account(a.account).unwrap();
    assert_eq!(
        account.orders.iter().copied().collect::<Vec<_>>(),
        vec![resting.id]
    );
    assert!(account.fills.is_empty());
    assert_eq!(account.last_evicted_fill, fill_ids[0]);
    // The fills page is empty in the live state and goes on in the store
    // from the account's newest evicted fill.
    let page = v.state.query_fills(a.key, None, None, None).unwrap();
    assert!(page.items.is_empty());
    let rest = page.rest.expect("the page goes on in the history");
    assert_eq!((rest.from, rest.market), (fill_ids[0], None));
    // The order list shows what the live state holds.
    let list = v
        .state
        .query_orders(a.key, &OrderFilter::default())
        .unwrap();
    assert_eq!(
        list.items.iter().map(|o| o.id).collect::<Vec<_>>(),
        vec![resting.id]
    );

    // client_order_id uniqueness lasts as long as the order is in the live
    // state: the same id after eviction places a new order
    // (docs/decisions.md).
    let again = v.order("buy up 0.60 x10 id=taker-1");
    match v.run(Command::PlaceOrder {
        key: b.key,
        order: again,
    }) {
        Reply::Order { order, created } => {
            assert!(created);
            assert!(order.id > resting.id);
        }
        other => panic!("{other:?}"),
    }
    // ...and within the tail, a retry is still the same order.
    match v.run(Command::PlaceOrder {
        key: b.key,
        order: again,
    }) {
        Reply::Order { created, .. } => assert!(!created),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_long_resting_order_does_not_hold_back_the_ones_after_it() {
    let mut v = venue();
    let (a, b) = (v.trader(1_000_00), v.trader(1_000_00));
    let first = v.place(a, "buy up 0.10 x1").unwrap();
    let mut ended = Vec::new();
    for _ in 0..20 {
        ended.push(v.place(b, "buy up 0.30 x1 ioc").unwrap().id);
    }
    v.advance(TAIL_MS + 200);
    assert_eq!(v.state.orders.len(), 1, "only the resting order is live");
    assert_eq!(v.state.orders.kept_len(), 1, "set aside, old and resting");
    assert!(v.state.order(first.id).is_some());
    assert!(ended.iter().all(|&id| v.state.order(id).is_none()));
    // It ends, and leaves one tail later.
    v.cancel(a, first.id).unwrap();
    v.advance(TAIL_MS + 200);
    assert_eq!(v.state.orders.len(), 0);
    assert!(evicted(&v.events).iter().any(
        |e| matches!(e, Evicted::Order(o) if o.id == first.id && o.status == OrderStatus::Canceled)
    ));
}

#[test]
fn a_settled_market_releases_its_book_and_its_trades_after_the_tail() {
    let mut v = venue();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    let market = v.market();
    v.place(a, "buy down 0.45 x10").unwrap();
    v.place(b, "buy up 0.60 x4").unwrap();
    v.place(a, "buy up 0.10 x3").unwrap();
    // Close and settle the window.
    v.now = T0 + WINDOW_MS;
    v.print(101);
    assert_eq!(
        v.state.markets[market as usize].status,
        MarketStatus::Settled
    );
    assert_eq!(v.state.markets[market as usize].trades.len(), 1);
    v.advance(TAIL_MS + 200);
    let m = &v.state.markets[market as usize];
    assert!(m.history && m.trades.is_empty());
    assert_eq!(m.book.resting_orders(), 0);
    assert_eq!(
        m.book.checksum(),
        sequencer::book::Book::default().checksum()
    );
    let gone = evicted(&v.events);
    assert!(gone.iter().any(
        |e| matches!(e, Evicted::Trades { market: m, trades } if *m == market && trades.len() == 1)
    ));
    // The market itself is still there: by ticker, with its result.
    let ticker = m.ticker.clone();
    assert_eq!(v.state.query_market(&ticker).unwrap().result, m.result);
    let book = v.state.query_orderbook(&ticker, None).unwrap();
    assert!(book.up.is_empty() && book.down.is_empty());
    let trades = v.state.query_trades(&ticker, Some(10), None).unwrap();
    assert!(trades.items.is_empty());
    assert_eq!(
        trades.rest.map(|r| (r.from, r.wanted)),
        Some((u64::from(market), 10))
    );
}

#[test]
fn the_tail_is_a_journaled_rule_and_refuses_nonsense() {
    let mut v = venue();
    match v.run(Command::SetRetention { tail_ms: 999 }) {
        Reply::Rejected(r) => {
            assert_eq!(r.code, ErrorCode::BadRequest);
            assert!(r.message.contains("history tail"), "{}", r.message);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(v.state.retention.tail_ms, TAIL_MS);
    // Replaying the same commands evicts the same way: same state, same
    // events.
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    for i in 0..30 {
        v.place(a, "buy down 0.45 x2").unwrap();
        v.place(b, "buy up 0.60 x1").unwrap();
        if i % 7 == 0 {
            v.advance(TAIL_MS / 3);
        }
    }
    v.advance(TAIL_MS * 2);
    let mut replayed = State::default();
    let mut events = Vec::new();
    for stamped in &v.log {
        replayed.apply(stamped, &mut events);
    }
    assert_eq!(replayed.state_hash(), v.state.state_hash());
    assert_eq!(replayed.event_hash, v.state.event_hash);
    assert!(events.iter().any(|e| matches!(e, Event::Evicted(_))));
}

/// A fills page filled exactly by the live fills still says that more
/// are in the history store (a cursor), and the next page goes there.
#[test]
fn a_page_filled_by_live_fills_alone_still_leads_to_the_stored_ones() {
    let mut v = venue();
    let (a, b) = (v.trader(1_000_00), v.trader(1_000_00));
    // Two fills for a, then evicted.
    for _ in 0..2 {
        v.place(a, "buy down 0.45 x1").unwrap();
        v.place(b, "buy up 0.60 x1").unwrap();
    }
    v.advance(TAIL_MS + 200);
    assert_eq!(v.state.account(a.account).unwrap().fills.len(), 0);
    // Three live fills.
    for _ in 0..3 {
        v.place(a, "buy down 0.45 x1").unwrap();
        v.place(b, "buy up 0.60 x1").unwrap();
    }
    let live = live_fills(&v, a.account);
    assert_eq!(live.len(), 3);
    let page = v.state.query_fills(a.key, None, Some(3), None).unwrap();
    assert_eq!(page.items.len(), 3);
    assert_eq!(page.cursor, Some(live[0]), "more are stored");
    assert!(page.rest.is_none());
    let next = v
        .state
        .query_fills(a.key, None, Some(3), page.cursor)
        .unwrap();
    assert!(next.items.is_empty() && next.cursor.is_none());
    let rest = next.rest.expect("the next page reads the store");
    assert_eq!(rest.wanted, 3);
    // With room on the page, the live fills and the store share it.
    let page = v.state.query_fills(a.key, None, Some(10), None).unwrap();
    assert_eq!((page.items.len(), page.cursor), (3, None));
    assert_eq!(page.rest.map(|r| r.wanted), Some(7));
}

/// docs/history-store.md: the live state keeps "orders ended less than
/// `tail_ms` ago". An order that rested for longer than the tail and then
/// filled ended at its fill: it stays live for a tail after the fill, not
/// after its creation.
#[test]
fn an_order_that_rested_past_the_tail_stays_a_tail_after_it_fills() {
    let mut v = venue();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    let maker = v.place(a, "buy up 0.40 x1").unwrap();
    v.advance(3 * TAIL_MS);
    v.place(b, "buy down 0.60 x1").unwrap();
    assert_eq!(
        v.state.order(maker.id).unwrap().status,
        OrderStatus::Executed
    );
    v.advance(TAIL_MS / 2);
    assert!(
        matches!(
            v.state.query_order(a.key, maker.id),
            Ok(OrderLookup::Live(o)) if o.status == OrderStatus::Executed
        ),
        "filled {} ms ago, within the tail",
        TAIL_MS / 2
    );
    v.advance(TAIL_MS);
    assert!(matches!(
        v.state.query_order(a.key, maker.id),
        Ok(OrderLookup::InHistory { .. })
    ));
}
