//! The OpenAPI document (`gateway/openapi.json`) against the code: it lists
//! exactly the routes the router serves (`rest::ROUTES`), every `$ref`
//! resolves, the server serves the file as it is, its patterns are the ones
//! the code checks, and real answers of a running venue fit the documented
//! responses, checked by a small JSON Schema validator that knows every
//! keyword the document uses.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use gateway::api::rest::ROUTES;
use gateway::{Server, ServerConfig};
use serde_json::{json, Value};

const DOC: &str = include_str!("../openapi.json");
const HTTP_METHODS: [&str; 8] = [
    "get", "put", "post", "delete", "options", "head", "patch", "trace",
];

fn doc() -> Value {
    serde_json::from_str(DOC).expect("openapi.json is JSON")
}

/// Resolves a local `$ref` such as `#/components/schemas/Order`.
fn resolve<'a>(doc: &'a Value, reference: &str) -> Option<&'a Value> {
    doc.pointer(reference.strip_prefix('#')?)
}

/// Follows `$ref`s until an object without one.
fn deref<'a>(doc: &'a Value, mut value: &'a Value) -> &'a Value {
    for _ in 0..16 {
        match value.get("$ref").and_then(Value::as_str) {
            Some(r) => value = resolve(doc, r).unwrap_or_else(|| panic!("unresolved $ref {r}")),
            None => return value,
        }
    }
    panic!("$ref chain too long")
}

fn operations(doc: &Value) -> Vec<(String, String, &Value)> {
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (key, op) in item.as_object().expect("path item") {
            if HTTP_METHODS.contains(&key.as_str()) {
                out.push((key.to_uppercase(), path.clone(), op));
            }
        }
    }
    out
}

// ----- the document itself ------------------------------------------------------------

#[test]
fn the_document_is_openapi_3_1_and_lists_exactly_the_served_routes() {
    let doc = doc();
    let version = doc["openapi"].as_str().expect("openapi field");
    assert!(version.starts_with("3.1."), "openapi {version}");
    assert_eq!(
        doc["info"]["version"], "1.0.0",
        "the interface description version of SPEC.md"
    );
    assert_eq!(doc["servers"][0]["url"], "http://127.0.0.1:8080/v1");
    let documented: BTreeSet<(String, String)> = operations(&doc)
        .into_iter()
        .map(|(m, p, _)| (m, p))
        .collect();
    let served: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    assert_eq!(served.len(), ROUTES.len(), "ROUTES has duplicates");
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty(),
        "served but not documented: {undocumented:?}"
    );
    assert!(
        unserved.is_empty(),
        "documented but not served: {unserved:?}"
    );
}

fn walk<'a>(value: &'a Value, at: String, out: &mut Vec<(String, &'a Value)>) {
    out.push((at.clone(), value));
    match value {
        Value::Object(map) => map
            .iter()
            .for_each(|(k, v)| walk(v, format!("{at}/{k}"), out)),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, v)| walk(v, format!("{at}/{i}"), out)),
        _ => {}
    }
}

#[test]
fn every_ref_resolves_and_every_component_is_used() {
    let doc = doc();
    let mut nodes = Vec::new();
    walk(&doc, String::new(), &mut nodes);
    let mut used = BTreeSet::new();
    for (at, node) in &nodes {
        if let Some(r) = node.get("$ref") {
            let r = r
                .as_str()
                .unwrap_or_else(|| panic!("{at}: $ref is not a string"));
            assert!(
                r.starts_with("#/components/"),
                "{at}: $ref {r} is not local"
            );
            assert!(
                resolve(&doc, r).is_some(),
                "{at}: $ref {r} does not resolve"
            );
            used.insert(r.to_string());
        }
    }
    for kind in ["schemas", "responses"] {
        for name in doc["components"][kind]
            .as_object()
            .expect("components")
            .keys()
        {
            let r = format!("#/components/{kind}/{name}");
            assert!(used.contains(&r), "{r} is never used");
        }
    }
}

#[test]
fn every_operation_documents_its_responses_precisely() {
    let doc = doc();
    let error = "#/components/schemas/Error";
    for (method, path, op) in operations(&doc) {
        let name = format!("{method} {path}");
        assert!(op["operationId"].is_string(), "{name}: operationId");
        let responses = op["responses"]
            .as_object()
            .unwrap_or_else(|| panic!("{name}: responses"));
        assert!(
            !responses.contains_key("default"),
            "{name}: a default response hides undocumented statuses"
        );
        let keyed = op["security"].as_array().is_some_and(|s| !s.is_empty());
        if keyed {
            assert_eq!(op["security"], json!([{ "bearerAuth": [] }]), "{name}");
            assert!(responses.contains_key("401"), "{name}: keyed but no 401");
            assert!(
                responses.contains_key("429"),
                "{name}: keyed but no 429 for the lockout"
            );
        } else {
            assert_eq!(
                op["security"],
                json!([]),
                "{name}: public operations say so"
            );
        }
        for (status, response) in responses {
            let code: u16 = status
                .parse()
                .unwrap_or_else(|_| panic!("{name}: status {status}"));
            let response = deref(&doc, response);
            assert!(
                response["description"].is_string(),
                "{name} {status}: description"
            );
            let schema = &response["content"]["application/json"]["schema"];
            assert!(
                schema.is_object(),
                "{name} {status}: an application/json schema"
            );
            assert_eq!(
                response["content"].as_object().map(|c| c.len()),
                Some(1),
                "{name} {status}: one content type"
            );
            check_keywords(&doc, schema, &format!("{name} {status}"));
            if code >= 400 {
                let base = &schema["allOf"][0]["$ref"];
                assert!(
                    schema["$ref"] == error || base == error,
                    "{name} {status}: errors use the Error schema"
                );
                if let Some(codes) = schema["allOf"][1]["properties"]["code"]["enum"].as_array() {
                    for c in codes {
                        let known = doc["components"]["schemas"]["ErrorCode"]["enum"]
                            .as_array()
                            .expect("ErrorCode");
                        assert!(
                            known.contains(c),
                            "{name} {status}: code {c} is not one of the spec's"
                        );
                        assert_eq!(
                            status_of(c.as_str().expect("code")),
                            code,
                            "{name}: {c} is not a {status}"
                        );
                    }
                }
            }
            if code == 429 {
                assert_eq!(
                    response["headers"]["Retry-After"]["required"], true,
                    "{name}: Retry-After"
                );
            }
        }
        for p in op["parameters"].as_array().into_iter().flatten() {
            check_keywords(&doc, &deref(&doc, p)["schema"], &name);
        }
    }
    for (name, schema) in doc["components"]["schemas"].as_object().expect("schemas") {
        check_keywords(&doc, schema, name);
    }
}

/// The status of each of the spec's codes, from the one table that maps them.
fn status_of(code: &str) -> u16 {
    sequencer::ErrorCode::ALL
        .iter()
        .find(|c| c.as_str() == code)
        .unwrap_or_else(|| panic!("unknown code {code}"))
        .http_status()
}

#[test]
fn the_error_codes_are_the_specs_twenty() {
    let doc = doc();
    let documented: Vec<&str> = doc["components"]["schemas"]["ErrorCode"]["enum"]
        .as_array()
        .expect("enum")
        .iter()
        .map(|c| c.as_str().expect("string"))
        .collect();
    let code: Vec<&str> = sequencer::ErrorCode::ALL
        .iter()
        .map(|c| c.as_str())
        .collect();
    assert_eq!(documented, code);
}

// ----- a small JSON Schema validator (the keywords the document uses) ---------------

const ANNOTATIONS: [&str; 5] = ["description", "examples", "default", "title", "deprecated"];
const KEYWORDS: [&str; 19] = [
    "$ref",
    "allOf",
    "type",
    "properties",
    "required",
    "additionalProperties",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "uniqueItems",
    "enum",
    "const",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
];

/// Every keyword of `schema` (recursively) is one the validator checks or a
/// pure annotation, so the validator can never pass something by ignoring it.
fn check_keywords(doc: &Value, schema: &Value, at: &str) {
    let Some(map) = schema.as_object() else {
        assert!(
            schema.is_boolean(),
            "{at}: a schema is an object or a boolean"
        );
        return;
    };
    for (key, value) in map {
        assert!(
            KEYWORDS.contains(&key.as_str()) || ANNOTATIONS.contains(&key.as_str()),
            "{at}: keyword {key} is not understood by the test's validator"
        );
        match key.as_str() {
            "properties" => value
                .as_object()
                .expect("properties")
                .iter()
                .for_each(|(k, v)| check_keywords(doc, v, &format!("{at}.{k}"))),
            "allOf" | "prefixItems" => value
                .as_array()
                .expect("array")
                .iter()
                .for_each(|v| check_keywords(doc, v, at)),
            "items" | "additionalProperties" => check_keywords(doc, value, at),
            "pattern" => {
                regex::Regex::new(value.as_str().expect("pattern")).expect("pattern compiles");
            }
            "$ref" => assert!(
                resolve(doc, value.as_str().expect("$ref")).is_some(),
                "{at}: {value}"
            ),
            _ => {}
        }
    }
}

fn type_matches(name: &str, value: &Value) -> bool {
    match name {
        "object" => value.is_object(),
        "array" => value.is_array(),
        "string" => value.is_string(),
        "boolean" => value.is_boolean(),
        "null" => value.is_null(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        other => panic!("unknown type {other}"),
    }
}

/// Errors of `value` against `schema`, each with a JSON pointer.
fn validate(doc: &Value, schema: &Value, value: &Value, at: &str, errors: &mut Vec<String>) {
    let map = match schema {
        Value::Bool(true) => return,
        Value::Bool(false) => return errors.push(format!("{at}: no value is allowed here")),
        Value::Object(map) => map,
        _ => panic!("{at}: bad schema {schema}"),
    };
    if let Some(r) = map.get("$ref").and_then(Value::as_str) {
        let target = resolve(doc, r).unwrap_or_else(|| panic!("unresolved {r}"));
        validate(doc, target, value, at, errors);
    }
    for sub in map
        .get("allOf")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        validate(doc, sub, value, at, errors);
    }
    if let Some(t) = map.get("type") {
        let ok = match t {
            Value::String(name) => type_matches(name, value),
            Value::Array(names) => names
                .iter()
                .any(|n| type_matches(n.as_str().expect("type"), value)),
            _ => panic!("{at}: bad type"),
        };
        if !ok {
            return errors.push(format!("{at}: {value} is not of type {t}"));
        }
    }
    if let Some(options) = map.get("enum").and_then(Value::as_array) {
        if !options.contains(value) {
            errors.push(format!("{at}: {value} is not one of {options:?}"));
        }
    }
    if let Some(c) = map.get("const") {
        if c != value {
            errors.push(format!("{at}: {value} is not {c}"));
        }
    }
    if let Value::String(s) = value {
        if let Some(p) = map.get("pattern").and_then(Value::as_str) {
            if !regex::Regex::new(p).expect("pattern").is_match(s) {
                errors.push(format!("{at}: {s:?} does not match {p}"));
            }
        }
        let chars = s.chars().count() as u64;
        if map
            .get("minLength")
            .and_then(Value::as_u64)
            .is_some_and(|n| chars < n)
        {
            errors.push(format!("{at}: {s:?} is too short"));
        }
        if map
            .get("maxLength")
            .and_then(Value::as_u64)
            .is_some_and(|n| chars > n)
        {
            errors.push(format!("{at}: {s:?} is too long"));
        }
    }
    if let Some(n) = value.as_f64() {
        if map
            .get("minimum")
            .and_then(Value::as_f64)
            .is_some_and(|m| n < m)
        {
            errors.push(format!("{at}: {value} is below the minimum"));
        }
        if map
            .get("maximum")
            .and_then(Value::as_f64)
            .is_some_and(|m| n > m)
        {
            errors.push(format!("{at}: {value} is above the maximum"));
        }
        if map
            .get("exclusiveMinimum")
            .and_then(Value::as_f64)
            .is_some_and(|m| n <= m)
        {
            errors.push(format!("{at}: {value} is not above the exclusive minimum"));
        }
    }
    if let Value::Object(object) = value {
        let properties = map.get("properties").and_then(Value::as_object);
        for name in map
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if !object.contains_key(name.as_str().expect("required")) {
                errors.push(format!("{at}: missing required {name}"));
            }
        }
        for (key, item) in object {
            match properties.and_then(|p| p.get(key)) {
                Some(sub) => validate(doc, sub, item, &format!("{at}/{key}"), errors),
                None => {
                    if let Some(extra) = map.get("additionalProperties") {
                        validate(doc, extra, item, &format!("{at}/{key}"), errors);
                    }
                }
            }
        }
    }
    if let Value::Array(items) = value {
        let n = items.len() as u64;
        if map
            .get("minItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| n < m)
        {
            errors.push(format!("{at}: fewer than minItems"));
        }
        if map
            .get("maxItems")
            .and_then(Value::as_u64)
            .is_some_and(|m| n > m)
        {
            errors.push(format!("{at}: more than maxItems"));
        }
        if map.get("uniqueItems") == Some(&Value::Bool(true)) {
            let distinct: BTreeSet<String> = items.iter().map(Value::to_string).collect();
            if distinct.len() != items.len() {
                errors.push(format!("{at}: items are not unique"));
            }
        }
        let prefix = map
            .get("prefixItems")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice);
        for (i, item) in items.iter().enumerate() {
            let sub = prefix.get(i).or_else(|| map.get("items"));
            if let Some(sub) = sub {
                validate(doc, sub, item, &format!("{at}/{i}"), errors);
            }
        }
    }
}

#[test]
fn the_validator_catches_what_it_should() {
    let doc = doc();
    let order = json!({ "$ref": "#/components/schemas/Order" });
    let good = json!({
        "order_id": "1", "client_order_id": "a1", "market_ticker": "btc-15m-261121-2100-2115",
        "outcome": "up", "action": "buy", "price": "0.55", "time_in_force": "good_till_canceled",
        "post_only": false, "status": "resting", "count": "10", "fill_count": "0", "remaining_count": "10",
        "created_ts_ms": 1
    });
    let errors = |value: &Value| {
        let mut e = Vec::new();
        validate(&doc, &order, value, "", &mut e);
        e
    };
    assert_eq!(errors(&good), Vec::<String>::new());
    for (field, bad) in [
        ("extra", json!("x")),
        ("price", json!("0.555")),
        ("status", json!("open")),
        ("created_ts_ms", json!(-1)),
        ("post_only", json!("false")),
        ("order_id", json!("0")),
    ] {
        let mut value = good.clone();
        value[field] = bad;
        assert!(!errors(&value).is_empty(), "{field} should be refused");
    }
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("remaining_count");
    assert!(!errors(&missing).is_empty());
    let level = json!({ "$ref": "#/components/schemas/Level" });
    let mut e = Vec::new();
    validate(&doc, &level, &json!(["0.55", "10", "x"]), "", &mut e);
    validate(&doc, &level, &json!(["0.55", 10]), "", &mut e);
    assert_eq!(e.len(), 3, "{e:?}");
}

// ----- the documented patterns are the ones the code checks --------------------------

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len())]
    }
}

fn schema_pattern(doc: &Value, name: &str) -> regex::Regex {
    let p = doc["components"]["schemas"][name]["pattern"]
        .as_str()
        .unwrap_or_else(|| panic!("{name} pattern"));
    regex::Regex::new(p).expect("pattern")
}

/// Strings near the shape of a market ticker, mutated at random.
fn ticker_like(rng: &mut Rng) -> String {
    let pieces = [
        "btc", "a", "0", "-", "--", "d", "d1", "d12", "d123", "15m", "261121", "2100", "2115",
        "12345", "1234567", "x", "B", "\n", "٣", "_", ".", "",
    ];
    let series_len = rng.below(70);
    let mut s: String = (0..series_len)
        .map(|_| ["a", "z", "0", "9", "-", "d"][rng.below(6)])
        .collect();
    if rng.below(4) != 0 {
        s.push_str(&format!(
            "-{:06}-{:04}-{:04}",
            rng.below(1_000_000),
            rng.below(10_000),
            rng.below(10_000)
        ));
    }
    if rng.below(3) == 0 {
        s.push_str(&format!("d{}", rng.below(200)));
    }
    for _ in 0..rng.below(3) {
        let at = if s.is_empty() {
            0
        } else {
            rng.below(s.len() + 1)
        };
        if s.is_char_boundary(at) {
            s.insert_str(at, rng.pick(&pieces));
        }
    }
    if rng.below(4) == 0 && !s.is_empty() {
        let at = rng.below(s.len());
        if s.is_char_boundary(at) && s.is_char_boundary(at + 1) {
            s.remove(at);
        }
    }
    s
}

fn short_string(rng: &mut Rng, alphabet: &[&str], max: usize) -> String {
    (0..rng.below(max + 1))
        .map(|_| rng.pick(alphabet))
        .collect()
}

#[test]
fn documented_patterns_match_exactly_what_the_code_accepts() {
    let doc = doc();
    let market = schema_pattern(&doc, "MarketTicker");
    let series = schema_pattern(&doc, "SeriesTicker");
    let price = schema_pattern(&doc, "Price");
    let count = schema_pattern(&doc, "Count");
    let client = schema_pattern(&doc, "ClientOrderId");
    let body = &doc["components"]["schemas"]["OrderRequest"]["properties"];
    let body_price =
        regex::Regex::new(body["price"]["pattern"].as_str().expect("price")).expect("regex");
    let body_count =
        regex::Regex::new(body["count"]["pattern"].as_str().expect("count")).expect("regex");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut matched = 0;
    for _ in 0..100_000 {
        let t = ticker_like(&mut rng);
        let documented = market.is_match(&t);
        matched += usize::from(documented);
        assert_eq!(
            documented,
            sequencer::validate::is_market_ticker(&t),
            "market ticker {t:?}"
        );
        assert_eq!(
            series.is_match(&t),
            sequencer::validate::is_series_ticker(&t),
            "series ticker {t:?}"
        );
    }
    assert!(
        matched > 10_000,
        "the generator should hit valid tickers often ({matched})"
    );
    let digits = [
        "0", "1", "5", "9", ".", "-", "a", " ", "٣", "\n", "+", "10000", "9999",
    ];
    for _ in 0..50_000 {
        let s = short_string(&mut rng, &digits, 6);
        let p = format!("0.{s}");
        for text in [&s, &p] {
            assert_eq!(
                price.is_match(text),
                sequencer::validate::parse_price(text).is_some(),
                "price {text:?}"
            );
            assert_eq!(
                body_price.is_match(text),
                price.is_match(text),
                "body price {text:?}"
            );
            assert_eq!(
                count.is_match(text),
                sequencer::validate::parse_count(text).is_some(),
                "count {text:?}"
            );
            let in_range = sequencer::validate::parse_count(text)
                .is_some_and(sequencer::validate::count_in_range);
            assert_eq!(body_count.is_match(text), in_range, "body count {text:?}");
        }
    }
    let id_chars = [
        "a",
        "Z",
        "0",
        ".",
        "_",
        ":",
        "-",
        " ",
        "/",
        "é",
        "\n",
        "aaaaaaaaaaaaaaaa",
    ];
    for _ in 0..50_000 {
        let s = short_string(&mut rng, &id_chars, 20);
        let code = sequencer::types::ClientOrderId::new(&s).is_some();
        assert_eq!(client.is_match(&s), code, "client_order_id {s:?}");
    }
}

// ----- a running venue --------------------------------------------------------------

struct Venue {
    server: Server,
    _dir: tempfile::TempDir,
}

fn start() -> Venue {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = ServerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        admin_listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.path().join("data"),
        price_simulator: false,
        lockout_failures: 4,
        orders_per_second: 1,
        orders_burst: 40,
        // A loaded test machine may stall a request for seconds.
        request_timeout_ms: 30_000,
        ..ServerConfig::default()
    };
    // The traded series' windows last a day, so that the one a test
    // trades in has minutes left (`open_market`).
    let mut config = config;
    for series in &mut config.series {
        if series.ticker == "aapl-60m" {
            series.window_minutes = 24 * 60;
        }
    }
    let server = Server::start(config).expect("the venue starts");
    Venue { server, _dir: dir }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One HTTP/1.1 exchange over a fresh connection.
fn http(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[(&str, &str)],
    body: Option<&str>,
) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut request =
        format!("{method} {target} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(body) = body {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body.unwrap_or(""));
    stream.write_all(request.as_bytes()).expect("send");
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .unwrap_or_else(|e| panic!("read {}: {e}", request.lines().next().unwrap_or("")));
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of headers");
    let head = String::from_utf8(raw[..split].to_vec()).expect("ascii head");
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers.iter().any(|(k, v)| {
        k.eq_ignore_ascii_case("transfer-encoding") && v.eq_ignore_ascii_case("chunked")
    });
    if chunked {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let line_end = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size");
        let size_text = std::str::from_utf8(&data[..line_end]).expect("size");
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .expect("hex size");
        data = &data[line_end + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&data[..size]);
        data = &data[size + 2..];
    }
}

/// Checks answers against the document and gathers every mismatch.
struct Conformance {
    doc: Value,
    addr: SocketAddr,
    failures: Vec<String>,
    seen: BTreeSet<(String, String, u16)>,
}

impl Conformance {
    /// Sends a request to `path` (an instance of the documented `template`)
    /// and checks the answer against the operation's documented response.
    fn call(
        &mut self,
        method: &str,
        template: &str,
        path: &str,
        key: Option<&str>,
        body: Option<&str>,
    ) -> Reply {
        let auth = key.map(|k| format!("Bearer {k}"));
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| ("Authorization", a))
            .into_iter()
            .collect();
        let reply = http(self.addr, method, &format!("/v1{path}"), &headers, body);
        self.check(method, template, path, &reply);
        reply
    }

    fn check(&mut self, method: &str, template: &str, path: &str, reply: &Reply) {
        let name = format!("{method} {path} -> {}", reply.status);
        self.seen
            .insert((method.to_string(), template.to_string(), reply.status));
        let op = &self.doc["paths"][template][method.to_lowercase()];
        let Some(response) = op["responses"].get(reply.status.to_string()) else {
            return self.failures.push(format!(
                "{name}: status not documented for {method} {template}: {}",
                reply.text()
            ));
        };
        let response = deref(&self.doc, response).clone();
        self.check_body(&name, &response, reply);
    }

    fn check_body(&mut self, name: &str, response: &Value, reply: &Reply) {
        let content_type = reply.header("content-type").unwrap_or("");
        if !content_type.starts_with("application/json") {
            return self.failures.push(format!(
                "{name}: content-type {content_type:?}: {}",
                reply.text()
            ));
        }
        let Ok(body) = serde_json::from_slice::<Value>(&reply.body) else {
            return self
                .failures
                .push(format!("{name}: body is not JSON: {}", reply.text()));
        };
        let mut errors = Vec::new();
        validate(
            &self.doc,
            &response["content"]["application/json"]["schema"],
            &body,
            "",
            &mut errors,
        );
        self.failures
            .extend(errors.into_iter().map(|e| format!("{name}: {e} in {body}")));
        for (header, spec) in response["headers"].as_object().into_iter().flatten() {
            match reply.header(header) {
                None if spec["required"] == true => self
                    .failures
                    .push(format!("{name}: header {header} missing")),
                None => {}
                Some(value) => {
                    let parsed = value
                        .parse::<u64>()
                        .map(Value::from)
                        .unwrap_or_else(|_| Value::from(value));
                    let mut errors = Vec::new();
                    validate(&self.doc, &spec["schema"], &parsed, header, &mut errors);
                    self.failures
                        .extend(errors.into_iter().map(|e| format!("{name}: {e}")));
                }
            }
        }
    }

    /// An answer outside every operation: the router's fallbacks.
    fn check_error(&mut self, name: &str, reply: &Reply, code: &str) {
        let response = json!({ "content": { "application/json": { "schema": { "$ref": "#/components/schemas/Error" } } } });
        self.check_body(name, &response, reply);
        if reply.json()["code"] != code {
            self.failures
                .push(format!("{name}: expected {code}, got {}", reply.text()));
        }
    }
}

fn admin(server: &Server, method: &str, path: &str, body: Value) -> Value {
    let auth = format!("Bearer {}", server.admin_token);
    let reply = http(
        server.admin_addr,
        method,
        path,
        &[("Authorization", &auth)],
        Some(&body.to_string()),
    );
    assert_eq!(reply.status, 200, "{method} {path}: {}", reply.text());
    reply.json()
}

/// An account with cash, terms accepted and trading allowed, and a key.
fn trader(server: &Server, scopes: &str) -> (u64, String) {
    let account = admin(server, "POST", "/admin/accounts", json!({ "cash": "1000" }))["account_id"]
        .as_u64()
        .expect("id");
    admin(
        server,
        "POST",
        &format!("/admin/accounts/{account}/flags"),
        json!({ "terms_accepted": true, "trading_allowed": true }),
    );
    (account, issue_key(server, account, scopes))
}

fn issue_key(server: &Server, account: u64, scopes: &str) -> String {
    let key = admin(
        server,
        "POST",
        "/admin/keys",
        json!({ "account": account, "scopes": scopes, "name": "test" }),
    );
    key["key"].as_str().expect("key").to_string()
}

fn order(
    ticker: &str,
    outcome: &str,
    price: &str,
    count: &str,
    id: &str,
    post_only: bool,
) -> String {
    json!({
        "market_ticker": ticker, "outcome": outcome, "action": "buy", "price": price, "count": count,
        "client_order_id": id, "post_only": post_only,
    })
    .to_string()
}

/// An open window of the `aapl-60m` series, once a price has arrived,
/// with at least 30 s to run: a close in the middle of the test would
/// cancel its resting orders. Near the hour it waits for the next window.
fn open_market(c: &mut Conformance, server: &Server) -> String {
    admin(
        server,
        "POST",
        "/admin/prices",
        json!({ "symbol": "AAPL", "price": "230.25" }),
    );
    let mut deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let reply = c.call(
            "GET",
            "/markets",
            "/markets?series_ticker=aapl-60m&status=open",
            None,
            None,
        );
        let json = reply.json();
        let market = &json["markets"][0];
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_millis() as u64;
        match (market["ticker"].as_str(), market["close_ts_ms"].as_u64()) {
            // Five minutes: time for the conformance run's requests on a
            // loaded machine (it waits at most that long for the next one).
            (Some(t), Some(close)) if close > now + 300_000 => return t.to_string(),
            (Some(_), Some(close)) => {
                // Closing soon: wait for its close, then a price opens the
                // next window.
                std::thread::sleep(Duration::from_millis(close.saturating_sub(now) + 200));
                admin(
                    server,
                    "POST",
                    "/admin/prices",
                    json!({ "symbol": "AAPL", "price": "230.25" }),
                );
                deadline = Instant::now() + Duration::from_secs(10);
            }
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no aapl-60m window opened: {}",
            reply.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_served_document_is_the_file_and_every_route_is_served() {
    let venue = start();
    let addr = venue.server.addr;
    let reply = http(addr, "GET", "/v1/openapi.json", &[], None);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(
        reply.text(),
        DOC,
        "GET /v1/openapi.json serves gateway/openapi.json as it is"
    );
    let reply = http(addr, "GET", "/v1/asyncapi.json", &[], None);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(
        reply.text(),
        include_str!("../asyncapi.json"),
        "GET /v1/asyncapi.json serves gateway/asyncapi.json as it is"
    );

    let paths: BTreeSet<&str> = ROUTES.iter().map(|(_, p)| *p).collect();
    for path in &paths {
        let concrete = path
            .replace("{order_id}", "1")
            .replace("{ticker}", "btc-15m-261121-2100-2115");
        for method in ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] {
            let listed = ROUTES.contains(&(method, *path));
            let body = (method == "POST").then_some("{}");
            let reply = http(addr, method, &format!("/v1{concrete}"), &[], body);
            let text = reply.text();
            let fallback =
                (reply.status == 404 && text.contains("No such path")) || reply.status == 405;
            if listed {
                assert!(
                    !fallback,
                    "{method} {path} is in ROUTES but the router does not serve it: {text}"
                );
            } else {
                assert_eq!(
                    reply.status, 405,
                    "{method} {path} is not in ROUTES, yet answers {text}"
                );
                assert_eq!(reply.json()["code"], "METHOD_NOT_ALLOWED");
            }
        }
        if ROUTES.contains(&("GET", *path)) {
            let head = http(addr, "HEAD", &format!("/v1{concrete}"), &[], None);
            assert_ne!(head.status, 405, "HEAD {path} is answered like GET");
        }
    }
}

#[test]
fn real_answers_fit_the_document() {
    let venue = start();
    let server = &venue.server;
    let mut c = Conformance {
        doc: doc(),
        addr: server.addr,
        failures: Vec::new(),
        seen: BTreeSet::new(),
    };

    // Market data before any trading.
    c.call("GET", "/markets", "/markets", None, None);
    let ticker = open_market(&mut c, server);
    let (_, key_a) = trader(server, "read,trade");
    let (account_b, key_b) = trader(server, "read,trade");
    let read_b = issue_key(server, account_b, "read");
    let a = Some(key_a.as_str());
    let b = Some(key_b.as_str());

    // Order entry: rest, retry, conflict, cross, refusals.
    let placed = c.call(
        "POST",
        "/portfolio/orders",
        "/portfolio/orders",
        a,
        Some(&order(&ticker, "up", "0.55", "10", "a1", false)),
    );
    assert_eq!(placed.status, 201, "{}", placed.text());
    let id_a = placed.json()["order"]["order_id"]
        .as_str()
        .expect("order_id")
        .to_string();
    let again = c.call(
        "POST",
        "/portfolio/orders",
        "/portfolio/orders",
        a,
        Some(&order(&ticker, "up", "0.55", "10", "a1", false)),
    );
    assert_eq!(
        again.json()["order"]["order_id"],
        id_a.as_str(),
        "an idempotent retry returns the same order"
    );
    let conflict = c.call(
        "POST",
        "/portfolio/orders",
        "/portfolio/orders",
        a,
        Some(&order(&ticker, "up", "0.54", "10", "a1", false)),
    );
    assert_eq!(conflict.status, 409);
    let crossed = c.call(
        "POST",
        "/portfolio/orders",
        "/portfolio/orders",
        b,
        Some(&order(&ticker, "down", "0.45", "4", "b1", false)),
    );
    assert_eq!(crossed.status, 201, "{}", crossed.text());
    let executed = crossed.json()["order"].clone();
    assert_eq!(executed["status"], "executed", "{executed}");
    assert!(
        executed.get("average_fill_price").is_some() && executed.get("fees_paid").is_some(),
        "{executed}"
    );
    let id_b = executed["order_id"].as_str().expect("order_id").to_string();
    let resting_b = c.call(
        "POST",
        "/portfolio/orders",
        "/portfolio/orders",
        b,
        Some(&order(&ticker, "up", "0.40", "1", "b2", true)),
    );
    assert_eq!(
        resting_b.json()["order"]["status"],
        "resting",
        "{}",
        resting_b.text()
    );
    let down_b = c.call(
        "POST",
        "/portfolio/orders",
        "/portfolio/orders",
        b,
        Some(&order(&ticker, "down", "0.30", "2", "b3", false)),
    );
    assert_eq!(
        down_b.json()["order"]["status"],
        "resting",
        "{}",
        down_b.text()
    );
    for (body, expected) in [
        (
            order(&ticker, "down", "0.60", "1", "a2", true),
            "POST_ONLY_CROSS",
        ),
        (
            order(&ticker, "down", "0.60", "1", "a3", false),
            "SELF_TRADE",
        ),
        (
            order("aapl-60m-200101-0000-0100", "up", "0.50", "1", "a4", false),
            "MARKET_NOT_OPEN",
        ),
        (
            order(&ticker, "up", "0.50", "10001", "a5", false),
            "BAD_REQUEST",
        ),
        (
            order(&ticker, "up", "0.50", "100", "a6", false),
            "LIMIT_EXCEEDED",
        ),
        (
            order(&ticker, "up", "0.99", "5000", "a7", false),
            "LIMIT_EXCEEDED",
        ),
        (
            r#"{"market_ticker":"x","extra":1}"#.to_string(),
            "BAD_REQUEST",
        ),
        ("not json".to_string(), "BAD_REQUEST"),
    ] {
        let reply = c.call(
            "POST",
            "/portfolio/orders",
            "/portfolio/orders",
            a,
            Some(&body),
        );
        if reply.json()["code"] != expected {
            c.failures
                .push(format!("{body}: expected {expected}, got {}", reply.text()));
        }
    }
    let read_only = c.call(
        "POST",
        "/portfolio/orders",
        "/portfolio/orders",
        Some(&read_b),
        Some(&order(&ticker, "up", "0.50", "1", "r1", false)),
    );
    assert_eq!(read_only.status, 403, "{}", read_only.text());
    let no_key = c.call(
        "POST",
        "/portfolio/orders",
        "/portfolio/orders",
        None,
        Some(&order(&ticker, "up", "0.50", "1", "n1", false)),
    );
    assert_eq!(no_key.status, 401);

    // Market data with a book and trades.
    let market_path = format!("/markets/{ticker}");
    let market = c
        .call("GET", "/markets/{ticker}", &market_path, None, None)
        .json();
    for field in [
        "price_to_beat",
        "up_bid",
        "up_bid_size",
        "up_ask",
        "up_ask_size",
        "last_price",
    ] {
        assert!(
            market["market"].get(field).is_some(),
            "market {field}: {market}"
        );
    }
    c.call(
        "GET",
        "/markets/{ticker}",
        &format!("{market_path}?x=1"),
        None,
        None,
    );
    c.call(
        "GET",
        "/markets/{ticker}",
        "/markets/aapl-60m-200101-0000-0100",
        None,
        None,
    );
    c.call(
        "GET",
        "/markets/{ticker}",
        "/markets/NOT-A-TICKER",
        None,
        None,
    );
    c.call(
        "GET",
        "/markets",
        "/markets?series_ticker=aapl-60m&limit=1",
        None,
        None,
    );
    c.call("GET", "/markets", "/markets?status=settled", None, None);
    c.call("GET", "/markets", "/markets?series_ticker=nope", None, None);
    c.call("GET", "/markets", "/markets?limit=0", None, None);
    c.call("GET", "/markets", "/markets?cursor=x", None, None);
    let book = c
        .call(
            "GET",
            "/markets/{ticker}/orderbook",
            &format!("{market_path}/orderbook"),
            None,
            None,
        )
        .json();
    assert!(
        !book["orderbook"]["up"].as_array().expect("up").is_empty(),
        "{book}"
    );
    c.call(
        "GET",
        "/markets/{ticker}/orderbook",
        &format!("{market_path}/orderbook?depth=1"),
        None,
        None,
    );
    c.call(
        "GET",
        "/markets/{ticker}/orderbook",
        &format!("{market_path}/orderbook?depth=100"),
        None,
        None,
    );
    c.call(
        "GET",
        "/markets/{ticker}/orderbook",
        "/markets/aapl-60m-200101-0000-0100/orderbook",
        None,
        None,
    );
    let trades = c
        .call(
            "GET",
            "/markets/{ticker}/trades",
            &format!("{market_path}/trades"),
            None,
            None,
        )
        .json();
    assert!(
        !trades["trades"].as_array().expect("trades").is_empty(),
        "{trades}"
    );
    c.call(
        "GET",
        "/markets/{ticker}/trades",
        &format!("{market_path}/trades?limit=1&cursor=99"),
        None,
        None,
    );
    c.call(
        "GET",
        "/markets/{ticker}/trades",
        &format!("{market_path}/trades?limit=1001"),
        None,
        None,
    );

    // The account's reads.
    for key in [a, b, Some(read_b.as_str())] {
        c.call("GET", "/portfolio/orders", "/portfolio/orders", key, None);
        c.call("GET", "/portfolio/fills", "/portfolio/fills", key, None);
        c.call(
            "GET",
            "/portfolio/positions",
            "/portfolio/positions",
            key,
            None,
        );
        c.call("GET", "/portfolio/balance", "/portfolio/balance", key, None);
        c.call("GET", "/account", "/account", key, None);
    }
    let page = c
        .call(
            "GET",
            "/portfolio/orders",
            "/portfolio/orders?limit=1",
            b,
            None,
        )
        .json();
    assert_ne!(page["cursor"], "", "two orders, a page of one: {page}");
    c.call(
        "GET",
        "/portfolio/orders",
        "/portfolio/orders?client_order_id=a1&status=resting",
        a,
        None,
    );
    c.call(
        "GET",
        "/portfolio/orders",
        &format!("/portfolio/orders?market_ticker={ticker}&cursor=1000"),
        a,
        None,
    );
    c.call(
        "GET",
        "/portfolio/orders",
        "/portfolio/orders?status=open",
        a,
        None,
    );
    c.call(
        "GET",
        "/portfolio/fills",
        "/portfolio/fills?limit=1",
        b,
        None,
    );
    c.call(
        "GET",
        "/portfolio/fills",
        "/portfolio/fills?limit=501",
        b,
        None,
    );
    c.call(
        "GET",
        "/portfolio/positions",
        "/portfolio/positions?x=1",
        b,
        None,
    );
    c.call(
        "GET",
        "/portfolio/orders/{order_id}",
        &format!("/portfolio/orders/{id_a}"),
        a,
        None,
    );
    c.call(
        "GET",
        "/portfolio/orders/{order_id}",
        &format!("/portfolio/orders/{id_a}"),
        b,
        None,
    );
    c.call(
        "GET",
        "/portfolio/orders/{order_id}",
        "/portfolio/orders/abc",
        a,
        None,
    );
    c.call(
        "GET",
        "/portfolio/orders/{order_id}",
        "/portfolio/orders/1",
        None,
        None,
    );
    c.call("GET", "/account", "/account", Some("tk_live_abc_def"), None);
    c.call("GET", "/account", "/account", Some("garbage"), None);

    // Cancels: one, again, an executed one, all.
    let canceled = c.call(
        "DELETE",
        "/portfolio/orders/{order_id}",
        &format!("/portfolio/orders/{id_a}"),
        a,
        None,
    );
    assert_eq!(
        canceled.json()["order"]["status"],
        "canceled",
        "{}",
        canceled.text()
    );
    let again = c.call(
        "DELETE",
        "/portfolio/orders/{order_id}",
        &format!("/portfolio/orders/{id_a}"),
        a,
        None,
    );
    assert_eq!(again.status, 200, "a retried cancel is safe");
    let done = c.call(
        "DELETE",
        "/portfolio/orders/{order_id}",
        &format!("/portfolio/orders/{id_b}"),
        b,
        None,
    );
    assert_eq!(
        done.json()["order"]["status"],
        "executed",
        "{}",
        done.text()
    );
    c.call(
        "DELETE",
        "/portfolio/orders/{order_id}",
        &format!("/portfolio/orders/{id_b}"),
        a,
        None,
    );
    c.call(
        "DELETE",
        "/portfolio/orders/{order_id}",
        "/portfolio/orders/1",
        Some(&read_b),
        None,
    );
    c.call(
        "DELETE",
        "/portfolio/orders",
        "/portfolio/orders?series_ticker=BAD",
        b,
        None,
    );
    let all = c.call(
        "DELETE",
        "/portfolio/orders",
        "/portfolio/orders?series_ticker=aapl-60m",
        b,
        None,
    );
    assert_eq!(
        all.json()["canceled_order_ids"].as_array().map(Vec::len),
        Some(2),
        "{}",
        all.text()
    );
    c.call(
        "DELETE",
        "/portfolio/orders",
        "/portfolio/orders",
        None,
        None,
    );

    // The router's fallbacks.
    let missing = http(server.addr, "GET", "/v1/nope", &[], None);
    assert_eq!(missing.status, 404);
    c.check_error("GET /v1/nope", &missing, "NOT_FOUND");
    let wrong = http(server.addr, "PUT", "/v1/markets", &[], None);
    assert_eq!(wrong.status, 405);
    c.check_error("PUT /v1/markets", &wrong, "METHOD_NOT_ALLOWED");
    assert_eq!(
        wrong.header("allow"),
        Some("GET,HEAD"),
        "a 405 names the methods served"
    );

    // The new-order rate limit, then the failed-authentication lockout.
    let mut limited = false;
    for i in 0..60 {
        let body = order(
            "aapl-60m-200101-0000-0100",
            "up",
            "0.50",
            "1",
            &format!("rl{i}"),
            false,
        );
        let reply = c.call(
            "POST",
            "/portfolio/orders",
            "/portfolio/orders",
            b,
            Some(&body),
        );
        if reply.status == 429 {
            limited = true;
            break;
        }
    }
    assert!(limited, "the new-order rate limit answers 429");
    let bad_key = "tk_test_abc_wrongsecret";
    let mut locked = false;
    for _ in 0..10 {
        let reply = c.call("GET", "/account", "/account", Some(bad_key), None);
        if reply.status == 429 {
            locked = true;
            break;
        }
    }
    assert!(
        locked,
        "repeated failed authentications lock the address out"
    );
    c.call(
        "DELETE",
        "/portfolio/orders/{order_id}",
        "/portfolio/orders/1",
        a,
        None,
    );
    c.call("GET", "/portfolio/balance", "/portfolio/balance", a, None);
    c.call("GET", "/asyncapi.json", "/asyncapi.json", None, None);

    // Every documented success and a good part of the errors were seen.
    for (method, path, _) in operations(&c.doc) {
        let ok = c
            .seen
            .iter()
            .any(|(m, p, s)| *m == method && *p == path && *s < 300);
        if path != "/openapi.json" {
            assert!(ok, "{method} {path}: no success was checked");
        }
    }
    let statuses: BTreeSet<u16> = c.seen.iter().map(|(_, _, s)| *s).collect();
    for s in [200, 201, 400, 401, 403, 404, 409, 429] {
        assert!(statuses.contains(&s), "no {s} was checked");
    }
    assert!(
        c.failures.is_empty(),
        "answers outside the document:\n{}",
        c.failures.join("\n")
    );
}
