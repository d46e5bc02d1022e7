//! The subscribers: plain websocket clients (fastwebsockets, client role)
//! on the load generator's runtime, each on its own TCP connection from a
//! loopback source address of its own group (the venue allows 20
//! connections per address), and the board where they report what they
//! received.
//!
//! Each client checks every data frame: `seq` must follow the last one,
//! and the book change must be the one the plan gives for the event that
//! `seq` stands for. The latency of the frame is the time from the
//! instant the driver stamped for that event (just before submitting the
//! command, or before the bare broadcaster built the frame) to the instant
//! the client has the whole frame, in one histogram per board.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use fastwebsockets::{Frame, OpCode, Payload, Role, WebSocket};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::engines::BenchError;
use crate::ws::plan;

/// Clients per loopback source address: under the venue's 20.
pub const CLIENTS_PER_ADDRESS: usize = 16;
/// Events the driver may run ahead of the slowest client before the
/// stamps ring wraps (never reached: see the driver's window).
pub const RING: usize = 1 << 20;

/// When the driver sent each event, per side: nanoseconds since `base`,
/// in a ring indexed by the event's global index.
pub struct Stamps {
    base: Instant,
    ring: Box<[AtomicU64]>,
}

impl Stamps {
    pub fn new(base: Instant) -> Self {
        Self {
            base,
            ring: (0..RING).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    pub fn now_ns(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }

    /// Stamps event `g` now; call it before the event leaves.
    pub fn stamp(&self, g: u64) {
        self.ring[g as usize % RING].store(self.now_ns(), Ordering::Release);
    }

    pub fn get(&self, g: u64) -> u64 {
        self.ring[g as usize % RING].load(Ordering::Acquire)
    }
}

/// What one client has received.
#[derive(Default)]
pub struct Counters {
    /// The next event it expects (one past the last it received).
    pub next: AtomicU64,
    /// Data frames received.
    pub received: AtomicU64,
    /// Events skipped by a jump in `seq` (messages lost).
    pub gaps: AtomicU64,
    /// Frames that were not the expected change, or not a data frame.
    pub bad: AtomicU64,
    /// Set when the connection ended.
    pub ended: AtomicU64,
}

/// The clients of one side at one subscriber count.
pub struct Board {
    pub stamps: Arc<Stamps>,
    /// The event `seq` 2 stands for (`seq` 1 is the venue's snapshot).
    pub base: u64,
    pub clients: Box<[Counters]>,
    pub latency: Mutex<Histogram<u64>>,
    pub first_error: Mutex<Option<String>>,
}

pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

impl Board {
    pub fn new(stamps: Arc<Stamps>, base: u64, clients: usize) -> Self {
        Self {
            stamps,
            base,
            clients: (0..clients)
                .map(|_| Counters {
                    next: AtomicU64::new(base),
                    ..Counters::default()
                })
                .collect(),
            latency: Mutex::new(histogram()),
            first_error: Mutex::new(None),
        }
    }

    /// The next event the slowest client expects.
    pub fn min_next(&self) -> u64 {
        self.clients
            .iter()
            .map(|c| c.next.load(Ordering::Acquire))
            .min()
            .unwrap_or(u64::MAX)
    }

    pub fn sum(&self, field: impl Fn(&Counters) -> &AtomicU64) -> u64 {
        self.clients
            .iter()
            .map(|c| field(c).load(Ordering::Relaxed))
            .sum()
    }

    /// Takes the latencies recorded so far.
    pub fn take_latency(&self) -> Histogram<u64> {
        std::mem::replace(
            &mut *self.latency.lock().expect("latency lock"),
            histogram(),
        )
    }

    fn error(&self, text: String) {
        let mut first = self.first_error.lock().expect("error lock");
        if first.is_none() {
            *first = Some(text);
        }
    }

    pub fn first_error(&self) -> Option<String> {
        self.first_error.lock().expect("error lock").clone()
    }
}

/// The source address of client number `n` of the whole run (a fresh
/// address every [`CLIENTS_PER_ADDRESS`] clients, in 127.1.0.0/16).
pub fn source_address(n: usize) -> IpAddr {
    let a = n / CLIENTS_PER_ADDRESS;
    IpAddr::V4(Ipv4Addr::new(127, 1, (a / 250) as u8, (a % 250 + 1) as u8))
}

/// Connects from `source` and upgrades `path`; the HTTP answer is read a
/// byte at a time so that nothing after it is taken from the socket.
pub async fn connect(
    server: SocketAddr,
    source: IpAddr,
    path: &str,
) -> Result<WebSocket<TcpStream>, BenchError> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source, 0))?;
    let mut stream = socket.connect(server).await?;
    stream.set_nodelay(true)?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {server}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await? == 0 || answer.len() > 16 * 1024 {
            return Err(format!(
                "upgrade of {path} from {source}: {}",
                String::from_utf8_lossy(&answer)
            )
            .into());
        }
        answer.push(byte[0]);
    }
    if !answer.starts_with(b"HTTP/1.1 101") {
        return Err(format!(
            "upgrade of {path} from {source} refused: {}",
            String::from_utf8_lossy(&answer)
        )
        .into());
    }
    Ok(WebSocket::after_handshake(stream, Role::Client))
}

/// The next text frame, as bytes.
async fn text(ws: &mut WebSocket<TcpStream>) -> Result<Bytes, BenchError> {
    loop {
        let frame = ws.read_frame().await?;
        match frame.opcode {
            OpCode::Text => return Ok(Bytes::from(frame.payload.to_vec())),
            OpCode::Close => return Err("closed by the server".into()),
            _ => {}
        }
    }
}

/// Subscribes to `orderbook_delta` of `ticker` on the venue; returns once
/// the reply and the snapshot (`seq` 1) have arrived.
pub async fn subscribe(ws: &mut WebSocket<TcpStream>, ticker: &str) -> Result<(), BenchError> {
    let command = serde_json::json!({
        "id": 1,
        "cmd": "subscribe",
        "params": { "channels": [plan::KIND], "market_tickers": [ticker] },
    })
    .to_string();
    ws.write_frame(Frame::text(Payload::Owned(command.into_bytes())))
        .await?;
    let reply: serde_json::Value = serde_json::from_slice(&text(ws).await?)?;
    if reply["type"] != "subscribed" || reply["msg"]["sid"] != 1 {
        return Err(format!("subscribe: {reply}").into());
    }
    let snapshot: serde_json::Value = serde_json::from_slice(&text(ws).await?)?;
    if snapshot["type"] != "orderbook_snapshot" || snapshot["seq"] != 1 {
        return Err(format!("expected the snapshot, got {snapshot}").into());
    }
    Ok(())
}

/// Reads data frames until the connection ends, checking and timing each.
pub async fn receive(mut ws: WebSocket<TcpStream>, board: Arc<Board>, index: usize) {
    let me = &board.clients[index];
    let mut last_seq = 1u64;
    loop {
        let frame = match ws.read_frame().await {
            Ok(frame) => frame,
            Err(e) => {
                board.error(format!("client {index}: {e}"));
                break;
            }
        };
        let now = board.stamps.now_ns();
        match frame.opcode {
            OpCode::Text => {}
            OpCode::Close => break,
            _ => continue,
        }
        let Some(parsed) = plan::parse(&frame.payload) else {
            me.bad.fetch_add(1, Ordering::Relaxed);
            board.error(format!(
                "client {index}: not a data frame: {}",
                String::from_utf8_lossy(&frame.payload)
            ));
            continue;
        };
        if parsed.seq <= last_seq {
            me.bad.fetch_add(1, Ordering::Relaxed);
            board.error(format!(
                "client {index}: seq {} after {last_seq}",
                parsed.seq
            ));
            continue;
        }
        if parsed.seq != last_seq + 1 {
            me.gaps
                .fetch_add(parsed.seq - last_seq - 1, Ordering::Relaxed);
            board.error(format!(
                "client {index}: seq jumped from {last_seq} to {}",
                parsed.seq
            ));
        }
        last_seq = parsed.seq;
        let g = board.base + parsed.seq - 2;
        if plan::expected(g) != (parsed.price, parsed.delta) {
            me.bad.fetch_add(1, Ordering::Relaxed);
            board.error(format!(
                "client {index}: event {g} should be {:?}, got {parsed:?}",
                plan::expected(g)
            ));
        }
        let sent = board.stamps.get(g);
        board
            .latency
            .lock()
            .expect("latency lock")
            .saturating_record(now.saturating_sub(sent).max(1));
        me.received.fetch_add(1, Ordering::Relaxed);
        me.next.store(g + 1, Ordering::Release);
    }
    me.ended.store(1, Ordering::Release);
}

/// Waits until `ready` or the deadline; false at the deadline.
pub fn wait_until(timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if ready() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}
