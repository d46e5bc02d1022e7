//! Rule scenarios: every row of SPEC.md's order state table and every error
//! condition of order entry, written as short stories over the harness.
//!
//! Prices in the order texts are on the outcome's own scale; fees in the
//! default series are 7 % taker, 0 % maker, so the most a one-contract fill
//! can cost in fees is 2 cents at any price from 0.26 up (1 cent below).

use sequencer::auth::{check_key, KeyRefusal};
use sequencer::command::{AccountFlag, SeriesConfig, VenueConfig};
use sequencer::event::{Event, Phase};
use sequencer::limits::{
    DAY_MS, FILLS_LIMIT_MAX, FILLS_LIMIT_MIN, KEY_IP_ALLOWLIST_MAX, KEY_NAME_LEN_MAX,
    MONEY_CENTS_MAX, PAYOUT_CENTS, SERIES_TICKER_LEN_MAX, TS_MS_MAX,
};
use sequencer::query::OrderFilter;
use sequencer::types::{
    AccountId, ClientOrderId, Environment, KeyIdx, KeyLimits, MarketStatus, OrderStatus, Outcome,
    Scopes,
};
use sequencer::{Command, ErrorCode, Reply};
use tests::harness::{big_limits, Trader, Venue, SERIES, SYMBOL, T0, WINDOW_MS};

// ----- the order state table ------------------------------------------------

#[test]
fn a_buy_that_does_not_cross_rests_and_holds_price_plus_max_fee() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    let order = v.place(a, "buy up 0.55 x10").unwrap();
    assert_eq!(order.status, OrderStatus::Resting);
    assert_eq!(order.filled, 0);
    // 10 x (0.55 + 0.02).
    assert_eq!(order.hold, 5_70);
    assert_eq!(v.buying_power(a), 100_00 - 5_70);
    assert_eq!(v.cash(a), 100_00);
    assert_eq!(v.book(), "up:0.55:10|down:");
}

#[test]
fn a_buy_that_fills_fully_is_executed_with_fills_in_the_response() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    v.place(a, "buy down 0.45 x10").unwrap();
    // Up ask is 0.55; this buy up at 0.60 fills at 0.55 (price improvement).
    let order = v.place(b, "buy up 0.60 x10").unwrap();
    assert_eq!(order.status, OrderStatus::Executed);
    assert_eq!(order.filled, 10);
    assert_eq!(order.fill_cost, 5_50);
    // ceil(0.07 x 10 x 0.55 x 0.45) = 0.18.
    assert_eq!(order.fees, 18);
    assert_eq!(order.hold, 0);
    assert_eq!(v.cash(b), 100_00 - 5_50 - 18);
    assert_eq!(v.buying_power(b), v.cash(b));
    // The maker paid 0.45 each and no fee.
    assert_eq!(v.cash(a), 100_00 - 4_50);
    assert_eq!(v.position(a, Outcome::Down), 10);
    assert_eq!(v.position(b, Outcome::Up), 10);
    assert_eq!(v.state.markets[v.market() as usize].pairs, 10);
    assert_eq!(v.book(), "up:|down:");
}

#[test]
fn a_gtc_buy_that_fills_in_part_rests_the_rest() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    v.place(a, "buy down 0.45 x4").unwrap();
    let order = v.place(b, "buy up 0.55 x10").unwrap();
    assert_eq!(order.status, OrderStatus::Resting);
    assert_eq!(order.filled, 4);
    assert_eq!(order.remaining(), 6);
    assert_eq!(order.hold, 6 * (55 + 2));
    assert_eq!(v.book(), "up:0.55:6|down:");
}

#[test]
fn an_ioc_cancels_what_does_not_fill() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    let none = v.place(b, "buy up 0.55 x10 ioc").unwrap();
    assert_eq!(
        (none.status, none.filled, none.hold),
        (OrderStatus::Canceled, 0, 0)
    );
    v.place(a, "buy down 0.45 x4").unwrap();
    let part = v.place(b, "buy up 0.55 x10 ioc").unwrap();
    assert_eq!(
        (part.status, part.filled, part.hold),
        (OrderStatus::Canceled, 4, 0)
    );
    v.place(a, "buy down 0.45 x3").unwrap();
    let full = v.place(b, "buy up 0.55 x3 ioc").unwrap();
    assert_eq!((full.status, full.filled), (OrderStatus::Executed, 3));
    assert_eq!(v.state.account(b.account).unwrap().held, 0);
    assert_eq!(v.book(), "up:|down:");
}

#[test]
fn a_resting_order_filled_by_later_orders_becomes_executed_and_releases_its_hold() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    let resting = v.place(a, "buy up 0.55 x10").unwrap();
    v.place(b, "buy down 0.45 x4").unwrap();
    let after = *v.state.order(resting.id).unwrap();
    assert_eq!(
        (after.status, after.filled, after.hold),
        (OrderStatus::Resting, 4, 6 * 57)
    );
    v.place(b, "buy down 0.45 x6").unwrap();
    let done = *v.state.order(resting.id).unwrap();
    assert_eq!(
        (done.status, done.filled, done.hold),
        (OrderStatus::Executed, 10, 0)
    );
    assert_eq!(v.state.account(a.account).unwrap().held, 0);
    assert_eq!(v.cash(a), 100_00 - 5_50);
}

#[test]
fn cancel_releases_the_hold_and_a_second_cancel_returns_the_order_as_it_stands() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    let order = v.place(a, "buy up 0.30 x10").unwrap();
    let canceled = v.cancel(a, order.id).unwrap();
    assert_eq!((canceled.status, canceled.hold), (OrderStatus::Canceled, 0));
    assert_eq!(v.buying_power(a), 100_00);
    assert_eq!(v.book(), "up:|down:");
    let again = v.cancel(a, order.id).unwrap();
    assert_eq!(again, canceled);
}

#[test]
fn cancel_all_cancels_resting_orders_and_honours_its_filters() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    let first = v.place(a, "buy up 0.30 x1").unwrap();
    let second = v.place(a, "buy down 0.30 x1").unwrap();
    let this_market = v.state.markets[v.market() as usize].ticker.clone();
    let other = v.run(Command::CancelAll {
        key: a.key,
        market: Some("btc-1m-000101-0000-0001".into()),
        series: None,
    });
    assert_eq!(other, Reply::Canceled { order_ids: vec![] });
    let wrong_series = v.run(Command::CancelAll {
        key: a.key,
        market: None,
        series: Some("eth-1m".into()),
    });
    assert_eq!(wrong_series, Reply::Canceled { order_ids: vec![] });
    let bad = v.run(Command::CancelAll {
        key: a.key,
        market: Some("NOT A TICKER".into()),
        series: None,
    });
    assert_eq!(bad.rejection().unwrap().code, ErrorCode::BadRequest);
    let all = v.run(Command::CancelAll {
        key: a.key,
        market: Some(this_market),
        series: Some(SERIES.into()),
    });
    assert_eq!(
        all,
        Reply::Canceled {
            order_ids: vec![first.id, second.id]
        }
    );
    assert_eq!(v.buying_power(a), 100_00);
}

/// Cancel-all finds an account's resting orders from its list of them, so
/// an old resting order behind many ended ones is found as fast as a new
/// one; fills and cancels in between keep that list exact (the invariant
/// checks after every command compare it with the books).
#[test]
fn cancel_all_finds_an_old_resting_order_behind_many_ended_ones() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(1_000_00), v.trader(1_000_00));
    let old = v.place(a, "buy up 0.10 x1").unwrap();
    for i in 0..300u64 {
        let order = v.place(a, "buy up 0.20 x1").unwrap();
        match i % 3 {
            0 => {
                v.cancel(a, order.id).unwrap();
            }
            // b's sell of a pair fills the oldest 0.20 bid in full.
            1 => {
                v.place(b, "buy down 0.80 x1 ioc").unwrap();
            }
            _ => {}
        }
    }
    // What a walk over every order of the account finds resting.
    let account = v.state.account(a.account).unwrap();
    let kept: Vec<u64> = account
        .orders
        .iter()
        .copied()
        .filter(|&id| v.state.order(id).unwrap().is_resting())
        .collect();
    assert_eq!(kept.len(), 101);
    assert_eq!(kept[0], old.id);
    assert_eq!(account.resting_orders() as usize, kept.len());
    let all = v.run(Command::CancelAll {
        key: a.key,
        market: None,
        series: None,
    });
    assert_eq!(all, Reply::Canceled { order_ids: kept });
    assert_eq!(v.state.account(a.account).unwrap().resting_orders(), 0);
    assert_eq!(v.buying_power(a), v.cash(a));
}

#[test]
fn the_window_close_cancels_resting_orders_and_settlement_pays_the_winners() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    let market = v.market();
    v.place(a, "buy up 0.60 x10").unwrap();
    v.place(b, "buy down 0.40 x10").unwrap();
    let resting = v.place(a, "buy up 0.20 x5").unwrap();
    // The window closes at T0 + 60 s; the print at the close is higher.
    v.now = T0 + WINDOW_MS;
    v.print(101);
    let m = &v.state.markets[market as usize];
    assert_eq!(m.status, MarketStatus::Settled);
    assert_eq!(m.result, Some(Outcome::Up));
    assert_eq!(m.settlement_price_e8, Some(101 * 100_000_000));
    assert_eq!(m.price_to_beat_e8, Some(100 * 100_000_000));
    assert_eq!(
        v.state.order(resting.id).unwrap().status,
        OrderStatus::Canceled
    );
    // a (maker, no fee) paid 6.00 for 10 up and gets 10.00; b (taker)
    // paid 4.00 and a fee of ceil(0.07 x 10 x 0.6 x 0.4) = 0.17, and loses.
    assert_eq!(v.cash(a), 100_00 - 6_00 + 10_00);
    assert_eq!(v.cash(b), 100_00 - 4_00 - 17);
    assert!(v.state.account(a.account).unwrap().positions.is_empty());
    assert_eq!(v.state.account(a.account).unwrap().held, 0);
    assert_eq!(
        v.phases(market),
        vec![
            Phase::Closed,
            Phase::Settled {
                result: Some(Outcome::Up),
                settlement_price_e8: Some(101 * 100_000_000)
            }
        ]
    );
}

#[test]
fn an_unchanged_price_settles_up_and_a_lower_one_down() {
    for (close, result) in [(100, Outcome::Up), (99, Outcome::Down)] {
        let mut v = Venue::new();
        let market = v.market();
        v.now = T0 + WINDOW_MS;
        v.print(close);
        assert_eq!(v.state.markets[market as usize].result, Some(result));
    }
}

#[test]
fn settlement_waits_for_the_first_print_at_or_after_the_close() {
    let mut v = Venue::new();
    let market = v.market();
    v.advance(WINDOW_MS);
    assert_eq!(
        v.state.markets[market as usize].status,
        MarketStatus::Closed
    );
    v.now += 500;
    v.print(90);
    assert_eq!(
        v.state.markets[market as usize].status,
        MarketStatus::Settled
    );
    assert_eq!(v.state.markets[market as usize].result, Some(Outcome::Down));
}

#[test]
fn a_fill_at_a_better_price_releases_the_difference_at_once() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    v.place(a, "buy down 0.70 x10").unwrap(); // Up ask 0.30.
    let order = v.place(b, "buy up 0.50 x20").unwrap();
    assert_eq!(order.filled, 10);
    // Ten filled at 0.30 (cost 3.00 + fee ceil(0.07x10x0.3x0.7)=0.15); the
    // ten still resting hold 10 x (0.50 + 0.02).
    assert_eq!(v.cash(b), 100_00 - 3_00 - 15);
    assert_eq!(v.state.account(b.account).unwrap().held, 5_20);
    assert_eq!(order.hold, 5_20);
}

// ----- the three kinds of trade ---------------------------------------------

#[test]
fn buy_and_sell_move_contracts_and_sell_and_sell_burn_a_pair() {
    let mut v = Venue::new();
    let (a, b, c) = (v.trader(100_00), v.trader(100_00), v.trader(100_00));
    let market = v.market() as usize;
    v.place(a, "buy up 0.50 x10").unwrap();
    v.place(b, "buy down 0.50 x10").unwrap();
    assert_eq!(v.state.markets[market].pairs, 10);
    // a sells 4 up to c: a transfer, no new pair.
    v.place(a, "sell up 0.55 x4").unwrap();
    v.place(c, "buy up 0.55 x4").unwrap();
    assert_eq!(v.state.markets[market].pairs, 10);
    assert_eq!(v.position(a, Outcome::Up), 6);
    assert_eq!(v.position(c, Outcome::Up), 4);
    // a sells 6 up and b sells 6 down: both are paid and a pair is burned.
    v.place(a, "sell up 0.50 x6").unwrap();
    let burn = v.place(b, "sell down 0.50 x6").unwrap();
    assert_eq!(burn.status, OrderStatus::Executed);
    assert_eq!(v.state.markets[market].pairs, 4);
    assert_eq!(v.position(a, Outcome::Up), 0);
    assert_eq!(v.position(b, Outcome::Down), 4);
}

#[test]
fn a_sell_rests_on_the_other_side_at_one_minus_its_price() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    v.place(a, "buy up 0.50 x10").unwrap();
    v.place(b, "buy down 0.50 x10").unwrap();
    v.place(a, "sell up 0.60 x3").unwrap();
    assert_eq!(v.book(), "up:|down:0.40:3");
    v.place(b, "sell down 0.70 x2").unwrap();
    assert_eq!(v.book(), "up:0.30:2|down:0.40:3");
}

// ----- refusals -----------------------------------------------------------------

#[test]
fn bad_fields_are_refused_with_a_message_naming_the_field() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    let mut order = v.order("buy up 0.50 x1");
    order.price = 0;
    assert!(v
        .place_order(a, order)
        .unwrap_err()
        .message
        .contains("price"));
    order.price = 100;
    assert!(v
        .place_order(a, order)
        .unwrap_err()
        .message
        .contains("price"));
    order.price = 50;
    order.count = 0;
    assert!(v
        .place_order(a, order)
        .unwrap_err()
        .message
        .contains("count"));
    order.count = 10_001;
    let reject = v.place_order(a, order).unwrap_err();
    assert_eq!(reject.code, ErrorCode::BadRequest);
    // The same words as the gateway's refusal of the wire field.
    assert_eq!(reject.message, "Field count must be 1 to 10000.");
    assert!(ClientOrderId::new("has space").is_none());
    assert!(ClientOrderId::new(&"a".repeat(65)).is_none());
    assert!(ClientOrderId::new(&"a".repeat(64)).is_some());
}

#[test]
fn insufficient_balance_for_buys_and_for_sells_of_contracts_not_held() {
    let mut v = Venue::new();
    let a = v.trader(5_00);
    // 10 x (0.50 + 0.02) = 5.20 > 5.00.
    let message = v.refused(a, "buy up 0.50 x10", ErrorCode::InsufficientBalance);
    assert!(message.contains("5.20"), "{message}");
    v.place(a, "buy up 0.50 x9").unwrap();
    let message = v.refused(a, "sell up 0.50 x1", ErrorCode::InsufficientBalance);
    assert!(message.contains("holds 0"), "{message}");
}

#[test]
fn contracts_offered_by_a_resting_sell_are_not_free() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    v.place(a, "buy up 0.50 x2").unwrap();
    v.place(b, "buy down 0.50 x2").unwrap();
    v.place(a, "sell up 0.90 x2").unwrap();
    let message = v.refused(a, "sell up 0.95 x1", ErrorCode::InsufficientBalance);
    assert!(message.contains("holds 0 not already offered"), "{message}");
}

#[test]
fn post_only_that_would_trade_is_refused_and_nothing_is_placed() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    v.place(a, "buy down 0.45 x1").unwrap();
    v.refused(b, "buy up 0.55 x1 post_only", ErrorCode::PostOnlyCross);
    assert_eq!(v.book(), "up:|down:0.45:1");
    let rests = v.place(b, "buy up 0.54 x1 post_only").unwrap();
    assert_eq!(rests.status, OrderStatus::Resting);
}

#[test]
fn self_trade_is_refused_whole_before_any_fill() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    v.place(b, "buy down 0.46 x1").unwrap();
    v.place(a, "buy down 0.45 x1").unwrap();
    // Crossing both levels would reach a's own order at 0.45.
    v.refused(a, "buy up 0.55 x2", ErrorCode::SelfTrade);
    assert_eq!(v.book(), "up:|down:0.46:1,0.45:1");
    // One contract only trades with b: allowed.
    assert_eq!(v.place(a, "buy up 0.55 x1").unwrap().filled, 1);
}

#[test]
fn markets_that_are_scheduled_closed_or_unknown_are_not_open() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    let series = v.state.series_by_ticker(SERIES).unwrap().markets.clone();
    let scheduled = *series.last().unwrap();
    assert_eq!(
        v.state.markets[scheduled as usize].status,
        MarketStatus::Scheduled
    );
    let order = v.order_on(scheduled, "buy up 0.50 x1");
    let reject = v.place_order(a, order).unwrap_err();
    assert_eq!(reject.code, ErrorCode::MarketNotOpen);
    assert!(
        reject.message.contains("not trading yet"),
        "{}",
        reject.message
    );
    let unknown = v.order_on(9_999, "buy up 0.50 x1");
    assert_eq!(
        v.place_order(a, unknown).unwrap_err().code,
        ErrorCode::MarketNotOpen
    );
    let first = series[0];
    v.advance(WINDOW_MS);
    let closed = v.order_on(first, "buy up 0.50 x1");
    let reject = v.place_order(a, closed).unwrap_err();
    assert!(reject.message.contains("closed"), "{}", reject.message);
}

#[test]
fn key_limits_max_order_per_day_open_orders_and_series() {
    let mut v = Venue::new();
    let t = v.trader_with(
        1_000_00,
        KeyLimits {
            max_order_cents: Some(5_00),
            max_daily_cents: Some(12_00),
            max_open_orders: Some(2),
            series: Some(vec![SERIES.into()]),
        },
    );
    let m = v.refused(t, "buy up 0.51 x10", ErrorCode::LimitExceeded);
    assert!(m.contains("max order"), "{m}");
    v.place(t, "buy up 0.50 x10").unwrap();
    v.place(t, "buy up 0.40 x10").unwrap();
    let m = v.refused(t, "buy up 0.30 x1", ErrorCode::LimitExceeded);
    assert!(m.contains("max open orders"), "{m}");
    // Cancelling gives back both the slot and the day's notional.
    v.cancel(t, 2).unwrap();
    v.place(t, "buy up 0.40 x10").unwrap();
    // 5.00 + 4.00 used; 3.50 more would pass 12.00.
    let m = v.refused(t, "buy up 0.35 x10", ErrorCode::LimitExceeded);
    assert!(m.contains("max per day") && m.contains("9.00 used"), "{m}");
    // A key limited to another series.
    let other = KeyLimits {
        series: Some(vec!["eth-1m".into()]),
        ..big_limits()
    };
    let key = v.key(
        t.account,
        Scopes {
            read: false,
            trade: true,
        },
        other,
    );
    let m = v.refused(
        Trader {
            account: t.account,
            key,
        },
        "buy up 0.10 x1",
        ErrorCode::LimitExceeded,
    );
    assert!(m.contains("series"), "{m}");
}

#[test]
fn trade_keys_without_limits_get_twenty_per_order_and_five_hundred_a_day() {
    let mut v = Venue::new();
    let account = v.account(10_000_00);
    let key = v.key(
        account,
        Scopes {
            read: true,
            trade: true,
        },
        KeyLimits::default(),
    );
    let limits = &v.state.keys[key as usize].limits;
    assert_eq!(
        (limits.max_order_cents, limits.max_daily_cents),
        (Some(20_00), Some(500_00))
    );
    let t = tests::harness::Trader { account, key };
    v.refused(t, "buy up 0.21 x100", ErrorCode::LimitExceeded);
    v.place(t, "buy up 0.20 x100").unwrap();
    let read_only = v.key(
        account,
        Scopes {
            read: true,
            trade: false,
        },
        KeyLimits::default(),
    );
    assert_eq!(
        v.state.keys[read_only as usize].limits,
        KeyLimits::default()
    );
}

#[test]
fn account_cap_on_amount_at_risk_and_market_cap_for_all_users() {
    let mut v = Venue::new();
    let a = v.trader(100_000_00);
    let account_cap = v.run(Command::SetAccountRiskCap {
        account: a.account,
        cents: Some(10_00),
    });
    assert_eq!(account_cap, Reply::Ok);
    let m = v.refused(a, "buy up 0.50 x20", ErrorCode::LimitExceeded);
    assert!(m.contains("Account limit"), "{m}");
    v.place(a, "buy up 0.50 x19").unwrap();

    let mut small = Venue::with_series(SeriesConfig {
        ticker: "tiny".into(),
        symbol: SYMBOL.into(),
        window_ms: WINDOW_MS,
        list_ahead: 1,
        taker_fee_bps: 700,
        maker_fee_bps: 0,
        market_cap_cents: 10_00,
    });
    let (b, c) = (small.trader(100_00), small.trader(100_00));
    let tiny = small.open_market("tiny");
    let order = small.order_on(tiny, "buy up 0.50 x20");
    small.place_order(b, order).unwrap();
    let order = small.order_on(tiny, "buy down 0.40 x1");
    let reject = small.place_order(c, order).unwrap_err();
    assert_eq!(reject.code, ErrorCode::LimitExceeded);
    assert!(
        reject.message.contains("Market limit"),
        "{}",
        reject.message
    );
}

/// A trader holding `count` Up contracts of the open market, bought from a
/// second trader (new pairs at 0.50), who holds the `count` Down; and a
/// second key of the holder's account with the default limits of a trade
/// key ($20 an order, $500 a day). Returns (holder, limited key, other).
fn holder_with_default_key(v: &mut Venue, count: u32) -> (Trader, Trader, Trader) {
    let holder = v.trader(10_000_00);
    let other = v.trader(10_000_00);
    v.place(holder, &format!("buy up 0.50 x{count}")).unwrap();
    v.place(other, &format!("buy down 0.50 x{count}")).unwrap();
    assert_eq!(v.position(holder, Outcome::Up), u64::from(count));
    let key = v.key(
        holder.account,
        Scopes {
            read: true,
            trade: true,
        },
        KeyLimits::default(),
    );
    (
        holder,
        Trader {
            account: holder.account,
            key,
        },
        other,
    )
}

/// Rules 2: a sell's dollars are what it trades for. Priced at 0.01 into a
/// bid at 0.90, a sell of 100 trades $90, not $1: a key's max order and
/// max per day bound what it trades, whatever limit the sell names.
#[test]
fn a_sell_counts_towards_key_limits_at_the_prices_it_fills_at() {
    let mut v = Venue::new();
    let (holder, limited, other) = holder_with_default_key(&mut v, 100);
    let bidder = v.trader(10_000_00);
    v.place(bidder, "buy up 0.90 x100").unwrap();
    let m = v.refused(limited, "sell up 0.01 x100 ioc", ErrorCode::LimitExceeded);
    assert_eq!(
        m,
        "Key limit: the order is $90.00 at the prices it would fill at, over this key's max order of $20.00."
    );
    // 22 x 0.90 = $19.80 fits; the day counts the $19.80 it traded.
    let sold = v.place(limited, "sell up 0.01 x22 ioc").unwrap();
    assert_eq!((sold.filled, sold.fill_cost), (22, 22 * 90));
    assert_eq!(v.state.keys[limited.key as usize].day_used_cents, 19_80);
    // 23 more at 0.85 would all fill at 0.90: $20.70.
    let m = v.refused(limited, "sell up 0.85 x23", ErrorCode::LimitExceeded);
    assert!(m.contains("$20.70 at the prices it would fill at"), "{m}");
    // What rests counts at its limit.
    let rested = v.place(limited, "sell up 0.95 x21").unwrap();
    assert_eq!(rested.filled, 0, "0.95 is above every bid");
    assert_eq!(
        v.state.keys[limited.key as usize].day_used_cents,
        19_80 + 21 * 95
    );
    // Cancelled, its remainder gives back what it counted.
    v.cancel(limited, rested.id).unwrap();
    assert_eq!(v.state.keys[limited.key as usize].day_used_cents, 19_80);
    // Part filled at once (2 at 0.91), the rest resting at 0.91: $18.20;
    // cancelled, the 18 resting give back $16.38.
    v.place(bidder, "buy up 0.91 x2").unwrap();
    let part = v.place(limited, "sell up 0.91 x20").unwrap();
    assert_eq!((part.filled, part.status), (2, OrderStatus::Resting));
    assert_eq!(
        v.state.keys[limited.key as usize].day_used_cents,
        19_80 + 18_20
    );
    v.cancel(limited, part.id).unwrap();
    assert_eq!(
        v.state.keys[limited.key as usize].day_used_cents,
        19_80 + 1_82
    );
    // Against a resting sell of the other outcome (a pair burnt): the up
    // seller gets 0.95 for each, $9.50 for 10, whatever its limit.
    v.place(other, "sell down 0.05 x10").unwrap();
    let burnt = v.place(limited, "sell up 0.01 x10 ioc").unwrap();
    assert_eq!((burnt.filled, burnt.fill_cost), (10, 10 * 95));
    assert_eq!(
        v.state.keys[limited.key as usize].day_used_cents,
        19_80 + 1_82 + 9_50
    );
    let _ = holder;
}

/// Rules 2: in a market at its cap, a buy that only takes over contracts
/// from resting sells adds nothing and is taken; one that would rest or
/// mint new pairs past the cap is refused.
#[test]
fn a_buy_from_resting_sells_fits_a_market_at_its_cap() {
    let tiny = SeriesConfig {
        market_cap_cents: 10_00,
        ..Venue::default_series()
    };
    let mut v = Venue::with_series(tiny);
    let (a, b, c) = (v.trader(100_00), v.trader(100_00), v.trader(100_00));
    v.place(a, "buy up 0.50 x10").unwrap();
    v.place(b, "buy down 0.50 x10").unwrap();
    let exposure = |v: &Venue| {
        let m = &v.state.markets[v.market() as usize];
        m.collateral() + m.resting_buy_notional
    };
    assert_eq!(exposure(&v), 10_00, "at the cap");
    v.place(a, "sell up 0.50 x4").unwrap();
    // 4 from the sell and one more resting: $0.50 past the cap.
    let m = v.refused(c, "buy up 0.50 x5", ErrorCode::LimitExceeded);
    assert!(m.starts_with("Market limit"), "{m}");
    let bought = v.place(c, "buy up 0.50 x4").unwrap();
    assert_eq!(bought.filled, 4);
    assert_eq!(exposure(&v), 10_00, "passing contracts on adds nothing");
    // A buy that would rest past the cap is still refused; one from a
    // resting sell of the other outcome is taken.
    let m = v.refused(c, "buy up 0.40 x1", ErrorCode::LimitExceeded);
    assert!(m.starts_with("Market limit"), "{m}");
    v.place(b, "sell down 0.50 x1").unwrap();
    v.place(c, "buy down 0.50 x1 ioc").unwrap();
    assert_eq!(exposure(&v), 10_00);

    // Minting counts what the pair adds: at the taker's price of the
    // trade (0.50 against a resting 0.50), not its limit (0.60).
    let tiny = SeriesConfig {
        market_cap_cents: 10_00,
        ..Venue::default_series()
    };
    let mut v = Venue::with_series(tiny);
    let (a, c) = (v.trader(100_00), v.trader(100_00));
    v.place(a, "buy up 0.50 x19").unwrap();
    assert_eq!(exposure(&v), 9_50);
    let m = v.refused(c, "buy down 0.60 x2 ioc", ErrorCode::LimitExceeded);
    assert!(m.starts_with("Market limit"), "{m}");
    v.place(c, "buy down 0.60 x1 ioc").unwrap();
    assert_eq!(exposure(&v), 10_00);
}

/// Journals written under rules 1 replay as they ran: a sell counted at its
/// limit, and a buy counted whole towards the market cap.
#[test]
fn rules_one_count_orders_at_their_limit() {
    let mut v = Venue::with_series_under(1, Venue::default_series());
    let (_, limited, _) = holder_with_default_key(&mut v, 100);
    let bidder = v.trader(10_000_00);
    v.place(bidder, "buy up 0.90 x100").unwrap();
    let sold = v.place(limited, "sell up 0.01 x100 ioc").unwrap();
    assert_eq!(sold.filled, 100);
    assert_eq!(v.state.keys[limited.key as usize].day_used_cents, 1_00);

    let tiny = SeriesConfig {
        market_cap_cents: 10_00,
        ..Venue::default_series()
    };
    let mut v = Venue::with_series_under(1, tiny);
    let (a, b, c) = (v.trader(100_00), v.trader(100_00), v.trader(100_00));
    v.place(a, "buy up 0.50 x10").unwrap();
    v.place(b, "buy down 0.50 x10").unwrap();
    v.place(a, "sell up 0.50 x4").unwrap();
    let m = v.refused(c, "buy up 0.50 x4", ErrorCode::LimitExceeded);
    assert!(m.starts_with("Market limit"), "{m}");
    let mut v = Venue::with_series_under(
        1,
        SeriesConfig {
            market_cap_cents: 10_00,
            ..Venue::default_series()
        },
    );
    let (a, c) = (v.trader(100_00), v.trader(100_00));
    v.place(a, "buy up 0.50 x19").unwrap();
    let m = v.refused(c, "buy down 0.60 x1 ioc", ErrorCode::LimitExceeded);
    assert!(m.starts_with("Market limit"), "{m}");
}

/// Rules 2: a suspended account's keys are refused, cancels included, so
/// its resting orders are cancelled at the suspension, holds and committed
/// contracts released, and nothing of it trades until it is unsuspended.
/// Under rules 1 they stayed on the book and filled.
#[test]
fn suspending_an_account_cancels_its_resting_orders() {
    for rules in [1, sequencer::limits::RULES_CURRENT] {
        let mut v = Venue::with_series_under(rules, Venue::default_series());
        let (a, b) = (v.trader(100_00), v.trader(100_00));
        v.place(a, "buy up 0.50 x10").unwrap();
        v.place(b, "buy down 0.50 x10").unwrap();
        let buy = v.place(a, "buy up 0.40 x5").unwrap();
        let sell = v.place(a, "sell up 0.70 x4").unwrap();
        v.ok(Command::SetAccountFlag {
            account: a.account,
            flag: AccountFlag::Suspended,
            value: true,
        });
        let status = |v: &Venue, id| v.state.order(id).unwrap().status;
        if rules < 2 {
            assert_eq!(status(&v, buy.id), OrderStatus::Resting);
            assert_eq!(v.book(), "up:0.40:5|down:0.30:4");
            // The move to rules 2 cancels what suspended accounts left.
            v.ok(Command::SetRules {
                version: sequencer::limits::RULES_CURRENT,
            });
        }
        assert_eq!(status(&v, buy.id), OrderStatus::Canceled);
        assert_eq!(status(&v, sell.id), OrderStatus::Canceled);
        assert_eq!(v.book(), "up:|down:");
        assert_eq!(v.buying_power(a), v.cash(a), "no hold left");
        let account = v.state.account(a.account).unwrap();
        assert!(account.resting.is_empty());
        assert!(account.positions.values().all(|p| p.committed == 0));
        // The cancellations are published like any other.
        assert!(v.events.iter().any(|e| matches!(
            e,
            Event::Order(update) if update.id == buy.id && update.status == OrderStatus::Canceled
        )));
        assert_eq!(
            v.refused(a, "buy up 0.50 x1", ErrorCode::Unauthorized),
            "This account is suspended."
        );
    }
}

/// Rules 1 kept a suspended account's resting orders on the book; the move
/// to rules 2 cancels those, and only those (see
/// `suspending_an_account_cancels_its_resting_orders`). A `SetRules` to the
/// version the venue already runs is no move back: it is taken and changes
/// nothing.
#[test]
fn the_move_to_rules_two_cancels_only_suspended_accounts_orders() {
    let mut v = Venue::with_series_under(1, Venue::default_series());
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    let suspended = v.place(a, "buy up 0.40 x5").unwrap();
    let active = v.place(b, "buy down 0.30 x2").unwrap();
    v.ok(Command::SetAccountFlag {
        account: a.account,
        flag: AccountFlag::Suspended,
        value: true,
    });
    v.ok(Command::SetRules { version: 1 });
    assert_eq!(v.state.rules, 1);
    let status = |v: &Venue, id| v.state.order(id).unwrap().status;
    assert_eq!(status(&v, suspended.id), OrderStatus::Resting);
    assert_eq!(v.book(), "up:0.40:5|down:0.30:2");
    v.ok(Command::SetRules { version: 2 });
    assert_eq!(status(&v, suspended.id), OrderStatus::Canceled);
    assert_eq!(status(&v, active.id), OrderStatus::Resting);
    assert_eq!(v.book(), "up:|down:0.30:2");
}

#[test]
fn keys_are_refused_when_revoked_expired_suspended_or_of_the_other_environment() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    v.run(Command::SetAccountFlag {
        account: a.account,
        flag: AccountFlag::Suspended,
        value: true,
    });
    assert_eq!(
        v.refused(a, "buy up 0.50 x1", ErrorCode::Unauthorized),
        "This account is suspended."
    );
    v.run(Command::SetAccountFlag {
        account: a.account,
        flag: AccountFlag::Suspended,
        value: false,
    });
    let key_id = v.state.keys[a.key as usize].key_id.clone();
    v.ok(Command::RevokeKey { key_id });
    assert_eq!(
        v.refused(a, "buy up 0.50 x1", ErrorCode::Unauthorized),
        "This API key has been revoked."
    );

    let expiring = day_key(&mut v, a.account);
    v.place(expiring, "buy up 0.10 x1").unwrap();
    // A day on (and 1 ms, so that the print is after the open of the
    // window then current, which opens on it).
    v.now += 24 * 3_600_000 + 1;
    v.print(100);
    assert_eq!(
        v.refused(expiring, "buy up 0.10 x1", ErrorCode::Unauthorized),
        "This API key has expired."
    );

    let mut live = v.new_key(
        a.account,
        Scopes {
            read: true,
            trade: true,
        },
        big_limits(),
    );
    live.environment = Environment::Live;
    let Reply::KeyIssued { key } = v.run(Command::IssueKey(live)) else {
        panic!()
    };
    let m = v.refused(
        tests::harness::Trader {
            account: a.account,
            key,
        },
        "buy up 0.10 x1",
        ErrorCode::Unauthorized,
    );
    assert!(m.contains("live environment"), "{m}");
}

#[test]
fn forbidden_names_the_missing_permission_or_precondition() {
    let mut v = Venue::new();
    let account = v.account(100_00);
    let read = v.key(
        account,
        Scopes {
            read: true,
            trade: false,
        },
        big_limits(),
    );
    let m = v.refused(
        tests::harness::Trader { account, key: read },
        "buy up 0.50 x1",
        ErrorCode::Forbidden,
    );
    assert!(m.contains("trade permission"), "{m}");
    let trade = v.key(
        account,
        Scopes {
            read: true,
            trade: true,
        },
        big_limits(),
    );
    let t = tests::harness::Trader {
        account,
        key: trade,
    };
    // The message says which is missing, and names both when both are.
    let cases = [
        (false, true, "accepted the current Terms of Service"),
        (true, false, "allowed trading on its wallet"),
        (
            false,
            false,
            "accepted the current Terms of Service nor allowed trading on its wallet",
        ),
    ];
    for (terms, wallet, missing) in cases {
        for (flag, value) in [
            (AccountFlag::TermsAccepted, terms),
            (AccountFlag::TradingAllowed, wallet),
        ] {
            v.ok(Command::SetAccountFlag {
                account,
                flag,
                value,
            });
        }
        assert_eq!(
            v.refused(t, "buy up 0.50 x1", ErrorCode::Forbidden),
            format!("The account has not {missing}.")
        );
    }
    for flag in [AccountFlag::TermsAccepted, AccountFlag::TradingAllowed] {
        v.ok(Command::SetAccountFlag {
            account,
            flag,
            value: true,
        });
    }
    v.ok(Command::Configure(VenueConfig {
        practice_book_open: false,
        ..VenueConfig::default()
    }));
    assert!(v
        .refused(t, "buy up 0.50 x1", ErrorCode::Forbidden)
        .contains("practice book"));
}

#[test]
fn a_pause_refuses_new_orders_but_cancels_still_work() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    let resting = v.place(a, "buy up 0.30 x1").unwrap();
    v.ok(Command::PauseTrading {
        until_ts_ms: Some(T0 + 5_000),
    });
    let m = v.refused(a, "buy up 0.30 x1", ErrorCode::TradingPaused);
    assert!(m.contains(&(T0 + 5_000).to_string()), "{m}");
    assert_eq!(
        v.cancel(a, resting.id).unwrap().status,
        OrderStatus::Canceled
    );
    v.advance(5_000);
    v.place(a, "buy up 0.30 x1").unwrap();
    v.ok(Command::PauseTrading { until_ts_ms: None });
    assert!(v
        .refused(a, "buy up 0.30 x1", ErrorCode::TradingPaused)
        .contains("further notice"));
    v.ok(Command::ResumeTrading);
    v.place(a, "buy up 0.30 x1").unwrap();
    // A pause ending in the past, past the largest time, or given in
    // seconds is refused, saying which. Times are epoch ms from 0 to
    // 9007199254740991 (SPEC, `TS_MS_MAX`): a pause may run until the
    // largest time, not past it. A past `until` below 100000000000 (epoch
    // seconds of any time since 1973) looks like seconds; from there on,
    // it is in the past.
    let refusal = |v: &mut Venue, until: u64| {
        v.run(Command::PauseTrading {
            until_ts_ms: Some(until),
        })
        .rejection()
        .expect("refused")
        .message
        .clone()
    };
    let now = v.now;
    assert_eq!(refusal(&mut v, now), "until must be a time in the future");
    assert!(refusal(&mut v, now / 1000 + 60).contains("this looks like seconds"));
    assert!(refusal(&mut v, 99_999_999_999).contains("this looks like seconds"));
    assert_eq!(
        refusal(&mut v, 100_000_000_000),
        "until must be a time in the future"
    );
    assert!(refusal(&mut v, u64::MAX).contains("past the largest time"));
    assert!(refusal(&mut v, TS_MS_MAX + 1).contains("past the largest time"));
    v.ok(Command::PauseTrading {
        until_ts_ms: Some(TS_MS_MAX),
    });
}

#[test]
fn idempotency_returns_the_same_order_or_a_conflict() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    let first = v.place(a, "buy up 0.30 x1 id=retry-1").unwrap();
    let retry = v.order("buy up 0.30 x1 id=retry-1");
    let Reply::Order { order, created } = v.run(Command::PlaceOrder {
        key: a.key,
        order: retry,
    }) else {
        panic!()
    };
    assert!(!created);
    assert_eq!(order, first);
    assert_eq!(v.state.orders.len(), 1);
    v.refused(
        a,
        "buy up 0.31 x1 id=retry-1",
        ErrorCode::IdempotencyConflict,
    );
    // Unique per account across keys: a second key of the same account conflicts too.
    let other_key = v.key(
        a.account,
        Scopes {
            read: true,
            trade: true,
        },
        big_limits(),
    );
    let t = tests::harness::Trader {
        account: a.account,
        key: other_key,
    };
    assert_eq!(
        v.place(t, "buy up 0.30 x1 id=retry-1").unwrap().id,
        first.id
    );
    // Another account may use the same id.
    let b = v.trader(100_00);
    assert_ne!(
        v.place(b, "buy up 0.30 x1 id=retry-1").unwrap().id,
        first.id
    );
}

#[test]
fn one_account_cannot_cancel_or_read_another_accounts_order() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    let order = v.place(a, "buy up 0.30 x1").unwrap();
    assert_eq!(
        v.cancel(b, order.id).unwrap_err().code,
        ErrorCode::OrderNotFound
    );
    assert_eq!(
        v.state.query_order(b.key, order.id).unwrap_err().code,
        ErrorCode::OrderNotFound
    );
    assert_eq!(
        v.state
            .query_order(a.key, order.id)
            .unwrap()
            .live()
            .unwrap()
            .id,
        order.id
    );
    assert_eq!(
        v.cancel(a, 12_345).unwrap_err().code,
        ErrorCode::OrderNotFound
    );
}

// ----- keys and accounts ------------------------------------------------------

#[test]
fn at_most_five_active_keys_and_key_fields_are_checked() {
    let mut v = Venue::new();
    let account = v.account(0);
    for _ in 0..5 {
        v.key(
            account,
            Scopes {
                read: true,
                trade: false,
            },
            KeyLimits::default(),
        );
    }
    let sixth = v.new_key(
        account,
        Scopes {
            read: true,
            trade: false,
        },
        KeyLimits::default(),
    );
    assert_eq!(
        v.run(Command::IssueKey(sixth.clone()))
            .rejection()
            .unwrap()
            .code,
        ErrorCode::LimitExceeded
    );
    // Revoking one frees a place.
    v.ok(Command::RevokeKey {
        key_id: "k1".into(),
    });
    v.ok(Command::IssueKey(sixth));
    let other = v.account(0);
    let mut bad = v.new_key(other, Scopes::default(), KeyLimits::default());
    assert!(v
        .run(Command::IssueKey(bad.clone()))
        .rejection()
        .unwrap()
        .message
        .contains("scopes"));
    bad.scopes.read = true;
    bad.expires_days = Some(366);
    assert!(v
        .run(Command::IssueKey(bad.clone()))
        .rejection()
        .unwrap()
        .message
        .contains("365"));
    bad.expires_days = Some(0);
    assert!(v.run(Command::IssueKey(bad.clone())).is_rejected());
    bad.expires_days = Some(365);
    bad.ip_allowlist = (0..11).map(|i| format!("10.0.0.{i}")).collect();
    assert!(v
        .run(Command::IssueKey(bad.clone()))
        .rejection()
        .unwrap()
        .message
        .contains("10 addresses"));
    bad.ip_allowlist = vec!["not-an-ip".into()];
    assert!(v.run(Command::IssueKey(bad.clone())).is_rejected());
    bad.ip_allowlist = vec!["127.0.0.1".into(), "::1".into()];
    v.ok(Command::IssueKey(bad));
    let unknown = v.new_key(
        999,
        Scopes {
            read: true,
            trade: false,
        },
        KeyLimits::default(),
    );
    assert_eq!(
        v.run(Command::IssueKey(unknown)).rejection().unwrap().code,
        ErrorCode::NotFound
    );
}

#[test]
fn withdrawals_come_only_from_buying_power() {
    let mut v = Venue::new();
    let a = v.trader(10_00);
    v.place(a, "buy up 0.50 x10").unwrap(); // holds 5.20
    let r = v.run(Command::Withdraw {
        account: a.account,
        cents: 5_00,
    });
    assert_eq!(r.rejection().unwrap().code, ErrorCode::InsufficientBalance);
    v.ok(Command::Withdraw {
        account: a.account,
        cents: 4_80,
    });
    assert_eq!(v.buying_power(a), 0);
    assert!(v
        .run(Command::Deposit {
            account: a.account,
            cents: 0
        })
        .is_rejected());
    assert!(v
        .run(Command::Deposit {
            account: a.account,
            cents: -1
        })
        .is_rejected());
}

// ----- windows ------------------------------------------------------------------

#[test]
fn windows_are_listed_ahead_with_tickers_in_the_spec_pattern() {
    let v = Venue::new();
    let tickers: Vec<(String, MarketStatus)> = v
        .state
        .series_by_ticker(SERIES)
        .unwrap()
        .markets
        .iter()
        .map(|&m| {
            (
                v.state.markets[m as usize].ticker.clone(),
                v.state.markets[m as usize].status,
            )
        })
        .collect();
    assert_eq!(
        tickers,
        vec![
            ("btc-1m-261121-2100-2101".to_string(), MarketStatus::Open),
            (
                "btc-1m-261121-2101-2102".to_string(),
                MarketStatus::Scheduled
            ),
            (
                "btc-1m-261121-2102-2103".to_string(),
                MarketStatus::Scheduled
            ),
        ]
    );
    for (ticker, _) in &tickers {
        assert!(sequencer::validate::is_market_ticker(ticker));
    }
}

/// Configures `v` and lists an AAPL series `ticker`, without fees, with no
/// price printed yet: its windows wait for their first print.
fn list_unpriced_series(v: &mut Venue, ticker: &str, list_ahead: u32) {
    v.ok(Command::Configure(VenueConfig::default()));
    v.ok(Command::CreateSeries(SeriesConfig {
        ticker: ticker.into(),
        symbol: "AAPL".into(),
        window_ms: WINDOW_MS,
        list_ahead,
        taker_fee_bps: 0,
        maker_fee_bps: 0,
        market_cap_cents: 1_000_00,
    }));
}

#[test]
fn a_window_with_no_earlier_print_opens_on_the_first_print_after_it() {
    let mut v = Venue::empty();
    list_unpriced_series(&mut v, "late", 0);
    let market = v.state.series_by_ticker("late").unwrap().markets[0] as usize;
    assert_eq!(v.state.markets[market].status, MarketStatus::Scheduled);
    v.now += 1_000;
    v.ok(Venue::print_of("AAPL", 230, v.now));
    assert_eq!(v.state.markets[market].status, MarketStatus::Open);
    assert_eq!(
        v.state.markets[market].price_to_beat_e8,
        Some(230 * 100_000_000)
    );
}

/// DESIGN §2: the price to beat is the last print at or before the open.
/// A feed's print of just before the open can reach the sequencer after
/// it, so the window waits for a print after its open before it opens.
#[test]
fn the_price_to_beat_is_the_last_print_before_the_open_even_when_it_arrives_late() {
    let mut v = Venue::empty();
    list_unpriced_series(&mut v, "beat", 1);
    let next = v.state.series_by_ticker("beat").unwrap().markets[1] as usize;
    let open = v.state.markets[next].open_ts_ms;
    assert_eq!(open, T0 + WINDOW_MS);
    let print = |v: &mut Venue, dollars: i64, t_ms: u64| {
        v.ok(Venue::print_of("AAPL", dollars, t_ms));
    };
    v.now = open - 1_000;
    print(&mut v, 100, open - 1_000);
    v.advance(1_000);
    assert_eq!(
        v.state.markets[next].status,
        MarketStatus::Scheduled,
        "no print after the open yet: a later one may still be at or before it"
    );
    // Stamped after the open, printed 1 ms before it: the price to beat.
    v.now = open + 2;
    print(&mut v, 101, open - 1);
    assert_eq!(v.state.markets[next].status, MarketStatus::Scheduled);
    v.now = open + 5;
    print(&mut v, 102, open + 5);
    let market = &v.state.markets[next];
    assert_eq!(market.status, MarketStatus::Open);
    assert_eq!(market.price_to_beat_e8, Some(101 * 100_000_000));
}

/// A journal written before the rules were versioned (no `SetRules`)
/// replays under the rules it was written with: there, a window opened at
/// the first command after its open, on the last print known then; and a
/// print far ahead was taken. `SetRules` moves to this build's rules, never
/// back, and never to a version this build does not know.
#[test]
fn journals_from_before_versioned_rules_replay_under_their_rules() {
    let mut v = Venue::unversioned();
    assert_eq!(v.state.rules, 0);
    list_unpriced_series(&mut v, "old", 1);
    let next = v.state.series_by_ticker("old").unwrap().markets[1] as usize;
    v.now = T0 + WINDOW_MS - 1_000;
    v.ok(Venue::print_of("AAPL", 100, v.now));
    v.advance(1_000);
    assert_eq!(
        v.state.markets[next].status,
        MarketStatus::Open,
        "rules 0: open at the tick, on the print before the open"
    );
    // A print far ahead was accepted under rules 0.
    v.ok(Venue::print_of("MSFT", 1, v.now + 3_600_000));
    // Never to a version this build does not know, never back.
    let newer = sequencer::limits::RULES_CURRENT + 1;
    let refused = v.run(Command::SetRules { version: newer });
    assert!(refused
        .rejection()
        .unwrap()
        .message
        .starts_with(&format!("rules version {newer} is newer than this build's")));
    v.ok(Command::SetRules {
        version: sequencer::limits::RULES_CURRENT,
    });
    assert_eq!(v.state.rules, sequencer::limits::RULES_CURRENT);
    assert!(v.run(Command::SetRules { version: 0 }).is_rejected());
    assert!(v
        .run(Venue::print_of("AAPL", 1, v.now + 3_600_000))
        .is_rejected());
}

/// A print far ahead of the venue's clock would open and settle windows on
/// itself and make every later real print "before the last one".
#[test]
fn prints_ahead_of_the_venue_clock_by_more_than_five_seconds_are_refused() {
    let mut v = Venue::new();
    let ahead = v.run(Venue::print_of(SYMBOL, 1, v.now + 5_001));
    let refusal = ahead.rejection().expect("refused");
    assert_eq!(refusal.code, ErrorCode::BadRequest);
    assert_eq!(
        refusal.message,
        "t_ms is more than 5 seconds ahead of the exchange's clock"
    );
    assert!(!v
        .run(Venue::print_of(SYMBOL, 1, v.now + 5_000))
        .is_rejected());
}

/// DESIGN §2: a window is open from its open to its close. A window the
/// venue first reaches at its close (a print after its open came in early,
/// and no command arrived during the window) closes without ever opening:
/// no open event and no price to beat.
#[test]
fn a_window_first_reached_at_its_close_closes_without_opening() {
    let mut v = Venue::empty();
    list_unpriced_series(&mut v, "idle", 1);
    let later = v.state.series_by_ticker("idle").unwrap().markets[1];
    let (open, close) = {
        let m = &v.state.markets[later as usize];
        (m.open_ts_ms, m.close_ts_ms)
    };
    // Printed 1 s after the open, received 1 s before it.
    v.now = open - 1_000;
    v.ok(Venue::print_of("AAPL", 230, open + 1_000));
    assert_eq!(
        v.state.markets[later as usize].status,
        MarketStatus::Scheduled
    );
    v.now = close;
    v.ok(Command::Tick);
    let m = &v.state.markets[later as usize];
    assert_eq!(m.status, MarketStatus::Closed);
    assert_eq!(m.price_to_beat_e8, None);
    assert_eq!(v.phases(later), vec![Phase::Closed]);
}

/// SPEC: `t_ms` is 0 to 9007199254740991; a print at the largest time is
/// taken and one past it refused.
#[test]
fn a_print_at_the_largest_time_is_taken_and_one_past_it_refused() {
    let mut v = Venue::empty();
    v.now = TS_MS_MAX;
    v.ok(Venue::print_of("AAPL", 230, TS_MS_MAX));
    let past = v.run(Venue::print_of("AAPL", 230, TS_MS_MAX + 1));
    let refusal = past.rejection().expect("refused");
    assert_eq!(refusal.code, ErrorCode::BadRequest);
    assert_eq!(refusal.message, "t_ms is out of range");
}

/// limits.rs: the latest 4096 prints of a symbol are kept. A print at or
/// after a window's close that came in ahead of it (the feed may lead the
/// venue's clock) settles the window even behind 4095 later prints.
#[test]
fn the_latest_4096_prints_of_a_symbol_are_kept_for_settlement() {
    let mut v = Venue::new();
    let market = v.market();
    let close = v.state.markets[market as usize].close_ts_ms;
    v.now = close - 4_000;
    v.check = false;
    for _ in 0..10 {
        v.print(100);
    }
    // The settlement print, 1 s after the close; then 4095 lower ones.
    v.ok(Venue::print_of(SYMBOL, 150, close + 1_000));
    for _ in 0..4_095 {
        v.ok(Venue::print_of(SYMBOL, 50, close + 1_000));
    }
    v.check = true;
    v.now = close;
    v.ok(Command::Tick);
    let m = &v.state.markets[market as usize];
    assert_eq!(m.status, MarketStatus::Settled);
    assert_eq!(m.settlement_price_e8, Some(150 * 100_000_000));
    assert_eq!(m.result, Some(Outcome::Up));
}

/// SPEC: the portfolio reads need the Read permission; Trade allows
/// placing and cancelling only.
#[test]
fn a_key_without_read_cannot_read_the_account() {
    let mut v = Venue::new();
    let account = v.account(100_00);
    let key = v.key(
        account,
        Scopes {
            read: false,
            trade: true,
        },
        big_limits(),
    );
    let trader = tests::harness::Trader { account, key };
    let order = v.place(trader, "buy up 0.10 x1").unwrap();
    let lacks = |r: sequencer::Reject| {
        assert_eq!(r.code, ErrorCode::Forbidden);
        assert_eq!(r.message, "This API key lacks the read permission.");
    };
    lacks(v.state.query_balance(key).unwrap_err());
    lacks(v.state.query_positions(key).unwrap_err());
    lacks(v.state.query_order(key, order.id).expect_err("refused"));
    // GET /account is "(key)": any valid key may see itself.
    assert!(v.state.query_account(key).is_ok());
    v.cancel(trader, order.id).unwrap();
}

/// The order list answers a client_order_id from the idempotency index,
/// resting orders from the account's list of them and a cursor by binary
/// search; every filter gives exactly what a walk over the day's orders
/// would.
#[test]
fn the_order_list_matches_a_walk_over_the_days_orders() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(1_000_00), v.trader(1_000_00));
    for i in 0..120u64 {
        let order = v
            .place(a, &format!("buy up 0.{:02} x2", 10 + i % 30))
            .unwrap();
        match i % 4 {
            0 => {
                v.cancel(a, order.id).unwrap();
            }
            1 => {
                v.place(b, "buy down 0.90 x1 ioc").unwrap();
            }
            _ => {}
        }
        if i == 60 {
            // A new window: later orders are in another market.
            v.now = T0 + WINDOW_MS + 1;
            v.print(100);
        }
    }
    let account = v.state.account(a.account).unwrap();
    let all: Vec<sequencer::state::Order> = account
        .orders
        .iter()
        .rev()
        .map(|&id| *v.state.order(id).unwrap())
        .collect();
    let some_coid = all[37].client_order_id;
    let markets: Vec<Option<String>> = vec![
        None,
        Some(v.state.markets[all[0].market as usize].ticker.clone()),
        Some(v.state.markets[all[119].market as usize].ticker.clone()),
    ];
    let statuses = [
        None,
        Some(OrderStatus::Resting),
        Some(OrderStatus::Canceled),
        Some(OrderStatus::Executed),
    ];
    let cursors = [
        None,
        Some(all[0].id + 1),
        Some(all[50].id),
        Some(all[119].id),
        Some(1),
    ];
    for market in &markets {
        for status in statuses {
            for coid in [None, Some(some_coid)] {
                for cursor in cursors {
                    let naive: Vec<u64> = all
                        .iter()
                        .filter(|o| cursor.is_none_or(|c| o.id < c))
                        .filter(|o| {
                            market
                                .as_ref()
                                .is_none_or(|t| v.state.markets[o.market as usize].ticker == *t)
                        })
                        .filter(|o| status.is_none_or(|s| o.status == s))
                        .filter(|o| coid.is_none_or(|c| o.client_order_id == c))
                        .map(|o| o.id)
                        .take(7)
                        .collect();
                    let filter = OrderFilter {
                        market_ticker: market.clone(),
                        client_order_id: coid,
                        status,
                        limit: Some(7),
                        cursor,
                    };
                    let page = v.state.query_orders(a.key, &filter).unwrap();
                    let got: Vec<u64> = page.items.iter().map(|o| o.id).collect();
                    assert_eq!(got, naive, "{filter:?}");
                }
            }
        }
    }
}

/// A filter that matches little never walks the whole day on the sequencer
/// thread: a page looks at most `LIVE_SCAN_MAX` records and, short of
/// matches, answers what it found with a cursor that resumes the walk; the
/// pages together give every match, once.
#[test]
fn filtered_lists_look_at_a_bounded_number_of_records_per_page() {
    use sequencer::limits::LIVE_SCAN_MAX;
    let mut v = Venue::new();
    v.check = false; // 40,000 commands; the invariants are checked at the end
    v.ok(Command::CreateSeries(SeriesConfig {
        ticker: "eth-1m".into(),
        symbol: "X:ETHUSD".into(),
        window_ms: WINDOW_MS,
        list_ahead: 1,
        taker_fee_bps: 0,
        maker_fee_bps: 0,
        market_cap_cents: 1_000_000_00,
    }));
    v.ok(Venue::print_of("X:ETHUSD", 3_000, v.now + 1));
    let eth = v.open_market("eth-1m");
    let (a, b) = (v.trader(1_000_000_00), v.trader(1_000_000_00));
    // The oldest order and fill of a are in the ETH market; then many in BTC.
    let first = v.order_on(eth, "buy up 0.50 x1");
    let eth_order = v.place_order(a, first).unwrap();
    let cross = v.order_on(eth, "buy down 0.50 x1");
    v.place_order(b, cross).unwrap();
    for _ in 0..LIVE_SCAN_MAX + 50 {
        v.place(a, "buy up 0.40 x1").unwrap();
        v.place(b, "buy down 0.60 x1 ioc").unwrap();
    }
    v.state.check_invariants().unwrap();
    let eth_ticker = v.state.markets[eth as usize].ticker.clone();
    // Orders of the ETH market: the first page looks at LIVE_SCAN_MAX
    // orders, finds none, and says where to go on.
    let mut filter = OrderFilter {
        market_ticker: Some(eth_ticker.clone()),
        limit: Some(5),
        ..Default::default()
    };
    let mut pages = Vec::new();
    loop {
        let page = v.state.query_orders(a.key, &filter).unwrap();
        pages.push(page.items.iter().map(|o| o.id).collect::<Vec<_>>());
        match page.cursor {
            Some(c) => filter.cursor = Some(c),
            None => break,
        }
        assert!(pages.len() < 10, "{pages:?}");
    }
    assert!(pages[0].is_empty(), "{pages:?}");
    assert_eq!(pages.concat(), vec![eth_order.id]);
    // Fills of the ETH market, the same way.
    let mut cursor = None;
    let mut found = Vec::new();
    let mut rounds = 0;
    loop {
        let page = v
            .state
            .query_fills(a.key, Some(&eth_ticker), Some(5), cursor)
            .unwrap();
        found.extend(page.items.iter().map(|f| f.order));
        rounds += 1;
        match page.cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
        assert!(rounds < 10);
    }
    assert!(rounds >= 2, "the first page stopped at the bound");
    assert_eq!(found, vec![eth_order.id]);
}

/// The market list answers from the unsettled markets or the series' own
/// list when a filter allows it; every filter and cursor gives exactly what
/// a walk over every market would.
#[test]
fn the_market_list_matches_a_walk_over_every_market() {
    let mut v = Venue::new();
    v.ok(Command::CreateSeries(SeriesConfig {
        ticker: "eth-1m".into(),
        symbol: "X:ETHUSD".into(),
        window_ms: WINDOW_MS,
        list_ahead: 1,
        taker_fee_bps: 0,
        maker_fee_bps: 0,
        market_cap_cents: 1_000_00,
    }));
    // 40 windows go by; the ETH series gets prints only now and then, so
    // some of its windows close without settling for a while.
    for minute in 1..=40u64 {
        v.now = T0 + minute * WINDOW_MS + 1;
        v.print(100 + minute as i64);
        if minute % 7 == 0 {
            v.ok(Venue::print_of("X:ETHUSD", 3_000, v.now));
        }
        v.advance(0);
    }
    let statuses = [
        None,
        Some(MarketStatus::Scheduled),
        Some(MarketStatus::Open),
        Some(MarketStatus::Closed),
        Some(MarketStatus::Settled),
    ];
    let total = v.state.markets.len() as u64;
    for series in [None, Some(SERIES), Some("eth-1m")] {
        for status in statuses {
            for cursor in [None, Some(total), Some(total / 2), Some(3), Some(0)] {
                let naive: Vec<u32> = v
                    .state
                    .markets
                    .iter()
                    .rev()
                    .filter(|m| cursor.is_none_or(|c| u64::from(m.id) < c))
                    .filter(|m| series.is_none_or(|t| v.state.series_of(m).config.ticker == t))
                    .filter(|m| status.is_none_or(|s| m.status == s))
                    .map(|m| m.id)
                    .take(5)
                    .collect();
                let page = v
                    .state
                    .query_markets(series, status, Some(5), cursor)
                    .unwrap();
                let got: Vec<u32> = page.items.iter().map(|m| m.id).collect();
                assert_eq!(got, naive, "{series:?} {status:?} {cursor:?}");
            }
        }
    }
    // Every status occurs, so the comparison above covered each path.
    for status in statuses.into_iter().flatten() {
        assert!(
            v.state.markets.iter().any(|m| m.status == status),
            "{status:?}"
        );
    }
}

/// DESIGN §2: a symbol's prints never go back in time; two prints of the
/// same millisecond do not, and both are taken.
#[test]
fn prints_may_not_go_back_in_time_and_symbols_are_checked() {
    let mut v = Venue::new();
    let back = v.run(Command::Price {
        symbol: SYMBOL.into(),
        price_e8: 1,
        t_ms: T0 - 1,
    });
    let refusal = back.rejection().unwrap();
    assert_eq!(refusal.code, ErrorCode::BadRequest);
    assert_eq!(refusal.message, "t_ms is before the symbol's last print");
    let lower = v.run(Command::Price {
        symbol: "x:btcusd".into(),
        price_e8: 1,
        t_ms: T0,
    });
    assert!(lower.is_rejected());
    let zero = v.run(Command::Price {
        symbol: SYMBOL.into(),
        price_e8: 0,
        t_ms: T0,
    });
    assert!(zero.is_rejected());
    v.now += 1_000;
    v.ok(Venue::print_of(SYMBOL, 101, v.now));
    v.ok(Venue::print_of(SYMBOL, 102, v.now));
    let earlier = v.run(Venue::print_of(SYMBOL, 103, v.now - 1));
    assert_eq!(
        earlier.rejection().expect("refused").message,
        "t_ms is before the symbol's last print"
    );
}

// ----- events and queries --------------------------------------------------------

#[test]
fn every_book_delta_carries_the_checksum_of_the_book_after_it() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    v.place(a, "buy up 0.40 x3").unwrap();
    v.place(a, "buy up 0.41 x3").unwrap();
    v.place(b, "sell up 0.39 x0").unwrap_err();
    v.place(b, "buy down 0.60 x4").unwrap();
    let deltas = book_deltas(&v);
    // b crossed 0.41 fully (one delta) and 0.40 in part (one delta).
    assert_eq!(deltas.len(), 2);
    assert_eq!(
        (deltas[0].0, deltas[0].1, deltas[0].2),
        (Outcome::Up, 41, -3)
    );
    assert_eq!(
        (deltas[1].0, deltas[1].1, deltas[1].2),
        (Outcome::Up, 40, -1)
    );
    assert_eq!(deltas[0].3, crc32fast_hash("up:0.40:3|down:"));
    assert_eq!(deltas[1].3, crc32fast_hash("up:0.40:2|down:"));
    assert!(v.events.iter().any(|e| matches!(e, Event::Ticker { .. })));
    assert_eq!(
        v.events
            .iter()
            .filter(|e| matches!(e, Event::Trade(_)))
            .count(),
        2
    );
}

/// The book deltas of the last command: (outcome, price, delta, checksum).
fn book_deltas(v: &Venue) -> Vec<(Outcome, u8, i64, u32)> {
    v.events
        .iter()
        .filter_map(|e| match e {
            Event::BookDelta {
                outcome,
                price,
                delta,
                checksum,
                ..
            } => Some((*outcome, *price, *delta, *checksum)),
            _ => None,
        })
        .collect()
}

#[test]
fn cancel_all_and_the_close_send_one_delta_per_changed_level() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    let first = v.place(a, "buy up 0.40 x3").unwrap();
    v.place(a, "buy down 0.30 x1").unwrap();
    v.place(b, "buy up 0.40 x4").unwrap();
    let last = v.place(a, "buy up 0.40 x2").unwrap();
    let all = v.run(Command::CancelAll {
        key: a.key,
        market: None,
        series: None,
    });
    // The reply lists a's orders oldest first; the book changed at two
    // levels, so two deltas, each with the checksum of the book after it.
    assert_eq!(
        all,
        Reply::Canceled {
            order_ids: vec![first.id, first.id + 1, last.id]
        }
    );
    let deltas = book_deltas(&v);
    assert_eq!(
        deltas,
        vec![
            (Outcome::Up, 40, -5, crc32fast_hash("up:0.40:4|down:0.30:1")),
            (Outcome::Down, 30, -1, crc32fast_hash("up:0.40:4|down:")),
        ]
    );
    let canceled = v
        .events
        .iter()
        .filter(|e| matches!(e, Event::Order(o) if o.status == OrderStatus::Canceled))
        .count();
    assert_eq!(canceled, 3, "one order update per order");

    // At the close, every order of a level leaves with one delta.
    v.place(a, "buy up 0.40 x1").unwrap();
    v.place(a, "buy up 0.35 x2").unwrap();
    v.now = T0 + WINDOW_MS;
    v.ok(Command::Tick);
    let deltas = book_deltas(&v);
    assert_eq!(
        deltas,
        vec![
            (Outcome::Up, 40, -5, crc32fast_hash("up:0.35:2|down:")),
            (Outcome::Up, 35, -2, crc32fast_hash("up:|down:")),
        ]
    );
}

fn crc32fast_hash(text: &str) -> u32 {
    // The zlib/PNG CRC-32, computed bit by bit so the test does not share
    // the sequencer's implementation.
    let mut crc = 0xffff_ffffu32;
    for &byte in text.as_bytes() {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn order_and_fill_lists_are_newest_first_with_filters_and_cursors() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    for _ in 0..5 {
        v.place(a, "buy up 0.50 x1").unwrap();
        v.place(b, "buy down 0.50 x1").unwrap();
    }
    let resting = v.place(a, "buy up 0.10 x1 id=last").unwrap();
    let page = v
        .state
        .query_orders(
            a.key,
            &OrderFilter {
                limit: Some(4),
                ..Default::default()
            },
        )
        .unwrap();
    let ids: Vec<u64> = page.items.iter().map(|o| o.id).collect();
    assert_eq!(ids, vec![11, 9, 7, 5]);
    let next = v
        .state
        .query_orders(
            a.key,
            &OrderFilter {
                limit: Some(4),
                cursor: page.cursor,
                ..Default::default()
            },
        )
        .unwrap();
    assert_eq!(
        next.items.iter().map(|o| o.id).collect::<Vec<_>>(),
        vec![3, 1]
    );
    assert_eq!(next.cursor, None);
    let by_status = OrderFilter {
        status: Some(OrderStatus::Resting),
        ..Default::default()
    };
    assert_eq!(
        v.state.query_orders(a.key, &by_status).unwrap().items,
        vec![resting]
    );
    let by_id = OrderFilter {
        client_order_id: ClientOrderId::new("last"),
        ..Default::default()
    };
    assert_eq!(v.state.query_orders(a.key, &by_id).unwrap().items.len(), 1);

    let fills = v.state.query_fills(a.key, None, Some(2), None).unwrap();
    assert_eq!(fills.items.len(), 2);
    assert!(fills.items[0].id > fills.items[1].id);
    let older = v
        .state
        .query_fills(a.key, None, Some(500), fills.cursor)
        .unwrap();
    assert_eq!(older.items.len(), 3);
    assert!(older.items[0].id < fills.items[1].id);
    // SPEC Limits: a fills page holds 1 to 500; a size outside that is
    // refused with a message that names the parameter and its range.
    for limit in [FILLS_LIMIT_MIN - 1, FILLS_LIMIT_MAX + 1] {
        let reject = v
            .state
            .query_fills(a.key, None, Some(limit), None)
            .unwrap_err();
        assert_eq!(reject.code, ErrorCode::BadRequest);
        let range = format!("limit must be an integer from {FILLS_LIMIT_MIN} to {FILLS_LIMIT_MAX}");
        assert!(reject.message.contains(&range), "{}", reject.message);
    }

    let positions = v.state.query_positions(a.key).unwrap();
    assert_eq!(positions.len(), 1);
    assert_eq!(
        (positions[0].outcome, positions[0].count, positions[0].cost),
        (Outcome::Up, 5, 2_50)
    );
    let balance = v.state.query_balance(a.key).unwrap();
    assert_eq!(balance.buying_power, balance.cash - balance.held);
    assert_eq!(balance.held, 10 + 1);
}

#[test]
fn orders_older_than_a_day_leave_the_order_list() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    v.place(a, "buy up 0.10 x1").unwrap();
    v.now += 24 * 3_600_000 + 1;
    v.print(100);
    assert!(v
        .state
        .query_orders(a.key, &OrderFilter::default())
        .unwrap()
        .items
        .is_empty());
    // The order itself is still there by id.
    assert_eq!(
        v.state
            .query_order(a.key, 1)
            .unwrap()
            .live()
            .unwrap()
            .status,
        OrderStatus::Canceled
    );
}

#[test]
fn the_rest_book_query_matches_the_checksum_of_the_last_delta() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    v.place(a, "buy up 0.40 x3").unwrap();
    v.place(a, "sell down 0.45 x0").unwrap_err();
    v.place(a, "buy down 0.20 x7").unwrap();
    let ticker = v.state.markets[v.market() as usize].ticker.clone();
    let book = v.state.query_orderbook(&ticker, None).unwrap();
    assert_eq!(book.up, vec![(40, 3)]);
    assert_eq!(book.down, vec![(20, 7)]);
    let last = v.events.iter().rev().find_map(|e| match e {
        Event::BookDelta { checksum, .. } => Some(*checksum),
        _ => None,
    });
    assert_eq!(Some(book.checksum), last);
    assert_eq!(
        v.state
            .query_orderbook("nope-261121-2100-2101", None)
            .unwrap_err()
            .code,
        ErrorCode::MarketNotFound
    );
}

// ----- boundaries the mutation audit found untested (sixteenth session) -----

/// DESIGN §2: a buy holds its price plus the larger of the two fee rates'
/// most, so a series whose maker fee is above its taker fee holds by the
/// maker's, and a resting buy filled as maker can always pay its fee.
#[test]
fn a_resting_buy_holds_the_maker_fee_when_it_is_the_larger() {
    let mut v = Venue::with_series(SeriesConfig {
        ticker: "maker".into(),
        symbol: SYMBOL.into(),
        window_ms: WINDOW_MS,
        list_ahead: 1,
        taker_fee_bps: 100,
        maker_fee_bps: 1_000,
        market_cap_cents: 1_000_000_00,
    });
    let market = v.open_market("maker");
    // Exactly what the hold asks: 10 x (0.50 + ceil(0.10 x 0.50 x 0.50)).
    let (maker, taker) = (v.trader(5_30), v.trader(100_00));
    let order = v.order_on(market, "buy up 0.50 x10");
    let resting = v.place_order(maker, order).unwrap();
    assert_eq!(resting.hold, 10 * (50 + 3));
    assert_eq!(v.buying_power(maker), 0);
    let order = v.order_on(market, "buy down 0.50 x10");
    v.place_order(taker, order).unwrap();
    let filled = *v.state.order(resting.id).unwrap();
    assert_eq!((filled.status, filled.fees), (OrderStatus::Executed, 25));
    // ceil(0.10 x 10 x 0.50 x 0.50) = 0.25 as maker; the hold covered it.
    assert_eq!(v.cash(maker), 5_30 - 5_00 - 25);
    assert_eq!(v.state.account(maker.account).unwrap().held, 0);
}

/// SPEC Limits: max open orders counts orders that rest. An IOC never
/// rests, so a key at its max still sends them, filled in part or not at
/// all.
#[test]
fn an_ioc_is_not_counted_against_max_open_orders() {
    let mut v = Venue::new();
    let t = v.trader_with(
        1_000_00,
        KeyLimits {
            max_open_orders: Some(1),
            ..big_limits()
        },
    );
    let other = v.trader(100_00);
    v.place(t, "buy up 0.20 x1").unwrap();
    let m = v.refused(t, "buy up 0.21 x1", ErrorCode::LimitExceeded);
    assert!(m.contains("max open orders"), "{m}");
    let none = v.place(t, "buy up 0.30 x5 ioc").unwrap();
    assert_eq!((none.status, none.filled), (OrderStatus::Canceled, 0));
    v.place(other, "buy down 0.60 x2").unwrap();
    let part = v.place(t, "buy up 0.40 x5 ioc").unwrap();
    assert_eq!((part.status, part.filled), (OrderStatus::Canceled, 2));
}

/// SPEC Limits, layer 2: an order is refused when it would take the
/// amount at risk past the cap; one that reaches the cap exactly is taken.
#[test]
fn an_order_that_reaches_the_account_cap_exactly_is_accepted() {
    let mut v = Venue::new();
    let a = v.trader(100_000_00);
    v.ok(Command::SetAccountRiskCap {
        account: a.account,
        cents: Some(10_00),
    });
    // 20 x (0.48 + 0.02) = 10.00, the cap.
    let order = v.place(a, "buy up 0.48 x20").unwrap();
    assert_eq!(order.hold, 10_00);
    let m = v.refused(a, "buy up 0.01 x1", ErrorCode::LimitExceeded);
    assert!(m.contains("Account limit"), "{m}");
}

/// SPEC idempotency rule 2: a client_order_id sent again with any field
/// changed is a conflict, each field on its own; the same order sent again
/// returns the first, even once its market has closed.
#[test]
fn every_field_of_a_retried_order_is_compared_and_a_retry_outlives_the_close() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    let first = v.place(a, "buy up 0.30 x2 gtc id=same").unwrap();
    for changed in [
        "buy down 0.30 x2 gtc id=same",
        "sell up 0.30 x2 gtc id=same",
        "buy up 0.31 x2 gtc id=same",
        "buy up 0.30 x3 gtc id=same",
        "buy up 0.30 x2 ioc id=same",
        "buy up 0.30 x2 gtc post_only id=same",
    ] {
        v.refused(a, changed, ErrorCode::IdempotencyConflict);
    }
    let next = v.state.series_by_ticker(SERIES).unwrap().markets[1];
    let mut elsewhere = v.order("buy up 0.30 x2 gtc id=same");
    elsewhere.market = next;
    let reject = v.place_order(a, elsewhere).unwrap_err();
    assert_eq!(reject.code, ErrorCode::IdempotencyConflict);

    // The window closes (the order is cancelled with it); the retry still
    // gets the order, not MARKET_NOT_OPEN.
    v.advance(WINDOW_MS);
    let retry = tests::harness::parse_order(first.market, "buy up 0.30 x2 gtc", "same");
    let Reply::Order { order, created } = v.run(Command::PlaceOrder {
        key: a.key,
        order: retry,
    }) else {
        panic!("the retry after the close was refused")
    };
    assert!(!created);
    assert_eq!((order.id, order.status), (first.id, OrderStatus::Canceled));
}

/// SPEC: a key stops working at its expiry, to the millisecond, and stops
/// counting towards the five active keys then.
#[test]
fn a_key_expires_at_its_expiry_millisecond() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    let expiring = day_key(&mut v, a.account);
    let expires = v.state.keys[expiring.key as usize].expires_ts_ms.unwrap();
    assert_eq!(expires % WINDOW_MS, 0, "the test's windows line up");
    // Three more keys: five active with the trader's own.
    for _ in 0..3 {
        v.key(
            a.account,
            Scopes {
                read: true,
                trade: false,
            },
            KeyLimits::default(),
        );
    }
    v.now = expires - 1_000;
    v.print(100);
    v.now = expires - 1;
    v.place(expiring, "buy up 0.10 x1").unwrap();
    let sixth = v.new_key(
        a.account,
        Scopes {
            read: true,
            trade: false,
        },
        KeyLimits::default(),
    );
    let Reply::Rejected(reject) = v.run(Command::IssueKey(sixth)) else {
        panic!("a sixth active key was issued")
    };
    assert!(reject.message.contains("5"), "{}", reject.message);
    v.now = expires;
    assert_eq!(
        v.refused(expiring, "buy up 0.10 x1", ErrorCode::Unauthorized),
        "This API key has expired."
    );
    let sixth = v.new_key(
        a.account,
        Scopes {
            read: true,
            trade: false,
        },
        KeyLimits::default(),
    );
    assert!(matches!(
        v.run(Command::IssueKey(sixth)),
        Reply::KeyIssued { .. }
    ));
}

/// DESIGN §2: the price to beat is the last print at or before the open:
/// a print stamped exactly at the open is it.
#[test]
fn a_print_exactly_at_the_open_is_the_price_to_beat() {
    let mut v = Venue::empty();
    list_unpriced_series(&mut v, "exact", 1);
    let next = v.state.series_by_ticker("exact").unwrap().markets[1] as usize;
    let open = v.state.markets[next].open_ts_ms;
    for (dollars, t_ms) in [(99, open - 1), (100, open), (101, open + 1)] {
        v.now = t_ms;
        v.ok(Venue::print_of("AAPL", dollars, t_ms));
    }
    let market = &v.state.markets[next];
    assert_eq!(market.status, MarketStatus::Open);
    assert_eq!(market.price_to_beat_e8, Some(100 * 100_000_000));
}

/// A second trading key for `account` that expires a day after it is issued.
fn day_key(v: &mut Venue, account: AccountId) -> Trader {
    let mut new_key = v.new_key(
        account,
        Scopes {
            read: true,
            trade: true,
        },
        big_limits(),
    );
    new_key.expires_days = Some(1);
    let Reply::KeyIssued { key } = v.run(Command::IssueKey(new_key)) else {
        panic!("the key was refused")
    };
    Trader { account, key }
}

// ----- gaps cargo-mutants found in the money and permission rules -----------
// (twentieth session: fees, limits, validate, auth and the engine's holds,
// fees, authorization, limits, settlement and payouts)

/// SPEC Key limits and Refused keys: a key with an IP allowlist works only
/// from its addresses (401, "This API key can't be used from this IP
/// address."); a key without one works from any address. An IPv4 caller
/// seen through an IPv6 socket (`::ffff:a.b.c.d`) is the same address. The
/// gateway asks `check_key` with the caller's address.
#[test]
fn a_key_works_only_from_the_addresses_on_its_allowlist() {
    let mut v = Venue::new();
    let account = v.account(0);
    let scopes = Scopes {
        read: true,
        trade: true,
    };
    let mut fenced = v.new_key(account, scopes, KeyLimits::default());
    fenced.ip_allowlist = vec!["10.9.9.9".into(), "2001:db8::7".into()];
    let Reply::KeyIssued { key: fenced } = v.run(Command::IssueKey(fenced)) else {
        panic!("the fenced key was refused")
    };
    let open = v.key(account, scopes, KeyLimits::default());
    let from = |v: &Venue, key: KeyIdx, ip: &str| {
        check_key(
            &v.state.keys[key as usize],
            false,
            v.state.now_ms,
            v.state.config.environment,
            Some(ip.parse().expect("an address")),
        )
    };
    for ip in ["10.9.9.9", "::ffff:10.9.9.9", "2001:db8::7"] {
        assert_eq!(from(&v, fenced, ip), Ok(()), "{ip}");
    }
    for ip in ["10.9.9.8", "127.0.0.1", "2001:db8::8"] {
        assert_eq!(from(&v, fenced, ip), Err(KeyRefusal::IpNotAllowed), "{ip}");
    }
    for ip in ["10.9.9.8", "203.0.113.5", "::1"] {
        assert_eq!(from(&v, open, ip), Ok(()), "{ip}");
    }
}

/// DESIGN §2 Settlement: each winning contract pays 1.00 into cash. The
/// ledger's payouts (the operator's replay summary reports them) are what
/// the settlement paid: exactly the cash the winners gained.
#[test]
fn the_ledger_counts_what_settlement_paid_the_winners() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    v.place(a, "buy up 0.60 x10").unwrap();
    v.place(b, "buy down 0.40 x10").unwrap();
    let winning = v.position(a, Outcome::Up);
    let cash = |v: &Venue| v.cash(a) + v.cash(b);
    let before = cash(&v);
    assert_eq!(v.state.ledger.payouts, 0);
    v.now = T0 + WINDOW_MS;
    v.print(101); // Up wins.
    let paid = cash(&v) - before;
    assert_eq!(paid, winning as i64 * PAYOUT_CENTS);
    assert_eq!(v.state.ledger.payouts, paid);
}

/// limits.rs `MONEY_CENTS_MAX`: an account holds at most $10,000,000,000,
/// so that no sum of money overflows. A deposit that fills it up to that
/// exactly is taken; one cent more is refused (LIMIT_EXCEEDED) and changes
/// nothing.
#[test]
fn a_deposit_may_fill_an_account_up_to_ten_billion_dollars_and_no_further() {
    let mut v = Venue::new();
    let a = v.trader(5_00);
    v.ok(Command::Deposit {
        account: a.account,
        cents: MONEY_CENTS_MAX - 5_00,
    });
    assert_eq!(v.cash(a), MONEY_CENTS_MAX);
    let over = v.run(Command::Deposit {
        account: a.account,
        cents: 1,
    });
    assert_eq!(over.rejection().unwrap().code, ErrorCode::LimitExceeded);
    assert_eq!(v.cash(a), MONEY_CENTS_MAX);
}

/// SPEC Limits: the message says which limit. A buy never pays more than
/// its limit, so its dollars for the key's max order are count x limit, and
/// the refusal names just those, even for a buy that would fill at a better
/// price (only a sell is counted "at the prices it would fill at").
#[test]
fn a_buy_over_the_max_order_is_refused_at_count_times_its_limit() {
    let mut v = Venue::new();
    let t = v.trader_with(
        1_000_00,
        KeyLimits {
            max_order_cents: Some(5_00),
            ..big_limits()
        },
    );
    let seller = v.trader(100_00);
    v.place(seller, "buy down 0.50 x10").unwrap(); // Up ask 0.50.
    let m = v.refused(t, "buy up 0.60 x10", ErrorCode::LimitExceeded);
    // 10 x 0.60 = 6.00.
    assert_eq!(
        m,
        "Key limit: the order is $6.00, over this key's max order of $5.00."
    );
}

/// SPEC Key limits: max per day is the total a key may trade in a day. An
/// order that brings the day's total to the max exactly is taken; the next
/// cent is refused.
#[test]
fn an_order_that_reaches_the_max_per_day_exactly_is_accepted() {
    let mut v = Venue::new();
    let t = v.trader_with(
        1_000_00,
        KeyLimits {
            max_daily_cents: Some(12_00),
            ..big_limits()
        },
    );
    v.place(t, "buy up 0.50 x10").unwrap();
    v.place(t, "buy up 0.70 x10").unwrap();
    assert_eq!(v.state.keys[t.key as usize].day_used_cents, 12_00);
    let m = v.refused(t, "buy up 0.01 x1", ErrorCode::LimitExceeded);
    assert!(m.contains("max per day"), "{m}");
}

/// SPEC Limits: max open orders counts orders that rest. A
/// good_till_canceled order that fills in full at once never rests, so a
/// key at its max may still send one; one contract more would rest and is
/// refused.
#[test]
fn a_gtc_order_that_fills_at_once_is_not_counted_against_max_open_orders() {
    let mut v = Venue::new();
    let t = v.trader_with(
        1_000_00,
        KeyLimits {
            max_open_orders: Some(1),
            ..big_limits()
        },
    );
    let other = v.trader(100_00);
    v.place(t, "buy up 0.20 x1").unwrap();
    v.place(other, "buy down 0.60 x2").unwrap();
    let filled = v.place(t, "buy up 0.40 x2").unwrap();
    assert_eq!((filled.status, filled.filled), (OrderStatus::Executed, 2));
    v.place(other, "buy down 0.60 x2").unwrap();
    let m = v.refused(t, "buy up 0.40 x3", ErrorCode::LimitExceeded);
    assert!(m.contains("max open orders"), "{m}");
}

/// SPEC Limits, layer 3 (rules 2): a buy adds to its market's exposure the
/// pairs it mints and the part of it that rests, its count less what fills
/// at once. One that takes the market to its cap exactly is taken.
#[test]
fn a_buy_that_fills_in_part_counts_only_what_rests_towards_the_market_cap() {
    let tiny = SeriesConfig {
        market_cap_cents: 10_00,
        ..Venue::default_series()
    };
    let mut v = Venue::with_series(tiny);
    let (a, c) = (v.trader(100_00), v.trader(100_00));
    // 4.00 resting.
    v.place(a, "buy down 0.50 x8").unwrap();
    // Mints 8 pairs (4.00 more than the resting buy they use up) and rests
    // 4 at 0.50 (2.00): 4.00 + 4.00 + 2.00 = the cap.
    let order = v.place(c, "buy up 0.50 x12").unwrap();
    assert_eq!((order.filled, order.status), (8, OrderStatus::Resting));
    let m = &v.state.markets[v.market() as usize];
    assert_eq!(m.collateral() + m.resting_buy_notional, 10_00);
    let m = v.refused(c, "buy up 0.01 x1", ErrorCode::LimitExceeded);
    assert!(m.starts_with("Market limit"), "{m}");
}

/// DESIGN §2 Self-trade: an order is refused when it would trade against a
/// resting order of its own account. The account's own order queued behind
/// enough of another's at the same price is not reached, so the order is
/// taken; an order that would reach it is refused whole.
#[test]
fn an_own_order_queued_behind_what_fills_is_no_self_trade() {
    let mut v = Venue::new();
    let (a, b) = (v.trader(100_00), v.trader(100_00));
    v.place(b, "buy down 0.45 x2").unwrap();
    v.place(a, "buy down 0.45 x1").unwrap();
    let taken = v.place(a, "buy up 0.55 x2").unwrap();
    assert_eq!((taken.status, taken.filled), (OrderStatus::Executed, 2));
    assert_eq!(v.book(), "up:|down:0.45:1");
    v.refused(a, "buy up 0.55 x1", ErrorCode::SelfTrade);
}

/// SPEC Position: a holding's count and cost. Selling part of it takes its
/// share of the cost along: the rest keeps its average price.
#[test]
fn a_partial_sell_takes_its_share_of_the_position_cost() {
    let mut v = Venue::new();
    let (a, b, c) = (v.trader(100_00), v.trader(100_00), v.trader(100_00));
    v.place(a, "buy up 0.50 x10").unwrap();
    v.place(b, "buy down 0.50 x10").unwrap();
    v.place(c, "buy up 0.70 x4").unwrap();
    let sold = v.place(a, "sell up 0.70 x4").unwrap();
    assert_eq!(sold.filled, 4);
    let positions = v.state.query_positions(a.key).unwrap();
    assert_eq!(positions.len(), 1);
    // Six of the ten bought for 5.00 are left: six tenths of the cost.
    assert_eq!((positions[0].count, positions[0].cost), (6, 3_00));
    assert_eq!(v.state.account(a.account).unwrap().position_cost, 3_00);
}

/// SPEC Key limits, as the operator sets them (DESIGN §4): max order and
/// max per day are positive dollars, at most $10,000,000,000 (limits.rs);
/// max open orders is positive; a series list names 1 to 100 series
/// tickers. Anything else is refused, when a key is issued and when its
/// limits change, and the key keeps the limits it had.
#[test]
fn key_limits_are_positive_bounded_and_name_one_to_a_hundred_series() {
    let mut v = Venue::new();
    let t = v.trader(0);
    let key_id = v.state.keys[t.key as usize].key_id.clone();
    let max = MONEY_CENTS_MAX as u64;
    let tickers = |n: usize| Some((0..n).map(|i| format!("s{i}")).collect::<Vec<_>>());
    for bad in [
        KeyLimits {
            max_order_cents: Some(0),
            ..big_limits()
        },
        KeyLimits {
            max_order_cents: Some(max + 1),
            ..big_limits()
        },
        KeyLimits {
            max_daily_cents: Some(0),
            ..big_limits()
        },
        KeyLimits {
            max_daily_cents: Some(max + 1),
            ..big_limits()
        },
        KeyLimits {
            max_open_orders: Some(0),
            ..big_limits()
        },
        KeyLimits {
            series: tickers(0),
            ..big_limits()
        },
        KeyLimits {
            series: tickers(101),
            ..big_limits()
        },
        KeyLimits {
            series: Some(vec!["BTC-1M".into()]),
            ..big_limits()
        },
    ] {
        let changed = v.run(Command::SetKeyLimits {
            key_id: key_id.clone(),
            limits: bad.clone(),
        });
        assert_eq!(
            changed.rejection().map(|r| r.code),
            Some(ErrorCode::BadRequest),
            "{bad:?}"
        );
        let new_key = v.new_key(
            t.account,
            Scopes {
                read: true,
                trade: true,
            },
            bad.clone(),
        );
        let issued = v.run(Command::IssueKey(new_key));
        assert_eq!(
            issued.rejection().map(|r| r.code),
            Some(ErrorCode::BadRequest),
            "{bad:?}"
        );
    }
    assert_eq!(v.state.keys[t.key as usize].limits, big_limits());
    for good in [
        KeyLimits {
            max_order_cents: Some(1),
            max_daily_cents: Some(max),
            max_open_orders: Some(1),
            series: tickers(100),
        },
        KeyLimits {
            max_order_cents: Some(max),
            max_daily_cents: Some(1),
            max_open_orders: None,
            series: tickers(1),
        },
    ] {
        v.ok(Command::SetKeyLimits {
            key_id: key_id.clone(),
            limits: good.clone(),
        });
        assert_eq!(v.state.keys[t.key as usize].limits, good);
    }
}

/// DESIGN §4 and SPEC Key limits: a key's name is at most 64 printable
/// characters (limits.rs `KEY_NAME_LEN_MAX`, characters, not bytes), and
/// its IP allowlist holds up to 10 addresses.
#[test]
fn a_key_name_is_at_most_64_printable_characters_and_ten_addresses_fit() {
    let mut v = Venue::new();
    let account = v.account(0);
    let mut issue = |name: String, addresses: usize| {
        let mut new_key = v.new_key(
            account,
            Scopes {
                read: true,
                trade: false,
            },
            KeyLimits::default(),
        );
        new_key.name = name;
        new_key.ip_allowlist = (0..addresses).map(|i| format!("10.0.0.{i}")).collect();
        v.run(Command::IssueKey(new_key))
    };
    let longest = "é".repeat(KEY_NAME_LEN_MAX);
    assert!(matches!(
        issue(longest, KEY_IP_ALLOWLIST_MAX),
        Reply::KeyIssued { .. }
    ));
    for name in ["é".repeat(KEY_NAME_LEN_MAX + 1), "tab\there".to_string()] {
        let reply = issue(name.clone(), 0);
        assert!(
            reply.rejection().unwrap().message.contains("name"),
            "{name:?}: {reply:?}"
        );
    }
    let reply = issue("eleven addresses".into(), KEY_IP_ALLOWLIST_MAX + 1);
    assert!(reply.is_rejected(), "{reply:?}");
}

/// SPEC Limits: the order list shows the orders of the last 24 hours; one
/// placed a millisecond less than a day ago is still in it.
#[test]
fn an_order_placed_less_than_a_day_ago_is_in_the_order_list() {
    let mut v = Venue::new();
    let a = v.trader(100_00);
    let order = v.place(a, "buy up 0.10 x1").unwrap();
    v.now = order.created_ts_ms + 24 * 3_600_000 - 1;
    v.print(100);
    let listed = v
        .state
        .query_orders(a.key, &OrderFilter::default())
        .unwrap()
        .items;
    assert_eq!(
        listed.iter().map(|o| o.id).collect::<Vec<_>>(),
        vec![order.id]
    );
}

/// DESIGN §3 and limits.rs `SERIES_WINDOW_MS_MAX`: a window is whole
/// minutes, from one minute to 99 days, the most a market ticker's `dNN`
/// suffix can say. With the longest series ticker that gives the longest
/// market ticker, and it matches the market ticker pattern: a cancel-all
/// can name it.
#[test]
fn the_longest_window_and_series_ticker_give_a_market_ticker_that_is_accepted() {
    let mut v = Venue::empty();
    v.ok(Command::Configure(VenueConfig::default()));
    let series = |ticker: &str, window_ms: u64| SeriesConfig {
        ticker: ticker.into(),
        symbol: "AAPL".into(),
        window_ms,
        list_ahead: 1,
        taker_fee_bps: 0,
        maker_fee_bps: 0,
        market_cap_cents: 1_000_00,
    };
    let too_long = v.run(Command::CreateSeries(series("long", 99 * DAY_MS + 60_000)));
    assert!(too_long.is_rejected(), "{too_long:?}");
    let longest = "a".repeat(SERIES_TICKER_LEN_MAX);
    v.ok(Command::CreateSeries(series(&longest, 99 * DAY_MS)));
    let market = v.state.series_by_ticker(&longest).unwrap().markets[0];
    let ticker = v.state.markets[market as usize].ticker.clone();
    assert!(ticker.ends_with("d99"), "{ticker}");
    assert_eq!(
        ticker.len(),
        SERIES_TICKER_LEN_MAX + "-YYMMDD-HHMM-HHMM".len() + "d99".len()
    );
    assert!(sequencer::validate::is_market_ticker(&ticker), "{ticker}");
    let a = v.trader(0);
    assert_eq!(
        v.run(Command::CancelAll {
            key: a.key,
            market: Some(ticker),
            series: None,
        }),
        Reply::Canceled { order_ids: vec![] }
    );
}
