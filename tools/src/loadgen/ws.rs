//! Websocket subscribers: each one subscribes to `orderbook_delta` of the
//! open series, logs in with one account's key and subscribes to that
//! account's `fill` channel, then counts what arrives, the gaps in each
//! subscription's seq and the delay from the server's send stamp (`ts_ms`)
//! to arrival. One thread per subscriber, blocking reads.
//!
//! The venue takes at most 20 websockets per address: past 20 the
//! subscribers connect from further loopback addresses (127.0.0.2, ...)
//! when the target is on loopback.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tungstenite::{Message, WebSocket};

use super::report::new_histogram;

/// Connections the venue accepts from one address.
const PER_ADDRESS: usize = sequencer::limits::WS_CONNECTIONS_PER_IP as usize;

/// What all subscribers saw, merged.
#[derive(Default)]
pub struct WsTotals {
    pub connected: usize,
    /// Data messages by type (orderbook_snapshot, orderbook_delta, fill...).
    pub messages: BTreeMap<String, u64>,
    /// Replies that were errors, and abnormal ends.
    pub errors: Vec<String>,
    /// Messages missed, from jumps in a subscription's seq.
    pub gaps: u64,
    /// Delivery delay of orderbook_delta and fill messages, in microseconds
    /// (the server stamps in whole milliseconds, so this is +-1 ms).
    pub delay: Option<Histogram<u64>>,
}

impl WsTotals {
    pub fn data_messages(&self) -> u64 {
        self.messages.values().sum()
    }
}

pub struct Subscribers {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
    totals: Arc<Mutex<WsTotals>>,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Reads `"name":123` in the fixed-order envelope prefix of a data frame.
fn field_u64(text: &str, name: &str) -> Option<u64> {
    let at = text.find(name)? + name.len();
    let digits: &str = &text[at..];
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// The type, sid, seq and ts_ms of a data frame
/// (`{"type":..,"sid":..,"seq":..,"ts_ms":..,"msg":..}`), without parsing
/// the message; `None` for replies (which carry an `id`).
fn envelope(text: &str) -> Option<(&str, u64, u64, u64)> {
    let rest = text.strip_prefix("{\"type\":\"")?;
    let kind = &rest[..rest.find('"')?];
    let head = &rest[..rest.find(",\"msg\":").unwrap_or(rest.len())];
    Some((
        kind,
        field_u64(head, "\"sid\":")?,
        field_u64(head, "\"seq\":")?,
        field_u64(head, "\"ts_ms\":")?,
    ))
}

/// Opens the websocket from `source` with a 200 ms read timeout.
fn connect(target: SocketAddr, source: Option<IpAddr>) -> Result<WebSocket<TcpStream>> {
    let stream = match source {
        Some(ip) => {
            let socket = socket2::Socket::new(
                socket2::Domain::for_address(target),
                socket2::Type::STREAM,
                None,
            )?;
            socket
                .bind(&SocketAddr::new(ip, 0).into())
                .with_context(|| format!("binding {ip}"))?;
            socket.connect(&target.into())?;
            TcpStream::from(socket)
        }
        None => TcpStream::connect(target)?,
    };
    stream.set_nodelay(true)?;
    let url = format!("ws://{target}/v1/ws");
    let (mut ws, _) = tungstenite::client(url.as_str(), stream).map_err(|e| match e {
        tungstenite::HandshakeError::Failure(e) => anyhow!("websocket upgrade refused: {e}"),
        tungstenite::HandshakeError::Interrupted(_) => anyhow!("websocket upgrade interrupted"),
    })?;
    ws.get_mut()
        .set_read_timeout(Some(Duration::from_millis(200)))?;
    Ok(ws)
}

fn send(ws: &mut WebSocket<TcpStream>, value: Value) -> Result<()> {
    ws.send(Message::text(value.to_string()))?;
    Ok(())
}

/// Reads until the reply with `id`; data frames on the way are counted.
fn reply(ws: &mut WebSocket<TcpStream>, id: u64, seen: &mut Seen) -> Result<Value> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if Instant::now() > deadline {
            bail!("no reply to command {id} within 10 s");
        }
        match read(ws)? {
            Some(text) => {
                if seen.count(&text) {
                    continue;
                }
                let value: Value = serde_json::from_str(&text)?;
                if value["id"].as_u64() == Some(id) {
                    if value["type"] == "error" {
                        bail!("command {id} refused: {}", value["msg"]);
                    }
                    return Ok(value);
                }
            }
            None => continue,
        }
    }
}

/// One text frame, or `None` on a read timeout.
fn read(ws: &mut WebSocket<TcpStream>) -> Result<Option<String>> {
    match ws.read() {
        Ok(Message::Text(text)) => Ok(Some(text.to_string())),
        Ok(Message::Close(frame)) => bail!("closed by the server: {frame:?}"),
        Ok(_) => Ok(None),
        Err(tungstenite::Error::Io(e))
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// What one subscriber saw.
struct Seen {
    messages: BTreeMap<String, u64>,
    last_seq: BTreeMap<u64, u64>,
    gaps: u64,
    delay: Histogram<u64>,
}

impl Seen {
    /// Counts a data frame; false for replies.
    fn count(&mut self, text: &str) -> bool {
        let Some((kind, sid, seq, ts_ms)) = envelope(text) else {
            return false;
        };
        match self.messages.get_mut(kind) {
            Some(n) => *n += 1,
            None => {
                self.messages.insert(kind.to_string(), 1);
            }
        }
        if let Some(last) = self.last_seq.insert(sid, seq) {
            self.gaps += seq.saturating_sub(last + 1);
        }
        if kind == "orderbook_delta" || kind == "fill" {
            let delay = now_ms().saturating_sub(ts_ms);
            self.delay.saturating_record(delay * 1000);
        }
        true
    }
}

/// One subscriber's life: connect, subscribe, log in, then read until told
/// to stop. `ready` is told once the subscriptions are in place.
fn subscriber(
    target: SocketAddr,
    source: Option<IpAddr>,
    series: &[String],
    key: &str,
    stop: &AtomicBool,
    ready: std::sync::mpsc::Sender<Result<()>>,
    seen: &mut Seen,
) -> Result<()> {
    let setup = (|| {
        let mut ws = connect(target, source)?;
        send(
            &mut ws,
            json!({"id": 1, "cmd": "subscribe", "params": {"channels": ["orderbook_delta"], "series_tickers": series}}),
        )?;
        reply(&mut ws, 1, seen)?;
        send(
            &mut ws,
            json!({"id": 2, "cmd": "login", "params": {"api_key": key}}),
        )?;
        reply(&mut ws, 2, seen)?;
        send(
            &mut ws,
            json!({"id": 3, "cmd": "subscribe", "params": {"channels": ["fill"]}}),
        )?;
        reply(&mut ws, 3, seen)?;
        Ok::<_, anyhow::Error>(ws)
    })();
    let mut ws = match setup {
        Ok(ws) => {
            let _ = ready.send(Ok(()));
            ws
        }
        Err(e) => {
            let _ = ready.send(Err(anyhow!("{e:#}")));
            return Err(e);
        }
    };
    while !stop.load(Ordering::Relaxed) {
        if let Some(text) = read(&mut ws)? {
            seen.count(&text);
        }
    }
    let _ = ws.close(None);
    let _ = ws.flush();
    Ok(())
}

impl Subscribers {
    /// Starts `count` subscribers, subscriber `j` logged in with
    /// `keys[j % keys.len()]`; returns once every one has subscribed (or
    /// failed; failures are reported in the totals).
    pub fn start(
        target: SocketAddr,
        count: usize,
        series: Vec<String>,
        keys: &[String],
    ) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let totals = Arc::new(Mutex::new(WsTotals {
            delay: Some(new_histogram()),
            ..WsTotals::default()
        }));
        let mut threads = Vec::new();
        let mut waits = Vec::new();
        let loopback = target.ip().is_loopback();
        if count > PER_ADDRESS && !(loopback && target.is_ipv4()) {
            bail!(
                "the venue takes at most {PER_ADDRESS} websockets per address; more than that needs an IPv4 loopback target"
            );
        }
        for j in 0..count {
            let source = if loopback && target.is_ipv4() && count > PER_ADDRESS {
                Some(IpAddr::V4(Ipv4Addr::new(
                    127,
                    0,
                    0,
                    1 + (j / PER_ADDRESS) as u8,
                )))
            } else {
                None
            };
            let (ready, wait) = std::sync::mpsc::channel();
            waits.push(wait);
            let key = keys[j % keys.len()].clone();
            let series = series.clone();
            let stop = stop.clone();
            let totals = totals.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("ws-{j}"))
                    .spawn(move || {
                        let mut seen = Seen {
                            messages: BTreeMap::new(),
                            last_seq: BTreeMap::new(),
                            gaps: 0,
                            delay: new_histogram(),
                        };
                        let outcome =
                            subscriber(target, source, &series, &key, &stop, ready, &mut seen);
                        let mut totals = totals.lock().expect("totals");
                        if let Err(e) = outcome {
                            totals.errors.push(format!("subscriber {j}: {e:#}"));
                        }
                        for (kind, n) in seen.messages {
                            *totals.messages.entry(kind).or_insert(0) += n;
                        }
                        totals.gaps += seen.gaps;
                        if let Some(delay) = totals.delay.as_mut() {
                            let _ = delay.add(&seen.delay);
                        }
                    })
                    .context("starting a websocket thread")?,
            );
        }
        let mut connected = 0;
        for wait in waits {
            if let Ok(Ok(())) = wait.recv_timeout(Duration::from_secs(30)) {
                connected += 1;
            }
        }
        totals.lock().expect("totals").connected = connected;
        Ok(Self {
            stop,
            threads,
            totals,
        })
    }

    /// Stops every subscriber and returns what they saw.
    pub fn finish(self) -> WsTotals {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            let _ = thread.join();
        }
        let mut totals = self.totals.lock().expect("totals");
        std::mem::take(&mut *totals)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelopes_are_read_without_parsing_the_message() {
        let text =
            r#"{"type":"fill","sid":3,"seq":12,"ts_ms":1795294800123,"msg":{"ts_ms":5,"seq":9}}"#;
        assert_eq!(envelope(text), Some(("fill", 3, 12, 1_795_294_800_123)));
        assert_eq!(envelope(r#"{"id":1,"type":"ok","msg":{}}"#), None);
    }
}
