//! Shared by the reliability and security tests (`crash.rs`, `faults.rs`,
//! `security.rs`): `updown serve` as a child process on loopback ports with
//! a TOML configuration, a small HTTP/1.1 client over std `TcpStream` (kept
//! alive, optionally from a chosen loopback source address), operator
//! helpers through the admin endpoint, a seeded generator, and a reader of
//! journal segment files written from `journal/FORMAT.md`.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

pub const BIN: &str = env!("CARGO_BIN_EXE_updown");

/// The underlying of every test series.
pub const SYMBOL: &str = "X:BTCUSD";

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as u64
}

/// Whether a market record (REST shape) closes more than `margin_ms` from
/// now: a window a test can trade in without its close getting in the way.
pub fn closes_after(market: &Value, margin_ms: u64) -> bool {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64;
    market["close_ts_ms"]
        .as_u64()
        .is_some_and(|close| close > now + margin_ms)
}

/// A window length in minutes (about a day) whose current window still has
/// at least 30 minutes to run, so no window closes while a test runs.
pub fn window_minutes() -> u64 {
    let now = now_ms();
    (1440..1440 + 240)
        .find(|minutes| {
            let window = minutes * 60_000;
            window - now % window >= 30 * 60_000
        })
        .expect("some window length leaves enough time")
}

// ----- a seeded generator -------------------------------------------------------------

/// splitmix64: small, seedable, good enough to choose test moves.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        assert!(lo < hi);
        lo + self.next_u64() % (hi - lo)
    }
    /// True with probability `percent`/100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.range(0, 100) < percent
    }
}

/// A seed from the environment variable `name`, or `default`; printed so a
/// failure can be reproduced.
pub fn seed_from_env(name: &str, default: u64) -> u64 {
    let seed = std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    eprintln!("{name}={seed}");
    seed
}

// ----- configuration ------------------------------------------------------------------

/// What a test venue looks like; written as a TOML file for `--config`.
#[derive(Clone, Debug)]
pub struct Settings {
    pub price_simulator: bool,
    pub price_interval_ms: u64,
    pub segment_mib: u64,
    pub snapshot_every: u64,
    pub lockout_failures: u32,
    pub lockout_secs: u64,
    pub orders_per_second: u32,
    pub ws_ping_interval_ms: u64,
    /// Ticker of the one series; its windows last about a day.
    pub series: String,
    /// How long ended orders and fills stay in memory (seconds).
    pub history_tail_secs: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            price_simulator: false,
            price_interval_ms: 1_000,
            segment_mib: 64,
            snapshot_every: 1_000_000,
            lockout_failures: 1_000,
            lockout_secs: 60,
            orders_per_second: 100_000,
            ws_ping_interval_ms: 10_000,
            series: "rel-a".into(),
            history_tail_secs: 86_400,
        }
    }
}

impl Settings {
    pub fn toml(&self) -> String {
        format!(
            r#"environment = "test"
price_simulator = {}
price_interval_ms = {}
segment_mib = {}
snapshot_every = {}
lockout_failures = {}
lockout_secs = {}
orders_per_second = {}
orders_burst = {}
ws_ping_interval_ms = {}
request_timeout_ms = 30000
history_tail_secs = {}

[[series]]
ticker = "{}"
symbol = "{SYMBOL}"
window_minutes = {}
sim_start_price = 97000.0
"#,
            self.price_simulator,
            self.price_interval_ms,
            self.segment_mib,
            self.snapshot_every,
            self.lockout_failures,
            self.lockout_secs,
            self.orders_per_second,
            self.orders_per_second,
            self.ws_ping_interval_ms,
            self.history_tail_secs,
            self.series,
            window_minutes(),
        )
    }

    /// Writes the file at `path`.
    pub fn write(&self, path: &Path) -> PathBuf {
        std::fs::write(path, self.toml()).expect("write the configuration");
        path.to_path_buf()
    }
}

// ----- the server as a child process ---------------------------------------------------

/// Waits (30 s at most, looking every 20 ms) until `ready`; fails with
/// `why()` if it never is.
#[track_caller]
pub fn eventually(mut ready: impl FnMut() -> bool, why: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(Instant::now() < deadline, "{}", why());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Lines a child printed, collected by a thread per stream, and whether
/// the stream has ended.
#[derive(Clone, Default)]
pub struct Lines(Arc<Mutex<Vec<String>>>, Arc<AtomicBool>);

impl Lines {
    fn collect(&self, stream: impl Read + Send + 'static) {
        let (lines, ended) = (self.0.clone(), self.1.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                lines.lock().expect("lines").push(line);
            }
            ended.store(true, Ordering::Release);
        });
    }

    /// Waits (10 s at most: a forked snapshot writer may hold the stream a
    /// while longer) until the child's stream has ended and every line of
    /// it is here.
    fn wait_end(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.1.load(Ordering::Acquire) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    pub fn text(&self) -> String {
        self.0.lock().expect("lines").join("\n")
    }
}

/// How to start `updown serve`.
#[derive(Clone, Debug)]
pub struct Launch {
    pub data_dir: PathBuf,
    pub config: Option<PathBuf>,
    pub args: Vec<String>,
    /// `UPDOWN_LOG`.
    pub log: String,
    /// A limit on open descriptors (soft and hard), set by a shell.
    pub nofile: Option<u64>,
}

impl Launch {
    pub fn new(data_dir: &Path, config: Option<&Path>) -> Launch {
        Launch {
            data_dir: data_dir.to_path_buf(),
            config: config.map(Path::to_path_buf),
            args: Vec::new(),
            log: "warn".into(),
            nofile: None,
        }
    }
    pub fn arg(mut self, arg: &str) -> Launch {
        self.args.push(arg.into());
        self
    }
    pub fn log(mut self, filter: &str) -> Launch {
        self.log = filter.into();
        self
    }
}

/// A running (or exited) `updown serve`.
pub struct Serve {
    pub child: Child,
    /// The REST/websocket and admin addresses, known once it has started
    /// (`Launch::try_start`); empty after a bare `spawn`.
    pub addr: String,
    pub admin_addr: String,
    pub data_dir: PathBuf,
    pub stdout: Lines,
    pub stderr: Lines,
    exited: Option<ExitStatus>,
}

/// The addresses in the server's start line, "updown V listening on
/// http://ADDR/v1 (admin on ADMIN, data in DIR)", once it is printed.
fn listening_on(stdout: &str) -> Option<(String, String)> {
    let line = stdout.lines().find(|l| l.contains(" listening on "))?;
    let (_, rest) = line.split_once(" listening on http://")?;
    let (addr, rest) = rest.split_once("/v1 (admin on ")?;
    let (admin, _) = rest.split_once(", data in ")?;
    Some((addr.to_string(), admin.to_string()))
}

/// Why a start did not reach "listening on".
#[derive(Debug)]
pub struct StartFailure {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl Launch {
    /// Spawns the child without waiting for anything.
    pub fn spawn(&self) -> Serve {
        let mut command = match self.nofile {
            // The shell sets the limit and becomes the server (`exec`).
            Some(n) => {
                let mut sh = Command::new("sh");
                sh.arg("-c")
                    .arg(format!("ulimit -n {n} && exec \"$0\" \"$@\""))
                    .arg(BIN);
                sh
            }
            None => Command::new(BIN),
        };
        command.arg("serve").arg("--data-dir").arg(&self.data_dir);
        if let Some(config) = &self.config {
            command.arg("--config").arg(config);
        }
        command
            // Port 0: the kernel picks free ports as the server binds them
            // (a port picked here and bound later could be taken meanwhile);
            // `try_start` reads them from the line the server prints.
            .args(["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"])
            .args(&self.args)
            .env("UPDOWN_LOG", &self.log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("start updown serve");
        let (stdout, stderr) = (Lines::default(), Lines::default());
        stdout.collect(child.stdout.take().expect("stdout"));
        stderr.collect(child.stderr.take().expect("stderr"));
        Serve {
            child,
            addr: String::new(),
            admin_addr: String::new(),
            data_dir: self.data_dir.clone(),
            stdout,
            stderr,
            exited: None,
        }
    }

    /// Starts and waits until the server prints that it listens, or exits.
    pub fn try_start(&self) -> Result<Serve, StartFailure> {
        let mut serve = self.spawn();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // Started once both start lines are out: "listening on" and the
            // journal's report under it (tests read the report). With JSON
            // logs they go to standard error, standard output being JSON.
            let text = if self.args.iter().any(|a| a == "--log-json") {
                serve.stderr.text()
            } else {
                serve.stdout.text()
            };
            if let Some((addr, admin_addr)) =
                listening_on(&text).filter(|_| text.lines().any(|l| l.starts_with("journal: ")))
            {
                serve.addr = addr;
                serve.admin_addr = admin_addr;
                return Ok(serve);
            }
            if let Some(status) = serve.child.try_wait().expect("wait") {
                serve.stdout.wait_end();
                serve.stderr.wait_end();
                serve.exited = Some(status);
                return Err(StartFailure {
                    status: Some(status),
                    stdout: serve.stdout.text(),
                    stderr: serve.stderr.text(),
                });
            }
            if Instant::now() > deadline {
                let _ = serve.child.kill();
                let _ = serve.child.wait();
                serve.exited = Some(serve.child.wait().expect("wait"));
                return Err(StartFailure {
                    status: None,
                    stdout: serve.stdout.text(),
                    stderr: serve.stderr.text(),
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    #[track_caller]
    pub fn start(&self) -> Serve {
        self.try_start()
            .unwrap_or_else(|f| panic!("updown serve did not start: {f:?}"))
    }
}

impl Serve {
    /// Waits (30 s at most) for a line of its standard output that
    /// `wanted` accepts, and returns it.
    #[track_caller]
    pub fn wait_line(&self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(line) = self.stdout.text().lines().find(|l| wanted(l)) {
                return line.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "no such line in: {}",
                self.stdout.text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then waits (30 s at most) for the exit.
    pub fn sigterm(&mut self) -> ExitStatus {
        if let Some(status) = self.exited {
            return status;
        }
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("kill -TERM");
        assert!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                self.stdout.wait_end();
                self.stderr.wait_end();
                self.exited = Some(status);
                return status;
            }
            assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL and reap.
    pub fn kill(&mut self) {
        if self.exited.is_some() {
            return;
        }
        let _ = self.child.kill();
        self.exited = Some(self.child.wait().expect("reap"));
    }

    pub fn token(&self) -> String {
        std::fs::read_to_string(self.data_dir.join("admin.token"))
            .expect("admin.token")
            .trim()
            .to_string()
    }

    pub fn api(&self) -> Http {
        Http::new(&self.addr)
    }

    pub fn admin(&self) -> Admin {
        Admin {
            http: Http::new(&self.admin_addr),
            token: self.token(),
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.kill();
    }
}

// ----- HTTP/1.1 over std TcpStream -------------------------------------------------------

/// One HTTP answer.
#[derive(Clone, Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub text: String,
    pub json: Value,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Asserts the status; returns the JSON body.
    #[track_caller]
    pub fn ok(&self, status: u16) -> &Value {
        assert_eq!(self.status, status, "{}", self.text);
        &self.json
    }

    /// Asserts an error body with this status, code and exact message.
    #[track_caller]
    pub fn err_msg(&self, status: u16, code: &str, message: &str) {
        assert_eq!(
            (
                self.status,
                self.json["code"].as_str(),
                self.json["message"].as_str()
            ),
            (status, Some(code), Some(message)),
            "{}",
            self.text
        );
    }

    /// Asserts an error with this status and code; returns the message.
    #[track_caller]
    pub fn err(&self, status: u16, code: &str) -> String {
        assert_eq!(
            (self.status, self.json["code"].as_str()),
            (status, Some(code)),
            "{}",
            self.text
        );
        self.json["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// A client of one address: a kept-alive connection, opened again when it
/// breaks; optionally from a given loopback source address.
pub struct Http {
    addr: String,
    source: Option<IpAddr>,
    conn: Option<BufReader<TcpStream>>,
    pub timeout: Duration,
}

impl Http {
    pub fn new(addr: &str) -> Http {
        Http {
            addr: addr.to_string(),
            source: None,
            conn: None,
            timeout: Duration::from_secs(30),
        }
    }

    /// Requests leave from `source` (any 127.x.y.z works on Linux loopback).
    pub fn from(addr: &str, source: IpAddr) -> Http {
        Http {
            source: Some(source),
            ..Http::new(addr)
        }
    }

    fn connect(&self) -> std::io::Result<TcpStream> {
        let target: SocketAddr = self.addr.parse().expect("address");
        let stream = match self.source {
            None => TcpStream::connect_timeout(&target, Duration::from_secs(5))?,
            Some(ip) => {
                let socket = socket2::Socket::new(
                    socket2::Domain::IPV4,
                    socket2::Type::STREAM,
                    Some(socket2::Protocol::TCP),
                )?;
                socket.bind(&SocketAddr::new(ip, 0).into())?;
                socket.connect_timeout(&target.into(), Duration::from_secs(5))?;
                socket.into()
            }
        };
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(self.timeout))?;
        stream.set_write_timeout(Some(self.timeout))?;
        Ok(stream)
    }

    /// One request; an I/O error (refused, reset, cut short) is returned, the
    /// connection is dropped and the next request opens a new one.
    pub fn try_send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> std::io::Result<Resp> {
        let result = self.send_once(method, path, headers, body);
        if result.is_err() {
            self.conn = None;
        }
        result
    }

    fn send_once(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> std::io::Result<Resp> {
        if self.conn.is_none() {
            self.conn = Some(BufReader::new(self.connect()?));
        }
        let conn = self.conn.as_mut().expect("connection");
        let body = body.unwrap_or("");
        let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr);
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        if !body.is_empty() || method == "POST" {
            request.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        request.push_str("\r\n");
        request.push_str(body);
        conn.get_mut().write_all(request.as_bytes())?;
        let resp = read_response(conn, method == "HEAD")?;
        if resp
            .header("connection")
            .is_some_and(|v| v.eq_ignore_ascii_case("close"))
        {
            self.conn = None;
        }
        Ok(resp)
    }

    /// A request that must get an answer.
    #[track_caller]
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&str>,
    ) -> Resp {
        self.try_send(method, path, headers, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// A request to `/v1{path}` with an optional bearer key.
    #[track_caller]
    pub fn call(
        &mut self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<&str>,
    ) -> Resp {
        let bearer = key.map(|k| format!("Bearer {k}"));
        let headers: Vec<(&str, &str)> = bearer
            .as_deref()
            .map(|b| vec![("Authorization", b)])
            .unwrap_or_default();
        self.send(method, &format!("/v1{path}"), &headers, body)
    }

    #[track_caller]
    pub fn get(&mut self, path: &str, key: Option<&str>) -> Resp {
        self.call("GET", path, key, None)
    }
}

/// One request to `/v1{path}` of `addr` with a bearer key, on a connection
/// of its own: the status and the JSON body (`Null` when there is none).
#[track_caller]
pub fn http(addr: &str, method: &str, path: &str, key: &str, body: Option<&str>) -> (u16, Value) {
    let resp = Http::new(addr).call(method, path, Some(key), body);
    (resp.status, resp.json)
}

fn invalid(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string())
}

fn read_response(conn: &mut BufReader<TcpStream>, head_only: bool) -> std::io::Result<Resp> {
    let mut line = String::new();
    if conn.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "connection closed before an answer",
        ));
    }
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid("status line"))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        if conn.read_line(&mut line)? == 0 {
            return Err(invalid("headers cut short"));
        }
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        let (name, value) = trimmed.split_once(':').ok_or_else(|| invalid("header"))?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
    let find = |name: &str| {
        headers
            .iter()
            .find(|(n, _): &&(String, String)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
    };
    let mut bytes = Vec::new();
    if head_only || status == 204 || status == 304 || status == 101 {
    } else if let Some(len) = find("content-length") {
        let len: usize = len.parse().map_err(|_| invalid("content-length"))?;
        bytes.resize(len, 0);
        conn.read_exact(&mut bytes)?;
    } else if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        loop {
            line.clear();
            conn.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim(), 16).map_err(|_| invalid("chunk"))?;
            let mut chunk = vec![0; size + 2];
            conn.read_exact(&mut chunk)?;
            if size == 0 {
                break;
            }
            bytes.extend_from_slice(&chunk[..size]);
        }
    } else {
        conn.read_to_end(&mut bytes)?;
    }
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    Ok(Resp {
        status,
        headers,
        text,
        json,
    })
}

// ----- the operator -------------------------------------------------------------------------

/// The admin endpoint with its token.
pub struct Admin {
    pub http: Http,
    pub token: String,
}

/// A funded account allowed to trade, with a read+trade key.
#[derive(Clone, Debug)]
pub struct Trader {
    pub account: u64,
    pub key: String,
    pub key_id: String,
}

impl Trader {
    pub fn secret(&self) -> &str {
        self.key.rsplit('_').next().expect("secret")
    }
}

impl Admin {
    #[track_caller]
    pub fn call(&mut self, method: &str, path: &str, body: Option<&Value>) -> Resp {
        let bearer = format!("Bearer {}", self.token);
        let text = body.map(Value::to_string);
        self.http
            .send(method, path, &[("Authorization", &bearer)], text.as_deref())
    }

    /// A POST that must answer 200; returns the body.
    #[track_caller]
    pub fn post(&mut self, path: &str, body: Value) -> Value {
        let resp = self.call("POST", path, Some(&body));
        assert_eq!(resp.status, 200, "admin {path} {body}: {}", resp.text);
        resp.json
    }

    #[track_caller]
    pub fn create_account(&mut self, cash: &str) -> u64 {
        self.post("/admin/accounts", json!({ "cash": cash }))["account_id"]
            .as_u64()
            .expect("account_id")
    }

    /// Issues a key for `account` (`spec` without `account`); returns the
    /// whole key string and its id.
    #[track_caller]
    pub fn issue_key(&mut self, account: u64, spec: Value) -> (String, String) {
        let mut body = spec;
        body["account"] = json!(account);
        let answer = self.post("/admin/keys", body);
        (
            answer["key"].as_str().expect("key").to_string(),
            answer["key_id"].as_str().expect("key_id").to_string(),
        )
    }

    #[track_caller]
    pub fn trader(&mut self, cash: &str) -> Trader {
        let account = self.create_account(cash);
        self.post(
            &format!("/admin/accounts/{account}/flags"),
            json!({ "terms_accepted": true, "trading_allowed": true }),
        );
        let (key, key_id) = self.issue_key(
            account,
            json!({ "scopes": "read,trade", "name": "rel", "max_order_usd": "5000", "max_daily_usd": "10000000" }),
        );
        Trader {
            account,
            key,
            key_id,
        }
    }

    /// A print of the underlying now.
    #[track_caller]
    pub fn price(&mut self, price: &str) {
        self.post("/admin/prices", json!({ "symbol": SYMBOL, "price": price }));
    }
}

/// The ticker of an open market of `series`, waiting up to 20 s for one
/// (the simulator's first print opens the current window).
#[track_caller]
pub fn open_market(http: &mut Http, series: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = http.get(
            &format!("/markets?series_ticker={series}&status=open"),
            None,
        );
        if let Some(ticker) = resp.json["markets"][0]["ticker"].as_str() {
            return ticker.to_string();
        }
        assert!(Instant::now() < deadline, "no open market: {}", resp.text);
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// An order body.
pub fn order_body(
    market: &str,
    outcome: &str,
    action: &str,
    price_cents: u64,
    count: u64,
    tif: &str,
    client_order_id: &str,
) -> String {
    json!({
        "market_ticker": market,
        "outcome": outcome,
        "action": action,
        "price": format!("0.{price_cents:02}"),
        "count": count.to_string(),
        "time_in_force": tif,
        "client_order_id": client_order_id,
    })
    .to_string()
}

/// Every fill of an account, oldest first, read page by page.
pub fn all_fills(http: &mut Http, key: &str) -> std::io::Result<Vec<Value>> {
    let bearer = format!("Bearer {key}");
    let mut fills = Vec::new();
    let mut cursor = String::new();
    loop {
        let path = if cursor.is_empty() {
            "/v1/portfolio/fills?limit=500".to_string()
        } else {
            format!("/v1/portfolio/fills?limit=500&cursor={cursor}")
        };
        let resp = http.try_send("GET", &path, &[("Authorization", &bearer)], None)?;
        if resp.status != 200 {
            return Err(invalid(&format!("fills: {}", resp.text)));
        }
        fills.extend(resp.json["fills"].as_array().cloned().unwrap_or_default());
        cursor = resp.json["cursor"].as_str().unwrap_or_default().to_string();
        if cursor.is_empty() {
            break;
        }
    }
    fills.reverse();
    Ok(fills)
}

// ----- journal files, read from FORMAT.md ---------------------------------------------------

pub const SEGMENT_HEADER_LEN: usize = 64;
pub const RECORD_HEADER_LEN: usize = 32;

/// One record's place in a segment file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordAt {
    pub offset: usize,
    pub seq: u64,
    pub kind: u16,
    pub payload_len: usize,
    /// Bytes the record occupies (header, payload, padding).
    pub total: usize,
}

/// Segment files of a journal directory, in index order.
pub fn segments(journal: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(journal)
        .expect("journal directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "seg"))
        .collect();
    found.sort();
    found
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// The records of one segment file up to its end of data or seal (no CRC
/// check: the tests damage files they know to be whole).
pub fn records(segment: &Path) -> Vec<RecordAt> {
    let bytes = std::fs::read(segment).expect("segment");
    assert_eq!(&bytes[..8], b"UPDNJRNL", "segment magic");
    let mut out = Vec::new();
    let mut at = SEGMENT_HEADER_LEN;
    while at + RECORD_HEADER_LEN <= bytes.len() {
        let marker = &bytes[at..at + 4];
        if marker != b"RCRD" {
            break;
        }
        let payload_len = u32_at(&bytes, at + 4) as usize;
        let total = RECORD_HEADER_LEN + payload_len.div_ceil(16) * 16;
        out.push(RecordAt {
            offset: at,
            seq: u64_at(&bytes, at + 8),
            kind: u16::from_le_bytes([bytes[at + 16], bytes[at + 17]]),
            payload_len,
            total,
        });
        at += total;
    }
    out
}

/// XORs `mask` into the byte at `offset` of `path`.
pub fn flip(path: &Path, offset: usize, mask: u8) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[offset] ^= mask;
    std::fs::write(path, &bytes).expect("write");
}

/// Overwrites `path` at `offset` with `data`.
pub fn overwrite(path: &Path, offset: usize, data: &[u8]) {
    let mut bytes = std::fs::read(path).expect("read");
    bytes[offset..offset + data.len()].copy_from_slice(data);
    std::fs::write(path, &bytes).expect("write");
}

/// Runs `updown ARGS...`; its exit status: 0 done, 1 a finding (damage,
/// a difference), 2 an error.
pub fn updown_status(args: &[&str]) -> Option<i32> {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run updown")
        .status
        .code()
}

/// Runs `updown ARGS...`; (success, stdout, stderr).
pub fn updown(args: &[&str]) -> (bool, String, String) {
    let (code, out, err) = updown_exit(args);
    (code == Some(0), out, err)
}

/// Runs `updown ARGS...`; (exit code, stdout, stderr).
pub fn updown_exit(args: &[&str]) -> (Option<i32>, String, String) {
    let output = Command::new(BIN).args(args).output().expect("run updown");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

// ----- journals written offline --------------------------------------------------------------

/// A journal written directly with `replay::Node`, as the venue would.
#[derive(Clone, Debug)]
pub struct Offline {
    /// Size of each segment file.
    pub segment_bytes: u64,
    /// Orders placed (and committed: acknowledged) after the set-up.
    pub orders: usize,
    /// A snapshot every this many orders (0: none).
    pub snapshot_every: usize,
    /// Orders appended after the last commit: written, never acknowledged.
    pub unacknowledged: usize,
    /// Time of every command.
    pub ts_ms: u64,
    /// Days until the traders' keys expire.
    pub expires_days: Option<u32>,
    /// Make segment 0 nearly full: stop adding orders once fewer than this
    /// many bytes are left in it (overrides `orders`).
    pub fill_first_segment_to: Option<usize>,
}

impl Default for Offline {
    fn default() -> Self {
        Offline {
            segment_bytes: 64 * 1024,
            orders: 1_500,
            snapshot_every: 0,
            unacknowledged: 0,
            ts_ms: now_ms(),
            expires_days: None,
            fill_first_segment_to: None,
        }
    }
}

/// What an offline journal holds.
#[derive(Clone, Debug)]
pub struct Written {
    /// Last acknowledged (committed) seq and the state hash there.
    pub last_seq: u64,
    pub hash: u64,
    /// The traders' whole key strings (two accounts, 1 and 2).
    pub keys: Vec<String>,
    /// Acknowledged order ids with the index of their trader.
    pub orders: Vec<(u64, usize)>,
    /// The market the orders went to.
    pub market: String,
}

impl Offline {
    pub fn write(&self, data_dir: &Path) -> Written {
        use replay::{Node, NodeConfig};
        use sequencer::command::{AccountFlag, NewKey, NewOrder, SeriesConfig};
        use sequencer::types::{
            Action, ClientOrderId, Environment, KeyLimits, Outcome, Scopes, TimeInForce,
        };
        use sequencer::{Command, Reply, VenueConfig};

        let mut journal = journal::JournalConfig::new(data_dir.join("journal"));
        journal.segment_bytes = self.segment_bytes;
        let config = NodeConfig {
            journal,
            snapshot_dir: Some(data_dir.join("snapshots")),
            venue: VenueConfig {
                environment: Environment::Test,
                practice_book_open: true,
                account_risk_cap_cents: 10_000_000,
            },
            history_dir: Some(data_dir.join("history")),
        };
        let ts = self.ts_ms;
        let (mut node, _) = Node::open(config, ts).expect("open a new journal");
        let submit = |node: &mut Node, command: Command| {
            let (_, reply) = node.submit(ts, command).expect("append");
            assert!(!reply.is_rejected(), "{reply:?}");
            reply
        };
        submit(
            &mut node,
            Command::CreateSeries(SeriesConfig {
                ticker: "rel-a".into(),
                symbol: SYMBOL.into(),
                window_ms: window_minutes() * 60_000,
                list_ahead: 2,
                taker_fee_bps: 700,
                maker_fee_bps: 0,
                market_cap_cents: 100_000_000,
            }),
        );
        submit(
            &mut node,
            Command::Price {
                symbol: SYMBOL.into(),
                price_e8: 97_000 * 100_000_000,
                t_ms: ts,
            },
        );
        submit(&mut node, Command::Tick);
        let mut keys = Vec::new();
        let mut key_idx = Vec::new();
        for i in 0..2 {
            let Reply::AccountCreated { account } = submit(&mut node, Command::CreateAccount)
            else {
                panic!("no account")
            };
            submit(
                &mut node,
                Command::Deposit {
                    account,
                    cents: 10_000_000,
                },
            );
            for flag in [AccountFlag::TermsAccepted, AccountFlag::TradingAllowed] {
                submit(
                    &mut node,
                    Command::SetAccountFlag {
                        account,
                        flag,
                        value: true,
                    },
                );
            }
            let key_id = format!("offline{i}");
            let secret = format!("offlinesecret{i}x7q2m9w4");
            let Reply::KeyIssued { key } = submit(
                &mut node,
                Command::IssueKey(NewKey {
                    account,
                    key_id: key_id.clone(),
                    fingerprint: gateway::auth::fingerprint(&secret),
                    name: "offline".into(),
                    environment: Environment::Test,
                    scopes: Scopes::parse_list("read,trade").expect("scopes"),
                    limits: KeyLimits {
                        max_order_cents: Some(1_000_000),
                        max_daily_cents: Some(1_000_000_000),
                        max_open_orders: None,
                        series: None,
                    },
                    ip_allowlist: Vec::new(),
                    expires_days: self.expires_days,
                }),
            ) else {
                panic!("no key")
            };
            keys.push(format!("tk_test_{key_id}_{secret}"));
            key_idx.push(key);
        }
        node.commit().expect("commit");
        let market_id = node.state().active_markets[0];
        let market = node.state().markets[market_id as usize].ticker.clone();
        let mut orders = Vec::new();
        let place = |node: &mut Node, i: usize| {
            let trader = i % 2;
            let reply = submit(
                node,
                Command::PlaceOrder {
                    key: key_idx[trader],
                    order: NewOrder {
                        market: market_id,
                        outcome: if trader == 0 {
                            Outcome::Up
                        } else {
                            Outcome::Down
                        },
                        action: Action::Buy,
                        price: 40 + (i * 7 % 21) as u8,
                        count: 1 + (i % 5) as u32,
                        time_in_force: TimeInForce::GoodTillCanceled,
                        post_only: false,
                        client_order_id: ClientOrderId::new(&format!("off-{i}")).expect("coid"),
                    },
                },
            );
            match reply {
                Reply::Order { order, .. } => (order.id, trader),
                other => panic!("{other:?}"),
            }
        };
        let first_segment = data_dir.join("journal").join(journal::segment_file_name(0));
        let mut i = 0;
        loop {
            match self.fill_first_segment_to {
                Some(room) if i % 50 == 0 && i > 0 => {
                    node.commit().expect("commit");
                    let last = *records(&first_segment).last().expect("records");
                    if self.segment_bytes as usize - (last.offset + last.total) < room {
                        break;
                    }
                }
                None if i >= self.orders => break,
                _ => {}
            }
            orders.push(place(&mut node, i));
            i += 1;
            if i % 10 == 0 {
                node.commit().expect("commit");
            }
            if self.snapshot_every > 0 && i % self.snapshot_every == 0 {
                node.commit().expect("commit");
                node.snapshot().expect("snapshot");
            }
        }
        node.commit().expect("commit");
        node.sync().expect("sync");
        let last_seq = node.state().last_seq;
        let hash = node.state().state_hash();
        for j in 0..self.unacknowledged {
            place(&mut node, i + j);
        }
        // Dropped without a commit: the unacknowledged orders are in the
        // files (the page cache), as after a crash before the commit.
        drop(node);
        Written {
            last_seq,
            hash,
            keys,
            orders,
            market,
        }
    }
}

/// Copies a directory tree (data directories of the fault tests).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The state hash of a journal replayed (without snapshots) up to `seq`,
/// with the last seq reached.
pub fn replayed_hash(journal: &Path, until: replay::Until) -> (u64, u64) {
    let out = replay::replay(journal, None, until).expect("replay");
    (out.state.last_seq, out.state.state_hash())
}
