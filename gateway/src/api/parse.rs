//! Checking request bodies and query strings against the spec, field by
//! field, so every refusal names the field. The patterns themselves live in
//! `sequencer::validate`, once.

use std::collections::BTreeMap;

use sequencer::types::{
    Action, ClientOrderId, MarketStatus, OrderStatus, Outcome, PriceCents, TimeInForce,
};
use sequencer::validate::{
    count_in_range, count_refusal, is_market_ticker, is_series_ticker, parse_count, parse_price,
    range_refusal, CLIENT_ORDER_ID_REFUSAL, PRICE_REFUSAL,
};
use serde_json::Value;

use crate::error::ApiError;

/// An order body after its shape is checked; the market is still a ticker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderBody {
    pub market_ticker: String,
    pub outcome: Outcome,
    pub action: Action,
    pub price: PriceCents,
    pub count: u32,
    pub time_in_force: TimeInForce,
    pub post_only: bool,
    pub client_order_id: ClientOrderId,
}

/// Digits of a cursor at most (`openapi.json` says the same): every cursor
/// allowed fits in 64 bits.
const CURSOR_DIGITS_MAX: usize = 19;

const ORDER_FIELDS: [&str; 8] = [
    "market_ticker",
    "outcome",
    "action",
    "price",
    "count",
    "time_in_force",
    "post_only",
    "client_order_id",
];

/// Parses POST /portfolio/orders.
pub fn order_body(bytes: &[u8]) -> Result<OrderBody, ApiError> {
    let value: Value = serde_json::from_slice(bytes)
        .map_err(|e| ApiError::bad_request(format!("The body is not valid JSON: {e}.")))?;
    let Value::Object(map) = value else {
        return Err(ApiError::bad_request("The body must be a JSON object."));
    };
    if let Some(unknown) = map.keys().find(|k| !ORDER_FIELDS.contains(&k.as_str())) {
        return Err(ApiError::bad_request(format!(
            "Unknown field {unknown}: the order body allows no other properties."
        )));
    }
    let text = |field: &str, required: bool| -> Result<Option<&str>, ApiError> {
        match map.get(field) {
            None if required => Err(ApiError::bad_request(format!("Missing field {field}."))),
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(_) => Err(ApiError::bad_request(format!(
                "Field {field} must be a string."
            ))),
        }
    };
    let market_ticker = text("market_ticker", true)?.unwrap_or_default();
    if !is_market_ticker(market_ticker) {
        return Err(ApiError::bad_request(
            "Field market_ticker does not match the market ticker pattern.",
        ));
    }
    let outcome = Outcome::parse(text("outcome", true)?.unwrap_or_default())
        .ok_or_else(|| ApiError::bad_request("Field outcome must be up or down."))?;
    let action = Action::parse(text("action", true)?.unwrap_or_default())
        .ok_or_else(|| ApiError::bad_request("Field action must be buy or sell."))?;
    let price = parse_price(text("price", true)?.unwrap_or_default())
        .ok_or_else(|| ApiError::bad_request(PRICE_REFUSAL))?;
    let count_text = text("count", true)?.unwrap_or_default();
    let count = parse_count(count_text).ok_or_else(|| {
        ApiError::bad_request("Field count must be a string of whole contracts, such as \"10\".")
    })?;
    if !count_in_range(count) {
        return Err(ApiError::bad_request(count_refusal()));
    }
    let time_in_force = match text("time_in_force", false)? {
        None => TimeInForce::GoodTillCanceled,
        Some(t) => TimeInForce::parse(t).ok_or_else(|| {
            ApiError::bad_request(
                "Field time_in_force must be good_till_canceled or immediate_or_cancel.",
            )
        })?,
    };
    let post_only = match map.get("post_only") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::bad_request("Field post_only must be a boolean.")),
    };
    let client_order_id = ClientOrderId::new(text("client_order_id", true)?.unwrap_or_default())
        .ok_or_else(|| ApiError::bad_request(CLIENT_ORDER_ID_REFUSAL))?;
    Ok(OrderBody {
        market_ticker: market_ticker.to_string(),
        outcome,
        action,
        price,
        count: count as u32,
        time_in_force,
        post_only,
        client_order_id,
    })
}

/// Query parameters as given, refusing unknown names.
pub struct Params(BTreeMap<String, String>);

impl Params {
    /// Parses a raw query string, allowing only `allowed` names, each once.
    pub fn parse(raw: Option<&str>, allowed: &[&str]) -> Result<Self, ApiError> {
        let mut map = BTreeMap::new();
        for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode(name)?;
            let value = decode(value)?;
            if !allowed.contains(&name.as_str()) {
                return Err(ApiError::bad_request(format!(
                    "Unknown query parameter {name}; allowed: {}.",
                    allowed.join(", ")
                )));
            }
            if map.insert(name.clone(), value).is_some() {
                return Err(ApiError::bad_request(format!(
                    "Query parameter {name} is given twice."
                )));
            }
        }
        Ok(Self(map))
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    pub fn market_ticker(&self, name: &str) -> Result<Option<String>, ApiError> {
        match self.get(name) {
            Some(t) if !is_market_ticker(t) => Err(ApiError::bad_request(format!(
                "Parameter {name} does not match the market ticker pattern."
            ))),
            other => Ok(other.map(str::to_string)),
        }
    }

    pub fn series_ticker(&self, name: &str) -> Result<Option<String>, ApiError> {
        match self.get(name) {
            Some(t) if !is_series_ticker(t) => Err(ApiError::bad_request(format!(
                "Parameter {name} does not match the series ticker pattern."
            ))),
            other => Ok(other.map(str::to_string)),
        }
    }

    /// An integer in `min..=max`.
    pub fn bounded(&self, name: &str, min: u32, max: u32) -> Result<Option<u32>, ApiError> {
        let Some(text) = self.get(name) else {
            return Ok(None);
        };
        match parse_count(text) {
            Some(n) if n >= u64::from(min) && n <= u64::from(max) => Ok(Some(n as u32)),
            _ => Err(ApiError::bad_request(range_refusal(name, min, max))),
        }
    }

    /// A cursor `^\d+$` of at most `CURSOR_DIGITS_MAX` digits.
    pub fn cursor(&self) -> Result<Option<u64>, ApiError> {
        let Some(text) = self.get("cursor") else {
            return Ok(None);
        };
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ApiError::bad_request("Parameter cursor must match ^\\d+$."));
        }
        if text.len() > CURSOR_DIGITS_MAX {
            return Err(ApiError::bad_request(format!(
                "Parameter cursor has at most {CURSOR_DIGITS_MAX} digits."
            )));
        }
        text.parse()
            .map(Some)
            .map_err(|_| ApiError::bad_request("Parameter cursor is out of range."))
    }

    pub fn order_status(&self) -> Result<Option<OrderStatus>, ApiError> {
        match self.get("status") {
            None => Ok(None),
            Some(s) => OrderStatus::parse(s).map(Some).ok_or_else(|| {
                ApiError::bad_request("Parameter status must be resting, executed or canceled.")
            }),
        }
    }

    pub fn market_status(&self) -> Result<Option<MarketStatus>, ApiError> {
        match self.get("status") {
            None => Ok(None),
            Some(s) => MarketStatus::parse(s).map(Some).ok_or_else(|| {
                ApiError::bad_request(
                    "Parameter status must be scheduled, open, closed or settled.",
                )
            }),
        }
    }

    pub fn client_order_id(&self) -> Result<Option<ClientOrderId>, ApiError> {
        match self.get("client_order_id") {
            None => Ok(None),
            Some(s) => ClientOrderId::new(s).map(Some).ok_or_else(|| {
                ApiError::bad_request(
                    "Parameter client_order_id must match ^[A-Za-z0-9._:-]{1,64}$.",
                )
            }),
        }
    }
}

/// Percent-decoding of one query component (`+` is a space).
pub fn decode(text: &str) -> Result<String, ApiError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| {
                        ApiError::bad_request("The query string has a bad percent escape.")
                    })?;
                out.push(byte);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).map_err(|_| ApiError::bad_request("The query string is not UTF-8."))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(text: &str) -> Result<OrderBody, String> {
        order_body(text.as_bytes()).map_err(|e| e.message)
    }

    const GOOD: &str = r#"{"market_ticker":"btc-1m-261121-2100-2101","outcome":"up","action":"buy","price":"0.55","count":"10","client_order_id":"a1"}"#;

    #[test]
    fn a_good_body_parses_with_defaults() {
        let order = body(GOOD).unwrap();
        assert_eq!(order.price, 55);
        assert_eq!(order.count, 10);
        assert_eq!(order.time_in_force, TimeInForce::GoodTillCanceled);
        assert!(!order.post_only);
    }

    #[test]
    fn every_bad_field_is_named() {
        let cases = [
            (r#"{"x":1}"#, "Unknown field x"),
            ("[]", "JSON object"),
            ("{", "not valid JSON"),
            (
                &GOOD.replace(r#""price":"0.55""#, r#""price":0.55"#),
                "price must be a string",
            ),
            (&GOOD.replace("0.55", "0.555"), "Field price"),
            (
                &GOOD.replace(r#""count":"10""#, r#""count":"10001""#),
                "Field count must be 1 to 10000",
            ),
            (
                &GOOD.replace(r#""count":"10""#, r#""count":"0""#),
                "Field count must be 1",
            ),
            (
                &GOOD.replace(r#""count":"10""#, r#""count":"010""#),
                "Field count must be a string",
            ),
            (&GOOD.replace("\"up\"", "\"sideways\""), "Field outcome"),
            (&GOOD.replace("\"buy\"", "\"hold\""), "Field action"),
            (&GOOD.replace("a1", "bad id"), "Field client_order_id"),
            (
                &GOOD.replace("btc-1m-261121-2100-2101", "BTC"),
                "Field market_ticker",
            ),
            (
                &GOOD.replace(r#","client_order_id":"a1""#, ""),
                "Missing field client_order_id",
            ),
            (
                &GOOD.replace('}', r#","post_only":"yes"}"#),
                "post_only must be a boolean",
            ),
            (
                &GOOD.replace('}', r#","time_in_force":"fok"}"#),
                "time_in_force",
            ),
        ];
        for (text, expected) in cases {
            let message = body(text).unwrap_err();
            assert!(message.contains(expected), "{text}: {message}");
        }
    }

    #[test]
    fn query_parameters() {
        let params = Params::parse(
            Some("limit=5&cursor=12&market_ticker=btc-1m-261121-2100-2101"),
            &["limit", "cursor", "market_ticker"],
        )
        .unwrap();
        assert_eq!(params.bounded("limit", 1, 500).unwrap(), Some(5));
        assert_eq!(params.cursor().unwrap(), Some(12));
        assert!(Params::parse(Some("nope=1"), &["limit"]).is_err());
        assert!(Params::parse(Some("limit=1&limit=2"), &["limit"]).is_err());
        let bad = Params::parse(Some("limit=501&cursor=x1"), &["limit", "cursor"]).unwrap();
        assert!(bad.bounded("limit", 1, 500).is_err());
        assert!(bad.cursor().is_err());
        assert_eq!(decode("a%2Fb+c").unwrap(), "a/b c");
    }
}
