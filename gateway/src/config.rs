//! The server's configuration: embedded defaults that start a complete
//! practice venue, overridable from a TOML file.

use std::net::SocketAddr;
use std::path::PathBuf;

use sequencer::types::Environment;
use sequencer::{SeriesConfig, VenueConfig};
use serde::Deserialize;

/// How often the journal is made durable.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum DurabilityPolicy {
    /// Every command is synced on its own before its reply.
    Always,
    /// Every batch drained from the queue is synced once, then answered.
    GroupCommit,
    /// Synced at most every `durability_interval_ms`; replies do not wait.
    Interval,
    /// Never synced by the venue (benchmarks only).
    Never,
}

/// One series as written in the config file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SeriesEntry {
    pub ticker: String,
    pub symbol: String,
    pub window_minutes: u64,
    #[serde(default = "default_list_ahead")]
    pub list_ahead: u32,
    #[serde(default = "default_taker_fee")]
    pub taker_fee: f64,
    #[serde(default)]
    pub maker_fee: f64,
    #[serde(default = "default_market_cap_usd")]
    pub market_cap_usd: u64,
    /// Starting price of the simulated underlying.
    #[serde(default)]
    pub sim_start_price: Option<f64>,
}

fn default_list_ahead() -> u32 {
    2
}
fn default_taker_fee() -> f64 {
    0.07
}
fn default_market_cap_usd() -> u64 {
    1_000_000
}

impl SeriesEntry {
    /// A simulated start price must be a price: it was clamped silently
    /// (a negative, zero or NaN one started the walk at 0.01, an infinite
    /// one pinned every print at the largest price, so every window
    /// settled the same way).
    pub fn check_start_price(&self) -> Result<(), String> {
        match self.sim_start_price {
            Some(price) if !(SIM_START_PRICE.0..=SIM_START_PRICE.1).contains(&price) => {
                Err(format!(
                    "series {:?}: sim_start_price must be from {} to {}, not {price}",
                    self.ticker, SIM_START_PRICE.0, SIM_START_PRICE.1 as u64
                ))
            }
            _ => Ok(()),
        }
    }

    /// The sequencer's form. A fee rate must be a whole number of basis
    /// points from 0 to 1 (0.07 is 7 %); anything else is refused here, not
    /// rounded or clamped (a negative rate would otherwise become 0).
    pub fn to_config(&self) -> Result<SeriesConfig, String> {
        let bps = |name: &str, rate: f64| {
            let bps = rate * 10_000.0;
            if rate.is_finite() && (0.0..=1.0).contains(&rate) && (bps - bps.round()).abs() < 1e-6 {
                Ok(bps.round() as u32)
            } else {
                Err(format!(
                    "series {}: {name} must be a rate from 0 to 1 in whole basis points, such as 0.07, not {rate}",
                    self.ticker
                ))
            }
        };
        let config = SeriesConfig {
            ticker: self.ticker.clone(),
            symbol: self.symbol.clone(),
            window_ms: self.window_minutes.saturating_mul(60_000),
            list_ahead: self.list_ahead,
            taker_fee_bps: bps("taker_fee", self.taker_fee)?,
            maker_fee_bps: bps("maker_fee", self.maker_fee)?,
            market_cap_cents: (self.market_cap_usd as i64).saturating_mul(100),
        };
        // The sequencer's own check, here before anything is journaled.
        sequencer::engine::check_series(&config)
            .map_err(|reject| format!("series {:?}: {}", self.ticker, reject.message))?;
        Ok(config)
    }
}

/// Everything the server needs to start.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Public REST and websocket address.
    pub listen: SocketAddr,
    /// Operator address; loopback by default.
    pub admin_listen: SocketAddr,
    /// Journal, snapshots, admin token and server files live here.
    pub data_dir: PathBuf,
    /// `live` or `test`.
    pub environment: String,
    /// Whether test keys may trade (the practice book is open).
    pub practice_book_open: bool,
    pub durability: DurabilityPolicy,
    pub durability_interval_ms: u64,
    /// Size of each journal segment file, in MiB.
    pub segment_mib: u64,
    /// Write a snapshot every this many commands (0: only at shutdown).
    pub snapshot_every: u64,
    /// Snapshots kept: after each one written, those older than the newest
    /// this many are removed (0 keeps every one).
    pub snapshots_keep: u32,
    /// How long ended orders, fills and settled markets' books and trades
    /// stay in memory before they move to the history store, in seconds
    /// (at least 1). The order list shows the last 24 hours only with at
    /// least 86400, the default; shorter is for practice venues and soaks.
    pub history_tail_secs: u64,
    /// Start even when the journal is damaged in the middle, cutting it back
    /// to the last good record (everything after it is lost). Off by
    /// default: start-up refuses and names the segment and offset.
    pub truncate_corrupt_journal: bool,
    /// Default cap on an account's amount at risk, in dollars.
    pub account_risk_cap_usd: u64,
    /// New orders per second per key, and the burst.
    pub orders_per_second: u32,
    pub orders_burst: u32,
    /// Failed authentications from one address before it is locked out.
    pub lockout_failures: u32,
    /// Window in which failures are counted, and the lockout length.
    pub lockout_secs: u64,
    /// Run the built-in price simulator.
    pub price_simulator: bool,
    /// Milliseconds between simulated prints per symbol.
    pub price_interval_ms: u64,
    /// Seed of the simulator's random walks.
    pub price_seed: u64,
    /// A file of recorded prints to replay instead of the simulator (see
    /// `feed::Prints::parse` for its forms); relative to the working
    /// directory.
    pub price_file: Option<PathBuf>,
    /// How many times faster than recorded the file is replayed.
    pub price_file_speed: f64,
    /// At its end the file is replayed again, backward, then forward...,
    /// so that prices go on from where they are; without, the prints stop.
    pub price_file_loop: bool,
    /// How long a request waits for the sequencer before 503. 0 answers
    /// every such request 503 at once, after handing it over (the tests of
    /// retries use it to force a 503 for an order that is then placed).
    pub request_timeout_ms: u64,
    /// Capacity of the queue into the sequencer.
    pub queue_capacity: usize,
    /// Shortest time between the starts of two journal syncs under load,
    /// in microseconds: batches that close meanwhile share the next sync.
    /// It saves the machine a sync's CPU per batch at the cost of up to
    /// this much latency per request; 0 syncs as soon as a batch is ready
    /// (for disks whose sync is cheap: on tmpfs the REST benchmark's p50
    /// went from 286 to 57 µs).
    pub sync_spacing_us: u64,
    /// Tokio worker threads of the gateway.
    pub workers: usize,
    /// Log as JSON lines instead of readable text.
    pub log_json: bool,
    /// Messages a websocket connection may have waiting; past it, messages
    /// are dropped for that connection and its client sees a seq gap.
    pub ws_queue_capacity: usize,
    /// The server pings every websocket this often (SPEC: 10 s).
    pub ws_ping_interval_ms: u64,
    /// Open HTTP connections (websockets included) from one address; past
    /// it a new one is answered 429 and closed.
    pub http_connections_per_address: usize,
    /// Open HTTP connections in all; past it a new one is answered 503.
    pub http_connections_max: usize,
    /// A connection with no byte read or written for this long is closed
    /// (a websocket's pings keep it alive: longer than two ping intervals).
    pub http_idle_timeout_secs: u64,
    pub series: Vec<SeriesEntry>,
    /// Whether `series` was written out (a `series` list in the file, or
    /// set by the code that built the configuration) rather than left to
    /// the built-in list. The built-in list is for a new venue only: a
    /// restart without a configuration file added its series to a venue
    /// made with others, for good.
    #[serde(skip)]
    pub series_listed: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: "127.0.0.1:8080".parse().expect("address"),
            admin_listen: "127.0.0.1:8081".parse().expect("address"),
            data_dir: PathBuf::from("updown-data"),
            environment: "test".into(),
            practice_book_open: true,
            durability: DurabilityPolicy::GroupCommit,
            durability_interval_ms: 5,
            segment_mib: 64,
            snapshot_every: 1_000_000,
            snapshots_keep: 10,
            history_tail_secs: sequencer::state::HISTORY_TAIL_MS_DEFAULT / 1000,
            truncate_corrupt_journal: false,
            account_risk_cap_usd: 100_000,
            orders_per_second: sequencer::limits::NEW_ORDERS_PER_SECOND,
            orders_burst: sequencer::limits::NEW_ORDERS_BURST,
            lockout_failures: 10,
            lockout_secs: 60,
            price_simulator: true,
            price_interval_ms: 1_000,
            price_seed: 1,
            price_file: None,
            price_file_speed: 1.0,
            price_file_loop: true,
            request_timeout_ms: 2_000,
            queue_capacity: 65_536,
            sync_spacing_us: 200,
            workers: 1,
            log_json: false,
            ws_queue_capacity: crate::ws::QUEUE_CAPACITY_DEFAULT,
            ws_ping_interval_ms: sequencer::limits::WS_PING_INTERVAL_MS,
            http_connections_per_address: 512,
            http_connections_max: 8_192,
            http_idle_timeout_secs: 60,
            series: default_series(),
            series_listed: false,
        }
    }
}

/// Bounds of the numeric settings, (least, most).
const SEGMENT_MIB: (u64, u64) = (1, journal::SEGMENT_BYTES_MAX >> 20);
const LOCKOUT_SECS: (u64, u64) = (1, 7 * 86_400);
const PRICE_INTERVAL_MS: (u64, u64) = (10, 3_600_000);
/// A slot is about 200 bytes: at most some 200 MiB of queue.
const QUEUE_CAPACITY: (u64, u64) = (16, 1 << 20);
const PING_MS: (u64, u64) = (10, 600_000);
/// A simulated underlying starts at a cent or more, and far below the
/// largest price a print holds (about 92 billion), so that its walk
/// never reaches it.
const SIM_START_PRICE: (f64, f64) = (0.01, 1e9);

/// The series a fresh venue lists: one-minute windows for quick trials, and
/// the 5-, 15- and 60-minute windows traders know.
pub fn default_series() -> Vec<SeriesEntry> {
    let entry = |ticker: &str, symbol: &str, minutes: u64, start: f64| SeriesEntry {
        ticker: ticker.into(),
        symbol: symbol.into(),
        window_minutes: minutes,
        list_ahead: default_list_ahead(),
        taker_fee: default_taker_fee(),
        maker_fee: 0.0,
        market_cap_usd: default_market_cap_usd(),
        sim_start_price: Some(start),
    };
    vec![
        entry("btc-1m", "X:BTCUSD", 1, 97_000.0),
        entry("btc-5m", "X:BTCUSD", 5, 97_000.0),
        entry("btc-15m", "X:BTCUSD", 15, 97_000.0),
        entry("eth-15m", "X:ETHUSD", 15, 3_400.0),
        entry("aapl-60m", "AAPL", 60, 230.0),
    ]
}

impl ServerConfig {
    /// Refuses settings the venue cannot run with, naming the first one
    /// (they were clamped silently: a burst of 0 became 1, a segment of
    /// 0 MiB became 1 MiB, a print interval of 0 became 10 ms).
    pub fn check(&self) -> Result<(), String> {
        let at_least = |name: &str, value: u64, min: u64, unit: &str| {
            if value < min {
                Err(format!("{name} must be at least {min}{unit}, not {value}"))
            } else {
                Ok(())
            }
        };
        let at_most = |name: &str, value: u64, max: u64, unit: &str| {
            if value > max {
                Err(format!("{name} must be at most {max}{unit}, not {value}"))
            } else {
                Ok(())
            }
        };
        // Every number has an upper bound as well: a huge one (written to
        // mean "forever" or "no limit") overflowed a deadline and panicked
        // the venue at the first failed key (`lockout_secs`) or connection
        // (`http_idle_timeout_secs`), or asked for terabytes
        // (`queue_capacity`). The bounds are far past any sensible value.
        let within = |name: &str, value: u64, (min, max): (u64, u64), unit: &str| {
            at_least(name, value, min, unit)?;
            at_most(name, value, max, unit)
        };
        within("segment_mib", self.segment_mib, SEGMENT_MIB, " (MiB)")?;
        within(
            "orders_per_second",
            self.orders_per_second.into(),
            (1, 1_000_000),
            "",
        )?;
        within("orders_burst", self.orders_burst.into(), (1, 1_000_000), "")?;
        at_least("lockout_failures", self.lockout_failures.into(), 1, "")?;
        within(
            "lockout_secs",
            self.lockout_secs,
            LOCKOUT_SECS,
            " (seconds)",
        )?;
        within(
            "price_interval_ms",
            self.price_interval_ms,
            PRICE_INTERVAL_MS,
            " (ms)",
        )?;
        within(
            "request_timeout_ms",
            self.request_timeout_ms,
            (0, 600_000),
            " (ms)",
        )?;
        within(
            "queue_capacity",
            self.queue_capacity as u64,
            QUEUE_CAPACITY,
            "",
        )?;
        within("workers", self.workers as u64, (1, 256), "")?;
        within(
            "ws_queue_capacity",
            self.ws_queue_capacity as u64,
            (1, 1 << 20),
            "",
        )?;
        within(
            "ws_ping_interval_ms",
            self.ws_ping_interval_ms,
            PING_MS,
            " (ms)",
        )?;
        within(
            "http_idle_timeout_secs",
            self.http_idle_timeout_secs,
            (1, 86_400),
            " (seconds)",
        )?;
        at_most("sync_spacing_us", self.sync_spacing_us, 100_000, " (µs)")?;
        within(
            "http_connections_per_address",
            self.http_connections_per_address as u64,
            (1, 1 << 20),
            "",
        )?;
        within(
            "http_connections_max",
            self.http_connections_max as u64,
            (1, 1 << 20),
            "",
        )?;
        if self.http_idle_timeout_secs * 1000 <= 2 * self.ws_ping_interval_ms {
            return Err(format!(
                "http_idle_timeout_secs must be longer than two websocket ping intervals ({} ms), not {}: an idle websocket lives on its pings",
                2 * self.ws_ping_interval_ms,
                self.http_idle_timeout_secs
            ));
        }
        if !(1e-3..=1e6).contains(&self.price_file_speed) {
            return Err(format!(
                "price_file_speed must be from 0.001 to 1000000, not {}",
                self.price_file_speed
            ));
        }
        // The sequencer refuses it too, but only once the first
        // configuration is journaled.
        at_least("account_risk_cap_usd", self.account_risk_cap_usd, 1, "")?;
        at_most(
            "account_risk_cap_usd",
            self.account_risk_cap_usd,
            (sequencer::limits::MONEY_CENTS_MAX / 100) as u64,
            "",
        )?;
        at_least(
            "history_tail_secs",
            self.history_tail_secs,
            sequencer::retention::HISTORY_TAIL_MS_MIN.div_ceil(1000),
            " (seconds)",
        )?;
        for (i, series) in self.series.iter().enumerate() {
            if self.series[..i].iter().any(|s| s.ticker == series.ticker) {
                return Err(format!("series {:?} is listed twice", series.ticker));
            }
        }
        if self.durability == DurabilityPolicy::Interval {
            at_least(
                "durability_interval_ms (with durability = \"interval\")",
                self.durability_interval_ms,
                1,
                " (ms; \"group_commit\" syncs every batch)",
            )?;
        }
        at_most(
            "durability_interval_ms",
            self.durability_interval_ms,
            60_000,
            " (ms)",
        )?;
        for series in &self.series {
            series.check_start_price()?;
        }
        Ok(())
    }

    /// Reads a TOML file over the defaults.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        let mut config: Self = toml::from_str(text).map_err(|e| e.to_string())?;
        let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
        config.series_listed = table.contains_key("series");
        Ok(config)
    }

    /// The environment as the sequencer knows it.
    pub fn environment(&self) -> Result<Environment, String> {
        Environment::parse(&self.environment).ok_or_else(|| {
            format!(
                "environment must be live or test, not {:?}",
                self.environment
            )
        })
    }

    /// The venue configuration written at the start of a new journal.
    pub fn venue(&self) -> Result<VenueConfig, String> {
        Ok(VenueConfig {
            environment: self.environment()?,
            practice_book_open: self.practice_book_open,
            account_risk_cap_cents: (self.account_risk_cap_usd as i64).saturating_mul(100),
        })
    }

    pub fn journal_dir(&self) -> PathBuf {
        self.data_dir.join("journal")
    }
    pub fn snapshot_dir(&self) -> PathBuf {
        self.data_dir.join("snapshots")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_config_parses_and_matches_the_defaults() {
        let mut config =
            ServerConfig::from_toml(include_str!("../../docs/config.example.toml")).unwrap();
        // Every value it shows is the default, the series included; it
        // writes them out, the default leaves them to the built-in list.
        assert!(config.series_listed);
        assert!(
            !ServerConfig::from_toml("workers = 1")
                .unwrap()
                .series_listed
        );
        config.series_listed = false;
        assert_eq!(
            format!("{config:?}"),
            format!("{:?}", ServerConfig::default())
        );
        assert_eq!(config.series.len(), 5);
        assert_eq!(config.series[0].to_config().unwrap().taker_fee_bps, 700);
        assert!(config.check().is_ok());
        assert!(config.venue().is_ok());
    }

    #[test]
    fn unknown_keys_and_bad_values_are_refused() {
        assert!(ServerConfig::from_toml("listen_on = \"x\"")
            .unwrap_err()
            .contains("unknown field"));
        let live = ServerConfig::from_toml("environment = \"prod\"").unwrap();
        assert!(live.environment().is_err());
        for fee in ["-0.07", "1.5", "0.00001", "nan"] {
            let text = format!(
                "[[series]]\nticker = \"x-1m\"\nsymbol = \"X\"\nwindow_minutes = 1\ntaker_fee = {fee}\n"
            );
            let config = ServerConfig::from_toml(&text).unwrap();
            let refused = config.series[0].to_config().unwrap_err();
            assert!(
                refused.contains("taker_fee must be a rate"),
                "{fee}: {refused}"
            );
        }
    }
}
