//! `updown loadgen` against a real `updown serve` child: a few seconds at a
//! low rate. Every scheduled request is sent on time and succeeds, the
//! `.hgrm` and SVG files are written, and the websocket subscribers receive
//! book deltas.

mod common;

use std::process::Command;
use std::time::Instant;

use common::{open_market, Launch, Serve, Settings, BIN};
use serde_json::Value;
use tempfile::TempDir;

/// A venue started on a fresh data directory with the tests' settings
/// (`common::Settings`): one series whose window lasts about a day (with
/// the default one-minute windows, a stall of this shared machine could
/// send orders of a run into a window that has closed meanwhile), a request
/// timeout far over the default 2 s (after which a stall would answer 503)
/// and no price simulator: a print opens the current window, the one
/// market the load generator finds. Returns the directory's holder, the
/// data directory, the server and its base URL.
fn venue() -> (TempDir, std::path::PathBuf, Serve, String) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let settings = Settings::default();
    let config = settings.write(&dir.path().join("updown.toml"));
    let server = Launch::new(&data, Some(&config)).start();
    server.admin().price("97000.5");
    open_market(&mut server.api(), &settings.series);
    let target = format!("http://{}", server.addr);
    (dir, data, server, target)
}

fn loadgen(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(BIN)
        .arg("loadgen")
        .args(args)
        .output()
        .expect("run updown loadgen");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into(),
        String::from_utf8_lossy(&output.stderr).into(),
    )
}

#[test]
fn loadgen_sends_on_schedule_and_every_request_succeeds() {
    let (dir, data, mut server, target) = venue();
    let hgrm = dir.path().join("run.hgrm");
    let plot = dir.path().join("run.svg");
    let data_text = data.to_str().unwrap();

    // Too few accounts for the rate: refused before anything is created.
    let (ok, _, err) = loadgen(&[
        "--target",
        &target,
        "--data-dir",
        data_text,
        "--accounts",
        "2",
        "--rate",
        "100",
    ]);
    assert!(!ok);
    assert!(err.contains("--accounts 10 or more"), "{err}");

    let (rate, duration) = (40.0, 4.0);
    let started = Instant::now();
    let (ok, out, err) = loadgen(&[
        "--target",
        &target,
        "--data-dir",
        data_text,
        "--accounts",
        "8",
        "--rate",
        &rate.to_string(),
        "--duration",
        &duration.to_string(),
        "--ws-subscribers",
        "3",
        "--connections",
        "4",
        "--interval",
        "1",
        "--watch-pid",
        &server.child.id().to_string(),
        "--hgrm",
        hgrm.to_str().unwrap(),
        "--plot",
        plot.to_str().unwrap(),
        "--json",
    ]);
    let wall = started.elapsed();
    server.sigterm();
    assert!(ok, "loadgen failed: {err}\n{out}");
    let result: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let expected = (rate * duration) as u64;
    let n = |field: &str| {
        result[field]
            .as_u64()
            .unwrap_or_else(|| panic!("{field}: {result}"))
    };

    // On schedule: every scheduled request was sent, within the duration
    // (plus the answer time of the last one, which a slow machine and its
    // disk may stretch), and never faster than scheduled.
    assert_eq!(n("scheduled"), expected);
    assert_eq!(n("sent"), expected, "{result}");
    assert_eq!(n("completed"), expected, "{result}");
    assert_eq!(n("unfinished"), 0);
    assert_eq!(n("skipped_no_market"), 0);
    let elapsed = result["elapsed_s"].as_f64().unwrap();
    assert!(
        elapsed >= duration - 0.05 && elapsed < duration + 10.0,
        "the schedule took {elapsed} s for {duration} s ({wall:?} in all)"
    );
    let achieved = result["achieved_rate"].as_f64().unwrap();
    assert!(
        achieved <= rate * 1.05 && achieved >= rate * 0.25,
        "achieved {achieved}/s for {rate}/s"
    );

    // Every request succeeded (201 for orders, 200 for cancels).
    assert_eq!(n("errors"), 0, "{}", result["errors_by_kind"]);
    assert_eq!(n("ok"), expected);
    let by_kind = &result["ok_by_kind"];
    assert!(by_kind["order_resting"].as_u64().unwrap() > 0, "{by_kind}");
    assert!(by_kind["order_crossing"].as_u64().unwrap() > 0, "{by_kind}");
    assert!(by_kind["cancel"].as_u64().unwrap() > 0, "{by_kind}");
    assert_eq!(result["latency"]["all"]["count"].as_u64(), Some(expected));
    let p50 = result["latency"]["all"]["p50_us"].as_u64().unwrap();
    let max = result["latency"]["all"]["max_us"].as_u64().unwrap();
    assert!(p50 > 0 && p50 <= max, "{}", result["latency"]);

    // Per-interval records, with the server's memory.
    let intervals = result["intervals"].as_array().unwrap();
    assert!(intervals.len() >= duration as usize, "{intervals:?}");
    let counted: u64 = intervals
        .iter()
        .map(|i| i["ok"].as_u64().unwrap() + i["errors"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, expected);
    assert!(
        intervals[0]["rss_kb"].as_u64().unwrap() > 0,
        "{intervals:?}"
    );

    // Files written: wrk2's .hgrm text and an SVG plot.
    let text = std::fs::read_to_string(&hgrm).unwrap();
    assert!(text.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)"));
    assert!(
        text.contains(&format!("Total count    = {expected:>12}]")),
        "{text}"
    );
    let svg = std::fs::read_to_string(&plot).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("<path d=\"M"),
        "{svg}"
    );

    // The websocket subscribers got their books and deltas.
    let ws = &result["ws"];
    assert_eq!(ws["connected"].as_u64(), Some(3), "{ws}");
    assert_eq!(ws["errors"].as_array().map(Vec::len), Some(0), "{ws}");
    assert!(
        ws["messages"]["orderbook_snapshot"].as_u64().unwrap_or(0) > 0,
        "{ws}"
    );
    assert!(
        ws["messages"]["orderbook_delta"].as_u64().unwrap_or(0) > 0,
        "{ws}"
    );
    assert_eq!(ws["gaps"].as_u64(), Some(0), "{ws}");
}

/// A venue that stalls (SIGSTOP) past the drain leaves requests in flight
/// and queued: they are in the latency figures at the time they had waited,
/// never left out (coordinated omission), and counted as unfinished.
#[test]
fn requests_a_stalled_venue_never_answers_count_in_the_latency() {
    let (dir, data, mut server, target) = venue();
    let pid = server.child.id().to_string();
    let hgrm = dir.path().join("stall.hgrm");
    // Stop the venue once it has placed its first orders (the load
    // generator's set-up is done), half a second later; the drain ends 1 s
    // after the 3 s schedule, so requests have waited 1.5 s or more by then.
    let stopper = {
        let pid = pid.clone();
        let mut http = server.api();
        std::thread::spawn(move || {
            let deadline = Instant::now() + std::time::Duration::from_secs(60);
            while Instant::now() < deadline {
                if http
                    .send("GET", "/metrics", &[], None)
                    .text
                    .contains("status=\"201\"")
                {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
            Command::new("kill").args(["-STOP", &pid]).status().unwrap();
        })
    };
    let (rate, duration) = (20.0, 3.0);
    let started = Instant::now();
    let (ok, out, err) = loadgen(&[
        "--target",
        &target,
        "--data-dir",
        data.to_str().unwrap(),
        "--accounts",
        "4",
        "--rate",
        &rate.to_string(),
        "--duration",
        &duration.to_string(),
        "--drain",
        "1",
        "--ws-subscribers",
        "0",
        "--connections",
        "2",
        "--hgrm",
        hgrm.to_str().unwrap(),
        "--json",
    ]);
    stopper.join().unwrap();
    Command::new("kill").args(["-CONT", &pid]).status().unwrap();
    server.sigterm();
    assert!(ok, "loadgen failed: {err}\n{out}");
    let result: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let expected = (rate * duration) as u64;
    let (completed, unfinished) = (
        result["completed"].as_u64().unwrap(),
        result["unfinished"].as_u64().unwrap(),
    );
    // The setup ran before the stop; if the machine was so slow that the
    // stop came before any request, the run says nothing about a stall.
    if completed == 0 {
        eprintln!("skipping: no request was answered before the stop ({started:?})");
        return;
    }
    assert!(unfinished > 0, "{result}");
    assert_eq!(
        result["latency"]["all"]["count"].as_u64(),
        Some(completed + unfinished),
        "every answered or unanswered request is in the figures: {result}"
    );
    assert!(completed + unfinished <= expected);
    // Each of them is in its kind's row too, or in `never_sent` when it
    // was still queued (never drawn): the rows add up to the whole.
    let rows: u64 = ["order_resting", "order_crossing", "cancel", "never_sent"]
        .iter()
        .map(|k| result["latency"][k]["count"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(rows, completed + unfinished, "{result}");
    let max = result["latency"]["all"]["max_us"].as_u64().unwrap();
    assert!(
        max >= 1_000_000,
        "the stall is in the figures: max {max} µs"
    );
    let text = std::fs::read_to_string(&hgrm).unwrap();
    assert!(
        text.contains(&format!("Total count    = {:>12}]", completed + unfinished)),
        "{text}"
    );
}

/// A one-second run of one account against a port where no venue listens.
fn no_venue_args(data_dir: &std::path::Path) -> Vec<&str> {
    vec![
        "--target",
        "http://127.0.0.1:9",
        "--data-dir",
        data_dir.to_str().unwrap(),
        "--accounts",
        "1",
        "--rate",
        "1",
        "--duration",
        "1",
    ]
}

/// Options that would spoil a run are refused before anything is sent:
/// an output file that cannot be written (the run's results would be lost
/// at its end), a plot that is not SVG, no connection, orders of no
/// contract, a process to watch that does not exist.
#[test]
fn options_that_would_spoil_a_run_are_refused_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let nowhere = dir.path().join("missing").join("run.hgrm");
    let png = dir.path().join("run.png");
    let cases: [(Vec<&str>, &str); 5] = [
        (vec!["--hgrm", nowhere.to_str().unwrap()], "cannot write"),
        (vec!["--plot", png.to_str().unwrap()], "SVG"),
        (vec!["--connections", "0"], "--connections"),
        (vec!["--max-count", "0"], "--max-count"),
        (vec!["--watch-pid", "4000000000"], "--watch-pid"),
    ];
    for (extra, says) in cases {
        let mut args = no_venue_args(dir.path());
        args.extend(extra.iter().copied());
        let (ok, out, err) = loadgen(&args);
        assert!(!ok, "{extra:?} accepted: {out}");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert!(
            !err.contains("connecting to"),
            "{extra:?} tried the venue: {err}"
        );
        assert!(!png.exists(), "a file made for a refused plot");
    }
}

/// A run that fails after its options were accepted (here: no venue at
/// the target) leaves no output file it made, and an output file that was
/// there before as it was: nothing that looks like a run's results.
#[test]
fn a_failed_run_leaves_no_output_file_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let hgrm = dir.path().join("run.hgrm");
    let plot = dir.path().join("run.svg");
    std::fs::write(&plot, "an earlier run's plot").unwrap();
    let mut args = no_venue_args(dir.path());
    args.extend(["--hgrm", hgrm.to_str().unwrap()]);
    args.extend(["--plot", plot.to_str().unwrap()]);
    let (ok, out, err) = loadgen(&args);
    assert!(!ok, "a run with no venue succeeded: {out}");
    assert!(err.contains("connecting to"), "{err}");
    assert!(!hgrm.exists(), "the failed run left an empty .hgrm");
    assert_eq!(
        std::fs::read_to_string(&plot).unwrap(),
        "an earlier run's plot"
    );
}
