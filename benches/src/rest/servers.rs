//! The two servers under load: the bare axum handler, and the whole venue
//! (`gateway::Server`) in-process, with its traders and markets set up
//! through the admin API.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{to_bytes, Body};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use gateway::api::parse::order_body;
use gateway::api::rest::BODY_BYTES_MAX;
use gateway::config::{DurabilityPolicy, SeriesEntry};
use gateway::error::ApiError;
use gateway::{Server, ServerConfig};
use serde_json::{json, Map, Value};

use crate::engines::BenchError;
use crate::loopback::LoopbackServer;
use crate::rest::load::ORDERS_PATH;
use tools::http::Conn;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

// ----- the bare handler ------------------------------------------------------------------

/// An axum server with one route, `POST /v1/portfolio/orders`, on a runtime
/// of one worker thread (the venue's default `workers = 1`). The handler
/// reads the body as the venue does (`to_bytes`, 16 KiB at most), parses
/// and validates it with the venue's own `order_body`, and answers 201 with
/// an Order record of the same fields the venue writes. No key, no
/// sequencer, no journal.
pub struct Bare {
    server: LoopbackServer,
}

static BARE_ORDER_ID: AtomicU64 = AtomicU64::new(1);

async fn bare_place_order(body: Body) -> Response {
    let bytes = match to_bytes(body, BODY_BYTES_MAX).await {
        Ok(b) => b,
        Err(_) => return ApiError::bad_request("The body is too large.").into_response(),
    };
    let order = match order_body(&bytes) {
        Ok(o) => o,
        Err(e) => return e.into_response(),
    };
    // The fields of `gateway::api::json::order` for a new resting order.
    let mut map = Map::new();
    let id = BARE_ORDER_ID.fetch_add(1, Ordering::Relaxed);
    map.insert("order_id".into(), id.to_string().into());
    map.insert(
        "client_order_id".into(),
        order.client_order_id.as_str().into(),
    );
    map.insert("market_ticker".into(), order.market_ticker.into());
    map.insert("outcome".into(), order.outcome.as_str().into());
    map.insert("action".into(), order.action.as_str().into());
    map.insert("price".into(), sequencer::wire::price(order.price).into());
    map.insert("time_in_force".into(), order.time_in_force.as_str().into());
    map.insert("post_only".into(), order.post_only.into());
    map.insert("status".into(), "resting".into());
    map.insert("count".into(), order.count.to_string().into());
    map.insert("fill_count".into(), "0".into());
    map.insert("remaining_count".into(), order.count.to_string().into());
    map.insert("created_ts_ms".into(), now_ms().into());
    (
        StatusCode::CREATED,
        Json(json!({ "order": Value::Object(map) })),
    )
        .into_response()
}

impl Bare {
    pub fn start() -> Result<Bare, BenchError> {
        let router = Router::new().route(ORDERS_PATH, post(bare_place_order));
        Ok(Bare {
            server: LoopbackServer::start("bare", 1, router)?,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }
}

// ----- the venue ---------------------------------------------------------------------------

/// The underlying every benchmark series follows.
pub const SYMBOL: &str = "X:BTCUSD";
/// Series of the benchmark venue, one open market each.
pub const SERIES: [&str; 4] = ["rb-a", "rb-b", "rb-c", "rb-d"];
/// Every trader's cash, in dollars: far more than its resting buys hold.
const CASH_USD: &str = "100000000";
/// Caps set so high that no order of the run meets them (dollars).
const CAP_USD: u64 = 1_000_000_000;

/// A window length, in minutes, whose current window (windows start on
/// multiples of the length since the epoch) still has at least an hour to
/// run: about a day, nudged a minute at a time. No window opens, closes or
/// settles during the run (a close cancels every resting order at once).
fn window_minutes() -> u64 {
    let now = now_ms();
    (1440..1440 + 240)
        .find(|minutes| {
            let window = minutes * 60_000;
            window - now % window >= 60 * 60 * 1000
        })
        .expect("some window length leaves an hour")
}

/// The venue's configuration: loopback ports chosen by the OS, the data in
/// `data_dir`, the default one gateway worker, `durability` (group commit
/// unless a run asks otherwise), no price simulator, four series of about
/// a day on one symbol, and every limit (rate limit, risk cap, market cap,
/// lockout, request timeout) too high to interfere.
pub fn venue_config(data_dir: &Path, durability: DurabilityPolicy) -> ServerConfig {
    let minutes = window_minutes();
    let series = SERIES
        .iter()
        .map(|ticker| SeriesEntry {
            ticker: (*ticker).into(),
            symbol: SYMBOL.into(),
            window_minutes: minutes,
            list_ahead: 1,
            taker_fee: 0.07,
            maker_fee: 0.0,
            market_cap_usd: CAP_USD,
            sim_start_price: None,
        })
        .collect();
    ServerConfig {
        listen: "127.0.0.1:0".parse().expect("address"),
        admin_listen: "127.0.0.1:0".parse().expect("address"),
        data_dir: data_dir.to_path_buf(),
        durability,
        // Only at shutdown unless asked: a snapshot in the middle of a
        // timed phase costs the commands of its time their copy-on-write
        // faults (`UPDOWN_BENCH_REST_SNAPSHOT_EVERY` to measure it).
        snapshot_every: std::env::var("UPDOWN_BENCH_REST_SNAPSHOT_EVERY")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
        account_risk_cap_usd: CAP_USD,
        orders_per_second: 1_000_000,
        orders_burst: 1_000_000,
        lockout_failures: 1_000_000,
        price_simulator: false,
        workers: 1,
        series,
        segment_mib: std::env::var("UPDOWN_BENCH_REST_SEGMENT_MIB")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(64),
        sync_spacing_us: std::env::var("UPDOWN_BENCH_REST_SYNC_SPACING_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(ServerConfig::default().sync_spacing_us),
        // A request waits up to 30 s for the sequencer, not 2 s: the
        // default answers 503 after a stall of this shared machine (the
        // run checks that every order was answered 201). It changes nothing
        // while the venue keeps up.
        request_timeout_ms: 30_000,
        ..ServerConfig::default()
    }
}

/// The running venue, its traders' keys and its open markets.
pub struct Venue {
    pub server: Server,
    pub accounts: Vec<u64>,
    pub keys: Vec<String>,
    pub markets: Vec<String>,
}

/// A call to the admin API that must answer 200; returns the JSON body.
async fn admin(conn: &mut Conn, token: &str, path: &str, body: Value) -> Result<Value, BenchError> {
    let bytes = body.to_string().into_bytes();
    let status = conn.request("POST", path, Some(token), &bytes).await?;
    let answer: Value = serde_json::from_slice(conn.body()).unwrap_or(Value::Null);
    if status != 200 {
        return Err(format!("admin {path} {body}: {status} {answer}").into());
    }
    Ok(answer)
}

async fn admin_get(conn: &mut Conn, token: &str, path: &str) -> Result<Value, BenchError> {
    let status = conn.request("GET", path, Some(token), b"").await?;
    let answer: Value = serde_json::from_slice(conn.body()).unwrap_or(Value::Null);
    if status != 200 {
        return Err(format!("admin GET {path}: {status} {answer}").into());
    }
    Ok(answer)
}

impl Venue {
    /// Starts the venue in `data_dir` and sets up `traders` traders (funded,
    /// terms accepted, trading allowed, one read+trade key each whose limits
    /// never bind), prints the opening price and finds the open markets.
    /// `client` drives the admin calls.
    pub fn start(
        data_dir: &Path,
        durability: DurabilityPolicy,
        traders: usize,
        client: &tokio::runtime::Runtime,
    ) -> Result<Venue, BenchError> {
        let server = Server::start(venue_config(data_dir, durability))?;
        let (admin_addr, addr, token) =
            (server.admin_addr, server.addr, server.admin_token.clone());
        let (accounts, keys, markets) = client.block_on(async move {
            let mut conn = Conn::connect(admin_addr).await?;
            let mut accounts = Vec::new();
            let mut keys = Vec::new();
            for _ in 0..traders.max(1) {
                let body = admin(
                    &mut conn,
                    &token,
                    "/admin/accounts",
                    json!({ "cash": CASH_USD }),
                )
                .await?;
                let account = body["account_id"]
                    .as_u64()
                    .ok_or("no account_id from the admin API")?;
                admin(
                    &mut conn,
                    &token,
                    &format!("/admin/accounts/{account}/flags"),
                    json!({ "terms_accepted": true, "trading_allowed": true }),
                )
                .await?;
                let key = admin(
                    &mut conn,
                    &token,
                    "/admin/keys",
                    json!({
                        "account": account,
                        "scopes": "read,trade",
                        "name": "bench",
                        "max_order_usd": "1000",
                        "max_daily_usd": CAP_USD.to_string(),
                    }),
                )
                .await?;
                accounts.push(account);
                keys.push(
                    key["key"]
                        .as_str()
                        .ok_or("no key from the admin API")?
                        .to_string(),
                );
            }
            // The current windows open on the first print.
            admin(
                &mut conn,
                &token,
                "/admin/prices",
                json!({ "symbol": SYMBOL, "price": "97000.5" }),
            )
            .await?;
            let mut public = Conn::connect(addr).await?;
            let mut markets = Vec::new();
            for series in SERIES {
                let path = format!("/v1/markets?series_ticker={series}&status=open");
                let status = public.request("GET", &path, None, b"").await?;
                let body: Value = serde_json::from_slice(public.body()).unwrap_or(Value::Null);
                let ticker = body["markets"][0]["ticker"].as_str();
                match (status, ticker) {
                    (200, Some(ticker)) => markets.push(ticker.to_string()),
                    _ => return Err(format!("no open market in {series}: {status} {body}").into()),
                }
            }
            Ok::<_, BenchError>((accounts, keys, markets))
        })?;
        Ok(Venue {
            server,
            accounts,
            keys,
            markets,
        })
    }

    /// Resting orders of every trader, as the admin API shows them.
    pub fn resting_orders(&self, client: &tokio::runtime::Runtime) -> Result<u64, BenchError> {
        let (addr, token) = (self.server.admin_addr, self.server.admin_token.clone());
        let accounts = self.accounts.clone();
        client.block_on(async move {
            let mut conn = Conn::connect(addr).await?;
            let mut total = 0;
            for account in accounts {
                let body =
                    admin_get(&mut conn, &token, &format!("/admin/accounts/{account}")).await?;
                total += body["resting_orders"]
                    .as_u64()
                    .ok_or("no resting_orders from the admin API")?;
            }
            Ok(total)
        })
    }

    /// Batches of events the websocket publisher could not take.
    pub fn lost_batches(&self) -> u64 {
        self.server.ws.stats.lost_batches.load(Ordering::Relaxed)
    }

    /// The sequencer's batches so far (from its metrics).
    pub fn batches(&self) -> BatchStats {
        let metrics = &self.server.submitter.metrics;
        BatchStats {
            batches: metrics.batches.load(Ordering::Relaxed),
            jobs: metrics.jobs.load(Ordering::Relaxed),
            busy_us: metrics.batch_busy_us.load(Ordering::Relaxed),
            syncs: metrics.journal_syncs.load(Ordering::Relaxed),
            sync_us: metrics.journal_sync_us.load(Ordering::Relaxed),
        }
    }
}

/// The sequencer's batches: how many, the jobs in them, and the time spent
/// on them (apply, journal append, handing the batch to the commit
/// thread); and the commit thread's syncs: how many, and their time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    pub batches: u64,
    pub jobs: u64,
    pub busy_us: u64,
    pub syncs: u64,
    pub sync_us: u64,
}

impl BatchStats {
    /// What happened since `before`.
    pub fn since(&self, before: &BatchStats) -> BatchStats {
        BatchStats {
            batches: self.batches - before.batches,
            jobs: self.jobs - before.jobs,
            busy_us: self.busy_us - before.busy_us,
            syncs: self.syncs - before.syncs,
            sync_us: self.sync_us - before.sync_us,
        }
    }

    /// Mean jobs per batch.
    pub fn jobs_per_batch(&self) -> f64 {
        self.jobs as f64 / self.batches.max(1) as f64
    }

    /// Mean jobs made durable by one sync.
    pub fn jobs_per_sync(&self) -> f64 {
        self.jobs as f64 / self.syncs.max(1) as f64
    }

    /// Mean microseconds of one sync (fdatasync of the journal).
    pub fn us_per_sync(&self) -> f64 {
        self.sync_us as f64 / self.syncs.max(1) as f64
    }

    /// Mean microseconds per batch.
    pub fn us_per_batch(&self) -> f64 {
        self.busy_us as f64 / self.batches.max(1) as f64
    }
}
