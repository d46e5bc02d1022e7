//! `POST /v1/portfolio/orders` bodies: `gateway::api::parse::order_body` on
//! arbitrary bytes never panics, and what it accepts is within the spec
//! and reads back the same once written out again.
#![no_main]

use gateway::api::parse::order_body;
use libfuzzer_sys::fuzz_target;
use sequencer::limits::{ORDER_COUNT_MAX, ORDER_COUNT_MIN};
use sequencer::validate::is_market_ticker;

fuzz_target!(|data: &[u8]| {
    let Ok(order) = order_body(data) else {
        return;
    };
    assert!((1..=99).contains(&order.price), "price {}", order.price);
    assert!(
        (ORDER_COUNT_MIN..=ORDER_COUNT_MAX).contains(&order.count),
        "count {}",
        order.count
    );
    assert!(is_market_ticker(&order.market_ticker));
    assert!(order.client_order_id.is_valid());
    let again = serde_json::json!({
        "market_ticker": order.market_ticker,
        "outcome": order.outcome.as_str(),
        "action": order.action.as_str(),
        "price": format!("0.{:02}", order.price),
        "count": order.count.to_string(),
        "time_in_force": order.time_in_force.as_str(),
        "post_only": order.post_only,
        "client_order_id": order.client_order_id.as_str(),
    })
    .to_string();
    assert_eq!(order_body(again.as_bytes()).ok(), Some(order));
});
