//! End-to-end tests of the public REST API: a real venue in-process, real
//! HTTP over loopback, operator set-up through the admin endpoint. Every
//! assertion is on what SPEC.md promises (status, `code`, and the exact
//! `message` where the spec fixes it), or on a decision of DESIGN.md §4-5 /
//! docs/decisions.md where the spec leaves the point open.
//!
//! Each test starts its own venue (own data directory, own ports, own
//! lockout table), so tests are independent and can run in parallel. The
//! venue's windows are about a day long and chosen to have at least 30
//! minutes left, so no window closes while a test runs.

mod support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::*;

fn id_of(order: &Value) -> String {
    order["order_id"].as_str().expect("order_id").to_string()
}

fn ids(list: &[Value], field: &str) -> Vec<String> {
    list.iter()
        .map(|v| v[field].as_str().expect("id").to_string())
        .collect()
}

fn num(id: &str) -> u64 {
    id.parse()
        .unwrap_or_else(|_| panic!("DESIGN: ids are decimal numbers, got {id:?}"))
}

fn balance(v: &Venue, key: Option<&str>) -> Value {
    let body = v.read("/portfolio/balance", key);
    assert_eq!(keys(&body), set(&["balance"]), "{body}");
    assert_eq!(
        keys(&body["balance"]),
        set(&["cash", "held", "buying_power"]),
        "{body}"
    );
    body["balance"].clone()
}

#[track_caller]
fn assert_balance(v: &Venue, key: Option<&str>, cash: &str, held: &str, buying_power: &str) {
    assert_eq!(
        balance(v, key),
        json!({ "cash": cash, "held": held, "buying_power": buying_power }),
        "balance"
    );
}

fn positions(v: &Venue, key: Option<&str>) -> Vec<Value> {
    let body = v.read("/portfolio/positions", key);
    assert_eq!(keys(&body), set(&["positions"]), "{body}");
    let list = body["positions"].as_array().expect("positions").clone();
    list.iter().for_each(assert_position_shape);
    list
}

fn fills(v: &Venue, key: Option<&str>, query: &str) -> (Vec<Value>, String) {
    let body = v.read(&format!("/portfolio/fills{query}"), key);
    assert_eq!(keys(&body), set(&["fills", "cursor"]), "{body}");
    let list = body["fills"].as_array().expect("fills").clone();
    list.iter().for_each(assert_fill_shape);
    (
        list,
        body["cursor"]
            .as_str()
            .expect("cursor is a string")
            .to_string(),
    )
}

fn orderbook(v: &Venue, market: &str, query: &str) -> Value {
    let body = v.read(&format!("/markets/{market}/orderbook{query}"), None);
    assert_eq!(keys(&body), set(&["orderbook"]), "{body}");
    let book = body["orderbook"].clone();
    assert_eq!(
        keys(&book),
        set(&["market_ticker", "up", "down", "checksum"]),
        "{book}"
    );
    assert_eq!(book["market_ticker"], market);
    book
}

fn market_record(v: &Venue, market: &str) -> Value {
    let body = v.read(&format!("/markets/{market}"), None);
    assert_eq!(keys(&body), set(&["market"]), "{body}");
    assert_market_shape(&body["market"]);
    body["market"].clone()
}

// ===== happy paths and shapes ==================================================================

#[test]
fn an_order_rests_is_read_listed_and_cancelled() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let m = v.open_market(SERIES_A);

    let client_order_id = coid("life");
    let before = now_ms();
    let resp = v.place(
        a.key(),
        &order(&m, "up", "buy", "0.40", "10", &client_order_id),
    );
    let body = resp.ok(201);
    assert_eq!(keys(body), set(&["order"]), "wrapped as {{ order }}");
    let placed = body["order"].clone();
    assert_order_shape(&placed);
    let after = now_ms();
    assert_eq!(placed["client_order_id"], client_order_id.as_str());
    assert_eq!(placed["market_ticker"], m.as_str());
    assert_eq!(placed["outcome"], "up");
    assert_eq!(placed["action"], "buy");
    assert_eq!(placed["price"], "0.40");
    assert_eq!(placed["time_in_force"], "good_till_canceled", "the default");
    assert_eq!(placed["post_only"], false, "the default");
    assert_eq!(placed["status"], "resting");
    assert_eq!(placed["count"], "10");
    assert_eq!(placed["fill_count"], "0");
    assert_eq!(placed["remaining_count"], "10");
    let created = placed["created_ts_ms"].as_u64().unwrap();
    assert!(
        before <= created && created <= after,
        "{before} <= {created} <= {after}"
    );
    let id = id_of(&placed);

    // A resting buy holds price plus the most its fees can cost: 0.40 + 0.02.
    assert_balance(&v, a.key(), "100.00", "4.20", "95.80");

    let got = v.get(&format!("/portfolio/orders/{id}"), a.key());
    let got_body = got.ok(200);
    assert_eq!(keys(got_body), set(&["order"]));
    assert_eq!(got_body["order"], placed);

    let list = v.read("/portfolio/orders", a.key());
    assert_eq!(keys(&list), set(&["orders", "cursor"]));
    assert_eq!(list["orders"], json!([placed.clone()]));

    let canceled = v.delete(&format!("/portfolio/orders/{id}"), a.key());
    let canceled_body = canceled.ok(200);
    assert_eq!(keys(canceled_body), set(&["order"]));
    let canceled_order = canceled_body["order"].clone();
    assert_order_shape(&canceled_order);
    assert_eq!(id_of(&canceled_order), id);
    assert_eq!(canceled_order["status"], "canceled");
    assert_eq!(canceled_order["fill_count"], "0");
    assert_eq!(canceled_order["count"], "10");
    assert_eq!(canceled_order["created_ts_ms"], placed["created_ts_ms"]);
    assert_balance(&v, a.key(), "100.00", "0.00", "100.00");

    // DESIGN §5: a retried cancel answers 200 with the order as it stands.
    let again = v.delete(&format!("/portfolio/orders/{id}"), a.key());
    assert_eq!(again.ok(200)["order"], canceled_order);
    assert_eq!(
        v.get(&format!("/portfolio/orders/{id}"), a.key()).ok(200)["order"],
        canceled_order
    );
    assert_eq!(v.orders(a.key(), "?status=resting"), Vec::<Value>::new());
}

#[test]
fn explicit_time_in_force_and_post_only_are_kept() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let m = v.open_market(SERIES_A);

    let mut body = buy(&m, "up", "0.30", "2");
    body["time_in_force"] = json!("good_till_canceled");
    body["post_only"] = json!(true);
    let resting = v.place_ok(a.key(), &body);
    assert_eq!(resting["post_only"], true);
    assert_eq!(resting["status"], "resting");

    // immediate_or_cancel that finds nothing to trade: cancelled, no fills.
    let mut ioc = buy(&m, "down", "0.20", "3");
    ioc["time_in_force"] = json!("immediate_or_cancel");
    let ioc = v.place_ok(a.key(), &ioc);
    assert_eq!(ioc["time_in_force"], "immediate_or_cancel");
    assert_eq!(ioc["status"], "canceled");
    assert_eq!(ioc["fill_count"], "0");
    assert_eq!(ioc["remaining_count"], "0");
    // Its hold is released at once; only the resting order holds cash.
    assert_balance(&v, a.key(), "100.00", "0.64", "99.36");
}

#[test]
fn a_crossing_buy_fills_at_the_resting_price_and_moves_money_positions_fills_and_trades() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let m = v.open_market(SERIES_A);

    let maker = v.place_ok(a.key(), &buy(&m, "up", "0.40", "10"));
    // Down at 0.65 crosses Up at 0.40 (0.65 + 0.40 >= 1); it trades at the
    // resting order's price, Up 0.40 = Down 0.60: the taker improves by 0.05.
    let taker = v.place_ok(b.key(), &buy(&m, "down", "0.65", "10"));
    assert_eq!(taker["status"], "executed");
    assert_eq!(taker["fill_count"], "10");
    assert_eq!(taker["remaining_count"], "0");
    assert_eq!(taker["average_fill_price"], "0.60");
    // Taker fee ceil(0.07 x 10 x 0.40 x 0.60) = 0.17; maker fee 0.
    assert_eq!(taker["fees_paid"], "0.17");

    let maker_now = v
        .get(&format!("/portfolio/orders/{}", id_of(&maker)), a.key())
        .ok(200)["order"]
        .clone();
    assert_order_shape(&maker_now);
    assert_eq!(maker_now["status"], "executed");
    assert_eq!(maker_now["fill_count"], "10");
    assert_eq!(maker_now["average_fill_price"], "0.40");
    assert_eq!(maker_now["fees_paid"], "0.00");
    // DESIGN §5: cancelling an executed order answers 200 with it as it stands.
    let cancel = v.delete(&format!("/portfolio/orders/{}", id_of(&maker)), a.key());
    assert_eq!(cancel.ok(200)["order"], maker_now);
    assert_eq!(
        v.delete("/portfolio/orders", a.key()).ok(200)["canceled_order_ids"],
        json!([])
    );

    assert_balance(&v, a.key(), "96.00", "0.00", "96.00");
    assert_balance(&v, b.key(), "93.83", "0.00", "93.83");

    let pa = positions(&v, a.key());
    assert_eq!(
        pa,
        vec![
            json!({ "market_ticker": m, "outcome": "up", "count": "10", "cost": "4.00", "average_price": "0.40" })
        ]
    );
    let pb = positions(&v, b.key());
    assert_eq!(
        pb,
        vec![
            json!({ "market_ticker": m, "outcome": "down", "count": "10", "cost": "6.00", "average_price": "0.60" })
        ]
    );

    let (fa, _) = fills(&v, a.key(), "");
    assert_eq!(fa.len(), 1);
    assert_eq!(fa[0]["market_ticker"], m.as_str());
    assert_eq!(fill_summary(&fa[0]), ["up", "buy", "0.40", "10", "4.00"]);
    let (fb, _) = fills(&v, b.key(), "");
    assert_eq!(fb.len(), 1);
    assert_eq!(fill_summary(&fb[0]), ["down", "buy", "0.60", "10", "6.00"]);

    let trades = v.read(&format!("/markets/{m}/trades"), None);
    assert_eq!(keys(&trades), set(&["trades", "cursor"]));
    let list = trades["trades"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["market_ticker"], m.as_str());
    assert_eq!(list[0]["up_price"], "0.40");
    assert_eq!(list[0]["count"], "10");
    assert_eq!(list[0]["taker_outcome"], "down");
    assert_eq!(list[0]["taker_action"], "buy");
    assert_eq!(market_record(&v, &m)["last_price"], "0.40");
    let book = orderbook(&v, &m, "");
    assert_eq!(
        (book["up"].clone(), book["down"].clone()),
        (json!([]), json!([]))
    );
    assert_eq!(book["checksum"], crc32(b"up:|down:"));

    // B sells 4 of its Down at 0.55: it rests on the Up side at 0.45.
    let offer = v.place_ok(b.key(), &sell(&m, "down", "0.55", "4"));
    assert_eq!(offer["status"], "resting");
    assert_eq!(orderbook(&v, &m, "")["up"], json!([["0.45", "4"]]));
    // Selling more than is held and not already offered: 6 left to offer.
    v.place(b.key(), &sell(&m, "down", "0.55", "7"))
        .err(400, "INSUFFICIENT_BALANCE");
    // A buys those 4 Down at 0.55 (fee ceil(0.07 x 4 x 0.45 x 0.55) = 0.07).
    let lift = v.place_ok(a.key(), &buy(&m, "down", "0.55", "4"));
    assert_eq!(
        (lift["status"].clone(), lift["average_fill_price"].clone()),
        (json!("executed"), json!("0.55"))
    );
    assert_eq!(lift["fees_paid"], "0.07");
    assert_balance(&v, a.key(), "93.73", "0.00", "93.73");
    assert_balance(&v, b.key(), "96.03", "0.00", "96.03");
    assert_eq!(
        positions(&v, b.key()),
        vec![
            json!({ "market_ticker": m, "outcome": "down", "count": "6", "cost": "3.60", "average_price": "0.60" })
        ]
    );
    let (fb, _) = fills(&v, b.key(), "");
    assert_eq!(fb.len(), 2);
    assert_eq!(
        fill_summary(&fb[0]),
        ["down", "sell", "0.55", "4", "2.20"],
        "newest first"
    );
    let pa: BTreeSet<(String, String)> = positions(&v, a.key())
        .iter()
        .map(|p| {
            (
                p["outcome"].as_str().unwrap().to_string(),
                p["count"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let want: BTreeSet<(String, String)> = [("down", "4"), ("up", "10")]
        .iter()
        .map(|(o, c)| (o.to_string(), c.to_string()))
        .collect();
    assert_eq!(pa, want);
}

/// A fill's outcome, action, price, count and cost, as sent.
fn fill_summary(fill: &Value) -> [&str; 5] {
    ["outcome", "action", "price", "count", "cost"].map(|k| fill[k].as_str().unwrap_or("?"))
}

#[test]
fn fills_are_paged_newest_first_with_limit_and_cursor() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let ma = v.open_market(SERIES_A);
    let mb = v.open_market(SERIES_B);

    for price in ["0.40", "0.41", "0.42", "0.43", "0.44"] {
        v.place_ok(a.key(), &buy(&ma, "up", price, "1"));
        let taker = v.place_ok(b.key(), &buy(&ma, "down", "0.60", "1"));
        assert_eq!(taker["status"], "executed");
    }
    v.place_ok(a.key(), &buy(&mb, "up", "0.50", "2"));
    v.place_ok(b.key(), &buy(&mb, "down", "0.50", "2"));

    let (all, cursor) = fills(&v, a.key(), "");
    assert_eq!(all.len(), 6);
    assert_eq!(cursor, "", "no older fills");
    let numbers: Vec<u64> = ids(&all, "fill_id").iter().map(|s| num(s)).collect();
    assert!(
        numbers.windows(2).all(|w| w[0] > w[1]),
        "newest first: {numbers:?}"
    );
    let times: Vec<u64> = all.iter().map(|f| f["ts_ms"].as_u64().unwrap()).collect();
    assert!(
        times.windows(2).all(|w| w[0] >= w[1]),
        "newest first: {times:?}"
    );
    assert_eq!(all[0]["market_ticker"], mb.as_str());
    let prices: Vec<&str> = all[1..]
        .iter()
        .map(|f| f["price"].as_str().unwrap())
        .collect();
    assert_eq!(prices, ["0.44", "0.43", "0.42", "0.41", "0.40"]);

    let mut paged = Vec::new();
    let mut query = "?limit=2".to_string();
    let mut pages = 0;
    loop {
        let (page, cursor) = fills(&v, a.key(), &query);
        assert!(page.len() <= 2);
        pages += 1;
        paged.extend(page);
        if cursor.is_empty() {
            break;
        }
        assert!(
            cursor.bytes().all(|c| c.is_ascii_digit()),
            "cursor matches ^\\d+$: {cursor}"
        );
        query = format!("?limit=2&cursor={cursor}");
        assert!(pages < 10, "paging does not end");
    }
    assert_eq!(pages, 3);
    assert_eq!(
        paged, all,
        "pages joined are the whole list, in order, without repeats"
    );

    let (only_b, _) = fills(&v, a.key(), &format!("?market_ticker={mb}"));
    assert_eq!(only_b.len(), 1);
    assert_eq!(only_b[0]["count"], "2");
    let (only_a, _) = fills(&v, a.key(), &format!("?market_ticker={ma}&limit=500"));
    assert_eq!(only_a, all[1..].to_vec());
    let (one, cursor) = fills(&v, a.key(), &format!("?market_ticker={ma}&limit=1"));
    assert_eq!(one, vec![all[1].clone()]);
    let (next, _) = fills(
        &v,
        a.key(),
        &format!("?market_ticker={ma}&limit=1&cursor={cursor}"),
    );
    assert_eq!(next, vec![all[2].clone()]);
    // A market with no fills of the account.
    let (none, cursor) = fills(&v, a.key(), "?market_ticker=e2e-a-000101-0000-0001");
    assert!(none.is_empty() && cursor.is_empty());
}

#[test]
fn the_order_list_is_newest_first_and_filters() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let ma = v.open_market(SERIES_A);
    let mb = v.open_market(SERIES_B);

    let o1 = v.place_ok(a.key(), &buy(&ma, "up", "0.30", "1"));
    let o2 = v.place_ok(a.key(), &buy(&mb, "up", "0.30", "1"));
    let mut ioc = buy(&ma, "up", "0.20", "1");
    ioc["time_in_force"] = json!("immediate_or_cancel");
    let o3 = v.place_ok(a.key(), &ioc);
    v.place_ok(b.key(), &buy(&ma, "down", "0.50", "1"));
    let o4 = v.place_ok(a.key(), &buy(&ma, "up", "0.50", "1"));
    assert_eq!(
        (
            o1["status"].clone(),
            o2["status"].clone(),
            o3["status"].clone(),
            o4["status"].clone()
        ),
        (
            json!("resting"),
            json!("resting"),
            json!("canceled"),
            json!("executed")
        )
    );

    let all = v.orders(a.key(), "");
    all.iter().for_each(assert_order_shape);
    assert_eq!(
        ids(&all, "order_id"),
        [&o4, &o3, &o2, &o1].map(id_of),
        "newest first"
    );
    let ts: Vec<u64> = all
        .iter()
        .map(|o| o["created_ts_ms"].as_u64().unwrap())
        .collect();
    assert!(ts.windows(2).all(|w| w[0] >= w[1]));

    let by = |q: &str| ids(&v.orders(a.key(), q), "order_id");
    assert_eq!(by("?status=resting"), [&o2, &o1].map(id_of));
    assert_eq!(by("?status=canceled"), [id_of(&o3)]);
    assert_eq!(by("?status=executed"), [id_of(&o4)]);
    assert_eq!(by(&format!("?market_ticker={mb}")), [id_of(&o2)]);
    assert_eq!(
        by(&format!("?market_ticker={ma}&status=resting")),
        [id_of(&o1)]
    );
    assert_eq!(
        by(&format!(
            "?client_order_id={}",
            o1["client_order_id"].as_str().unwrap()
        )),
        [id_of(&o1)]
    );
    assert!(by("?client_order_id=never-used").is_empty());
    assert!(by("?market_ticker=e2e-a-000101-0000-0001").is_empty());

    // Paging (DESIGN §5 list shape): limit and cursor.
    let page = v.read("/portfolio/orders?limit=3", a.key());
    assert_eq!(
        ids(page["orders"].as_array().unwrap(), "order_id"),
        [&o4, &o3, &o2].map(id_of)
    );
    let cursor = page["cursor"].as_str().unwrap();
    assert!(!cursor.is_empty());
    let rest = v.read(
        &format!("/portfolio/orders?limit=3&cursor={cursor}"),
        a.key(),
    );
    assert_eq!(
        ids(rest["orders"].as_array().unwrap(), "order_id"),
        [id_of(&o1)]
    );
    assert_eq!(rest["cursor"], "");
}

#[test]
fn cancel_all_cancels_resting_orders_narrowed_by_market_or_series() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let ma = v.open_market(SERIES_A);
    let mb = v.open_market(SERIES_B);

    let a1 = id_of(&v.place_ok(a.key(), &buy(&ma, "up", "0.10", "1")));
    let a2 = id_of(&v.place_ok(a.key(), &buy(&ma, "down", "0.10", "1")));
    let b1 = id_of(&v.place_ok(a.key(), &buy(&mb, "up", "0.10", "1")));
    let b2 = id_of(&v.place_ok(a.key(), &buy(&mb, "down", "0.10", "1")));
    // An executed order is not resting and never listed as cancelled.
    v.place_ok(b.key(), &buy(&ma, "down", "0.70", "1"));
    let executed = v.place_ok(a.key(), &buy(&ma, "up", "0.30", "1"));
    assert_eq!(executed["status"], "executed");
    // Another account's resting order is never touched.
    let other = id_of(&v.place_ok(b.key(), &buy(&ma, "up", "0.05", "1")));

    let canceled = |query: &str| -> BTreeSet<String> {
        let body = v
            .delete(&format!("/portfolio/orders{query}"), a.key())
            .ok(200)
            .clone();
        assert_eq!(keys(&body), set(&["canceled_order_ids"]), "{body}");
        body["canceled_order_ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_str().unwrap().to_string())
            .collect()
    };
    let want =
        |list: &[&String]| -> BTreeSet<String> { list.iter().map(|s| s.to_string()).collect() };

    assert_eq!(canceled(&format!("?market_ticker={ma}")), want(&[&a1, &a2]));
    assert_eq!(
        canceled(&format!("?market_ticker={ma}")),
        BTreeSet::new(),
        "nothing left there"
    );
    assert_eq!(
        canceled("?market_ticker=e2e-b-000101-0000-0001"),
        BTreeSet::new()
    );
    assert_eq!(
        canceled(&format!("?series_ticker={SERIES_A}")),
        BTreeSet::new()
    );
    assert_eq!(
        canceled(&format!("?series_ticker={SERIES_B}")),
        want(&[&b1, &b2])
    );
    for id in [&a1, &a2, &b1, &b2] {
        assert_eq!(
            v.read(&format!("/portfolio/orders/{id}"), a.key())["order"]["status"],
            "canceled"
        );
    }

    let c1 = id_of(&v.place_ok(a.key(), &buy(&ma, "up", "0.11", "1")));
    let c2 = id_of(&v.place_ok(a.key(), &buy(&mb, "up", "0.11", "1")));
    assert_eq!(
        canceled(&format!("?market_ticker={mb}&series_ticker={SERIES_A}")),
        BTreeSet::new(),
        "both filters apply"
    );
    assert_eq!(canceled(""), want(&[&c1, &c2]));
    assert_eq!(canceled(""), BTreeSet::new());
    // The one fill: Up at 0.30 plus a taker fee of 0.02.
    assert_balance(&v, a.key(), "99.68", "0.00", "99.68");
    assert_eq!(
        v.read(&format!("/portfolio/orders/{other}"), b.key())["order"]["status"],
        "resting"
    );
}

#[test]
fn account_shows_the_key_and_never_its_secret() {
    let v = Venue::start();
    let account = v.create_account("10.00");
    let key = v.issue_key(
        account,
        json!({
            "scopes": "read,trade", "name": "bot-1", "max_order_usd": "50", "max_daily_usd": "200",
            "max_open_orders": 3, "series": [SERIES_A]
        }),
    );
    assert!(
        key.key.starts_with("tk_test_"),
        "key format tk_<env>_<key_id>_<secret>: {}",
        key.key
    );
    assert_eq!(key.key, format!("tk_test_{}_{}", key.key_id, key.secret()));

    let before = now_ms();
    let resp = v.get("/account", Some(key.as_str()));
    let body = resp.ok(200);
    let after = now_ms();
    assert_eq!(keys(body), set(&["account"]));
    let acct = &body["account"];
    assert_eq!(
        keys(acct),
        set(&[
            "key_id",
            "key_name",
            "environment",
            "scopes",
            "limits",
            "server_time_ms"
        ])
    );
    assert_eq!(acct["key_id"], key.key_id.as_str());
    assert_eq!(acct["key_name"], "bot-1");
    assert_eq!(acct["environment"], "test");
    assert_eq!(acct["scopes"], json!(["read", "trade"]));
    assert_eq!(
        acct["limits"],
        json!({ "max_order_usd": 50, "max_daily_usd": 200, "max_open_orders": 3, "markets": [SERIES_A] })
    );
    let t = acct["server_time_ms"].as_u64().unwrap();
    assert!(before <= t && t <= after, "{before} <= {t} <= {after}");
    assert!(
        !resp.text.contains(key.secret()),
        "the secret never comes back: {}",
        resp.text
    );
    assert!(!resp.text.contains(&key.key));

    // A read key has no limits; a trade key without limits shows the
    // spec's defaults of $20 per order and $500 per day.
    let read = v.issue_key(account, json!({ "scopes": "read", "name": "ro" }));
    let acct = v.read("/account", Some(read.as_str()))["account"].clone();
    assert_eq!(acct["scopes"], json!(["read"]));
    assert_eq!(acct["limits"], json!({}));
    let trade = v.issue_key(account, json!({ "scopes": "read,trade" }));
    let acct = v.read("/account", Some(trade.as_str()))["account"].clone();
    assert_eq!(
        acct["limits"],
        json!({ "max_order_usd": 20, "max_daily_usd": 500 })
    );
    // SPEC: at most 5 active keys per account (checked by the operator API).
    v.issue_key(account, json!({ "scopes": "read" }));
    v.issue_key(account, json!({ "scopes": "read" }));
    let sixth = v.admin_call(
        "POST",
        "/admin/keys",
        Some(&json!({ "account": account, "scopes": "read" })),
    );
    assert_eq!(sixth.status, 400, "{}", sixth.text);
    assert_eq!(sixth.body["code"], "LIMIT_EXCEEDED");
    v.revoke(&read);
    // SPEC: an IP allowlist of up to 10 addresses; an expiry of 1 to 365 days.
    let ips: Vec<String> = (1..=11).map(|i| format!("10.0.0.{i}")).collect();
    for bad in [
        json!({ "ips": ips }),
        json!({ "expires_days": 0 }),
        json!({ "expires_days": 366 }),
    ] {
        let mut body = bad;
        body["account"] = json!(account);
        body["scopes"] = json!("read");
        assert_eq!(
            v.admin_call("POST", "/admin/keys", Some(&body)).status,
            400,
            "{body}"
        );
    }
    // Any valid key may check itself, whatever its permissions.
    let trade_only = v.issue_key(account, json!({ "scopes": "trade" }));
    assert_eq!(
        v.read("/account", Some(trade_only.as_str()))["account"]["scopes"],
        json!(["trade"])
    );
    // SPEC: the portfolio reads are "(key, Read)"; Trade places and cancels.
    for path in [
        "/portfolio/balance",
        "/portfolio/positions",
        "/portfolio/orders",
    ] {
        let refused = v.get(path, Some(trade_only.as_str()));
        assert_eq!(refused.status, 403, "{path}: {}", refused.text);
        assert_eq!(refused.body["code"], "FORBIDDEN");
        assert_eq!(
            refused.body["message"],
            "This API key lacks the read permission."
        );
    }
}

/// Bad operator input is refused whole, in the API's error shape, and
/// leaves nothing half done.
#[test]
fn the_admin_api_refuses_bad_amounts_and_paths_without_side_effects() {
    let v = Venue::start();
    let first = v.create_account("1.00");
    // Over the largest deposit: refused before any account is made.
    let over = v.admin_call(
        "POST",
        "/admin/accounts",
        Some(&json!({ "cash": "20000000000" })),
    );
    assert_eq!(over.status, 400, "{}", over.text);
    assert_eq!(over.body["code"], "BAD_REQUEST");
    assert_eq!(
        over.body["message"],
        "amount must be positive and at most $10,000,000,000"
    );
    // A JSON number is never rounded to cents.
    for body in [json!({ "cash": 10.005 }), json!({ "cash": -1 })] {
        let refused = v.admin_call("POST", "/admin/accounts", Some(&body));
        assert_eq!(refused.status, 400, "{body}: {}", refused.text);
        assert_eq!(
            refused.body["message"],
            "Field cash must be a dollar amount such as \"100.00\"."
        );
    }
    let refused = v.admin_call(
        "POST",
        &format!("/admin/accounts/{first}/deposit"),
        Some(&json!({ "amount": 0.125 })),
    );
    assert_eq!(refused.status, 400, "{}", refused.text);
    // The next account made is the one after the first: none was left behind.
    let exact = v.admin("/admin/accounts", json!({ "cash": 10.01 }));
    assert_eq!(exact["account_id"].as_u64(), Some(first + 1));
    assert_eq!(exact["cash"], "10.01");
    // A path segment that is not UTF-8 once decoded.
    let bad = v.admin_call(
        "POST",
        "/admin/accounts/%FF/deposit",
        Some(&json!({ "amount": "1.00" })),
    );
    assert_eq!(bad.status, 400, "{}", bad.text);
    assert_eq!(bad.body["code"], "BAD_REQUEST");
    assert_eq!(
        bad.body["message"],
        "The id in the path is not valid UTF-8."
    );
}

#[test]
fn markets_list_one_orderbook_with_checksum_and_trades() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let c = v.trader("100.00");

    let all = v.read("/markets", None);
    assert_eq!(keys(&all), set(&["markets", "cursor"]));
    let list = all["markets"].as_array().unwrap();
    list.iter().for_each(assert_market_shape);
    assert_eq!(
        list.len(),
        6,
        "two series, the current window and two ahead each"
    );
    for series in [SERIES_A, SERIES_B] {
        let of: Vec<&Value> = list
            .iter()
            .filter(|m| m["series_ticker"] == series)
            .collect();
        let open = of.iter().filter(|m| m["status"] == "open").count();
        let scheduled = of.iter().filter(|m| m["status"] == "scheduled").count();
        assert_eq!((of.len(), open, scheduled), (3, 1, 2), "{series}");
    }
    let only_a = v.read(&format!("/markets?series_ticker={SERIES_A}"), None);
    assert!(only_a["markets"]
        .as_array()
        .unwrap()
        .iter()
        .all(|m| m["series_ticker"] == SERIES_A));
    assert_eq!(only_a["markets"].as_array().unwrap().len(), 3);
    let open = v.read("/markets?status=open", None);
    assert_eq!(open["markets"].as_array().unwrap().len(), 2);
    let page = v.read("/markets?limit=4", None);
    assert_eq!(page["markets"].as_array().unwrap().len(), 4);
    let rest = v.read(
        &format!(
            "/markets?limit=4&cursor={}",
            page["cursor"].as_str().unwrap()
        ),
        None,
    );
    assert_eq!(rest["markets"].as_array().unwrap().len(), 2);
    assert_eq!(rest["cursor"], "");

    let m = v.open_market(SERIES_A);
    let market = market_record(&v, &m);
    assert_eq!(market["ticker"], m.as_str());
    assert_eq!(market["series_ticker"], SERIES_A);
    assert_eq!(market["status"], "open");
    assert_eq!(
        market["price_to_beat"], "97000.50",
        "the window opened on the first print"
    );
    assert_eq!(
        market["price_ranges"],
        json!([{ "start": "0.01", "end": "0.99", "step": "0.01" }])
    );
    assert_eq!(market["tick_size"], "0.01");
    let (open_ts, close_ts) = (
        market["open_ts_ms"].as_u64().unwrap(),
        market["close_ts_ms"].as_u64().unwrap(),
    );
    assert!(open_ts <= now_ms() && now_ms() < close_ts);
    for absent in [
        "result",
        "settlement_price",
        "settled_ts_ms",
        "last_price",
        "up_bid",
        "up_ask",
    ] {
        assert!(
            market.get(absent).is_none(),
            "{absent} before any order or settlement: {market}"
        );
    }
    let scheduled = market_record(&v, &v.scheduled_market(SERIES_A));
    assert_eq!(scheduled["status"], "scheduled");
    assert!(scheduled.get("price_to_beat").is_none());

    let empty = orderbook(&v, &m, "");
    assert_eq!(
        (empty["up"].clone(), empty["down"].clone()),
        (json!([]), json!([]))
    );
    assert_eq!(empty["checksum"], crc32(b"up:|down:"));

    v.place_ok(a.key(), &buy(&m, "up", "0.40", "10"));
    v.place_ok(a.key(), &buy(&m, "up", "0.45", "5"));
    v.place_ok(b.key(), &buy(&m, "down", "0.30", "3"));
    let book = orderbook(&v, &m, "");
    assert_eq!(book["up"], json!([["0.45", "5"], ["0.40", "10"]]));
    assert_eq!(book["down"], json!([["0.30", "3"]]));
    assert_eq!(book["checksum"], crc32(b"up:0.45:5,0.40:10|down:0.30:3"));
    assert_eq!(
        book["checksum"],
        crc32(checksum_text(&book["up"], &book["down"]).as_bytes())
    );
    let market = market_record(&v, &m);
    assert_eq!(
        (
            market["up_bid"].clone(),
            market["up_bid_size"].clone(),
            market["up_ask"].clone(),
            market["up_ask_size"].clone()
        ),
        (json!("0.45"), json!("5"), json!("0.70"), json!("3")),
        "top of book on the Up scale: the Up ask is 1 - the best Down bid"
    );

    let empty_trades = v.read(&format!("/markets/{m}/trades"), None);
    assert_eq!(empty_trades, json!({ "trades": [], "cursor": "" }));

    let taker = v.place_ok(c.key(), &buy(&m, "down", "0.60", "2"));
    assert_eq!(taker["average_fill_price"], "0.55");
    let book = orderbook(&v, &m, "");
    assert_eq!(book["up"], json!([["0.45", "3"], ["0.40", "10"]]));
    assert_eq!(book["checksum"], crc32(b"up:0.45:3,0.40:10|down:0.30:3"));
    // A shallower view still carries the checksum of the whole book.
    let top = orderbook(&v, &m, "?depth=1");
    assert_eq!(top["up"], json!([["0.45", "3"]]));
    assert_eq!(top["checksum"], book["checksum"]);

    let trades = v.read(&format!("/markets/{m}/trades"), None);
    let list = trades["trades"].as_array().unwrap();
    assert_eq!(list.len(), 1);
    let trade = &list[0];
    assert_eq!(trade["market_ticker"], m.as_str());
    assert_eq!(trade["up_price"], "0.45");
    assert_eq!(trade["down_price"], "0.55");
    assert_eq!(trade["count"], "2");
    assert_eq!(trade["taker_outcome"], "down");
    assert_eq!(trade["taker_action"], "buy");
    assert!(trade["ts_ms"].as_u64().is_some());
    assert_eq!(market_record(&v, &m)["last_price"], "0.45");
}

#[test]
fn the_orderbook_checksum_covers_the_top_ten_levels_of_each_side() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let m = v.open_market(SERIES_B);
    for cents in 1..=12 {
        v.place_ok(
            a.key(),
            &buy(&m, "up", &format!("0.{cents:02}"), &format!("{cents}")),
        );
        v.place_ok(
            b.key(),
            &buy(&m, "down", &format!("0.{:02}", cents + 20), "1"),
        );
    }
    let book = orderbook(&v, &m, "");
    let up = book["up"].as_array().unwrap();
    let down = book["down"].as_array().unwrap();
    assert_eq!(
        (up.len(), down.len()),
        (12, 12),
        "the REST book has every level"
    );
    assert_eq!(up[0], json!(["0.12", "12"]), "best (highest) first");
    assert_eq!(down[0], json!(["0.32", "1"]));
    let text = checksum_text(&book["up"], &book["down"]);
    assert_eq!(
        text,
        "up:0.12:12,0.11:11,0.10:10,0.09:9,0.08:8,0.07:7,0.06:6,0.05:5,0.04:4,0.03:3\
         |down:0.32:1,0.31:1,0.30:1,0.29:1,0.28:1,0.27:1,0.26:1,0.25:1,0.24:1,0.23:1"
    );
    assert_eq!(book["checksum"], crc32(text.as_bytes()));
}

// ===== 400s =====================================================================================

#[test]
fn bad_order_bodies_are_refused_naming_the_field() {
    let v = Venue::start();
    let a = v.trader("1000.00");
    let m = v.open_market(SERIES_A);
    let good = order(&m, "up", "buy", "0.40", "1", "good-1");

    let with = |field: &str, value: Value| {
        let mut body = good.clone();
        body[field] = value;
        body
    };
    let without = |field: &str| {
        let mut body = good.clone();
        body.as_object_mut().unwrap().remove(field);
        body
    };

    let mut cases: Vec<(Value, &str)> = vec![(with("leverage", json!(2)), "leverage")];
    for field in [
        "market_ticker",
        "outcome",
        "action",
        "price",
        "count",
        "client_order_id",
    ] {
        cases.push((without(field), field));
    }
    for price in [
        json!("0.555"),
        json!("1.00"),
        json!("0.00"),
        json!("0.5"),
        json!(".50"),
        json!("0,50"),
        json!(0.5),
        json!(""),
    ] {
        cases.push((with("price", price), "price"));
    }
    for count in [
        json!("0"),
        json!("10001"),
        json!("010"),
        json!("-1"),
        json!("1.5"),
        json!(10),
        json!(""),
    ] {
        cases.push((with("count", count), "count"));
    }
    for id in [
        json!("bad id"),
        json!("x".repeat(65)),
        json!(""),
        json!("a/b"),
        json!("é"),
        json!(7),
    ] {
        cases.push((with("client_order_id", id), "client_order_id"));
    }
    cases.push((with("outcome", json!("sideways")), "outcome"));
    cases.push((with("action", json!("hold")), "action"));
    cases.push((
        with("time_in_force", json!("fill_or_kill")),
        "time_in_force",
    ));
    cases.push((with("post_only", json!("true")), "post_only"));
    cases.push((with("market_ticker", json!("BTC")), "market_ticker"));
    for (body, field) in &cases {
        v.place(a.key(), body)
            .err_says(400, "BAD_REQUEST", &[field]);
    }
    for raw in ["{", "[]", "", "null", "\"order\""] {
        v.post_raw("/portfolio/orders", a.key(), raw.as_bytes())
            .err(400, "BAD_REQUEST");
    }
    assert!(
        v.orders(a.key(), "").is_empty(),
        "no refused body placed anything"
    );
    assert_balance(&v, a.key(), "1000.00", "0.00", "1000.00");

    // The edges of every range are accepted.
    let edge_id = format!("{}:._-", "Az09".repeat(15));
    assert_eq!(edge_id.len(), 64);
    v.place_ok(a.key(), &order(&m, "up", "buy", "0.01", "10000", &edge_id));
    v.place_ok(a.key(), &order(&m, "down", "buy", "0.01", "1", "d"));
    v.place_ok(a.key(), &order(&m, "up", "buy", "0.02", "1", "e"));
    // 0.99 passes every check of the body; it would trade with the
    // account's own Up bid at 0.02, which is the next check.
    v.place(a.key(), &order(&m, "down", "buy", "0.99", "1", "f"))
        .err(400, "SELF_TRADE");
}

#[test]
fn a_body_over_16_kib_is_refused() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let m = v.open_market(SERIES_A);
    let padded = |total: usize, id: &str| {
        let mut text = order(&m, "up", "buy", "0.40", "1", id).to_string();
        assert!(text.len() < total);
        text.push_str(&" ".repeat(total - text.len()));
        text
    };
    let at_limit = padded(16 * 1024, "at-limit");
    v.post_raw("/portfolio/orders", a.key(), at_limit.as_bytes())
        .ok(201);
    let over = padded(16 * 1024 + 1, "over-limit");
    v.post_raw("/portfolio/orders", a.key(), over.as_bytes())
        .err_says(400, "BAD_REQUEST", &["body"]);
    assert_eq!(v.orders(a.key(), "").len(), 1);
}

#[test]
fn bad_query_parameters_are_refused_naming_the_parameter() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let m = v.open_market(SERIES_A);
    let cases: &[(&str, &str, &str)] = &[
        ("GET", "/portfolio/fills?limit=0", "limit"),
        ("GET", "/portfolio/fills?limit=501", "limit"),
        ("GET", "/portfolio/fills?limit=abc", "limit"),
        ("GET", "/portfolio/fills?limit=", "limit"),
        ("GET", "/portfolio/fills?cursor=abc", "cursor"),
        ("GET", "/portfolio/fills?cursor=-1", "cursor"),
        ("GET", "/portfolio/fills?cursor=", "cursor"),
        ("GET", "/portfolio/fills?market_ticker=BTC", "market_ticker"),
        ("GET", "/portfolio/fills?size=10", "size"),
        ("GET", "/portfolio/fills?limit=1&limit=2", "limit"),
        ("GET", "/portfolio/orders?status=open", "status"),
        (
            "GET",
            "/portfolio/orders?client_order_id=bad%20id",
            "client_order_id",
        ),
        ("GET", "/portfolio/orders?market_ticker=x", "market_ticker"),
        ("GET", "/portfolio/orders?limit=0", "limit"),
        ("GET", "/portfolio/orders?limit=1001", "limit"),
        ("GET", "/portfolio/orders?colour=red", "colour"),
        (
            "DELETE",
            "/portfolio/orders?series_ticker=Bad_Series",
            "series_ticker",
        ),
        (
            "DELETE",
            "/portfolio/orders?market_ticker=nope",
            "market_ticker",
        ),
        ("DELETE", "/portfolio/orders?status=resting", "status"),
        ("GET", "/portfolio/positions?limit=1", "limit"),
        ("GET", "/portfolio/balance?x=1", "x"),
        ("GET", "/markets?status=live", "status"),
        ("GET", "/markets?limit=0", "limit"),
        ("GET", "/markets?limit=1001", "limit"),
        ("GET", "/markets?series_ticker=BAD", "series_ticker"),
    ];
    for (method, path, name) in cases {
        let resp = v.call(method, path, a.key(), None);
        let message = resp.err(400, "BAD_REQUEST");
        assert!(
            message.contains(name),
            "{method} {path}: {message:?} should name {name}"
        );
    }
    v.get(&format!("/markets/{m}/orderbook?depth=0"), None)
        .err_says(400, "BAD_REQUEST", &["depth"]);
    v.get(&format!("/markets/{m}/trades?cursor=x"), None)
        .err_says(400, "BAD_REQUEST", &["cursor"]);
    v.get(&format!("/markets/{m}/trades?limit=1001"), None)
        .err_says(400, "BAD_REQUEST", &["limit"]);
    v.get(&format!("/markets/{m}/trades?limit=1000"), None)
        .ok(200);
    // The bounds themselves are fine (fills pages hold 500, the other
    // lists 1,000).
    for path in [
        "/portfolio/fills?limit=1",
        "/portfolio/fills?limit=500",
        "/portfolio/orders?limit=1000",
        "/markets?limit=1000",
        "/portfolio/fills?cursor=0",
        // Up to 19 digits (openapi.json), leading zeros included.
        "/portfolio/fills?cursor=0000000000000000042",
        "/portfolio/fills?cursor=9999999999999999999",
    ] {
        v.get(path, a.key()).ok(200);
    }
    // Longer: refused for its length, not as a mismatch of the pattern.
    v.get("/portfolio/fills?cursor=00000000000000000042", a.key())
        .err_msg(
            400,
            "BAD_REQUEST",
            "Parameter cursor has at most 19 digits.",
        );
}

#[test]
fn insufficient_balance_for_a_buy_or_a_sell() {
    let v = Venue::start();
    let a = v.trader("5.20");
    let m = v.open_market(SERIES_A);
    // 10 x (0.50 + 0.02 most fee) = 5.20: exactly the buying power.
    v.place_ok(a.key(), &buy(&m, "up", "0.50", "10"));
    assert_balance(&v, a.key(), "5.20", "5.20", "0.00");
    // Buying power already counts the cash held by the resting buy.
    v.place(a.key(), &buy(&m, "up", "0.01", "1"))
        .err(400, "INSUFFICIENT_BALANCE");
    // A sell needs contracts held.
    v.place(a.key(), &sell(&m, "down", "0.50", "1"))
        .err(400, "INSUFFICIENT_BALANCE");
    let poor = v.trader("1.00");
    v.place(poor.key(), &buy(&m, "down", "0.30", "10"))
        .err(400, "INSUFFICIENT_BALANCE");
    assert_eq!(v.orders(a.key(), "").len(), 1);
    assert!(v.orders(poor.key(), "").is_empty());
}

#[test]
fn limit_exceeded_for_key_max_order_and_the_default_20_dollars() {
    let v = Venue::start();
    let m = v.open_market(SERIES_A);

    let account = v.create_account("1000.00");
    v.flags(
        account,
        json!({ "terms_accepted": true, "trading_allowed": true }),
    );
    let five = v.issue_key(
        account,
        json!({ "scopes": "read,trade", "max_order_usd": "5" }),
    );
    v.place(Some(five.as_str()), &buy(&m, "up", "0.50", "11"))
        .err_says(400, "LIMIT_EXCEEDED", &["max order"]);
    v.place_ok(Some(five.as_str()), &buy(&m, "up", "0.50", "10"));

    // A trade key without limits: $20 per order.
    let plain = v.issue_key(account, json!({ "scopes": "read,trade" }));
    v.place(Some(plain.as_str()), &buy(&m, "up", "0.50", "41"))
        .err_says(400, "LIMIT_EXCEEDED", &["max order", "20"]);
    v.place(Some(plain.as_str()), &buy(&m, "down", "0.21", "100"))
        .err(400, "LIMIT_EXCEEDED");
    v.place_ok(Some(plain.as_str()), &buy(&m, "up", "0.50", "40"));
    // The key limit is judged before the balance.
    let poor = v.create_account("1.00");
    v.flags(
        poor,
        json!({ "terms_accepted": true, "trading_allowed": true }),
    );
    let poor_key = v.issue_key(poor, json!({ "scopes": "read,trade" }));
    v.place(Some(poor_key.as_str()), &buy(&m, "up", "0.50", "41"))
        .err(400, "LIMIT_EXCEEDED");
    v.place(Some(poor_key.as_str()), &buy(&m, "up", "0.50", "40"))
        .err(400, "INSUFFICIENT_BALANCE");
}

#[test]
fn limit_exceeded_for_the_other_key_account_and_market_limits() {
    let v = Venue::start();
    let ma = v.open_market(SERIES_A);
    let mb = v.open_market(SERIES_B);
    let account = v.create_account("5000.00");
    v.flags(
        account,
        json!({ "terms_accepted": true, "trading_allowed": true }),
    );

    let daily = v.issue_key(
        account,
        json!({ "scopes": "read,trade", "max_order_usd": "10", "max_daily_usd": "10" }),
    );
    v.place_ok(Some(daily.as_str()), &buy(&ma, "up", "0.30", "20"));
    v.place(Some(daily.as_str()), &buy(&ma, "up", "0.50", "10"))
        .err_says(400, "LIMIT_EXCEEDED", &["max per day"]);

    let open = v.issue_key(
        account,
        json!({ "scopes": "read,trade", "max_open_orders": 2 }),
    );
    v.place_ok(Some(open.as_str()), &buy(&ma, "down", "0.10", "1"));
    v.place_ok(Some(open.as_str()), &buy(&ma, "down", "0.11", "1"));
    v.place(Some(open.as_str()), &buy(&ma, "down", "0.12", "1"))
        .err_says(400, "LIMIT_EXCEEDED", &["max open orders"]);
    // An order that will not rest needs no slot.
    let mut ioc = buy(&ma, "down", "0.12", "1");
    ioc["time_in_force"] = json!("immediate_or_cancel");
    assert_eq!(v.place_ok(Some(open.as_str()), &ioc)["status"], "canceled");

    let series = v.issue_key(
        account,
        json!({ "scopes": "read,trade", "series": [SERIES_B] }),
    );
    v.place(Some(series.as_str()), &buy(&ma, "up", "0.10", "1"))
        .err_says(400, "LIMIT_EXCEEDED", &[SERIES_A]);
    v.place_ok(Some(series.as_str()), &buy(&mb, "up", "0.10", "1"));

    // The account's cap on the amount at risk (set by the operator).
    let capped = v.trader("100.00");
    v.admin(
        &format!("/admin/accounts/{}/risk-cap", capped.account),
        json!({ "usd": "10" }),
    );
    v.place_ok(capped.key(), &buy(&ma, "up", "0.30", "30"));
    v.place(capped.key(), &buy(&ma, "up", "0.50", "1"))
        .err_says(400, "LIMIT_EXCEEDED", &["Account"]);

    // The market's cap for all users together (series B: $1,000).
    let whale = v.trader("3000.00");
    v.place(whale.key(), &buy(&mb, "up", "0.50", "2001"))
        .err_says(400, "LIMIT_EXCEEDED", &["Market"]);
    v.place_ok(whale.key(), &buy(&mb, "up", "0.50", "1990"));
}

#[test]
fn market_not_open_for_an_unknown_or_scheduled_market() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let unknown = "e2e-a-000101-0000-0001";
    v.place(a.key(), &buy(unknown, "up", "0.40", "1"))
        .err_says(400, "MARKET_NOT_OPEN", &[unknown]);
    v.place(a.key(), &sell(unknown, "up", "0.40", "1"))
        .err(400, "MARKET_NOT_OPEN");
    let scheduled = v.scheduled_market(SERIES_A);
    v.place(a.key(), &buy(&scheduled, "up", "0.40", "1"))
        .err_says(400, "MARKET_NOT_OPEN", &[&scheduled]);
    // The market is checked where any unopened market would be: after the
    // key's permission.
    let read = v.issue_key(a.account, json!({ "scopes": "read" }));
    v.place(Some(read.as_str()), &buy(unknown, "up", "0.40", "1"))
        .err(403, "FORBIDDEN");
    assert!(v.orders(a.key(), "").is_empty());
}

#[test]
fn post_only_that_would_trade_is_refused_whole() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let m = v.open_market(SERIES_A);
    v.place_ok(a.key(), &buy(&m, "up", "0.40", "10"));
    let book = orderbook(&v, &m, "");

    let mut crossing = buy(&m, "down", "0.60", "5");
    crossing["post_only"] = json!(true);
    v.place(b.key(), &crossing).err(400, "POST_ONLY_CROSS");
    assert!(v.orders(b.key(), "").is_empty(), "nothing placed");
    assert_eq!(orderbook(&v, &m, ""), book, "book unchanged");
    assert_balance(&v, b.key(), "100.00", "0.00", "100.00");

    let mut passive = buy(&m, "down", "0.59", "5");
    passive["post_only"] = json!(true);
    assert_eq!(v.place_ok(b.key(), &passive)["status"], "resting");

    // SPEC: post_only applies to good_till_canceled only.
    let mut ioc = buy(&m, "down", "0.60", "1");
    ioc["post_only"] = json!(true);
    ioc["time_in_force"] = json!("immediate_or_cancel");
    let ioc = v.place_ok(b.key(), &ioc);
    assert_eq!(
        (ioc["status"].clone(), ioc["fill_count"].clone()),
        (json!("executed"), json!("1"))
    );
}

#[test]
fn an_order_that_would_trade_with_its_own_account_is_refused_whole() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let m = v.open_market(SERIES_A);
    v.place_ok(a.key(), &buy(&m, "up", "0.40", "10"));
    let book = orderbook(&v, &m, "");
    v.place(a.key(), &buy(&m, "down", "0.60", "5"))
        .err(400, "SELF_TRADE");
    assert_eq!(v.orders(a.key(), "").len(), 1, "nothing placed");
    assert_eq!(orderbook(&v, &m, ""), book);
    // Another key of the same account is the same account.
    let second = v.issue_key(a.account, json!({ "scopes": "read,trade" }));
    v.place(Some(second.as_str()), &buy(&m, "down", "0.70", "1"))
        .err(400, "SELF_TRADE");
    assert_balance(&v, a.key(), "100.00", "4.20", "95.80");
}

#[test]
fn self_trade_is_judged_on_what_the_order_would_trade_against() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let m = v.open_market(SERIES_A);
    v.place_ok(a.key(), &buy(&m, "up", "0.40", "10"));
    v.place_ok(b.key(), &buy(&m, "up", "0.45", "5"));
    // 6 contracts would reach A's own order behind B's 5: refused whole.
    v.place(a.key(), &buy(&m, "down", "0.60", "6"))
        .err(400, "SELF_TRADE");
    assert_eq!(
        orderbook(&v, &m, "")["up"],
        json!([["0.45", "5"], ["0.40", "10"]])
    );
    // 5 contracts trade only with B: allowed.
    let filled = v.place_ok(a.key(), &buy(&m, "down", "0.60", "5"));
    assert_eq!(
        (
            filled["status"].clone(),
            filled["average_fill_price"].clone()
        ),
        (json!("executed"), json!("0.55"))
    );
}

#[test]
fn holds_follow_fills_at_a_better_price_cancels_and_execution() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let m = v.open_market(SERIES_A);
    v.place_ok(b.key(), &buy(&m, "up", "0.30", "5"));
    // A's Down bid at 0.80 for 10 fills 5 at 0.70 (better than its limit)
    // and rests 5: only the resting 5 hold 0.80 + 0.02 each.
    let part = v.place_ok(a.key(), &buy(&m, "down", "0.80", "10"));
    assert_eq!(
        (
            part["status"].clone(),
            part["fill_count"].clone(),
            part["remaining_count"].clone()
        ),
        (json!("resting"), json!("5"), json!("5")),
        "SPEC: resting, possibly part-filled"
    );
    assert_eq!(part["average_fill_price"], "0.70");
    // Fee ceil(0.07 x 5 x 0.30 x 0.70) = 0.08.
    assert_eq!(part["fees_paid"], "0.08");
    assert_balance(&v, a.key(), "96.42", "4.10", "92.32");
    // A fill of the resting part (as maker, at 0.80, fee 0) releases the
    // hold of what filled: 3 x 0.82 released, 3 x 0.80 paid.
    let c = v.trader("100.00");
    let taker = v.place_ok(c.key(), &buy(&m, "up", "0.20", "3"));
    assert_eq!(taker["status"], "executed");
    assert_balance(&v, a.key(), "94.02", "1.64", "92.38");
    let now = v.read(&format!("/portfolio/orders/{}", id_of(&part)), a.key())["order"].clone();
    assert_eq!(
        (now["status"].clone(), now["remaining_count"].clone()),
        (json!("resting"), json!("2"))
    );
    assert_eq!(
        now["average_fill_price"], "0.7375",
        "(5 x 0.70 + 3 x 0.80) / 8, to 4 decimals"
    );
    let id = id_of(&part);
    let canceled = v
        .delete(&format!("/portfolio/orders/{id}"), a.key())
        .ok(200)["order"]
        .clone();
    assert_eq!(
        (canceled["status"].clone(), canceled["fill_count"].clone()),
        (json!("canceled"), json!("8"))
    );
    assert_balance(&v, a.key(), "94.02", "0.00", "94.02");
}

#[test]
fn max_open_orders_is_per_market() {
    let v = Venue::start();
    let ma = v.open_market(SERIES_A);
    let mb = v.open_market(SERIES_B);
    let account = v.create_account("100.00");
    v.flags(
        account,
        json!({ "terms_accepted": true, "trading_allowed": true }),
    );
    let key = v.issue_key(
        account,
        json!({ "scopes": "read,trade", "max_open_orders": 1 }),
    );
    let k = Some(key.as_str());
    v.place_ok(k, &buy(&ma, "up", "0.10", "1"));
    v.place(k, &buy(&ma, "up", "0.11", "1"))
        .err_says(400, "LIMIT_EXCEEDED", &["max open orders"]);
    v.place_ok(k, &buy(&mb, "up", "0.10", "1"));
}

// ===== 401 / 403 / 404 / 405 ======================================================================

/// Every endpoint that needs a key, with a request that is otherwise fine.
fn keyed_requests(m: &str) -> Vec<(&'static str, String, Option<Vec<u8>>)> {
    let body = buy(m, "up", "0.40", "1").to_string().into_bytes();
    vec![
        ("POST", "/portfolio/orders".into(), Some(body)),
        ("GET", "/portfolio/orders".into(), None),
        ("DELETE", "/portfolio/orders".into(), None),
        ("GET", "/portfolio/orders/1".into(), None),
        ("DELETE", "/portfolio/orders/1".into(), None),
        ("GET", "/portfolio/positions".into(), None),
        ("GET", "/portfolio/fills".into(), None),
        ("GET", "/portfolio/balance".into(), None),
        ("GET", "/account".into(), None),
    ]
}

#[test]
fn refused_keys_answer_401_with_the_spec_message() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let m = v.open_market(SERIES_A);

    for (method, path, body) in keyed_requests(&m) {
        let resp = v.call(method, &path, None, body.as_deref());
        let message = resp.err(401, "UNAUTHORIZED");
        assert!(
            message.contains("Authorization: Bearer tk_"),
            "{method} {path}: {message:?}"
        );
        // RFC 9110 §11.6.1: a 401 names the scheme it takes.
        assert_eq!(
            resp.header("www-authenticate"),
            Some("Bearer realm=\"updown\""),
            "{method} {path}"
        );
    }
    for header in ["Basic dXNlcjpwYXNz", "Bearer", "Bearer "] {
        let message = v
            .call_raw_auth("GET", "/account", Some(header))
            .err(401, "UNAUTHORIZED");
        assert!(
            message.contains("Authorization: Bearer tk_"),
            "{header:?}: {message:?}"
        );
    }
    // A bearer token that is not an API key at all: a key that does not
    // exist (and a failed attempt for the lockout), not a missing one.
    for token in ["hunter2", "TK_test_abc_s", "Bearer"] {
        let resp = v.get("/account", Some(token));
        resp.err_msg(401, "UNAUTHORIZED", "Invalid API key.");
        assert_eq!(
            resp.header("www-authenticate"),
            Some("Bearer realm=\"updown\"")
        );
    }
    // The scheme is case-insensitive (RFC 9110 11.1).
    for scheme in ["bearer", "BEARER", "BeArEr"] {
        let header = format!("{scheme} {}", a.key.key);
        v.call_raw_auth("GET", "/account", Some(&header)).ok(200);
    }

    let invalid = [
        "tk_test_nosuchkey0_s3cr3t".to_string(),
        format!("tk_test_{}_wrongsecret", a.key.key_id),
        format!("tk_test_{}_{}x", a.key.key_id, a.key.secret()),
        "tk_test_abc".to_string(),
        format!("tk_test_{}", a.key.key_id),
    ];
    for key in &invalid {
        for (method, path, body) in keyed_requests(&m) {
            v.call(method, &path, Some(key), body.as_deref()).err_msg(
                401,
                "UNAUTHORIZED",
                "Invalid API key.",
            );
        }
    }

    // A key of the other environment: a live key on this test venue.
    let account = v.create_account("10.00");
    let live = v.issue_key(account, json!({ "scopes": "read,trade", "env": "live" }));
    assert!(live.key.starts_with("tk_live_"), "{}", live.key);
    let forged = a.key.key.replacen("tk_test_", "tk_live_", 1);
    for key in [live.as_str(), forged.as_str()] {
        for (method, path, body) in keyed_requests(&m) {
            v.call(method, &path, Some(key), body.as_deref()).err_says(
                401,
                "UNAUTHORIZED",
                &["live", "environment"],
            );
        }
    }

    let fenced = v.issue_key(
        a.account,
        json!({ "scopes": "read,trade", "ips": ["10.9.9.9"] }),
    );
    for (method, path, body) in keyed_requests(&m) {
        v.call(method, &path, Some(fenced.as_str()), body.as_deref())
            .err_msg(
                401,
                "UNAUTHORIZED",
                "This API key can't be used from this IP address.",
            );
    }
    let loopback = v.issue_key(
        a.account,
        json!({ "scopes": "read,trade", "ips": ["10.9.9.9", "127.0.0.1"] }),
    );
    v.get("/account", Some(loopback.as_str())).ok(200);

    // Expiry: a key issued for 1 day works now. Reaching "This API key has
    // expired." needs a day to pass (1 to 365 days); not tested here.
    let expiring = v.issue_key(a.account, json!({ "scopes": "read", "expires_days": 1 }));
    v.get("/account", Some(expiring.as_str())).ok(200);

    v.get("/account", a.key()).ok(200);
    v.revoke(&a.key);
    for (method, path, body) in keyed_requests(&m) {
        v.call(method, &path, a.key(), body.as_deref()).err_msg(
            401,
            "UNAUTHORIZED",
            "This API key has been revoked.",
        );
    }
    // The account's other keys still work.
    v.get("/account", Some(loopback.as_str())).ok(200);

    let b = v.trader("100.00");
    v.flags(b.account, json!({ "suspended": true }));
    for (method, path, body) in keyed_requests(&m) {
        v.call(method, &path, b.key(), body.as_deref()).err_msg(
            401,
            "UNAUTHORIZED",
            "This account is suspended.",
        );
    }
    v.flags(b.account, json!({ "suspended": false }));
    v.get("/account", b.key()).ok(200);
    v.place_ok(b.key(), &buy(&m, "up", "0.40", "1"));
}

/// Reads one HTTP/1.1 response with a `Content-Length` body off a kept-alive
/// connection: its status and body.
fn read_response(stream: &mut std::net::TcpStream) -> (u16, String) {
    use std::io::Read;
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => raw.push(byte[0]),
            other => panic!("the connection ended before a response: {other:?} after {raw:?}"),
        }
    }
    let head = String::from_utf8(raw).expect("ascii head");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let length: usize = head
        .split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse().ok())
        .expect("content-length");
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).expect("body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// A refused order entry keeps the caller's connection: the gateway reads
/// the body it refuses before answering, even when the body arrives after
/// the headers, so the next request on the same connection is answered.
#[test]
fn a_refused_request_keeps_the_connection() {
    use std::io::Write;
    let v = Venue::start();
    let m = v.open_market(SERIES_A);
    let addr = v.addr();
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let body = buy(&m, "up", "0.40", "1").to_string();
    for key in ["tk_test_nosuchkey0_s3cr3t", "not a key"] {
        let head = format!(
            "POST /v1/portfolio/orders HTTP/1.1\r\nHost: {addr}\r\n\
             Authorization: Bearer {key}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).expect("send head");
        stream.flush().expect("flush");
        std::thread::sleep(Duration::from_millis(200));
        stream.write_all(body.as_bytes()).expect("send body");
        let (status, text) = read_response(&mut stream);
        assert_eq!(status, 401, "{text}");
        assert!(text.contains("UNAUTHORIZED"), "{text}");
    }
    // A stray query parameter refused before the key, an unknown path, a
    // method not allowed, a GET with a body: each body is read, each
    // refusal answered, and the connection stays.
    for (method, target, status) in [
        ("POST", "/v1/portfolio/orders?x=1", 400),
        ("POST", "/v1/nope", 404),
        ("PUT", "/v1/portfolio/orders", 405),
        ("GET", "/v1/markets?limit=1", 200),
    ] {
        let head = format!(
            "{method} {target} HTTP/1.1\r\nHost: {addr}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        stream.write_all(head.as_bytes()).expect("send head");
        std::thread::sleep(Duration::from_millis(200));
        stream.write_all(body.as_bytes()).expect("send body");
        let (got, text) = read_response(&mut stream);
        assert_eq!(got, status, "{method} {target}: {text}");
    }

    let get = format!("GET /v1/markets/{m} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    stream.write_all(get.as_bytes()).expect("send");
    let (status, text) = read_response(&mut stream);
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(&m), "{text}");
}

#[test]
fn forbidden_without_the_trade_permission_terms_or_wallet_trading() {
    let v = Venue::start();
    let m = v.open_market(SERIES_A);
    let a = v.trader("100.00");
    let resting = id_of(&v.place_ok(a.key(), &buy(&m, "up", "0.40", "1")));

    let read_only = v.issue_key(a.account, json!({ "scopes": "read" }));
    let ro = Some(read_only.as_str());
    v.place(ro, &buy(&m, "up", "0.30", "1"))
        .err_says(403, "FORBIDDEN", &["permission"]);
    v.delete(&format!("/portfolio/orders/{resting}"), ro)
        .err_says(403, "FORBIDDEN", &["permission"]);
    v.delete("/portfolio/orders", ro)
        .err_says(403, "FORBIDDEN", &["permission"]);
    // Reading is what a read key is for.
    assert_eq!(v.orders(ro, "").len(), 1);
    v.get(&format!("/portfolio/orders/{resting}"), ro).ok(200);
    for path in [
        "/portfolio/positions",
        "/portfolio/fills",
        "/portfolio/balance",
        "/account",
    ] {
        v.get(path, ro).ok(200);
    }
    assert_eq!(
        v.read(&format!("/portfolio/orders/{resting}"), a.key())["order"]["status"],
        "resting"
    );

    let account = v.create_account("100.00");
    let key = v.issue_key(account, json!({ "scopes": "read,trade" }));
    let k = Some(key.as_str());
    v.place(k, &buy(&m, "up", "0.40", "1"))
        .err_says(403, "FORBIDDEN", &["Terms of Service"]);
    v.flags(account, json!({ "terms_accepted": true }));
    v.place(k, &buy(&m, "up", "0.40", "1"))
        .err_says(403, "FORBIDDEN", &["trading"]);
    v.flags(
        account,
        json!({ "trading_allowed": true, "terms_accepted": false }),
    );
    v.place(k, &buy(&m, "up", "0.40", "1"))
        .err_says(403, "FORBIDDEN", &["Terms of Service"]);
    v.flags(account, json!({ "terms_accepted": true }));
    v.place_ok(k, &buy(&m, "up", "0.40", "1"));
}

#[test]
fn test_keys_are_forbidden_while_the_practice_book_is_closed() {
    let v = Venue::start_with(|c| c.practice_book_open = false);
    let a = v.trader("100.00");
    let m = v.open_market(SERIES_A);
    v.place(a.key(), &buy(&m, "up", "0.40", "1"))
        .err_says(403, "FORBIDDEN", &["practice book"]);
    v.get("/account", a.key()).ok(200);
}

#[test]
fn order_not_found_for_unknown_malformed_and_other_accounts_ids() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let m = v.open_market(SERIES_A);
    let mine = id_of(&v.place_ok(a.key(), &buy(&m, "up", "0.40", "1")));

    for id in [
        "999999",
        "abc",
        "0",
        "-1",
        "1.0",
        "%2B1",
        "a%2Fb",
        "18446744073709551616",
        &format!("{mine}x"),
        // Not the id as issued: ids are written without leading zeros.
        &format!("0{mine}"),
        &format!("00{mine}"),
    ] {
        for method in ["GET", "DELETE"] {
            v.call(method, &format!("/portfolio/orders/{id}"), a.key(), None)
                .err(404, "ORDER_NOT_FOUND");
        }
    }
    // Another account's order does not exist for this account.
    for method in ["GET", "DELETE"] {
        v.call(method, &format!("/portfolio/orders/{mine}"), b.key(), None)
            .err(404, "ORDER_NOT_FOUND");
    }
    assert_eq!(
        v.read(&format!("/portfolio/orders/{mine}"), a.key())["order"]["status"],
        "resting"
    );
}

#[test]
fn unknown_paths_and_methods() {
    let v = Venue::start();
    let a = v.trader("100.00");
    for path in [
        "/nope",
        "/portfolio",
        "/portfolio/orders/1/fills",
        "/markets/x/y/z",
    ] {
        v.get(path, a.key()).err(404, "NOT_FOUND");
    }
    v.call_root("GET", "/v2/markets").err(404, "NOT_FOUND");
    v.call_root("GET", "/").err(404, "NOT_FOUND");
    v.call("POST", "/nope", a.key(), Some(b"{}"))
        .err(404, "NOT_FOUND");

    let cases: &[(&str, &str)] = &[
        ("PUT", "/portfolio/orders"),
        ("PATCH", "/portfolio/orders"),
        ("PUT", "/portfolio/orders/1"),
        ("POST", "/portfolio/orders/1"),
        ("POST", "/portfolio/positions"),
        ("DELETE", "/portfolio/fills"),
        ("POST", "/portfolio/balance"),
        ("DELETE", "/account"),
        ("POST", "/markets"),
        ("DELETE", "/markets/e2e-a-000101-0000-0001"),
        ("POST", "/markets/e2e-a-000101-0000-0001/orderbook"),
        ("PUT", "/markets/e2e-a-000101-0000-0001/trades"),
    ];
    for (method, path) in cases {
        let body = (*method != "DELETE").then_some(&b"{}"[..]);
        v.call(method, path, a.key(), body)
            .err(405, "METHOD_NOT_ALLOWED");
    }
}

#[test]
fn market_not_found_and_series_not_found() {
    let v = Venue::start();
    let unknown = "e2e-a-000101-0000-0001";
    v.get(&format!("/markets/{unknown}"), None)
        .err_says(404, "MARKET_NOT_FOUND", &[unknown]);
    v.get(&format!("/markets/{unknown}/orderbook"), None)
        .err(404, "MARKET_NOT_FOUND");
    v.get(&format!("/markets/{unknown}/trades"), None)
        .err(404, "MARKET_NOT_FOUND");
    v.get("/markets?series_ticker=no-such-series", None)
        .err(404, "SERIES_NOT_FOUND");
    // Not a market ticker at all.
    v.get("/markets/NOT_A_TICKER", None).err(400, "BAD_REQUEST");
}

// ===== idempotency =================================================================================

#[test]
fn idempotency_same_order_returns_it_and_a_different_one_conflicts() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let ma = v.open_market(SERIES_A);
    let mb = v.open_market(SERIES_B);

    let id = "idem-1";
    let body = order(&ma, "up", "buy", "0.40", "10", id);
    let first = v.place_ok(a.key(), &body);
    let again = v.place_ok(a.key(), &body);
    assert_eq!(
        again, first,
        "the same client_order_id and order returns the order already placed"
    );
    let mut explicit = body.clone();
    explicit["time_in_force"] = json!("good_till_canceled");
    explicit["post_only"] = json!(false);
    assert_eq!(
        v.place_ok(a.key(), &explicit),
        first,
        "defaults written out are the same order"
    );
    // Another key of the same account: client_order_id is per account.
    let second_key = v.issue_key(
        a.account,
        json!({ "scopes": "read,trade", "max_order_usd": "100" }),
    );
    assert_eq!(v.place_ok(Some(second_key.as_str()), &body), first);

    let changes: Vec<(&str, Value)> = vec![
        ("price", json!("0.41")),
        ("count", json!("11")),
        ("outcome", json!("down")),
        ("action", json!("sell")),
        ("market_ticker", json!(mb)),
        // A market never listed: still the id's conflict, not MARKET_NOT_OPEN.
        ("market_ticker", json!("e2e-a-000101-0000-0001")),
        ("time_in_force", json!("immediate_or_cancel")),
        ("post_only", json!(true)),
    ];
    for (field, value) in &changes {
        let mut different = body.clone();
        different[*field] = value.clone();
        v.place(a.key(), &different)
            .err(409, "IDEMPOTENCY_CONFLICT");
        v.place(Some(second_key.as_str()), &different)
            .err(409, "IDEMPOTENCY_CONFLICT");
    }
    let listed = v.orders(a.key(), "");
    assert_eq!(
        ids(&listed, "order_id"),
        [id_of(&first)],
        "never a second order"
    );
    assert_balance(&v, a.key(), "100.00", "4.20", "95.80");

    // Another account may use the same client_order_id for its own order.
    let other = v.place_ok(b.key(), &order(&ma, "down", "buy", "0.30", "1", id));
    assert_ne!(id_of(&other), id_of(&first));

    // After the order executed, a retry returns it as it stands.
    v.place_ok(b.key(), &buy(&ma, "down", "0.60", "10"));
    let retried = v.place_ok(a.key(), &body);
    assert_eq!(id_of(&retried), id_of(&first));
    assert_eq!(retried["status"], "executed");
    assert_eq!(positions(&v, a.key())[0]["count"], "10", "no second fill");
    assert_eq!(v.orders(a.key(), "").len(), 1);

    // After a cancel, a retry does not place it again.
    let c = order(&ma, "up", "buy", "0.20", "1", "idem-2");
    let placed = v.place_ok(a.key(), &c);
    v.delete(&format!("/portfolio/orders/{}", id_of(&placed)), a.key())
        .ok(200);
    let retried = v.place_ok(a.key(), &c);
    assert_eq!(
        (id_of(&retried), retried["status"].clone()),
        (id_of(&placed), json!("canceled"))
    );

    // A refused order does not take its client_order_id.
    let refused = order(&ma, "up", "buy", "0.50", "1000", "idem-3");
    v.place(a.key(), &refused).err(400, "INSUFFICIENT_BALANCE");
    let placed = v.place_ok(a.key(), &order(&ma, "up", "buy", "0.10", "1", "idem-3"));
    assert_eq!(placed["status"], "resting");
    assert_eq!(v.orders(a.key(), "?client_order_id=idem-3").len(), 1);
}

/// SPEC idempotency rule 3: after a 503 EXCHANGE_UNAVAILABLE the client
/// resends with the same id and never gets a second order.
///
/// The 503 is forced by a request timeout of 0: the gateway hands the order
/// to the sequencer and gives up waiting at once, so the client gets 503
/// for an order that is then placed (the dangerous case). (A 1 ms timeout
/// was used before; on a quiet machine the venue answered 3,000 orders in
/// time and the test found no 503.) The retries run after a restart with a
/// normal timeout, on the same data.
#[test]
fn a_retry_after_503_never_makes_a_second_order() {
    const WANTED: usize = 5;
    const ROUND: usize = 100;
    const MAX_ORDERS: usize = 3_000;
    let mut v = Venue::start_with(|c| {
        c.orders_per_second = 100_000;
        c.orders_burst = 100_000;
    });
    let a = v.trader("1000.00");
    let m = v.open_market(SERIES_A);
    let key = a.key.key.clone();
    let body = |i: usize| order(&m, "up", "buy", "0.01", "1", &format!("t503-{i}"));

    v.restart_with(|c| c.request_timeout_ms = 0);
    let mut results: Vec<(usize, u16, String)> = Vec::new();
    let mut sent = 0;
    while sent < MAX_ORDERS && results.iter().filter(|r| r.1 == 503).count() < WANTED {
        let round: Vec<(usize, u16, String)> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..4)
                .map(|t| {
                    let (v, key, body) = (&v, key.as_str(), &body);
                    scope.spawn(move || {
                        (sent + t..sent + ROUND)
                            .step_by(4)
                            .map(|i| {
                                let resp = v.place(Some(key), &body(i));
                                (
                                    i,
                                    resp.status,
                                    resp.body["code"].as_str().unwrap_or("").to_string(),
                                )
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            threads
                .into_iter()
                .flat_map(|h| h.join().expect("client thread"))
                .collect()
        });
        results.extend(round);
        sent += ROUND;
    }
    for (i, status, code) in &results {
        assert!(
            *status == 201 || (*status == 503 && code == "EXCHANGE_UNAVAILABLE"),
            "order {i}: {status} {code}"
        );
    }
    let unavailable: Vec<usize> = results.iter().filter(|r| r.1 == 503).map(|r| r.0).collect();
    assert!(
        !unavailable.is_empty(),
        "no 503 in {sent} orders with a request timeout of 0"
    );
    // Each late answer says what to do in the words of its kind: a place
    // names its client_order_id (resent here: the same order), a cancel has
    // none and is safe to repeat (one of an order that does not exist here,
    // so that nothing changes when it is applied after the 503).
    v.place(Some(&key), &body(unavailable[0])).err_msg(
        503,
        "EXCHANGE_UNAVAILABLE",
        "The order could not be confirmed in time; retry with the same client_order_id.",
    );
    v.delete("/portfolio/orders/987654321", Some(&key)).err_msg(
        503,
        "EXCHANGE_UNAVAILABLE",
        "The cancel could not be confirmed in time; retry it (a cancel is safe to repeat).",
    );

    v.restart_with(|c| c.request_timeout_ms = 30_000);
    let confirmed: Vec<usize> = results
        .iter()
        .filter(|r| r.1 == 201)
        .map(|r| r.0)
        .take(20)
        .collect();
    let mut placed_before_retry = 0;
    for &i in unavailable.iter().chain(&confirmed) {
        let query = format!("?client_order_id=t503-{i}");
        let before = v.orders(Some(&key), &query);
        assert!(
            before.len() <= 1,
            "one client_order_id, at most one order: {before:?}"
        );
        if unavailable.contains(&i) {
            placed_before_retry += before.len();
        } else {
            assert_eq!(before.len(), 1, "an order answered 201 exists");
        }
        let retried = v.place_ok(Some(&key), &body(i));
        if let Some(existing) = before.first() {
            assert_eq!(
                retried, *existing,
                "the retry returns the order already placed"
            );
        }
        assert_eq!(
            v.orders(Some(&key), &query).len(),
            1,
            "never a second order for t503-{i}"
        );
    }
    // Every client_order_id sent has exactly one order, and there is no other.
    let mut seen = BTreeSet::new();
    let mut query = "?limit=1000".to_string();
    loop {
        let page = v.read(&format!("/portfolio/orders{query}"), Some(&key));
        for o in page["orders"].as_array().unwrap() {
            let id = o["client_order_id"].as_str().unwrap().to_string();
            assert!(seen.insert(id.clone()), "two orders for {id}");
        }
        let cursor = page["cursor"].as_str().unwrap();
        if cursor.is_empty() {
            break;
        }
        query = format!("?limit=1000&cursor={cursor}");
    }
    let missing: Vec<usize> = (0..sent)
        .filter(|i| !seen.contains(&format!("t503-{i}")))
        .collect();
    // Only an order whose 503 came before the sequencer took it may be
    // missing, and every such one was placed by its retry above.
    assert!(
        missing.is_empty(),
        "orders never placed even after the retry: {missing:?}"
    );
    assert_eq!(seen.len(), sent);
    eprintln!(
        "503 test: {} of {sent} answered 503; {placed_before_retry} of those had been placed before the retry",
        unavailable.len()
    );
}

// ===== limits on requests ===============================================================================

/// The body that placed order `id` (read back from it) and the order as
/// placed; reads are not rate limited.
fn answers_first(v: &Venue, a: &Trader, market: &str, id: &str) -> (Value, Value) {
    let placed = v.get(&format!("/portfolio/orders/{id}"), a.key()).ok(200)["order"].clone();
    let body = order(
        market,
        "up",
        "buy",
        "0.01",
        "1",
        placed["client_order_id"].as_str().unwrap(),
    );
    (body, placed)
}

#[test]
fn new_orders_are_rate_limited_per_key_and_cancels_never_are() {
    let v = Venue::start();
    assert_eq!(
        (v.config.orders_per_second, v.config.orders_burst),
        (10, 20),
        "SPEC: 10 per second, bursts of 20"
    );
    let a = v.trader("100.00");
    let m = v.open_market(SERIES_A);

    // Eight clients at once, until one is limited: the bucket refills 10 a
    // second, so a single client would never reach the limit on a machine
    // whose round trip (one journal sync each) is near 100 ms.
    let stop = std::sync::atomic::AtomicBool::new(false);
    let answers: Vec<Resp> = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..8)
            .map(|_| {
                let (v, m, a, stop) = (&v, &m, &a, &stop);
                scope.spawn(move || {
                    let mut answers = Vec::new();
                    for _ in 0..100 {
                        if stop.load(std::sync::atomic::Ordering::Relaxed) {
                            break;
                        }
                        let resp = v.place(a.key(), &buy(m, "up", "0.01", "1"));
                        if resp.status == 429 {
                            stop.store(true, std::sync::atomic::Ordering::Relaxed);
                        }
                        answers.push(resp);
                    }
                    answers
                })
            })
            .collect();
        clients
            .into_iter()
            .flat_map(|c| c.join().expect("client"))
            .collect()
    });
    let placed: Vec<String> = answers
        .iter()
        .filter(|r| r.status != 429)
        .map(|r| id_of(&r.ok(201)["order"]))
        .collect();
    let limited = answers
        .into_iter()
        .find(|r| r.status == 429)
        .expect("a 429 within 800 orders from 8 clients at once");
    assert!(
        placed.len() >= 20,
        "a burst of 20 is allowed, got {}",
        placed.len()
    );
    limited.err(429, "RATE_LIMITED");
    let retry_after: u64 = limited
        .retry_after
        .as_deref()
        .expect("429 carries Retry-After")
        .parse()
        .expect("Retry-After in whole seconds");
    assert!(retry_after >= 1);

    // A retry of an order already placed is no new order: it returns that
    // order even while new ones are refused (SPEC idempotency rule 1).
    let first_placed = answers_first(&v, &a, &m, &placed[0]);
    // (The bucket refills one order per 100 ms: five retries at once
    // would meet an empty one.)
    for _ in 0..5 {
        assert_eq!(v.place_ok(a.key(), &first_placed.0), first_placed.1);
    }

    // The limit is per key: another key of the account may still place.
    let other = v.issue_key(a.account, json!({ "scopes": "read,trade" }));
    v.place_ok(Some(other.as_str()), &buy(&m, "up", "0.01", "1"));

    // Cancels are never rate limited.
    for id in &placed[..placed.len() - 5] {
        v.delete(&format!("/portfolio/orders/{id}"), a.key())
            .ok(200);
    }
    for _ in 0..30 {
        v.delete(&format!("/portfolio/orders/{}", placed[0]), a.key())
            .ok(200);
    }
    let all = v.delete("/portfolio/orders", a.key()).ok(200).clone();
    assert_eq!(all["canceled_order_ids"].as_array().unwrap().len(), 6);

    // After waiting Retry-After seconds, the key may place again.
    std::thread::sleep(Duration::from_secs(retry_after));
    v.place_ok(a.key(), &buy(&m, "up", "0.01", "1"));
}

/// A venue that locks an address out for 60 s after 3 failed keys.
fn lockout_venue() -> Venue {
    Venue::start_with(|c| {
        c.lockout_failures = 3;
        c.lockout_secs = 60;
    })
}

#[test]
fn repeated_failed_keys_lock_the_address_out_with_429() {
    let v = lockout_venue();
    let a = v.trader("100.00");
    let m = v.open_market(SERIES_A);
    v.get("/account", a.key()).ok(200);

    let bad = [
        "tk_test_nosuchkey_s3cr3t".to_string(),
        format!("tk_test_{}_wrong", a.key.key_id),
        "tk_test_x".to_string(),
    ];
    for key in &bad {
        v.get("/account", Some(key))
            .err_msg(401, "UNAUTHORIZED", "Invalid API key.");
    }
    // Now even a good key from this address is refused for a while.
    let locked = v.get("/account", a.key());
    locked.err(429, "RATE_LIMITED");
    let secs: u64 = locked
        .retry_after
        .as_deref()
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&secs), "{secs}");
    v.place(a.key(), &buy(&m, "up", "0.40", "1"))
        .err(429, "RATE_LIMITED");
    v.get("/account", Some(&bad[0])).err(429, "RATE_LIMITED");
    // Public market data needs no key and is not locked.
    v.get("/markets", None).ok(200);
}

/// Only a key that does not exist (or a wrong secret) counts towards the
/// lockout: a real key refused for what it is (revoked) tests no secret,
/// nor does a request with no key, and a trader's bot retrying either must
/// not lock its own host out.
#[test]
fn a_revoked_key_refused_again_and_again_does_not_lock_the_address() {
    let v = lockout_venue();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    v.revoke(&a.key);
    for _ in 0..6 {
        v.get("/account", a.key())
            .err_msg(401, "UNAUTHORIZED", "This API key has been revoked.");
        v.get("/account", None).err(401, "UNAUTHORIZED");
    }
    v.get("/account", b.key()).ok(200);
}

/// Wrong keys sent at once from one address: no more keys are tested than
/// the lockout allows, however the requests interleave. (Whether they pass
/// the gateway's check before the first failure is counted depends on
/// timing here; `engine::tests` queues them for certain.)
#[test]
fn wrong_keys_sent_at_once_test_no_more_keys_than_the_lockout_allows() {
    let v = lockout_venue();
    let barrier = std::sync::Barrier::new(24);
    let statuses: Vec<u16> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..24)
            .map(|i| {
                let (v, barrier) = (&v, &barrier);
                scope.spawn(move || {
                    let key = format!("tk_test_nosuchkey{i}_s3cr3t");
                    barrier.wait();
                    v.get("/account", Some(&key)).status
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let tested = statuses.iter().filter(|&&s| s == 401).count();
    assert!(
        tested <= 3,
        "{tested} keys were tested past a lockout of 3: {statuses:?}"
    );
    assert!(
        statuses.iter().all(|&s| s == 401 || s == 429),
        "{statuses:?}"
    );
}

#[test]
fn trading_paused_refuses_new_orders_while_cancels_still_work() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let m = v.open_market(SERIES_A);
    let first_body = buy(&m, "up", "0.30", "1");
    let first = v.place_ok(a.key(), &first_body);
    let second = v.place_ok(a.key(), &buy(&m, "up", "0.31", "1"));

    let until = now_ms() + 3_600_000;
    v.admin("/admin/trading/pause", json!({ "until_ts_ms": until }));
    let paused = v.place(a.key(), &buy(&m, "up", "0.40", "1"));
    let retry_after: u64 = paused
        .retry_after
        .as_deref()
        .expect("a pause with an end gives Retry-After")
        .parse()
        .expect("whole seconds");
    assert!((3_590..=3_600).contains(&retry_after), "{retry_after}");
    paused.err_says(503, "TRADING_PAUSED", &[&until.to_string()]);
    // decisions.md: a retry of an order already placed still gets it.
    assert_eq!(id_of(&v.place_ok(a.key(), &first_body)), id_of(&first));
    // Reads and cancels still work.
    v.get("/portfolio/balance", a.key()).ok(200);
    assert_eq!(
        v.delete(&format!("/portfolio/orders/{}", id_of(&first)), a.key())
            .ok(200)["order"]["status"],
        "canceled"
    );
    assert_eq!(
        v.delete("/portfolio/orders", a.key()).ok(200)["canceled_order_ids"],
        json!([id_of(&second)])
    );

    v.admin("/admin/trading/pause", json!({}));
    let paused = v.place(a.key(), &buy(&m, "up", "0.40", "1"));
    assert_eq!(paused.retry_after, None, "no end, no Retry-After");
    paused.err(503, "TRADING_PAUSED");
    v.admin("/admin/trading/resume", json!({}));
    v.place_ok(a.key(), &buy(&m, "up", "0.40", "1"));

    // A pause with an end ends by itself at that time.
    let until = now_ms() + 3_000;
    v.admin("/admin/trading/pause", json!({ "until_ts_ms": until }));
    let refused = v.place(a.key(), &buy(&m, "up", "0.41", "1"));
    // Answered before the end (else this machine stalled for 3 s: the
    // order may rightly have been placed).
    if now_ms() < until {
        refused.err_says(503, "TRADING_PAUSED", &[&until.to_string()]);
    }
    while now_ms() <= until {
        std::thread::sleep(Duration::from_millis(50));
    }
    v.place_ok(a.key(), &buy(&m, "up", "0.41", "1"));
}

// ===== durability and isolation =============================================================================

/// Everything a client can read, for comparing across a restart.
fn snapshot(v: &Venue, key: Option<&str>, markets: &[&str]) -> Value {
    let mut account = v.read("/account", key);
    account["account"]
        .as_object_mut()
        .unwrap()
        .remove("server_time_ms");
    let mut books = serde_json::Map::new();
    for m in markets {
        books.insert(
            m.to_string(),
            json!({
                "market": v.read(&format!("/markets/{m}"), None),
                "orderbook": v.read(&format!("/markets/{m}/orderbook"), None),
                "trades": v.read(&format!("/markets/{m}/trades"), None),
            }),
        );
    }
    json!({
        "orders": v.read("/portfolio/orders", key),
        "fills": v.read("/portfolio/fills", key),
        "positions": v.read("/portfolio/positions", key),
        "balance": v.read("/portfolio/balance", key),
        "account": account,
        "markets": v.read("/markets", None),
        "books": books,
    })
}

#[test]
fn a_restart_keeps_accounts_keys_orders_fills_positions_balances_and_markets() {
    let mut v = Venue::start();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let ma = v.open_market(SERIES_A);
    let mb = v.open_market(SERIES_B);

    let a1_body = buy(&ma, "up", "0.40", "10");
    let a1 = v.place_ok(a.key(), &a1_body);
    let a2 = v.place_ok(a.key(), &buy(&ma, "up", "0.35", "5"));
    v.place_ok(a.key(), &buy(&mb, "down", "0.20", "2"));
    let b1 = v.place_ok(b.key(), &buy(&ma, "down", "0.60", "4"));
    assert_eq!(b1["status"], "executed");
    let revoked = v.issue_key(a.account, json!({ "scopes": "read" }));
    v.revoke(&revoked);
    let suspended = v.trader("1.00");
    v.flags(suspended.account, json!({ "suspended": true }));
    let admin_view = |v: &Venue, id: u64| {
        v.admin_call("GET", &format!("/admin/accounts/{id}"), None)
            .ok(200)
            .clone()
    };

    let before_a = snapshot(&v, a.key(), &[&ma, &mb]);
    let before_b = snapshot(&v, b.key(), &[&ma, &mb]);
    let admin_before = (admin_view(&v, a.account), admin_view(&v, b.account));
    let a1_now = &before_a["orders"]["orders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["order_id"] == a1["order_id"])
        .unwrap()
        .clone();
    assert_eq!(
        (a1_now["status"].clone(), a1_now["fill_count"].clone()),
        (json!("resting"), json!("4"))
    );

    v.restart();

    assert_eq!(snapshot(&v, a.key(), &[&ma, &mb]), before_a);
    assert_eq!(snapshot(&v, b.key(), &[&ma, &mb]), before_b);
    assert_eq!(
        (admin_view(&v, a.account), admin_view(&v, b.account)),
        admin_before
    );
    v.get("/account", Some(revoked.as_str())).err_msg(
        401,
        "UNAUTHORIZED",
        "This API key has been revoked.",
    );
    v.get("/account", suspended.key())
        .err_msg(401, "UNAUTHORIZED", "This account is suspended.");
    v.get("/account", Some("tk_test_nosuchkey_x"))
        .err_msg(401, "UNAUTHORIZED", "Invalid API key.");

    // The resting order is still in the book and trades.
    let b2 = v.place_ok(b.key(), &buy(&ma, "down", "0.60", "6"));
    assert_eq!(b2["status"], "executed");
    assert!(num(&id_of(&b2)) > num(&id_of(&b1)), "ids are never reused");
    let a1_after = v.read(&format!("/portfolio/orders/{}", id_of(&a1)), a.key())["order"].clone();
    assert_eq!(
        (a1_after["status"].clone(), a1_after["fill_count"].clone()),
        (json!("executed"), json!("10"))
    );
    // Idempotency survives the restart.
    assert_eq!(id_of(&v.place_ok(a.key(), &a1_body)), id_of(&a1));
    assert_eq!(
        v.delete(&format!("/portfolio/orders/{}", id_of(&a2)), a.key())
            .ok(200)["order"]["status"],
        "canceled"
    );
    assert_eq!(fills(&v, a.key(), "").0.len(), 2);

    // And once more, with the new state.
    let again = snapshot(&v, a.key(), &[&ma, &mb]);
    v.restart();
    assert_eq!(snapshot(&v, a.key(), &[&ma, &mb]), again);
}

#[test]
fn one_account_never_reads_or_cancels_anothers_orders() {
    let v = Venue::start();
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let m = v.open_market(SERIES_A);
    let theirs = v.place_ok(a.key(), &order(&m, "up", "buy", "0.40", "10", "shared-id"));
    let id = id_of(&theirs);

    v.get(&format!("/portfolio/orders/{id}"), b.key())
        .err(404, "ORDER_NOT_FOUND");
    v.delete(&format!("/portfolio/orders/{id}"), b.key())
        .err(404, "ORDER_NOT_FOUND");
    assert!(v.orders(b.key(), "").is_empty());
    assert!(v.orders(b.key(), "?client_order_id=shared-id").is_empty());
    assert!(v.orders(b.key(), &format!("?market_ticker={m}")).is_empty());
    assert_eq!(
        v.delete("/portfolio/orders", b.key()).ok(200)["canceled_order_ids"],
        json!([])
    );
    assert_eq!(
        v.delete(&format!("/portfolio/orders?market_ticker={m}"), b.key())
            .ok(200)["canceled_order_ids"],
        json!([])
    );
    assert_eq!(
        v.read(&format!("/portfolio/orders/{id}"), a.key())["order"],
        theirs,
        "untouched"
    );

    // The same client_order_id is B's own, separate order.
    let mine = v.place_ok(b.key(), &order(&m, "up", "buy", "0.40", "10", "shared-id"));
    assert_ne!(id_of(&mine), id);
    assert_eq!(ids(&v.orders(b.key(), ""), "order_id"), [id_of(&mine)]);
    assert_eq!(ids(&v.orders(a.key(), ""), "order_id"), [id]);
    // B's key never sees A's fills, positions or balance.
    let c = v.trader("100.00");
    v.place_ok(c.key(), &buy(&m, "down", "0.60", "10"));
    assert!(fills(&v, b.key(), "").0.is_empty());
    assert!(positions(&v, b.key()).is_empty());
    assert_balance(&v, b.key(), "100.00", "4.20", "95.80");
    assert_eq!(fills(&v, a.key(), "").0.len(), 1);
}

#[test]
fn unreadable_path_segments_and_stray_query_parameters_get_the_error_shape() {
    let v = Venue::start();
    let t = v.trader("100.00");
    // %FF is not UTF-8: an order id that cannot be read is no order.
    v.get("/portfolio/orders/%FF", t.key())
        .err(404, "ORDER_NOT_FOUND");
    v.delete("/portfolio/orders/%FF", t.key())
        .err(404, "ORDER_NOT_FOUND");
    v.get("/markets/%FF", None).err(400, "BAD_REQUEST");
    v.get("/markets/%FF/orderbook", None)
        .err(400, "BAD_REQUEST");
    // Endpoints that take no query parameters refuse them like the others.
    v.get("/account?x=1", t.key()).err(400, "BAD_REQUEST");
    v.get("/portfolio/orders/1?x=1", t.key())
        .err(400, "BAD_REQUEST");
    v.delete("/portfolio/orders/1?x=1", t.key())
        .err(400, "BAD_REQUEST");
    let market = v.open_market(SERIES_A);
    v.post(
        "/portfolio/orders?x=1",
        t.key(),
        &buy(&market, "up", "0.40", "1"),
    )
    .err(400, "BAD_REQUEST");
}

fn metric(v: &Venue, name: &str) -> u64 {
    let text = v.call_root("GET", "/metrics").text;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"))
}

/// Connections past the cap for one address are answered 429 in the API's
/// error shape and closed, without a request read; closing some lets new
/// ones in. (A security trial held every descriptor of the venue with
/// 20,000 idle connections from one host.)
#[test]
fn connections_past_the_cap_for_an_address_are_refused_with_429() {
    use std::io::Read;
    let v = Venue::start_with(|c| c.http_connections_per_address = 6);
    // Six held, then a seventh: the server accepts in the order of the
    // connects, so the seventh is the one refused, whenever it gets to it.
    let held: Vec<std::net::TcpStream> = (0..6)
        .map(|_| std::net::TcpStream::connect(v.addr()).unwrap())
        .collect();
    let mut seventh = std::net::TcpStream::connect(v.addr()).unwrap();
    seventh
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut refusal = String::new();
    seventh.read_to_string(&mut refusal).unwrap();
    assert!(refusal.starts_with("HTTP/1.1 429 "), "{refusal}");
    // Accepted before it, the six were not refused: nothing came on them.
    for mut stream in &held {
        stream.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        let read = stream.read(&mut byte);
        assert!(
            matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
            "a held connection got {read:?}"
        );
    }
    let body: Value = serde_json::from_str(refusal.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(body["code"], "RATE_LIMITED");
    drop(held);
    // Refused before any request was read, it is still counted. A read of
    // the metrics made before the server has seen the six close is itself
    // refused (and counted): the count is the seventh plus those.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut refused_reads = 0;
    loop {
        let resp = v.call_root("GET", "/metrics");
        if resp.status == 429 {
            refused_reads += 1;
        } else {
            let want = format!(
                "updown_http_connections_refused_total{{cap=\"address\"}} {}",
                1 + refused_reads
            );
            if resp.text.lines().any(|l| l == want) {
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the refusal is not counted ({refused_reads} reads refused):\n{}",
            resp.text
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while v.get("/markets", None).status != 200 {
        assert!(Instant::now() < deadline, "still refused after closing");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A connection that sends nothing is closed after the idle time.
#[test]
fn an_idle_connection_is_closed() {
    use std::io::Read;
    let v = Venue::start_with(|c| {
        c.http_idle_timeout_secs = 1;
        c.ws_ping_interval_ms = 400;
    });
    // Before the connect: the server's idle time may start before this
    // thread runs again.
    let started = Instant::now();
    let mut stream = std::net::TcpStream::connect(v.addr()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf).unwrap_or(0);
    assert_eq!(n, 0, "closed without an answer");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(8),
        "closed after {waited:?}"
    );
}

/// Under `always` the journal syncs every command itself, before the
/// commit stage: the sync metric counts those too (it stayed at 0).
#[test]
fn the_sync_metric_counts_the_journals_own_syncs() {
    let v = Venue::start_with(|c| c.durability = gateway::config::DurabilityPolicy::Always);
    let a = v.trader("100.00");
    let market = v.open_market(SERIES_A);
    let syncs_before = metric(&v, "updown_journal_syncs_total");
    for i in 0..5 {
        v.place_ok(a.key(), &buy(&market, "up", &format!("0.3{i}"), "1"));
    }
    let syncs = metric(&v, "updown_journal_syncs_total") - syncs_before;
    assert!(syncs >= 5, "{syncs} syncs for 5 orders");
}

/// Group commit, pipelined: an answered order was synced by the commit
/// thread first (the sync counter moved), the answer's bytes are the Order
/// record the reads give, and the order is there after a restart.
#[test]
fn answers_leave_after_the_journal_sync_and_match_the_reads() {
    let mut v = Venue::start();
    let a = v.trader("100.00");
    let market = v.open_market(SERIES_A);
    let syncs_before = metric(&v, "updown_journal_syncs_total");
    let placed = v.place_ok(a.key(), &buy(&market, "up", "0.31", "3"));
    assert!(metric(&v, "updown_journal_syncs_total") > syncs_before);
    assert_order_shape(&placed);
    let read = v.read(&format!("/portfolio/orders/{}", id_of(&placed)), a.key());
    assert_eq!(
        read["order"], placed,
        "the write's answer is the read's record"
    );
    let canceled = v.delete(&format!("/portfolio/orders/{}", id_of(&placed)), a.key());
    let canceled = canceled.ok(200)["order"].clone();
    assert_eq!(canceled["status"], "canceled");
    v.restart();
    let after = v.read(&format!("/portfolio/orders/{}", id_of(&placed)), a.key());
    assert_eq!(after["order"], canceled);
}

/// The operator's token file is the owner's alone: a loosened one is set
/// back to 0600 at start, and the token in it keeps working.
#[test]
fn a_loosened_admin_token_file_is_tightened_at_start() {
    use std::os::unix::fs::PermissionsExt;
    let mut v = Venue::start();
    let path = gateway::server::admin_token_path(&v.config.data_dir);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&path), 0o600);
    let token = std::fs::read_to_string(&path).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    v.restart();
    assert_eq!(mode(&path), 0o600, "tightened at start");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), token, "same token");
    v.create_account("1.00");
}

/// Every metric README.md names is on /metrics.
#[test]
fn the_metrics_the_readme_names_are_served() {
    let v = Venue::start();
    let a = v.trader("10.00");
    v.read("/portfolio/balance", a.key());
    let served = v.call_root("GET", "/metrics").text;
    let readme = include_str!("../../README.md");
    let mut named = 0;
    for word in readme.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("updown_") {
            named += 1;
            assert!(
                served.lines().any(|l| l.starts_with(word)),
                "README names {word}, /metrics has no such metric:\n{served}"
            );
        }
    }
    assert!(named >= 15, "the README's metrics table: {named} names");
    // Requests are counted by method as well as route: reading the
    // balance and placing an order are apart from listing and cancelling
    // (one route each). The latency summary has its `_sum`, equal to or
    // over its count in microseconds.
    let get = r#"method="GET",route="/v1/portfolio/balance""#;
    assert!(
        served.lines().any(|l| l.starts_with(&format!(
            "updown_http_requests_total{{{get},status=\"200\"}}"
        ))),
        "{served}"
    );
    let value = |name: &str| -> u64 {
        served
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}{{{get}}} "))?.parse().ok())
            .unwrap_or_else(|| panic!("{name} of {get}:\n{served}"))
    };
    let count = value("updown_http_latency_us_count");
    assert!(count >= 1 && value("updown_http_latency_us_sum") >= count);
}

// ----- the history tail --------------------------------------------------------------

/// With a one-second history tail, ended orders and fills leave the live
/// state; reading them by id or paging back through fills gives exactly
/// what the live state gave, from the history store, and only to their
/// account; a restart keeps them.
#[test]
fn orders_and_fills_past_the_history_tail_come_from_the_history_store() {
    let mut v = Venue::start_with(|c| c.history_tail_secs = 1);
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let m = v.open_market(SERIES_A);
    let mut makers = Vec::new();
    for _ in 0..3 {
        makers.push(v.place_ok(a.key(), &buy(&m, "up", "0.40", "1")));
        let taker = v.place_ok(b.key(), &buy(&m, "down", "0.60", "1"));
        assert_eq!(taker["status"], "executed");
    }
    let resting = v.place_ok(a.key(), &buy(&m, "up", "0.10", "1"));
    let order_path = |o: &Value| format!("/portfolio/orders/{}", id_of(o));
    let before: Vec<Value> = makers
        .iter()
        .map(|o| v.read(&order_path(o), a.key())["order"].clone())
        .collect();
    let (fills_before, cursor) = fills(&v, a.key(), "");
    assert_eq!((fills_before.len(), cursor.as_str()), (3, ""));

    // Past the tail (a print makes the venue evict on its time).
    std::thread::sleep(Duration::from_millis(1_300));
    v.push_price("100.00");
    let listed = ids(&v.orders(a.key(), ""), "order_id");
    assert_eq!(
        listed,
        vec![id_of(&resting)],
        "only the live order is listed"
    );

    let check = |v: &Venue| {
        for (maker, was) in makers.iter().zip(&before) {
            assert_eq!(&v.read(&order_path(maker), a.key())["order"], was);
            // Only to its own account.
            v.get(&order_path(maker), b.key())
                .err(404, "ORDER_NOT_FOUND");
            // A retried cancel is always safe (DESIGN §5): the order as
            // it stands, from the store; to its own account only.
            let canceled = v.delete(&order_path(maker), a.key());
            assert_eq!(&canceled.ok(200)["order"], was);
            v.delete(&order_path(maker), b.key())
                .err(404, "ORDER_NOT_FOUND");
        }
        let (all, cursor) = fills(v, a.key(), "?limit=10");
        assert_eq!(
            (all.as_slice(), cursor.as_str()),
            (fills_before.as_slice(), "")
        );
        let (first, cursor) = fills(v, a.key(), "?limit=2");
        assert_eq!(first.as_slice(), &fills_before[..2]);
        let (second, end) = fills(v, a.key(), &format!("?limit=2&cursor={cursor}"));
        assert_eq!((second.as_slice(), end.as_str()), (&fills_before[2..], ""));
        let (same, _) = fills(v, a.key(), &format!("?market_ticker={m}"));
        assert_eq!(same, fills_before);
        let other = v.scheduled_market(SERIES_A);
        let (other, _) = fills(v, a.key(), &format!("?market_ticker={other}"));
        assert!(other.is_empty());
    };
    check(&v);

    // A new fill pages ahead of the stored ones.
    v.place_ok(b.key(), &buy(&m, "down", "0.90", "1"));
    let (now, _) = fills(&v, a.key(), "?limit=10");
    assert_eq!(now.len(), 4);
    assert_eq!(&now[1..], fills_before.as_slice());

    // The store survives a restart; the live tail is rebuilt by replay.
    v.restart();
    let (after, _) = fills(&v, a.key(), "?limit=10");
    assert_eq!(after, now);
    for (maker, was) in makers.iter().zip(&before) {
        assert_eq!(&v.read(&order_path(maker), a.key())["order"], was);
    }

    // The store is derived from the journal: lost, it is rebuilt at start
    // (no snapshot past what the store holds is used, so replay starts
    // from seq 1 and evicts again).
    v.restart_with(|c| {
        std::fs::remove_dir_all(c.data_dir.join("history")).expect("remove the store");
    });
    let (rebuilt, _) = fills(&v, a.key(), "?limit=10");
    assert_eq!(rebuilt, now);
    for (maker, was) in makers.iter().zip(&before) {
        assert_eq!(&v.read(&order_path(maker), a.key())["order"], was);
    }

    // One file of the store lost or cut short, the rest in place: the
    // store is emptied and written anew (an operator trial: a lost
    // `orders.dat` answered every stored order 404, "no such order").
    let history = v.config.data_dir.join("history");
    let cut = |name: &str, len: u64| {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(history.join(name))
            .expect("store file");
        file.set_len(len).expect("cut");
    };
    for damage in 0..3 {
        v.restart_with(|_| match damage {
            0 => std::fs::remove_file(history.join("orders.dat")).expect("remove"),
            1 => cut("orders.dat", 300),
            _ => cut("fills.dat", 0),
        });
        let (rebuilt, _) = fills(&v, a.key(), "?limit=10");
        assert_eq!(rebuilt, now, "damage {damage}");
        for (maker, was) in makers.iter().zip(&before) {
            assert_eq!(
                &v.read(&order_path(maker), a.key())["order"],
                was,
                "damage {damage}"
            );
        }
    }

    // Bytes of a stored order changed in place: its reads answer 503
    // (never 404), and the next start writes the store anew.
    let stored: u64 = id_of(&makers[0]).parse().expect("order id");
    v.restart_with(|_| {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(history.join("orders.dat"))
            .expect("orders.dat");
        let at = (stored - 1) * replay::history::ORDER_SLOT as u64 + 20;
        let mut byte = [0u8; 1];
        file.read_exact_at(&mut byte, at).expect("read");
        file.write_all_at(&[byte[0] ^ 0x40], at).expect("write");
    });
    v.get(&order_path(&makers[0]), a.key())
        .err(503, "EXCHANGE_UNAVAILABLE");
    assert!(
        history.join("damaged").exists(),
        "the damage is not recorded"
    );
    v.restart();
    assert!(!history.join("damaged").exists());
    for (maker, was) in makers.iter().zip(&before) {
        assert_eq!(&v.read(&order_path(maker), a.key())["order"], was);
    }
}

/// A settled market's public trades leave the live state with its book one
/// tail after settlement; `GET /markets/{ticker}/trades` then pages them
/// from the history store exactly as it did before. Needs a 1-minute
/// window to close: up to a minute of waiting.
#[test]
fn a_settled_markets_trades_past_the_tail_come_from_the_history_store() {
    // Trade in a window with at least 40 s left (a loaded machine may take
    // many seconds to start a venue and place six orders).
    while now_ms() % 60_000 > 20_000 {
        std::thread::sleep(Duration::from_millis(200));
    }
    let v = Venue::start_with(|c| {
        c.history_tail_secs = 1;
        c.series[0].window_minutes = 1;
        c.series.truncate(1);
    });
    let a = v.trader("100.00");
    let b = v.trader("100.00");
    let m = v.open_market(SERIES_A);
    for price in ["0.40", "0.41", "0.42"] {
        v.place_ok(a.key(), &buy(&m, "up", price, "1"));
        v.place_ok(b.key(), &buy(&m, "down", "0.70", "1"));
    }
    let path = format!("/markets/{m}/trades");
    let before = v.read(&format!("{path}?limit=100"), None);
    let trades = before["trades"].as_array().expect("trades").clone();
    assert_eq!(trades.len(), 3, "{before}");
    let first = v.read(&format!("{path}?limit=2"), None);
    let cursor = first["cursor"].as_str().expect("cursor").to_string();
    assert!(!cursor.is_empty());

    // Wait for the window to close, print after the close so it settles,
    // then let the tail pass and print again so the venue evicts.
    let market = |v: &Venue| v.read(&format!("/markets/{m}"), None)["market"].clone();
    let close = market(&v)["close_ts_ms"].as_u64().expect("close_ts_ms");
    while now_ms() < close + 50 {
        std::thread::sleep(Duration::from_millis(100));
    }
    v.push_price("97001.00");
    assert_eq!(market(&v)["status"], "settled", "{}", market(&v));
    std::thread::sleep(Duration::from_millis(1_300));
    v.push_price("97002.00");

    // The same pages, from the store.
    assert_eq!(v.read(&format!("{path}?limit=100"), None), before);
    assert_eq!(v.read(&format!("{path}?limit=2"), None), first);
    let rest = v.read(&format!("{path}?limit=2&cursor={cursor}"), None);
    assert_eq!(
        rest["trades"].as_array().expect("trades").as_slice(),
        &trades[2..]
    );
    assert_eq!(rest["cursor"], "");
    // Its book is empty and the market record unchanged in shape.
    let book = v.read(&format!("/markets/{m}/orderbook"), None);
    assert_eq!(book["orderbook"]["up"], json!([]), "{book}");
    assert_eq!(market(&v)["status"], "settled");
}

/// A history tail under a second is refused at start, naming the setting.
#[test]
fn a_history_tail_under_a_second_is_refused_at_start() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut config = support::config(dir.path());
    config.history_tail_secs = 0;
    let Err(e) = gateway::server::Server::start(config) else {
        panic!("a zero history tail was accepted");
    };
    let message = e.to_string();
    assert!(
        message.contains("history_tail_secs") && message.contains("at least"),
        "{message}"
    );
}
