//! `updown`: the one command of the venue.
//!
//! - `updown serve` starts the venue (REST, admin, sequencer, journal, price
//!   simulator) from embedded defaults or a TOML file.
//! - `updown admin ...` runs it as an operator through the admin endpoint,
//!   finding the server and its token from the data directory.
//! - `updown journal|replay|snapshot` are the auditor's tools: read the
//!   journal, rebuild the venue as of any seq or time, snapshot offline.
//! - `updown loadgen` drives a running venue at a fixed arrival rate and
//!   reports latency percentiles (see `loadgen.rs`).
//!
//! Exit status, as `diff` and `cmp` use it: 0 done; 1 a check found what
//! it checks for (a damaged journal, journals that differ: a [`Finding`]);
//! 2 anything else went wrong (bad arguments, I/O, a refusal).

mod admin;
mod describe;
mod journal_cmd;
mod loadgen;
mod replay_cmd;
mod scan;
mod timefmt;

/// Large blocks on transparent huge pages (`gateway::alloc`): the tables
/// of the sequencer grow without a page fault every few commands.
#[global_allocator]
static ALLOC: gateway::alloc::HugePages = gateway::alloc::HugePages;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use gateway::{Server, ServerConfig};

#[derive(Parser)]
#[command(
    name = "updown",
    version,
    about = "An exchange for short-window up/down markets"
)]
struct Cli {
    #[command(subcommand)]
    command: Top,
}

#[derive(Subcommand)]
enum Top {
    /// Start the venue.
    Serve(ServeArgs),
    /// Operate a running venue.
    Admin(admin::AdminArgs),
    /// Read the journal: dump, find, tail, stats, verify.
    Journal(journal_cmd::JournalArgs),
    /// Rebuild the venue as of a seq or time; export or compare.
    Replay(replay_cmd::ReplayArgs),
    /// Write a snapshot from the journal, offline.
    Snapshot(replay_cmd::SnapshotArgs),
    /// Drive a running venue with open-loop traffic and report latency.
    Loadgen(loadgen::LoadgenArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Public REST address (overrides the config file; 127.0.0.1:8080 when
    /// neither gives one).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// Admin address (overrides the config file; 127.0.0.1:8081 when neither
    /// gives one). Keep it on loopback.
    #[arg(long)]
    admin_listen: Option<std::net::SocketAddr>,
    /// Data directory: journal, snapshots, history, admin token (overrides
    /// the config file; ./updown-data when neither gives one).
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// TOML configuration file.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Create, once, a funded demo account and print a read+trade test key.
    #[arg(long)]
    demo: bool,
    /// Replay this file of recorded prints (lines `t_ms,symbol,price`, or
    /// JSON as the admin ingest path or the websocket's `prices` channel
    /// has them) instead of the price simulator (overrides the config file).
    #[arg(long)]
    price_file: Option<PathBuf>,
    /// Log as JSON lines. The level and filters come from the UPDOWN_LOG
    /// environment variable (tracing's syntax: `debug`,
    /// `info,gateway=debug`; `info` when unset).
    #[arg(long)]
    log_json: bool,
    /// Start on a journal damaged in the middle by cutting it back to the
    /// last good record; everything after that record is lost.
    #[arg(long)]
    truncate_corrupt_journal: bool,
}

fn main() {
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Top::Serve(_) | Top::Replay(_) | Top::Snapshot(_) | Top::Journal(_)
    ) {
        // This thread replays journals (the venue's start, the auditors'
        // tools): its growing state is faulted in ahead, as the sequencer
        // thread's is (`gateway::alloc`).
        gateway::alloc::populate_ahead_on_this_thread();
    }
    let result = match cli.command {
        Top::Serve(args) => serve(args),
        Top::Admin(args) => admin::run(args),
        Top::Journal(args) => journal_cmd::run(args),
        Top::Replay(args) => replay_cmd::run(args),
        Top::Snapshot(args) => replay_cmd::snapshot_cmd(args),
        Top::Loadgen(args) => loadgen::run(args),
    };
    if let Err(e) = result {
        eprintln!("error: {e:#}");
        std::process::exit(if e.downcast_ref::<Finding>().is_some() {
            1
        } else {
            2
        });
    }
}

/// What a check found, as opposed to a failure to check: exit status 1
/// where an error is 2, so that a script can tell a damaged journal from
/// one it could not read.
#[derive(Debug)]
pub struct Finding(pub String);

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Finding {}

fn serve(args: ServeArgs) -> Result<()> {
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            ServerConfig::from_toml(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?
        }
        None => ServerConfig::default(),
    };
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(admin) = args.admin_listen {
        config.admin_listen = admin;
    }
    if let Some(dir) = args.data_dir {
        config.data_dir = dir;
    }
    if let Some(file) = args.price_file {
        config.price_file = Some(file);
    }
    config.log_json |= args.log_json;
    config.truncate_corrupt_journal |= args.truncate_corrupt_journal;
    init_logs(config.log_json);

    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGTERM, signal_hook::consts::SIGINT] {
        signal_hook::flag::register(signal, stop.clone()).context("installing signal handlers")?;
    }
    // A practice feature, refused on a live venue before it starts (it
    // would fund an account with $10,000 and print a live key).
    if args.demo
        && config.environment().map_err(anyhow::Error::msg)? != sequencer::types::Environment::Test
    {
        bail!("--demo funds a practice account and prints a test key: it runs on a test venue only (environment = \"test\")");
    }
    let server = Server::start(config.clone()).context("starting the venue")?;
    let say = Console {
        json: config.log_json,
    };
    say.line(format_args!(
        "updown {} listening on http://{}/v1 (admin on {}, data in {})",
        env!("CARGO_PKG_VERSION"),
        server.addr,
        server.admin_addr,
        config.data_dir.display()
    ));
    say.line(&server.open_report);
    if args.demo {
        demo(&server, &config, say)?;
    }
    let mut died = false;
    while !stop.load(Ordering::SeqCst) {
        std::thread::sleep(std::time::Duration::from_millis(100));
        if server.sequencer_died() {
            // Every request would be answered 503 for good: better a
            // process that ends, for its supervisor to see and restart.
            tracing::error!("the sequencer thread ended unexpectedly; stopping the venue");
            died = true;
            break;
        }
    }
    // To the console and the log stream both (a pipeline reads the logs only).
    let announce = |text: &str| {
        say.line(text);
        tracing::info!("{text}");
    };
    announce("shutting down: finishing requests in flight and flushing the journal");
    let metrics = server.metrics();
    server.stop();
    let journal_failed = metrics
        .journal_failed
        .load(std::sync::atomic::Ordering::Relaxed)
        != 0;
    if died {
        bail!("the sequencer thread ended unexpectedly (see the log above); a restart replays the journal");
    }
    if journal_failed {
        // Not a clean run, for whoever supervises the process.
        bail!("the journal failed while the venue ran (see the log above) and writes were refused from then on; nothing acknowledged is lost: fix the cause (disk space, the disk) and start again");
    }
    announce("stopped");
    Ok(())
}

/// Where `serve` says things to the person who started it: standard
/// output, or, when the logs are JSON lines on standard output, standard
/// error, so that standard output holds nothing but JSON.
#[derive(Clone, Copy)]
struct Console {
    json: bool,
}

impl Console {
    fn line(self, text: impl std::fmt::Display) {
        if self.json {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }
}

fn init_logs(json: bool) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("UPDOWN_LOG").unwrap_or_else(|_| "info".into());
    if json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        // Colours for a terminal only: a file or journald got escape codes.
        use std::io::IsTerminal;
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .init();
    }
}

/// Creates the demo account and key once; later starts say where it is.
fn demo(server: &Server, config: &ServerConfig, say: Console) -> Result<()> {
    let marker = config.data_dir.join("demo-account.json");
    if let Ok(text) = std::fs::read_to_string(&marker) {
        say.line(format_args!("demo account already created: {text}"));
        say.line(
            "its key was printed when it was created; issue another with `updown admin key issue`.",
        );
        return Ok(());
    }
    let client = admin::Client::new(server.admin_addr.to_string(), server.admin_token.clone());
    let account = client.post("/admin/accounts", serde_json::json!({ "cash": "10000.00" }))?;
    let id = account["account_id"].as_u64().context("account id")?;
    client.post(
        &format!("/admin/accounts/{id}/flags"),
        serde_json::json!({ "terms_accepted": true, "trading_allowed": true }),
    )?;
    let key = client.post(
        "/admin/keys",
        serde_json::json!({ "account": id, "scopes": "read,trade", "name": "demo", "max_order_usd": 1000, "max_daily_usd": 100000 }),
    )?;
    let Some(secret_key) = key["key"].as_str() else {
        bail!("the key was not issued: {key}")
    };
    std::fs::write(
        &marker,
        serde_json::json!({ "account_id": id, "key_id": key["key_id"] }).to_string(),
    )?;
    say.line(format_args!(
        "demo account {id} with $10,000.00, terms accepted and trading allowed"
    ));
    say.line(format_args!(
        "demo key (shown once, read+trade): {secret_key}"
    ));
    say.line(format_args!(
        "try: curl -H 'Authorization: Bearer {secret_key}' http://{}/v1/portfolio/balance",
        server.addr
    ));
    Ok(())
}
