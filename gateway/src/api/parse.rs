//! Checking request bodies and query strings against the spec, field by
//! field, so every refusal names the field. The patterns themselves live in
//! `sequencer::validate`, once.

use std::borrow::Cow;
use std::collections::BTreeMap;

use sequencer::types::{
    Action, ClientOrderId, MarketStatus, OrderStatus, Outcome, PriceCents, TimeInForce,
};
use sequencer::validate::{
    count_in_range, count_refusal, is_market_ticker, is_series_ticker, parse_count, parse_price,
    range_refusal, CLIENT_ORDER_ID_REFUSAL, PRICE_REFUSAL,
};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
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
///
/// The body is read straight into the eight fields it may have, its
/// strings borrowed from the bytes (copied only when they hold escapes), not
/// into a `serde_json::Value` first: a map and a string per key and value
/// were some 17 allocations and frees per order on the gateway thread. The
/// answers are those of reading a `Value` and checking it (a test compares
/// the two on thousands of bodies): invalid JSON anywhere first, then a
/// body that is not an object, then the unknown field first in byte order,
/// then each field in the order below; of a field given twice, the last.
pub fn order_body(bytes: &[u8]) -> Result<OrderBody, ApiError> {
    let Top {
        object,
        fields,
        unknown,
    } = serde_json::from_slice(bytes).map_err(not_json)?;
    if !object {
        return Err(not_object());
    }
    if let Some(unknown) = unknown {
        return Err(unknown_field(&unknown));
    }
    order_fields(|name| {
        let at = ORDER_FIELDS.iter().position(|f| *f == name)?;
        fields[at].as_ref().map(|value| match value {
            Scalar::Str(s) => Field::Str(s),
            Scalar::Bool(b) => Field::Bool(*b),
            Scalar::Other => Field::Other,
        })
    })
}

fn not_json(e: serde_json::Error) -> ApiError {
    ApiError::bad_request(format!("The body is not valid JSON: {e}."))
}

fn not_object() -> ApiError {
    ApiError::bad_request("The body must be a JSON object.")
}

fn unknown_field(name: &str) -> ApiError {
    ApiError::bad_request(format!(
        "Unknown field {name}: the order body allows no other properties."
    ))
}

/// A field of an order body as its checks see it.
enum Field<'a> {
    Str(&'a str),
    Bool(bool),
    Other,
}

/// Checks an order's fields, each found by `field`, in a fixed order.
fn order_fields<'a>(field: impl Fn(&str) -> Option<Field<'a>>) -> Result<OrderBody, ApiError> {
    let text = |name: &str, required: bool| -> Result<Option<&'a str>, ApiError> {
        match field(name) {
            None if required => Err(ApiError::bad_request(format!("Missing field {name}."))),
            None => Ok(None),
            Some(Field::Str(s)) => Ok(Some(s)),
            Some(_) => Err(ApiError::bad_request(format!(
                "Field {name} must be a string."
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
    let post_only = match field("post_only") {
        None => false,
        Some(Field::Bool(b)) => b,
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

/// A JSON string, borrowed from the body unless it held escapes.
struct Text<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(s)))
            }
        }
        d.deserialize_str(V)
    }
}

/// A field's value as far as an order needs it: a string, a boolean, or
/// anything else (read whole, as a `Value` would be, and dropped).
enum Scalar<'a> {
    Str(Cow<'a, str>),
    Bool(bool),
    Other,
}

/// Takes any JSON value; keeps strings and booleans.
struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Borrowed(s)))
    }
    fn visit_str<E: de::Error>(self, s: &str) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(s.to_owned())))
    }
    fn visit_string<E: de::Error>(self, s: String) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Str(Cow::Owned(s)))
    }
    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Bool(b))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar<'de>, A::Error> {
        while seq.next_element::<Value>()?.is_some() {}
        Ok(Scalar::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar<'de>, A::Error> {
        while map.next_entry::<String, Value>()?.is_some() {}
        Ok(Scalar::Other)
    }
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

/// The whole body: whether it is an object, and if so its order fields
/// (by `ORDER_FIELDS`) and its first unknown key in byte order.
struct Top<'a> {
    object: bool,
    fields: [Option<Scalar<'a>>; ORDER_FIELDS.len()],
    unknown: Option<String>,
}

impl Top<'_> {
    fn not_object() -> Self {
        Top {
            object: false,
            fields: Default::default(),
            unknown: None,
        }
    }
}

impl<'de> Deserialize<'de> for Top<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Top<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Top<'de>, A::Error> {
                let mut fields: [Option<Scalar<'de>>; ORDER_FIELDS.len()] = Default::default();
                let mut unknown: Option<String> = None;
                while let Some(Text(key)) = map.next_key::<Text<'de>>()? {
                    match ORDER_FIELDS.iter().position(|f| *f == key) {
                        Some(at) => fields[at] = Some(map.next_value::<Scalar<'de>>()?),
                        None => {
                            map.next_value::<Value>()?;
                            if unknown.as_deref().is_none_or(|u| *key < *u) {
                                unknown = Some(key.into_owned());
                            }
                        }
                    }
                }
                Ok(Top {
                    object: true,
                    fields,
                    unknown,
                })
            }
            fn visit_borrowed_str<E: de::Error>(self, _: &'de str) -> Result<Top<'de>, E> {
                Ok(Top::not_object())
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Top<'de>, E> {
                Ok(Top::not_object())
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Top<'de>, E> {
                Ok(Top::not_object())
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Top<'de>, E> {
                Ok(Top::not_object())
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Top<'de>, E> {
                Ok(Top::not_object())
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Top<'de>, E> {
                Ok(Top::not_object())
            }
            fn visit_unit<E: de::Error>(self) -> Result<Top<'de>, E> {
                Ok(Top::not_object())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Top<'de>, A::Error> {
                while seq.next_element::<Value>()?.is_some() {}
                Ok(Top::not_object())
            }
        }
        d.deserialize_any(V)
    }
}

/// The refusal of a name (`what`: "query parameter", "field") that is not
/// one of `allowed`, listing those that are, or saying there are none.
pub fn unknown_name(what: &str, name: &str, allowed: &[&str]) -> ApiError {
    ApiError::bad_request(if allowed.is_empty() {
        format!("Unknown {what} {name}: this request takes none.")
    } else {
        format!("Unknown {what} {name}; allowed: {}.", allowed.join(", "))
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
                return Err(unknown_name("query parameter", &name, allowed));
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
        if text.is_empty() {
            // What the last page answers: passed back by a client that
            // does not stop there.
            return Err(ApiError::bad_request(
                "Parameter cursor must match ^\\d+$; an empty cursor in a page means there are no more pages.",
            ));
        }
        if !text.bytes().all(|b| b.is_ascii_digit()) {
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

    /// The parser before it read fields in place: the body into a
    /// `Value`, then checked. The oracle of the differential test.
    fn order_body_by_value(bytes: &[u8]) -> Result<OrderBody, ApiError> {
        let value: Value = serde_json::from_slice(bytes).map_err(not_json)?;
        let Value::Object(map) = value else {
            return Err(not_object());
        };
        if let Some(unknown) = map.keys().find(|k| !ORDER_FIELDS.contains(&k.as_str())) {
            return Err(unknown_field(unknown));
        }
        order_fields(|name| {
            map.get(name).map(|value| match value {
                Value::String(s) => Field::Str(s),
                Value::Bool(b) => Field::Bool(*b),
                _ => Field::Other,
            })
        })
    }

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

    /// The same answer from both parsers: the same order, or the same
    /// refusal word for word.
    /// Returns the refusal's first two words, its kind (`None` for an
    /// order).
    fn same_answer(text: &[u8]) -> Option<String> {
        match (order_body(text), order_body_by_value(text)) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a, b, "{}", String::from_utf8_lossy(text));
                None
            }
            (Err(a), Err(b)) => {
                assert_eq!(
                    (a.code, &a.message),
                    (b.code, &b.message),
                    "{}",
                    String::from_utf8_lossy(text)
                );
                Some(a.message.split(' ').take(2).collect::<Vec<_>>().join(" "))
            }
            (a, b) => panic!(
                "{}: in place {:?}, by value {:?}",
                String::from_utf8_lossy(text),
                a.map_err(|e| e.message),
                b.map_err(|e| e.message)
            ),
        }
    }

    /// Reading the fields in place answers every body as reading it into
    /// a `Value` first did: each field given every kind of JSON value,
    /// left out, given twice, spelled with escapes; unknown fields in any
    /// order; bodies that are not objects; every prefix of a body; and
    /// seeded random edits of them all.
    #[test]
    fn fields_read_in_place_answer_as_a_value_did() {
        let fields: Vec<(&str, &str)> = vec![
            ("market_ticker", r#""btc-1m-261121-2100-2101""#),
            ("outcome", r#""up""#),
            ("action", r#""buy""#),
            ("price", r#""0.55""#),
            ("count", r#""10""#),
            ("time_in_force", r#""immediate_or_cancel""#),
            ("post_only", "true"),
            ("client_order_id", r#""a1""#),
        ];
        let values = [
            r#""up""#,
            r#""down""#,
            r#""sell""#,
            r#""0.01""#,
            r#""0.99""#,
            r#""1.00""#,
            r#""0.555""#,
            r#""10000""#,
            r#""10001""#,
            r#""0""#,
            r#""010""#,
            r#""""#,
            r#""good_till_canceled""#,
            r#""\u0062uy""#,
            r#""0\u002e55""#,
            r#""a\"b""#,
            r#""\ud800""#,
            "\"\u{e9}\"",
            "0.55",
            "10",
            "-1",
            "1e400",
            "1.5e3",
            "true",
            "false",
            "null",
            "[]",
            r#"[1,"a",[{}]]"#,
            "{}",
            r#"{"a":{"b":[1e400]}}"#,
            r#""BTC-1M-261121-2100-2101""#,
            r#""x-y""#,
        ];
        let object = |pairs: &[(&str, &str)]| {
            let inner: Vec<String> = pairs.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
            format!("{{{}}}", inner.join(","))
        };
        let mut bodies: Vec<String> = vec![object(&fields)];
        for at in 0..fields.len() {
            for value in values {
                let mut f = fields.clone();
                f[at].1 = value;
                bodies.push(object(&f));
                // Given twice: the last one counts.
                f.push(fields[at]);
                bodies.push(object(&f));
                let last = f.len() - 1;
                f.swap(at, last);
                bodies.push(object(&f));
            }
            let mut f = fields.clone();
            f.remove(at);
            bodies.push(object(&f));
            // The key itself spelled with an escape.
            let name = fields[at].0;
            let escaped = format!(
                "{}\\u00{:02x}",
                &name[..name.len() - 1],
                name.as_bytes()[name.len() - 1]
            );
            let mut f = fields.clone();
            f[at].0 = &escaped;
            bodies.push(object(&f));
        }
        let extras: [&[(&str, &str)]; 5] = [
            &[("zeta", "1")],
            &[("zeta", "1"), ("alpha", "[]")],
            &[("Price", r#""0.5""#)],
            &[("", "null")],
            &[(r"b\u0061d", "{}")],
        ];
        for extra in extras {
            let mut f = fields.clone();
            f.extend_from_slice(extra);
            bodies.push(object(&f));
            f.reverse();
            bodies.push(object(&f));
        }
        for other in [
            "",
            " ",
            "[]",
            "[1,2",
            r#""x""#,
            "1",
            "-0",
            "null",
            "true",
            "{}",
            "{} x",
            "{,}",
            r#"{"a"}"#,
            r#"{"a":1,}"#,
            "\u{feff}{}",
        ] {
            bodies.push(other.to_string());
        }
        let good = bodies[0].clone();
        for cut in 0..good.len() {
            bodies.push(good[..cut].to_string());
        }
        bodies.push(format!("{good} "));
        bodies.push(format!("{good}x"));
        bodies.push(format!("{}]", &good[..good.len() - 1]));
        // Both parsers see orders and every kind of refusal, not one kind.
        let mut accepted = 0;
        let mut refusals = BTreeMap::new();
        let mut tally = |answer: Option<String>| match answer {
            None => accepted += 1,
            Some(why) => *refusals.entry(why).or_insert(0) += 1,
        };
        for body in &bodies {
            tally(same_answer(body.as_bytes()));
        }
        // Random edits: a byte replaced, dropped or doubled, once to thrice.
        let alphabet = b"{}[]:,\"\\ 0123456789.-eEtruefalsnup_abcz\x00\xff";
        let mut seed: u64 = 0x5eed;
        let mut next = |n: usize| {
            seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) % n as u64) as usize
        };
        for _ in 0..20_000 {
            let mut body = bodies[next(bodies.len())].as_bytes().to_vec();
            for _ in 0..1 + next(3) {
                if body.is_empty() {
                    break;
                }
                let at = next(body.len());
                match next(3) {
                    0 => body[at] = alphabet[next(alphabet.len())],
                    1 => {
                        body.remove(at);
                    }
                    _ => body.insert(at, body[at]),
                }
            }
            tally(same_answer(&body));
        }
        assert!(accepted >= 100, "{accepted} orders accepted");
        assert!(refusals.len() >= 10, "{refusals:?}");
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
        let nope = |allowed: &[&str]| {
            Params::parse(Some("nope=1"), allowed)
                .err()
                .unwrap()
                .message
        };
        assert_eq!(
            nope(&["limit"]),
            "Unknown query parameter nope; allowed: limit."
        );
        assert_eq!(
            nope(&[]),
            "Unknown query parameter nope: this request takes none."
        );
        assert!(Params::parse(Some("limit=1&limit=2"), &["limit"]).is_err());
        let bad = Params::parse(Some("limit=501&cursor=x1"), &["limit", "cursor"]).unwrap();
        assert!(bad.bounded("limit", 1, 500).is_err());
        assert!(bad.cursor().is_err());
        let end = Params::parse(Some("cursor="), &["cursor"]).unwrap();
        assert_eq!(
            end.cursor().unwrap_err().message,
            "Parameter cursor must match ^\\d+$; an empty cursor in a page means there are no more pages."
        );
        assert_eq!(decode("a%2Fb+c").unwrap(), "a/b c");
    }
}
