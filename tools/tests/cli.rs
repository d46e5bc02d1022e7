//! The `updown` binary as an operator uses it: `serve` in a child process,
//! `admin` commands against it (tables and `--json`), clear errors for bad
//! admin input, and a graceful SIGTERM that keeps everything for the restart.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{http, Launch, Serve, BIN};
use serde_json::Value;

/// `updown serve` in a child; with `--demo`, the test key it printed (none
/// when the demo account existed already).
fn serve(dir: &Path, demo: bool) -> (Serve, Option<String>) {
    let mut launch = Launch::new(dir, None);
    if demo {
        launch = launch.arg("--demo");
    }
    let serve = launch.start();
    let demo_key = demo
        .then(|| {
            serve.wait_line(|l| l.contains("tk_test_") || l.starts_with("demo account already"))
        })
        .and_then(|line| {
            let at = line.find("tk_test_")?;
            line[at..].split_whitespace().next().map(str::to_string)
        });
    (serve, demo_key)
}

fn admin(dir: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(BIN)
        .arg("admin")
        .arg("--data-dir")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into(),
        String::from_utf8_lossy(&output.stderr).into(),
    )
}

fn admin_json(dir: &Path, args: &[&str]) -> Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let (ok, out, err) = admin(dir, &all);
    assert!(ok, "admin {args:?} failed: {err}");
    serde_json::from_str(&out).unwrap_or_else(|_| panic!("admin {args:?} printed no JSON: {out}"))
}

#[test]
fn admin_commands_work_and_refuse_bad_input_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, _) = serve(dir.path(), false);
    let d = dir.path();

    let created = admin_json(d, &["account", "create", "--cash", "250.50"]);
    let id = created["account_id"].as_u64().unwrap().to_string();
    admin_json(d, &["account", "accept-terms", &id]);
    admin_json(d, &["account", "allow-trading", &id]);
    admin_json(d, &["account", "deposit", &id, "10"]);
    admin_json(d, &["account", "withdraw", &id, "0.50"]);
    let shown = admin_json(d, &["account", "show", &id]);
    assert_eq!(shown["cash"], "260.00");
    assert_eq!(shown["terms_accepted"], true);
    assert_eq!(shown["trading_allowed"], true);

    let key = admin_json(
        d,
        &[
            "key",
            "issue",
            "--account",
            &id,
            "--scopes",
            "read,trade",
            "--name",
            "bot",
            "--max-order-usd",
            "50",
            "--series",
            "btc-1m,btc-5m",
            "--ip",
            "127.0.0.1",
            "--expires-days",
            "30",
        ],
    );
    let secret_key = key["key"].as_str().unwrap().to_string();
    assert!(secret_key.starts_with("tk_test_"));
    let key_id = key["key_id"].as_str().unwrap().to_string();
    let listed = admin_json(d, &["key", "list", "--account", &id]);
    let listed_text = listed.to_string();
    assert!(listed_text.contains(&key_id));
    let secret = secret_key.rsplit('_').next().unwrap();
    assert!(
        !listed_text.contains(secret),
        "key list never shows a secret"
    );
    assert_eq!(listed["keys"][0]["limits"]["max_order_usd"], 50);

    // The readable form is a table with a header row.
    let (ok, table, _) = admin(d, &["key", "list", "--account", &id]);
    assert!(ok);
    assert!(table.lines().next().unwrap().contains("key_id"));
    assert!(table.contains(&key_id));
    let (ok, series, _) = admin(d, &["series", "list"]);
    assert!(ok && series.contains("btc-15m") && series.contains("aapl-60m"));
    let markets = admin_json(d, &["markets", "list"]);
    assert!(markets["markets"].as_array().unwrap().len() >= 5);
    // Narrowed by series and status.
    let series = markets["markets"][0]["series_ticker"]
        .as_str()
        .unwrap()
        .to_string();
    let narrowed = admin_json(
        d,
        &[
            "markets",
            "list",
            "--series",
            &series,
            "--status",
            "scheduled",
        ],
    );
    let narrowed = narrowed["markets"].as_array().unwrap();
    assert!(!narrowed.is_empty());
    assert!(narrowed
        .iter()
        .all(|m| m["series_ticker"] == series.as_str() && m["status"] == "scheduled"));
    let (ok, _, err) = admin(d, &["markets", "list", "--status", "sleeping"]);
    assert!(!ok && err.contains("status"), "{err}");
    // The live hashes, in the form `updown replay` prints them.
    let state = admin_json(d, &["state"]);
    assert!(state["seq"].as_u64().unwrap() > 0, "{state}");
    for hash in ["state_hash", "event_hash"] {
        let text = state[hash].as_str().unwrap();
        assert!(
            text.len() == 16 && text.bytes().all(|b| b.is_ascii_hexdigit()),
            "{state}"
        );
    }

    // The key works, and pausing refuses its orders.
    let (status, account) = http(&server.addr, "GET", "/account", &secret_key, None);
    assert_eq!(status, 200, "{account}");
    admin_json(d, &["trading", "pause"]);
    let body = format!(
        r#"{{"market_ticker":"{}","outcome":"up","action":"buy","price":"0.10","count":"1","client_order_id":"p1"}}"#,
        markets["markets"][0]["ticker"].as_str().unwrap()
    );
    let place = || {
        http(
            &server.addr,
            "POST",
            "/portfolio/orders",
            &secret_key,
            Some(&body),
        )
    };
    let (status, refused) = place();
    assert_eq!(
        (status, refused["code"].as_str()),
        (503, Some("TRADING_PAUSED"))
    );
    admin_json(d, &["trading", "resume"]);
    // A pause's end may be given as RFC 3339 too, and readable output shows
    // times as UTC, not epoch milliseconds.
    admin_json(d, &["trading", "pause", "--until", "2099-01-01T00:00:00Z"]);
    let (status, refused) = place();
    assert_eq!(status, 503, "{refused}");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("until 4070908800000"),
        "{refused}"
    );
    admin_json(d, &["trading", "resume"]);
    let (ok, text, err) = admin(d, &["key", "list", "--account", "1"]);
    assert!(ok, "{err}");
    assert!(
        text.contains("Z ") || text.contains("Z\n"),
        "times as UTC: {text}"
    );
    let longest_digits = text
        .split(|c: char| !c.is_ascii_digit())
        .map(str::len)
        .max()
        .unwrap_or(0);
    assert!(longest_digits < 13, "no epoch milliseconds: {text}");
    // A key's limits replaced; a trade key keeps a daily limit (the default).
    admin_json(
        d,
        &[
            "key",
            "limits",
            &key_id,
            "--max-order-usd",
            "75",
            "--series",
            "btc-1m",
        ],
    );
    let limits = &admin_json(d, &["key", "list", "--account", &id])["keys"][0]["limits"];
    assert_eq!(limits["max_order_usd"], 75, "{limits}");
    assert_eq!(limits["max_daily_usd"], 500, "{limits}");
    assert_eq!(limits["markets"], serde_json::json!(["btc-1m"]), "{limits}");
    // The account's risk cap, set and back to the venue's.
    let show = |d| admin_json(d, &["account", "show", &id]);
    admin_json(d, &["account", "risk-cap", &id, "250"]);
    let capped = show(d);
    assert_eq!(capped["risk_cap"], "250.00", "{capped}");
    assert_eq!(capped["risk_cap_is_default"], false, "{capped}");
    admin_json(d, &["account", "risk-cap", &id, "default"]);
    let default = show(d);
    assert_ne!(default["risk_cap"], "250.00", "{default}");
    assert_eq!(default["risk_cap_is_default"], true, "{default}");
    assert_eq!(default["at_risk"], "0.00", "{default}");
    // Text in a path or a query is one value, not more of the URL: a key
    // id with slashes is a key that does not exist, a series with `&` a
    // bad ticker (not a second filter).
    let (ok, _, err) = admin(d, &["key", "revoke", "ABC/../x"]);
    assert!(!ok && err.contains("key ABC/../x does not exist"), "{err}");
    let (ok, _, err) = admin(
        d,
        &[
            "markets",
            "list",
            "--series",
            &format!("{series}&status=open"),
        ],
    );
    assert!(!ok && err.contains("series_ticker"), "{err}");
    admin_json(d, &["key", "revoke", &key_id]);
    let (status, revoked) = http(&server.addr, "GET", "/account", &secret_key, None);
    assert_eq!(
        (status, revoked["message"].as_str()),
        (401, Some("This API key has been revoked."))
    );

    // Bad input answers with a clear error and a failing exit status.
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "key".into(),
                "issue".into(),
                "--account".into(),
                "999".into(),
            ],
            "account 999 does not exist",
        ),
        (
            vec!["account".into(), "deposit".into(), "999".into(), "5".into()],
            "account 999 does not exist",
        ),
        (
            vec![
                "key".into(),
                "issue".into(),
                "--account".into(),
                id.clone(),
                "--expires-days".into(),
                "366".into(),
            ],
            "1 to 365",
        ),
        (
            vec![
                "key".into(),
                "issue".into(),
                "--account".into(),
                id.clone(),
                "--expires-days".into(),
                "0".into(),
            ],
            "1 to 365",
        ),
        (
            [
                vec!["key".into(), "issue".into(), "--account".into(), id.clone()],
                (0..11)
                    .flat_map(|i| vec!["--ip".to_string(), format!("10.0.0.{i}")])
                    .collect(),
            ]
            .concat(),
            "at most 10 addresses",
        ),
        (
            vec![
                "key".into(),
                "issue".into(),
                "--account".into(),
                id.clone(),
                "--scopes".into(),
                "trade".into(),
                "--series".into(),
                "nosuch-1m".into(),
            ],
            "No series nosuch-1m.",
        ),
        (
            vec![
                "key".into(),
                "issue".into(),
                "--account".into(),
                id.clone(),
                "--max-order-usd".into(),
                "NaN".into(),
            ],
            "not a positive dollar amount",
        ),
        (
            vec![
                "account".into(),
                "withdraw".into(),
                id.clone(),
                "100000".into(),
            ],
            "INSUFFICIENT_BALANCE",
        ),
        (
            vec!["account".into(), "deposit".into(), id.clone(), "abc".into()],
            "dollar amount",
        ),
        (
            vec![
                "account".into(),
                "deposit".into(),
                id.clone(),
                "99999999999999".into(),
            ],
            "must be at most $10,000,000,000",
        ),
        (
            vec![
                "key".into(),
                "limits".into(),
                key_id.clone(),
                "--max-daily-usd".into(),
                "10000000000.01".into(),
            ],
            "max_daily_usd must be positive and at most $10,000,000,000",
        ),
        (
            vec![
                "key".into(),
                "limits".into(),
                key_id.clone(),
                "--series".into(),
                "nosuch-1m".into(),
            ],
            "No series nosuch-1m.",
        ),
        (
            vec!["account".into(), "risk-cap".into(), id.clone(), "0".into()],
            "risk cap must be positive and at most $10,000,000,000",
        ),
    ];
    for (args, expected) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, _, err) = admin(d, &args);
        assert!(!ok, "{args:?} should fail");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    for _ in 0..5 {
        admin_json(d, &["key", "issue", "--account", &id, "--scopes", "read"]);
    }
    let (ok, _, err) = admin(d, &["key", "issue", "--account", &id]);
    assert!(!ok && err.contains("already has 5 active keys"), "{err}");

    // A venue killed leaves its server.json: the CLI says nothing answers
    // and nothing was sent (it said the endpoint "did not answer in time",
    // as if a deposit might have landed).
    let server_json = std::fs::read(d.join("server.json")).unwrap();
    assert!(server.sigterm().success());
    let (ok, _, err) = admin(d, &["series", "list"]);
    assert!(!ok && err.contains("no running server"), "{err}");
    std::fs::write(d.join("server.json"), server_json).unwrap();
    let (ok, _, err) = admin(d, &["account", "deposit", &id, "5"]);
    assert!(!ok, "a deposit to a stopped venue");
    assert!(
        err.contains("no venue answers") && err.contains("nothing was sent"),
        "{err}"
    );
}

#[test]
fn demo_then_sigterm_then_restart_keeps_the_account_and_its_orders() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, key) = serve(dir.path(), true);
    let key = key.expect("serve --demo prints a key");
    // The current window opens on the simulator's first print, just after
    // start-up; one closing within a minute (a run just before the hour)
    // would cancel the order across the restart, so wait for the next.
    let deadline = Instant::now() + Duration::from_secs(150);
    let ticker = loop {
        let (status, markets) = http(
            &server.addr,
            "GET",
            "/markets?series_ticker=aapl-60m&status=open",
            &key,
            None,
        );
        assert_eq!(status, 200);
        let m = &markets["markets"][0];
        if common::closes_after(m, 60_000) {
            break m["ticker"].as_str().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "an open aapl-60m window");
        std::thread::sleep(Duration::from_millis(50));
    };
    let body = format!(
        r#"{{"market_ticker":"{ticker}","outcome":"up","action":"buy","price":"0.20","count":"5","client_order_id":"keep-me"}}"#
    );
    let (status, placed) = http(&server.addr, "POST", "/portfolio/orders", &key, Some(&body));
    assert_eq!(status, 201, "{placed}");
    let (_, balance_before) = http(&server.addr, "GET", "/portfolio/balance", &key, None);
    assert!(server.sigterm().success(), "a graceful stop exits 0");

    let (mut again, again_key) = serve(dir.path(), true);
    assert!(again_key.is_none(), "the demo account is created once");
    let (status, order) = http(
        &again.addr,
        "GET",
        &format!(
            "/portfolio/orders/{}",
            placed["order"]["order_id"].as_str().unwrap()
        ),
        &key,
        None,
    );
    assert_eq!(status, 200);
    assert_eq!(order["order"]["client_order_id"], "keep-me");
    let (_, balance_after) = http(&again.addr, "GET", "/portfolio/balance", &key, None);
    assert_eq!(balance_before, balance_after);
    assert!(again.sigterm().success());
}

#[test]
fn a_journal_damaged_in_the_middle_stops_start_up_until_told_to_truncate() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, key) = serve(dir.path(), true);
    let key = key.unwrap();
    // More records after the demo account, so the damage is mid-log.
    for _ in 0..5 {
        http(&server.addr, "GET", "/account", &key, None);
    }
    assert!(server.sigterm().success());
    let segment = std::fs::read_dir(dir.path().join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "seg"))
        .unwrap();
    let mut bytes = std::fs::read(&segment).unwrap();
    // A byte inside the payload of an early record (after the 64-byte
    // segment header and the first 32-byte record header).
    bytes[64 + 32 + 8] ^= 0x5a;
    std::fs::write(&segment, &bytes).unwrap();

    let refused = Launch::new(dir.path(), None)
        .log("off")
        .try_start()
        .err()
        .expect("start-up refuses a damaged journal");
    let err = refused.stderr;
    assert!(
        err.contains(&segment.file_name().unwrap().to_string_lossy().to_string()),
        "{err}"
    );
    assert!(err.contains("offset"), "{err}");

    let mut recovered = Launch::new(dir.path(), None)
        .arg("--truncate-corrupt-journal")
        .log("off")
        .start();
    // The venue works on what was kept: the demo account's key came after
    // the damaged record, so it is gone, and new commands are journaled.
    let (status, refused) = http(&recovered.addr, "GET", "/account", &key, None);
    assert_eq!(
        (status, refused["message"].as_str()),
        (401, Some("Invalid API key."))
    );
    let (status, _) = http(&recovered.addr, "GET", "/markets", &key, None);
    assert_eq!(status, 200);
    assert!(recovered.sigterm().success());
}

/// A restart with a changed configuration: the environment is fixed for a
/// data directory's life (refused, saying so); other venue settings change
/// by a journaled command; a series dropped from the file keeps its
/// simulated prices, going on from its last journaled price.
#[test]
fn a_restart_with_a_changed_configuration_keeps_the_venue_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = common::Settings {
        price_simulator: true,
        price_interval_ms: 100,
        ..common::Settings::default()
    };
    let config = first.write(&dir.path().join("first.toml"));
    let mut serve = Launch::new(&data, Some(&config)).start();
    // The last journaled print of the series' symbol, and how many.
    let prints = |data: &Path| -> (usize, f64) {
        let lines = journaled_prints(data, common::SYMBOL);
        let last = lines.last().map_or(0, |p| p.0);
        (lines.len(), last as f64 / 1e8)
    };
    // Some prints of the series' symbol, then a graceful stop.
    common::eventually(
        || prints(&data).0 >= 3,
        || format!("no prints: {}", serve.stderr.text()),
    );
    assert!(serve.sigterm().success(), "{}", serve.stderr.text());
    let (printed, before) = prints(&data);

    // The other environment: refused, naming it, nothing changed.
    let live = dir.path().join("live.toml");
    std::fs::write(
        &live,
        first
            .toml()
            .replace("environment = \"test\"", "environment = \"live\""),
    )
    .unwrap();
    let Err(refused) = Launch::new(&data, Some(&live)).try_start() else {
        panic!("a live start on a test venue started");
    };
    assert!(
        refused
            .stderr
            .contains("environment is live in the configuration")
            && refused.stderr.contains("is a test venue"),
        "{}",
        refused.stderr
    );

    // --demo funds a practice account: refused on a live venue, before it
    // starts.
    let Err(refused) = Launch::new(&dir.path().join("live-data"), Some(&live))
        .arg("--demo")
        .try_start()
    else {
        panic!("--demo started on a live venue");
    };
    assert!(
        refused.stderr.contains("runs on a test venue only"),
        "{}",
        refused.stderr
    );
    assert!(!dir.path().join("live-data").join("journal").exists());

    // A file without the series and with another risk cap: the cap is
    // journaled as a change; the series' symbol still gets prices, from
    // where it was.
    let other = dir.path().join("other.toml");
    let text = first.toml();
    // (`series = []`: no series at all, not the default ones, which print
    // the same symbol.)
    let without_series = text[..text.find("[[series]]").unwrap()].to_string()
        + "price_simulator = true\naccount_risk_cap_usd = 5000\nseries = []\n";
    std::fs::write(
        &other,
        without_series.replacen("price_simulator = true\n", "", 1),
    )
    .unwrap();
    let mut serve = Launch::new(&data, Some(&other)).start();
    common::eventually(
        || prints(&data).0 > printed,
        || {
            format!(
                "the dropped series' symbol got no prints: {}",
                serve.stderr.text()
            )
        },
    );
    assert!(serve.sigterm().success(), "{}", serve.stderr.text());
    let configures = journaled(&data, "configure");
    assert_eq!(configures.len(), 2, "{configures:?}");
    let (printed_after, after) = prints(&data);
    assert!(
        printed_after > printed,
        "the dropped series' symbol still got prints"
    );
    assert!(
        (after / before - 1.0).abs() < 0.02,
        "the walk went on from {before}, not from a start price: {after}"
    );

    // A restart with no configuration file: the built-in series are for a
    // new venue; this one keeps its one series (they were added for good).
    let created = || journaled(&data, "create_series").len();
    assert_eq!(created(), 1);
    let mut serve = Launch::new(&data, None).start();
    assert!(serve.sigterm().success(), "{}", serve.stderr.text());
    assert_eq!(
        created(),
        1,
        "the built-in series were added to a venue that had one"
    );
    // A file that lists series adds those it does not have yet.
    let mut serve = Launch::new(&data, Some(&config)).start();
    assert!(serve.sigterm().success(), "{}", serve.stderr.text());
    assert_eq!(created(), 1);
    let more = dir.path().join("more.toml");
    std::fs::write(
        &more,
        first.toml()
            + "\n[[series]]\nticker = \"rel-b\"\nsymbol = \"X:ETHUSD\"\nwindow_minutes = 15\n",
    )
    .unwrap();
    let mut serve = Launch::new(&data, Some(&more)).start();
    assert!(serve.sigterm().success(), "{}", serve.stderr.text());
    assert_eq!(created(), 2, "a series listed in the file was not added");
}

/// The journal's records of one kind, as `journal dump --json` prints them.
fn journaled(data: &Path, kind: &str) -> Vec<Value> {
    let dump = Command::new(BIN)
        .args(["journal", "dump", "--json", "--kind", kind, "--data-dir"])
        .arg(data)
        .output()
        .unwrap();
    String::from_utf8_lossy(&dump.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A start that cannot serve (its address is taken) exits 2 naming the
/// address, says the cause once, and makes nothing, no data directory and
/// no journal: its first
/// configuration would have fixed the venue's environment and series for
/// the next start. The next start, on a free address, may be a live venue.
#[test]
fn a_start_that_cannot_listen_journals_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    for (flag, other) in [
        ("--listen", "--admin-listen"),
        ("--admin-listen", "--listen"),
    ] {
        let output = Command::new(BIN)
            .args(["serve", "--data-dir"])
            .arg(&data)
            .args([flag, &addr, other, "127.0.0.1:0"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{flag}: {err}");
        assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
        assert_eq!(err.matches("(os error").count(), 1, "the cause once: {err}");
        assert!(!data.exists(), "{flag}: the data directory was made");
    }
    // The two addresses on one port: each binds (SO_REUSEADDR) and they
    // clashed only at listen, after the journal was made. A wildcard
    // address covers the loopback one.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    drop(free);
    for (public, admin) in [
        (format!("127.0.0.1:{port}"), format!("127.0.0.1:{port}")),
        (format!("0.0.0.0:{port}"), format!("127.0.0.1:{port}")),
    ] {
        let output = Command::new(BIN)
            .args(["serve", "--data-dir"])
            .arg(&data)
            .args(["--listen", &public, "--admin-listen", &admin])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{public} {admin}: {err}");
        assert!(err.contains("take the same port"), "{err}");
        assert!(
            !data.exists(),
            "{public} {admin}: the data directory was made"
        );
    }
    let live = dir.path().join("live.toml");
    std::fs::write(&live, "environment = \"live\"\nprice_simulator = false\n").unwrap();
    let mut serve = Launch::new(&data, Some(&live)).start();
    assert!(serve.sigterm().success(), "{}", serve.stderr.text());
}

/// Settings the venue cannot run with are refused at start, naming the
/// setting (they used to be clamped without a word: a burst of 0 became 1,
/// a segment of 0 MiB became 1 MiB, a print interval of 0 became 10 ms).
#[test]
fn settings_out_of_range_are_refused_naming_them() {
    let dir = tempfile::tempdir().unwrap();
    for (setting, says) in [
        (
            "orders_per_second = 0",
            "orders_per_second must be at least 1",
        ),
        ("orders_burst = 0", "orders_burst must be at least 1"),
        ("segment_mib = 0", "segment_mib must be at least 1"),
        (
            "price_interval_ms = 0",
            "price_interval_ms must be at least 10",
        ),
        ("queue_capacity = 0", "queue_capacity must be at least 16"),
        ("workers = 0", "workers must be at least 1"),
        (
            "ws_queue_capacity = 0",
            "ws_queue_capacity must be at least 1",
        ),
        (
            "ws_ping_interval_ms = 0",
            "ws_ping_interval_ms must be at least 10",
        ),
        (
            "lockout_failures = 0",
            "lockout_failures must be at least 1",
        ),
        ("lockout_secs = 0", "lockout_secs must be at least 1"),
        (
            "sync_spacing_us = 100001",
            "sync_spacing_us must be at most 100000",
        ),
        (
            "durability = \"interval\"\ndurability_interval_ms = 0",
            "durability_interval_ms (with durability = \"interval\") must be at least 1",
        ),
        // These two and the series below were refused by the sequencer,
        // after the first configuration was journaled.
        ("history_tail_secs = 0", "history_tail_secs must be at least 1"),
        (
            "account_risk_cap_usd = 0",
            "account_risk_cap_usd must be at least 1",
        ),
        (
            "price_file_speed = 0.0",
            "price_file_speed must be from 0.001 to 1000000",
        ),
        (
            "[[series]]\nticker = \"BTC_1m\"\nsymbol = \"X:BTCUSD\"\nwindow_minutes = 1",
            "series \"BTC_1m\": series ticker must match",
        ),
        (
            "[[series]]\nticker = \"btc-1m\"\nsymbol = \"X:BTCUSD\"\nwindow_minutes = 0",
            "series \"btc-1m\": window must be whole minutes",
        ),
        (
            "[[series]]\nticker = \"a\"\nsymbol = \"A\"\nwindow_minutes = 1\n[[series]]\nticker = \"a\"\nsymbol = \"B\"\nwindow_minutes = 5",
            "series \"a\" is listed twice",
        ),
        // Huge values, written to mean "forever" or "no limit": the first
        // failed key panicked the venue (a deadline past the clock's
        // range), every connection panicked, or the queue asked for
        // terabytes. Every number now has an upper bound.
        (
            "lockout_secs = 9223372036854775807",
            "lockout_secs must be at most 604800",
        ),
        (
            "http_idle_timeout_secs = 9223372036854775807",
            "http_idle_timeout_secs must be at most 86400",
        ),
        (
            "queue_capacity = 1099511627776",
            "queue_capacity must be at most 1048576",
        ),
        (
            "ws_ping_interval_ms = 9223372036854775807",
            "ws_ping_interval_ms must be at most 600000",
        ),
        (
            "request_timeout_ms = 9223372036854775807",
            "request_timeout_ms must be at most 600000",
        ),
        ("workers = 100000", "workers must be at most 256"),
        ("segment_mib = 1048576", "segment_mib must be at most 16384"),
        (
            "price_interval_ms = 9223372036854775807",
            "price_interval_ms must be at most 3600000",
        ),
        (
            "durability_interval_ms = 9223372036854775807",
            "durability_interval_ms must be at most 60000",
        ),
        // A start price that is no price was clamped: an infinite one
        // pinned every print at the largest price.
        (
            "[[series]]\nticker = \"a\"\nsymbol = \"A\"\nwindow_minutes = 1\nsim_start_price = inf",
            "series \"a\": sim_start_price must be from 0.01 to 1000000000, not inf",
        ),
        (
            "[[series]]\nticker = \"a\"\nsymbol = \"A\"\nwindow_minutes = 1\nsim_start_price = -5.0",
            "sim_start_price must be from 0.01",
        ),
        (
            "[[series]]\nticker = \"a\"\nsymbol = \"A\"\nwindow_minutes = 1\nsim_start_price = nan",
            "sim_start_price must be from 0.01",
        ),
    ] {
        let path = dir.path().join("bad.toml");
        std::fs::write(
            &path,
            format!("listen = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n{setting}\n"),
        )
        .unwrap();
        let data = dir.path().join("data");
        let mut child = Command::new(BIN)
            .args(["serve", "--config"])
            .arg(&path)
            .arg("--data-dir")
            .arg(&data)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A venue that accepts the setting runs until stopped: stop it and
        // fail, rather than wait for it.
        let deadline = Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                child.kill().unwrap();
                child.wait().unwrap();
                panic!("{setting}: the venue started");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let output = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{setting}: {err}");
        assert!(err.contains(says), "{setting}: {err}");
        assert!(!data.exists(), "{setting}: the data directory was made");
    }
}

/// The journaled prints of `symbol`, in order: (price x 10^8, t_ms).
fn journaled_prints(data: &Path, symbol: &str) -> Vec<(i64, u64)> {
    let out = Command::new(BIN)
        .args([
            "journal",
            "dump",
            "--json",
            "--raw",
            "--kind",
            "price",
            "--data-dir",
        ])
        .arg(data)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["command"]["symbol"] == symbol)
        .map(|l| {
            (
                l["command"]["price_e8"].as_i64().unwrap(),
                l["command"]["t_ms"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// A file of recorded prints replaces the simulator: its prints are
/// journaled in its order, paced by its gaps, stamped with the venue's
/// clock; looping, it goes back through the file backward. A series whose
/// symbol the file lacks is named in a warning, and a bad file is refused
/// at start, naming its line, before anything is journaled.
#[test]
fn a_price_file_is_replayed_in_order_and_a_bad_one_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("prints.csv");
    // Two symbols, 40 ms apart as recorded; the series trades the first.
    std::fs::write(
        &file,
        format!(
            "t_ms,symbol,price\n\
             1700000000000,{s},97000\n\
             1700000000040,AAPL,230.5\n\
             1700000000080,{s},97010.25\n\
             {{\"type\":\"price\",\"sid\":1,\"seq\":3,\"msg\":{{\"symbol\":\"{s}\",\"price\":\"97020\",\"t_ms\":1700000000120}}}}\n",
            s = common::SYMBOL
        ),
    )
    .unwrap();
    let e8 = |p: f64| (p * 1e8).round() as i64;
    let forward = [e8(97_000.0), e8(97_010.25), e8(97_020.0)];
    for (looping, wanted) in [
        (false, forward.to_vec()),
        (
            true,
            [
                &forward[..],
                &[forward[2], forward[1], forward[0], forward[0]],
            ]
            .concat(),
        ),
    ] {
        let data = dir.path().join(format!("data-{looping}"));
        // The simulator on: the file takes its place.
        let settings = common::Settings {
            price_simulator: true,
            price_interval_ms: 20,
            ..common::Settings::default()
        };
        let text = format!(
            "price_file = {:?}\nprice_file_loop = {looping}\n{}",
            file.to_str().unwrap(),
            settings.toml()
        );
        let config = dir.path().join(format!("file-{looping}.toml"));
        std::fs::write(&config, text).unwrap();
        let started_ms = common::now_ms();
        let mut serve = Launch::new(&data, Some(&config)).log("info").start();
        common::eventually(
            || journaled_prints(&data, common::SYMBOL).len() >= wanted.len(),
            || serve.stderr.text(),
        );
        if !looping {
            // Nothing more comes: the simulator does not take over.
            std::thread::sleep(Duration::from_millis(300));
        }
        assert!(serve.sigterm().success(), "{}", serve.stderr.text());
        let log = serve.stderr.text();
        assert!(
            log.contains("replaying recorded prints instead of the price simulator"),
            "{log}"
        );
        let got = journaled_prints(&data, common::SYMBOL);
        let prices: Vec<i64> = got.iter().map(|p| p.0).collect();
        assert_eq!(prices[..wanted.len()], wanted[..], "looping {looping}");
        if !looping {
            assert_eq!(
                prices.len(),
                wanted.len(),
                "the file ended, the prints stopped"
            );
        }
        // Stamped with the venue's clock, in order, at the recorded pace at
        // most (the third print was recorded 120 ms after the first).
        assert!(got[0].1 >= started_ms, "{got:?}");
        assert!(got.windows(2).all(|w| w[0].1 <= w[1].1), "{got:?}");
        assert!(got[2].1 >= started_ms + 119, "{got:?} from {started_ms}");
        assert_eq!(
            journaled_prints(&data, "AAPL")[0].0,
            e8(230.5),
            "the other symbol's print"
        );
    }

    // Warned at start, by name: a restart on the file (it starts again at
    // its first print, 97000, where the journal's last was 97020); then a
    // series whose symbol the file lacks, and times in seconds.
    let warned = |serve: &common::Serve, says: &[&str]| {
        common::eventually(
            || says.iter().all(|s| serve.stderr.text().contains(s)),
            || format!("{says:?}: {}", serve.stderr.text()),
        );
    };
    let mut serve = Launch::new(
        &dir.path().join("data-false"),
        Some(&dir.path().join("file-false.toml")),
    )
    .start();
    warned(&serve, &["the price file starts again at its first print"]);
    assert!(serve.sigterm().success());
    std::fs::write(&file, "1700000000,AAPL,230\n").unwrap();
    let data = dir.path().join("data-other");
    let mut serve = Launch::new(&data, None)
        .arg("--price-file")
        .arg(file.to_str().unwrap())
        .start();
    warned(
        &serve,
        &[
            "the price file has no prints of this series' symbol",
            "seconds?",
        ],
    );
    assert!(serve.sigterm().success());

    // A bad line: refused at start, naming the file and the line.
    std::fs::write(&file, "1700000000000,AAPL,230\n1700000000001,AAPL,zero\n").unwrap();
    let data = dir.path().join("data-bad");
    let output = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .arg("--price-file")
        .arg(&file)
        .arg("--data-dir")
        .arg(&data)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "price_file {}: line 2: price \"zero\" must be a positive decimal",
            file.display()
        )),
        "{err}"
    );
    assert!(!data.exists(), "the data directory was made");
}
