//! Starting and stopping the whole venue: open the journal and replay it,
//! start the sequencer thread, create configured series, start the price
//! simulator, serve REST and admin, and shut all of it down in order.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use journal::{Durability, JournalConfig};
use replay::{Node, NodeConfig};
use sequencer::{Command, Reply, SeriesConfig};
use tokio::sync::Notify;

use crate::admin::{self, Admin};
use crate::api::rest::{self, App};
use crate::auth::{random_token, Lockout};
use crate::config::{DurabilityPolicy, SeriesEntry, ServerConfig};
use crate::engine::{now_ms, Engine, EngineSettings};
use crate::metrics::Metrics;

/// The OpenAPI document, served at `/v1/openapi.json`.
pub const OPENAPI: &str = include_str!("../openapi.json");
/// The websocket's AsyncAPI document, served at `/v1/asyncapi.json`.
pub const ASYNCAPI: &str = include_str!("../asyncapi.json");

/// Why the venue could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("configuration: {0}")]
    Config(String),
    /// The I/O error is in the message, not a source too (said twice).
    #[error("data directory {path}: {error}")]
    DataDir {
        path: PathBuf,
        error: std::io::Error,
    },
    /// The node's error is shown in the message, not as a source too (the
    /// CLI prints sources after the message: it was said twice).
    #[error("the journal could not be opened: {0}{hint}", hint = truncate_hint(.0))]
    Node(replay::NodeError),
    #[error("cannot listen on {addr}: {error}{hint}", hint = in_use_hint(error))]
    Listen {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("cannot start the {what} thread: {error} (is a limit on processes or threads too low, such as ulimit -u or a cgroup's pids.max?)")]
    Thread {
        what: &'static str,
        error: std::io::Error,
    },
}

/// A thread the system would not start, as a start's error.
fn thread(what: &'static str) -> impl FnOnce(std::io::Error) -> StartError {
    move |error| StartError::Thread { what, error }
}

impl From<replay::NodeError> for StartError {
    fn from(e: replay::NodeError) -> Self {
        StartError::Node(e)
    }
}

/// For an address taken: who usually holds it.
fn in_use_hint(error: &std::io::Error) -> &'static str {
    if error.kind() == std::io::ErrorKind::AddrInUse {
        " (is another updown serve running with this address? `--listen` and `--admin-listen` choose others)"
    } else {
        ""
    }
}

/// For damage that only a cut (or, for a segment cut after its seal, a
/// repair) can get past: the option that does it.
fn truncate_hint(e: &replay::NodeError) -> &'static str {
    use journal::JournalError as J;
    use replay::{NodeError as N, ReplayError as R};
    let damage = |j: &J| {
        matches!(
            j,
            J::Corrupt { .. }
                | J::SeqGap { .. }
                | J::MissingSegment { .. }
                | J::CutWouldDrop { .. }
        )
    };
    match e {
        N::Journal(J::CutAfterSeal { .. }) | N::Replay(R::Journal(J::CutAfterSeal { .. })) => {
            SEAL_HINT
        }
        N::Journal(j) | N::Replay(R::Journal(j)) if damage(j) => TRUNCATE_HINT,
        N::SnapshotAhead { .. } => TRUNCATE_HINT,
        _ => "",
    }
}

const SEAL_HINT: &str = ". To make the file whole again, losing nothing, start with --truncate-corrupt-journal (or truncate_corrupt_journal = true in the configuration); keep a copy of the data directory first";

const TRUNCATE_HINT: &str = ". To continue from the journal as it can be read, cutting it at the damage and setting aside snapshots past the cut (their commands are lost), start with --truncate-corrupt-journal (or truncate_corrupt_journal = true in the configuration); keep a copy of the data directory first";

/// A running venue.
pub struct Server {
    pub addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub admin_token: String,
    pub data_dir: PathBuf,
    engine: Engine,
    runtime: Option<tokio::runtime::Runtime>,
    shutdown: Arc<Notify>,
    feed_stop: Arc<AtomicBool>,
    feed: Option<std::thread::JoinHandle<()>>,
    servers: Vec<tokio::task::JoinHandle<()>>,
    pub submitter: crate::engine::Submitter,
    pub open_report: String,
    /// The websocket's hub and its publisher thread.
    pub ws: Arc<crate::ws::Hub>,
    publisher: Option<crate::ws::Publisher>,
}

/// The token file in a data directory.
pub fn admin_token_path(data_dir: &Path) -> PathBuf {
    data_dir.join("admin.token")
}

/// The file in which a running server leaves its addresses for the CLI.
pub fn server_file_path(data_dir: &Path) -> PathBuf {
    data_dir.join("server.json")
}

/// Shorter operator tokens are warned of at start.
const ADMIN_TOKEN_MIN: usize = 32;

/// The operator's token: read from the data directory, or made there. The
/// file is readable by its owner only: created so (never world-readable,
/// not even for a moment), and an existing one with looser permissions is
/// tightened, with a warning.
fn admin_token(data_dir: &Path) -> Result<String, StartError> {
    let path = admin_token_path(data_dir);
    let io = |error| StartError::DataDir {
        path: path.clone(),
        error,
    };
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => {
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(&path).map_err(io)?.permissions().mode();
                if mode & 0o077 != 0 {
                    tracing::warn!(
                        path = %path.display(),
                        mode = format!("{:o}", mode & 0o777),
                        "the admin token file was readable by others; setting it to 0600"
                    );
                    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                        .map_err(io)?;
                }
            }
            let token = token.trim().to_string();
            if token.chars().count() < ADMIN_TOKEN_MIN {
                tracing::warn!(
                    path = %path.display(),
                    "the admin token is {} characters: short enough to guess (a venue makes one of 40 random characters when the file is missing)",
                    token.chars().count()
                );
            }
            Ok(token)
        }
        _ => {
            let token = random_token(40);
            // Made 0600 from the start, renamed over whatever empty or
            // unreadable file was there.
            write_whole(&path, &token, 0o600).map_err(io)?;
            Ok(token)
        }
    }
}

/// Writes `text` to `path` whole or not at all: into a new file under a
/// temporary name of this process (with `mode`), synced, then renamed over
/// `path`; the temporary file is removed when any step fails (a full
/// disk).
fn write_whole(path: &Path, text: &str, mode: u32) -> std::io::Result<()> {
    use std::io::Write;
    // Of this process: two starts at once on one new directory do not
    // write or rename each other's file.
    let temporary = path.with_extension(format!("tmp.{}", std::process::id()));
    let _ = std::fs::remove_file(&temporary);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    let written = options.open(&temporary).and_then(|mut file| {
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&temporary, path)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
}

impl Server {
    /// Starts the venue described by `config`.
    pub fn start(config: ServerConfig) -> Result<Server, StartError> {
        config.check().map_err(StartError::Config)?;
        let environment = config.environment().map_err(StartError::Config)?;
        let venue = config.venue().map_err(StartError::Config)?;
        // Every series of the file is checked before anything is opened or
        // journaled: a bad one must not leave a half-made venue behind.
        let series_configs: Vec<SeriesConfig> = config
            .series
            .iter()
            .map(SeriesEntry::to_config)
            .collect::<Result<_, _>>()
            .map_err(StartError::Config)?;
        // The whole file of recorded prints is read and checked now too.
        let price_file = config
            .price_file
            .as_deref()
            .map(|path| {
                // (A file of millions of prints takes seconds.)
                tracing::info!(file = %path.display(), "reading the price file");
                crate::feed::Prints::read(path)
            })
            .transpose()
            .map_err(StartError::Config)?;
        // The addresses are taken before the data directory is made or
        // the journal opened: a start that cannot serve must not journal a
        // first configuration, which would fix the venue's environment and
        // series for good, nor leave a new directory behind. Both bind with
        // SO_REUSEADDR, so two on one port would both bind and clash only
        // at `listen`, after the journal: that is refused here.
        if share_a_port(config.listen, config.admin_listen) {
            return Err(StartError::Config(format!(
                "listen ({}) and admin_listen ({}) take the same port: the admin endpoint needs its own",
                config.listen, config.admin_listen
            )));
        }
        let public = reserve(config.listen)?;
        let private = reserve(config.admin_listen)?;
        std::fs::create_dir_all(&config.data_dir).map_err(|error| StartError::DataDir {
            path: config.data_dir.clone(),
            error,
        })?;
        if !config.admin_listen.ip().is_loopback() {
            tracing::warn!(
                admin_listen = %config.admin_listen,
                "the admin endpoint listens beyond this machine: anyone who can reach it and read the admin token operates the venue"
            );
        }
        if config.request_timeout_ms == 0 {
            tracing::warn!(
                "request_timeout_ms is 0: every request that needs the sequencer is answered 503 at once (a setting for tests of retries)"
            );
        }
        let mut journal = JournalConfig::new(config.journal_dir());
        journal.segment_bytes = config.segment_mib * 1024 * 1024;
        journal.truncate_on_corruption = config.truncate_corrupt_journal;
        journal.durability = match config.durability {
            DurabilityPolicy::Always => Durability::Always,
            DurabilityPolicy::GroupCommit => Durability::GroupCommit,
            DurabilityPolicy::Interval => Durability::IntervalMs(config.durability_interval_ms),
            DurabilityPolicy::Never => Durability::Never,
        };
        let node_config = NodeConfig {
            journal,
            snapshot_dir: Some(config.snapshot_dir()),
            venue: venue.clone(),
            history_dir: Some(config.data_dir.join("history")),
        };
        let (node, report) = Node::open(node_config, now_ms())?;
        // After the journal's lock: a second start on a running venue's
        // directory must not write a token the running one does not know.
        let token = admin_token(&config.data_dir)?;
        let last_seq = report
            .recovery
            .last_seq
            .map_or_else(|| "none".to_string(), |s| s.to_string());
        let open_report = format!(
            "journal: {} records, last seq {}{}; replayed {} commands{}",
            report.recovery.records,
            last_seq,
            report
                .recovery
                .truncated_tail
                .as_ref()
                .filter(|t| t.kind == journal::ProblemKind::TornTail)
                .map_or(String::new(), |t| format!(
                    ", torn tail cut at {} offset {} ({} bytes)",
                    t.segment.display(),
                    t.offset,
                    t.bytes_dropped
                )),
            report.replayed,
            report
                .from_snapshot
                .map_or(String::new(), |s| format!(" after snapshot {s}")),
        );
        tracing::info!("{open_report}");
        let cut = report.recovery.truncated_tail.as_ref();
        if let Some(whole) = cut.filter(|t| t.kind == journal::ProblemKind::CutAfterSeal) {
            tracing::warn!(
                "journal segment {} was cut short after its seal at byte offset {} ({}); \
                 written back to its full length (--truncate-corrupt-journal): no record was lost; \
                 the journal ends at seq {}",
                whole.segment.display(),
                whole.offset,
                whole.reason,
                last_seq,
            );
        } else if let Some(cut) = cut.filter(|t| t.kind != journal::ProblemKind::TornTail) {
            // Not a crash's leftover: acknowledged commands may be gone.
            // A cut at offset 0 removes the damaged segment itself.
            let removed: Vec<String> = cut
                .segments_removed
                .iter()
                .filter(|p| !(cut.offset == 0 && **p == cut.segment))
                .map(|p| p.display().to_string())
                .collect();
            let rest = if cut.offset == 0 {
                "that whole segment".to_string()
            } else {
                format!("the rest of that segment ({} bytes)", cut.bytes_dropped)
            };
            tracing::warn!(
                "journal cut at damage (--truncate-corrupt-journal): {} byte offset {} ({}); \
                 {rest} and {} later segment(s) [{}] are gone, \
                 with every command they held; the journal now ends at seq {}",
                cut.segment.display(),
                cut.offset,
                cut.reason,
                removed.len(),
                removed.join(", "),
                last_seq,
            );
        }
        for stale in &report.stale_snapshots {
            tracing::warn!(
                "set aside a snapshot past the end of the cut journal: {}",
                stale.display()
            );
        }
        for skipped in &report.skipped_snapshots {
            tracing::warn!("skipped a snapshot: {skipped}");
        }
        if let Some((from, to, seq)) = report.rules_moved {
            // An upgrade changes what later commands do (docs/decisions.md,
            // "Versions of the business rules"), and may itself cancel
            // orders: say so where the operator looks.
            tracing::warn!(
                "business rules moved from version {from} to {to} at seq {seq}: \
                 the journal before it keeps the rules it was written with \
                 (`updown journal dump --kind set_rules --events` shows what the move did)"
            );
        }
        // The venue's settings are journaled when the journal is made. Its
        // environment is fixed for the life of the data directory (every
        // key belongs to one); the others may change, as a journaled
        // command, so that the change is on record for auditors.
        let journaled = node.state().config.clone();
        if journaled.environment != venue.environment {
            return Err(StartError::Config(format!(
                "environment is {} in the configuration, but this data directory ({}) is a {} venue: \
                 the environment of a venue is fixed for the life of its data (every key belongs to one)",
                venue.environment.as_str(),
                config.data_dir.display(),
                journaled.environment.as_str()
            )));
        }
        let venue_changes = journaled != venue;
        let journal_seq = node.state().last_seq;
        let history = node.history();
        let tail_ms = config.history_tail_secs.saturating_mul(1000);
        let retention_changes = node.state().retention.tail_ms != tail_ms;
        let existing: Vec<String> = node
            .state()
            .series
            .iter()
            .map(|s| s.config.ticker.clone())
            .collect();
        // A series is created once, from the configuration of the first
        // start that names it; later changes to it in the file are not
        // applied (its windows and their fees are on record): say so.
        for wanted in &series_configs {
            let Some(series) = node.state().series_by_ticker(&wanted.ticker) else {
                continue;
            };
            if *wanted != series.config {
                tracing::warn!(
                    series = %wanted.ticker,
                    "the configuration changes this series, which exists already: the change is not applied (a series keeps the settings it was created with)"
                );
            }
        }
        // The simulator prints for every series the journal has, not only
        // those still in the file (their windows would stall unsettled),
        // going on from each symbol's last journaled price.
        let mut simulated: BTreeMap<String, f64> = BTreeMap::new();
        for series in &node.state().series {
            simulated.insert(series.config.symbol.clone(), 100.0);
        }
        let add_series = config.series_listed || existing.is_empty();
        for s in config.series.iter().filter(|_| add_series) {
            simulated.insert(s.symbol.clone(), s.sim_start_price.unwrap_or(100.0));
        }
        for (symbol, price) in simulated.iter_mut() {
            if let Some((_, last_e8)) = node.state().prices.get(symbol).and_then(|p| p.latest()) {
                *price = last_e8 as f64 / 100_000_000.0;
            }
        }
        let metrics = Arc::new(Metrics::default());
        let lockout = Arc::new(Lockout::new(
            config.lockout_failures,
            Duration::from_secs(config.lockout_secs),
        ));
        let failures: crate::engine::FailureSink = lockout.clone();
        let settings = EngineSettings {
            environment,
            orders_per_second: config.orders_per_second,
            orders_burst: config.orders_burst,
            snapshot_every: config.snapshot_every,
            snapshots_keep: config.snapshots_keep,
            request_timeout: Duration::from_millis(config.request_timeout_ms),
            queue_capacity: config.queue_capacity,
            sync_spacing: Duration::from_micros(config.sync_spacing_us),
        };
        // The websocket publisher takes each committed batch's events.
        let (ws, events, publisher) = crate::ws::start(crate::ws::WsSettings {
            queue_capacity: config.ws_queue_capacity,
            ping_interval: Duration::from_millis(config.ws_ping_interval_ms),
        })
        .map_err(thread("websocket publisher"))?;
        if let Some(prints) = &price_file {
            // What the operator should know of the file, while the state
            // (its series and last prices) is at hand.
            prints.warn_at_start(node.state(), &series_configs, config.price_file_speed);
        }
        let engine = Engine::start(node, settings, metrics.clone(), failures, events)
            .map_err(thread("sequencer"))?;
        let submitter = engine.submitter.clone();

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(config.workers)
            .thread_name("gateway")
            .enable_all()
            .build()
            .map_err(thread("gateway runtime"))?;

        if venue_changes {
            let reply = runtime.block_on(submitter.internal(Command::Configure(venue.clone())));
            accepted(reply, "the venue's settings")?;
            // A warning: a start without the usual --config puts the
            // defaults back over what the venue ran with.
            tracing::warn!(
                practice_book_open = venue.practice_book_open,
                account_risk_cap_cents = venue.account_risk_cap_cents,
                was_practice_book_open = journaled.practice_book_open,
                was_account_risk_cap_cents = journaled.account_risk_cap_cents,
                "venue settings changed from the journal's by this start's configuration"
            );
        }

        // The history tail is journaled, so replay evicts exactly as the
        // live run did; a changed setting is a new command.
        if retention_changes {
            let reply = runtime.block_on(submitter.internal(Command::SetRetention { tail_ms }));
            accepted(reply, "history_tail_secs")?;
            tracing::info!(tail_ms, "history tail set");
        }

        // Series from the configuration that the journal does not have yet;
        // the built-in list only for a venue that has no series.
        if !add_series {
            tracing::info!(
                series = existing.len(),
                "no series listed in the configuration: the venue goes on with the series it has (the built-in list is for a new venue)"
            );
        }
        for series in series_configs
            .into_iter()
            .filter(|s| add_series && !existing.contains(&s.ticker))
        {
            let ticker = series.ticker.clone();
            let reply = runtime.block_on(submitter.internal(Command::CreateSeries(series)));
            accepted(reply, &format!("series {ticker}"))?;
            tracing::info!(series = %ticker, "series created");
        }

        let feed_stop = Arc::new(AtomicBool::new(false));
        let feed = if let Some(prints) = price_file {
            tracing::info!(
                file = %config.price_file.as_deref().unwrap_or(Path::new("")).display(),
                prints = prints.prints.len(),
                symbols = prints.symbols.len(),
                recorded_span_ms = prints.span_ms(),
                speed = config.price_file_speed,
                looping = config.price_file_loop,
                "replaying recorded prints instead of the price simulator"
            );
            Some(
                crate::feed::start_file(
                    submitter.clone(),
                    prints,
                    config.price_file_speed,
                    config.price_file_loop,
                    Duration::from_millis(config.price_interval_ms),
                    feed_stop.clone(),
                )
                .map_err(thread("price file"))?,
            )
        } else if config.price_simulator {
            Some(
                crate::feed::start(
                    submitter.clone(),
                    simulated,
                    Duration::from_millis(config.price_interval_ms),
                    // A restart goes on with other steps, not the same walk
                    // again (reproducible from the same journal).
                    config.price_seed ^ journal_seq.wrapping_mul(0x9E37_79B9_7F4A_7C15),
                    feed_stop.clone(),
                )
                .map_err(thread("price simulator"))?,
            )
        } else {
            None
        };

        let app = Arc::new(App {
            submitter: submitter.clone(),
            environment,
            lockout,
            openapi: OPENAPI,
            ws: ws.clone(),
            history,
        });
        let admin = Arc::new(Admin {
            submitter: submitter.clone(),
            token: token.clone(),
            environment,
        });
        let shutdown = Arc::new(Notify::new());
        let limits = crate::conns::Limits {
            per_address: config.http_connections_per_address,
            total: crate::conns::total_within_descriptor_limit(config.http_connections_max),
            idle: Duration::from_secs(config.http_idle_timeout_secs),
        };
        let (addr, admin_addr, servers) = runtime.block_on(async {
            // Connections are taken from here on: during the replay a
            // client was refused, not left hanging in the backlog.
            let public = listen(public, config.listen)?;
            let private = listen(private, config.admin_listen)?;
            let addr = public.local_addr().map_err(|error| StartError::Listen {
                addr: config.listen,
                error,
            })?;
            let admin_addr = private.local_addr().map_err(|error| StartError::Listen {
                addr: config.admin_listen,
                error,
            })?;
            let servers = vec![
                tokio::spawn(serve(
                    crate::conns::Guarded::new(public, limits, Some(metrics.clone())),
                    rest::router(app),
                    shutdown.clone(),
                )),
                tokio::spawn(serve(
                    crate::conns::Guarded::new(
                        private,
                        crate::conns::Limits {
                            per_address: crate::conns::ADMIN_CONNECTIONS_MAX,
                            total: crate::conns::ADMIN_CONNECTIONS_MAX,
                            ..limits
                        },
                        None,
                    ),
                    admin::router(admin),
                    shutdown.clone(),
                )),
            ];
            Ok::<_, StartError>((addr, admin_addr, servers))
        })?;
        let server_file = serde_json::json!({
            "listen": addr.to_string(),
            "admin_listen": admin_addr.to_string(),
            "pid": std::process::id(),
        });
        // Where the admin CLI finds the venue: written whole or not at all
        // (a full disk left it empty, and every `updown admin` failed on
        // it without a word from the server).
        if let Err(e) = write_whole(
            &server_file_path(&config.data_dir),
            &server_file.to_string(),
            0o644,
        ) {
            tracing::warn!(
                error = %e,
                "server.json could not be written: `updown admin` will not find this venue"
            );
        }
        Ok(Server {
            addr,
            admin_addr,
            admin_token: token,
            data_dir: config.data_dir.clone(),
            engine,
            runtime: Some(runtime),
            shutdown,
            feed_stop,
            feed,
            servers,
            submitter,
            open_report,
            ws,
            publisher: Some(publisher),
        })
    }

    /// The runtime, for callers that drive the venue in-process.
    pub fn runtime(&self) -> &tokio::runtime::Runtime {
        self.runtime.as_ref().expect("running")
    }

    /// Graceful stop: stop accepting, let in-flight requests finish, drain
    /// the sequencer, sync the journal and write a snapshot.
    pub fn stop(mut self) {
        self.stop_inner();
    }

    /// Whether the sequencer thread has ended without being asked to (a
    /// bug): nothing can be done through the venue any more, reads
    /// included.
    pub fn sequencer_died(&self) -> bool {
        self.engine.died()
    }

    /// The venue's metrics; after `stop`, `journal_failed` says whether
    /// the journal failed at any time (a full disk, an I/O error), its
    /// last sync at shutdown included.
    pub fn metrics(&self) -> Arc<Metrics> {
        self.submitter.metrics.clone()
    }

    fn stop_inner(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        // Websocket connections close with 1001 before the listeners stop.
        self.ws.shutdown();
        self.shutdown.notify_waiters();
        for handle in self.servers.drain(..) {
            let _ = runtime
                .block_on(async { tokio::time::timeout(Duration::from_secs(5), handle).await });
        }
        self.feed_stop.store(true, Ordering::SeqCst);
        if let Some(feed) = self.feed.take() {
            let _ = feed.join();
        }
        self.engine.shutdown();
        // The sequencer thread dropped its event sink: the publisher ends.
        if let Some(publisher) = self.publisher.take() {
            let _ = publisher.handle.join();
        }
        runtime.shutdown_timeout(Duration::from_secs(1));
        let _ = std::fs::remove_file(server_file_path(&self.data_dir));
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// Binds a socket to `addr` (so a taken address fails the start before
/// anything is journaled) without listening on it yet.
/// Whether two listening addresses would take one port: the same port
/// (not 0, which the system chooses) on the same address (an IPv4-mapped
/// IPv6 one is its IPv4 one), or on a wildcard address that covers the
/// other: `0.0.0.0` every IPv4 address, `[::]` every address (dual stack,
/// Linux's default).
fn share_a_port(a: SocketAddr, b: SocketAddr) -> bool {
    let covers = |x: std::net::IpAddr, y: std::net::IpAddr| {
        x == y || (x.is_unspecified() && (x.is_ipv6() || y.is_ipv4()))
    };
    let (x, y) = (a.ip().to_canonical(), b.ip().to_canonical());
    a.port() == b.port() && a.port() != 0 && (covers(x, y) || covers(y, x))
}

fn reserve(addr: SocketAddr) -> Result<tokio::net::TcpSocket, StartError> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()
    } else {
        tokio::net::TcpSocket::new_v6()
    };
    let socket = socket.map_err(|error| StartError::Listen { addr, error })?;
    // SO_REUSEADDR lets a restart take its port back while connections of
    // the stopped venue linger in TIME_WAIT. Not for port 0: between bind
    // and listen, two sockets with it may be given the same free port.
    socket
        .set_reuseaddr(addr.port() != 0)
        .and_then(|()| socket.bind(addr))
        .map_err(|error| StartError::Listen { addr, error })?;
    Ok(socket)
}

/// Starts listening on a reserved socket (inside the runtime).
fn listen(
    socket: tokio::net::TcpSocket,
    addr: SocketAddr,
) -> Result<tokio::net::TcpListener, StartError> {
    socket
        .listen(1024)
        .map_err(|error| StartError::Listen { addr, error })
}

async fn serve(listener: crate::conns::Guarded, router: axum::Router, shutdown: Arc<Notify>) {
    // Through `tap_io` (doing nothing) for axum's `ConnectInfo<SocketAddr>`
    // of a listener that is not its own.
    let listener = axum::serve::ListenerExt::tap_io(listener, |_| {});
    let service = router.into_make_service_with_connect_info::<SocketAddr>();
    let result = axum::serve(listener, service)
        .with_graceful_shutdown(async move { shutdown.notified().await })
        .await;
    if let Err(e) = result {
        tracing::error!(error = %e, "server stopped");
    }
}

/// A start-up command's reply: accepted, or a configuration error naming
/// the setting (`what`) with the sequencer's reason.
fn accepted(reply: Result<Reply, crate::error::ApiError>, what: &str) -> Result<(), StartError> {
    match reply {
        Ok(Reply::Ok) => Ok(()),
        Ok(Reply::Rejected(r)) => Err(StartError::Config(format!("{what}: {}", r.message))),
        Ok(other) => Err(StartError::Config(format!("{what}: {other:?}"))),
        Err(e) => Err(StartError::Config(format!("{what}: {}", e.message))),
    }
}

#[cfg(test)]
mod tests {
    use super::share_a_port;

    #[test]
    fn addresses_that_share_a_port() {
        let clash = |a: &str, b: &str| share_a_port(a.parse().unwrap(), b.parse().unwrap());
        assert!(clash("127.0.0.1:80", "127.0.0.1:80"));
        assert!(clash("0.0.0.0:80", "127.0.0.1:80"));
        assert!(clash("127.0.0.1:80", "0.0.0.0:80"));
        assert!(clash("[::]:80", "127.0.0.1:80"));
        assert!(clash("[::]:80", "[::1]:80"));
        assert!(clash("[::ffff:127.0.0.1]:80", "127.0.0.1:80"));
        assert!(!clash("127.0.0.1:80", "127.0.0.1:81"));
        assert!(!clash("127.0.0.1:80", "127.0.0.2:80"));
        assert!(!clash("0.0.0.0:80", "[::1]:80"));
        assert!(!clash("127.0.0.1:0", "127.0.0.1:0"));
    }
}
