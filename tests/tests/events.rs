//! What the events and the reads say, field by field: the contents a
//! websocket subscriber or a REST client sees, where the simulation's
//! checks compare the state only with itself. Each test names the promise
//! (SPEC.md, DESIGN.md or docs/) that it holds the venue to.

use sequencer::event::Event;
use sequencer::types::MarketId;
use sequencer::{Command, Reply};
use tests::harness::{Venue, SERIES, T0, WINDOW_MS};

/// The ticker events of the last command, for one market.
fn tickers(v: &Venue, market: MarketId) -> Vec<sequencer::event::Top> {
    v.events
        .iter()
        .filter_map(|e| match e {
            Event::Ticker { market: m, top } if *m == market => Some(*top),
            _ => None,
        })
        .collect()
}

/// SPEC ticker and Market: top of book on the Up scale. An Up ask is a
/// Down bid (DESIGN §2): the Up ask is 1 - the best Down bid, and its size
/// is the contracts at that Down level.
#[test]
fn the_ticker_shows_the_up_ask_as_one_minus_the_best_down_bid() {
    use sequencer::event::Top;
    let mut v = Venue::new();
    let a = v.trader(100_00);
    let market = v.market();
    v.place(a, "buy up 0.40 x3").unwrap();
    v.place(a, "buy down 0.30 x7").unwrap();
    let want = Top {
        up_bid: Some(40),
        up_bid_size: 3,
        up_ask: Some(70),
        up_ask_size: 7,
        last_price: None,
    };
    assert_eq!(tickers(&v, market), vec![want]);
    assert_eq!(v.state.top(market), want, "the Market record's top");
}

/// SPEC order states: a resting order "possibly part-filled". Its owner
/// hears of each fill (user_orders): a maker filled in part gets an order
/// event with the fill count, cost and hold it has now, still resting.
#[test]
fn a_maker_filled_in_part_gets_an_order_event() {
    use sequencer::event::OrderUpdate;
    use sequencer::types::OrderStatus;
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    let maker = v.place(a, "buy up 0.40 x10").unwrap();
    v.place(b, "buy down 0.60 x4").unwrap();
    let updates: Vec<OrderUpdate> = v
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Order(o) if o.id == maker.id => Some(*o),
            _ => None,
        })
        .collect();
    let now = *v.state.order(maker.id).unwrap();
    assert_eq!((now.status, now.filled), (OrderStatus::Resting, 4));
    assert_eq!(updates, vec![OrderUpdate::of(&now)]);
}

/// SPEC Fill `ts_ms` and the public trade: both carry the time the trade
/// happened, not the time either order was placed; the fills and trades
/// reads say the same.
#[test]
fn fills_and_trades_carry_the_time_of_the_trade() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    v.place(a, "buy up 0.40 x1").unwrap();
    v.now += 1_234;
    v.place(b, "buy down 0.60 x1").unwrap();
    let traded = v.now;
    let mut fills = 0;
    for event in &v.events {
        match event {
            Event::Fill(f) => {
                fills += 1;
                assert_eq!(f.ts_ms, traded, "{f:?}");
            }
            Event::Trade(t) => assert_eq!(t.ts_ms, traded, "{t:?}"),
            _ => {}
        }
    }
    assert_eq!(fills, 2);
    for trader in [a, b] {
        let page = v.state.query_fills(trader.key, None, None, None).unwrap();
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.items[0].ts_ms, traded);
    }
    let ticker = v.state.markets[v.market() as usize].ticker.clone();
    let trades = v.state.query_trades(&ticker, None, None).unwrap();
    assert_eq!(trades.items.len(), 1);
    assert_eq!(trades.items[0].ts_ms, traded);
}

/// SPEC Market `settled_ts_ms`, DESIGN §2: set when the market settles,
/// which is when the first print at or after the close arrives; that may
/// be well after the close (docs/history-store.md keeps the book and
/// trades a tail after this time).
#[test]
fn settled_ts_ms_is_when_the_settlement_print_arrived() {
    use sequencer::event::Phase;
    use sequencer::types::MarketStatus;
    let mut v = Venue::new();
    let market = v.market();
    v.advance(WINDOW_MS);
    assert_eq!(
        v.state.markets[market as usize].status,
        MarketStatus::Closed
    );
    v.now += 5_000;
    v.print(101);
    let settled_at = T0 + WINDOW_MS + 5_000;
    let m = &v.state.markets[market as usize];
    assert_eq!(m.status, MarketStatus::Settled);
    assert_eq!(m.settled_ts_ms, Some(settled_at));
    let lifecycle = v.events.iter().find_map(|e| match e {
        Event::Lifecycle {
            market: m,
            phase: Phase::Settled { .. },
            ts_ms,
        } if *m == market => Some(*ts_ms),
        _ => None,
    });
    assert_eq!(lifecycle, Some(settled_at));
}

/// The public trades read (GET /markets/{ticker}/trades, DESIGN §5 lists as
/// `{ things, cursor }`): newest first, and the cursor of a page gives the
/// trades older than that page, each once; the last page has no cursor.
#[test]
fn public_trades_page_newest_first_each_trade_once() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    for _ in 0..5 {
        v.place(a, "buy up 0.50 x1").unwrap();
        v.place(b, "buy down 0.50 x1").unwrap();
    }
    let ticker = v.state.markets[v.market() as usize].ticker.clone();
    let mut seen = Vec::new();
    let mut cursor = None;
    for expected in [vec![5, 4], vec![3, 2], vec![1]] {
        let page = v.state.query_trades(&ticker, Some(2), cursor).unwrap();
        let ids: Vec<u64> = page.items.iter().map(|t| t.trade_id).collect();
        assert_eq!(ids, expected, "after cursor {cursor:?}");
        seen.extend(ids);
        cursor = page.cursor;
    }
    assert_eq!(cursor, None, "the last page has no cursor");
    assert_eq!(seen, vec![5, 4, 3, 2, 1]);
}

/// SPEC fills: "Pass the cursor back to get older fills." A page that ends
/// exactly at the account's oldest fill has no cursor: there is nothing
/// older to get.
#[test]
fn a_fills_page_that_ends_at_the_oldest_fill_has_no_cursor() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    for _ in 0..4 {
        v.place(a, "buy up 0.50 x1").unwrap();
        v.place(b, "buy down 0.50 x1").unwrap();
    }
    let all = v.state.query_fills(a.key, None, Some(4), None).unwrap();
    assert_eq!(all.items.len(), 4);
    assert_eq!(all.cursor, None);
    let first = v.state.query_fills(a.key, None, Some(2), None).unwrap();
    assert!(first.cursor.is_some());
    let last = v
        .state
        .query_fills(a.key, None, Some(2), first.cursor)
        .unwrap();
    assert_eq!(last.items.len(), 2);
    assert_eq!(last.cursor, None);
}

/// The REST order book (DESIGN §5) with a depth: that many levels a side,
/// best first, and still the checksum of the whole book (SPEC: the same
/// checksum as the websocket for the same book).
#[test]
fn the_order_book_read_honours_its_depth_and_keeps_the_whole_checksum() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    v.place(a, "buy up 0.40 x3").unwrap();
    v.place(a, "buy up 0.41 x2").unwrap();
    v.place(a, "buy down 0.30 x7").unwrap();
    v.place(a, "buy down 0.20 x1").unwrap();
    let ticker = v.state.markets[v.market() as usize].ticker.clone();
    let whole = v.state.query_orderbook(&ticker, None).unwrap();
    let top = v.state.query_orderbook(&ticker, Some(1)).unwrap();
    assert_eq!(top.up, vec![(41, 2)]);
    assert_eq!(top.down, vec![(30, 7)]);
    assert_eq!(whole.up, vec![(41, 2), (40, 3)]);
    assert_eq!(top.checksum, whole.checksum);
}

/// SPEC cancel-all: `series_ticker` narrows the cancel to that series. A
/// series whose ticker is the start of another's (`btc` and `btc-1m`) is a
/// different series: its filter leaves the other's orders resting.
#[test]
fn cancel_all_by_series_takes_only_that_exact_series() {
    use sequencer::types::OrderStatus;
    let mut v = Venue::new();
    let a = v.trader(100_00);
    let order = v.place(a, "buy up 0.30 x1").unwrap();
    for series in ["btc", "btc-1"] {
        let reply = v.run(Command::CancelAll {
            key: a.key,
            market: None,
            series: Some(series.into()),
        });
        assert_eq!(reply, Reply::Canceled { order_ids: vec![] }, "{series}");
    }
    assert_eq!(
        v.state.order(order.id).unwrap().status,
        OrderStatus::Resting
    );
    let reply = v.run(Command::CancelAll {
        key: a.key,
        market: None,
        series: Some(SERIES.into()),
    });
    assert_eq!(
        reply,
        Reply::Canceled {
            order_ids: vec![order.id]
        }
    );
}

/// The publisher rebuilds each order event into the whole Order record
/// (user_orders) from a state after it: the record must be the order as it
/// stood at the event, not as it stands later. A resting order's event,
/// read after the order filled in part, still shows no fills.
#[test]
fn an_order_event_read_later_shows_the_order_as_it_stood() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    let placed = v.place(a, "buy up 0.40 x10").unwrap();
    let event = v
        .events
        .iter()
        .find_map(|e| match e {
            Event::Order(o) if o.id == placed.id => Some(*o),
            _ => None,
        })
        .unwrap();
    v.place(b, "buy down 0.60 x4").unwrap();
    assert_eq!(v.state.order(placed.id).unwrap().filled, 4);
    assert_eq!(event.order(&v.state), Some(placed));
}

/// SPEC ticker channel: top of book and last price "when they change". An
/// order behind the best bid, and its cancel, change neither: no ticker.
#[test]
fn no_ticker_when_the_top_does_not_change() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    let market = v.market();
    v.place(a, "buy up 0.40 x3").unwrap();
    assert_eq!(tickers(&v, market).len(), 1);
    let behind = v.place(a, "buy up 0.30 x3").unwrap();
    assert_eq!(tickers(&v, market), vec![]);
    v.cancel(a, behind.id).unwrap();
    assert_eq!(tickers(&v, market), vec![]);
    v.place(a, "buy up 0.40 x1").unwrap();
    assert_eq!(tickers(&v, market).len(), 1, "the best level grew");
}

/// SPEC: "A series ticker subscription follows each new window
/// automatically". The publisher knows a window's series from its listing
/// event only: it must name the series, not the window.
#[test]
fn a_new_window_is_listed_under_its_series() {
    let mut v = Venue::new();
    v.advance(WINDOW_MS);
    let listed: Vec<(String, String)> = v
        .events
        .iter()
        .filter_map(|e| match e {
            Event::MarketListed { ticker, series, .. } => Some((ticker.clone(), series.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(listed.len(), 1, "{listed:?}");
    let (ticker, series) = &listed[0];
    assert_eq!(series, SERIES);
    assert!(ticker.starts_with(&format!("{SERIES}-")), "{ticker}");
}

/// docs/decisions.md: a cancel sends its book delta before the events of
/// the orders it takes off (a match, after its makers' events), so that a
/// client sees the book change before each order's update.
#[test]
fn a_cancel_sends_the_book_delta_before_the_order_events() {
    for close in [false, true] {
        let mut v = Venue::new();
        let a = v.trader(100_00);
        let first = v.place(a, "buy up 0.40 x1").unwrap();
        let second = v.place(a, "buy up 0.40 x2").unwrap();
        if close {
            v.advance(WINDOW_MS);
        } else {
            v.ok(Command::CancelAll {
                key: a.key,
                market: None,
                series: None,
            });
        }
        let at = |want: &dyn Fn(&Event) -> bool| v.events.iter().position(want).unwrap();
        let delta = at(&|e| matches!(e, Event::BookDelta { delta: -3, .. }));
        for id in [first.id, second.id] {
            let update = at(&|e| matches!(e, Event::Order(o) if o.id == id));
            assert!(delta < update, "close {close}: order {id}: {:?}", v.events);
        }
    }
}

/// DESIGN §3: lifecycle events `open`, `closed`, `settled`, each once. A
/// two-minute window is stepped at the one-minute series' close in its
/// middle, and publishes no second `open`.
#[test]
fn a_window_publishes_its_open_once_though_stepped_again_while_open() {
    use sequencer::command::SeriesConfig;
    use sequencer::event::Phase;
    let mut v = Venue::new();
    v.ok(Command::CreateSeries(SeriesConfig {
        ticker: "btc-2m".into(),
        window_ms: 2 * WINDOW_MS,
        list_ahead: 0,
        ..Venue::default_series()
    }));
    let two = v.open_market("btc-2m");
    assert_eq!(
        v.state.markets[two as usize].close_ts_ms,
        T0 + 2 * WINDOW_MS
    );
    let one = v.market();
    v.advance(WINDOW_MS);
    assert_eq!(v.phases(one), vec![Phase::Closed]);
    assert_eq!(v.phases(two), vec![]);
    assert_eq!(
        v.state.markets[two as usize].status,
        sequencer::types::MarketStatus::Open
    );
}
