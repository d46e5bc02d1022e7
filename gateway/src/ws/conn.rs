//! One websocket connection: the upgrade (limits, Origin, bearer key), a
//! reader task that turns frames into messages (fragments joined, 64 KB
//! enforced), and the connection task that writes data and replies, runs
//! commands, rate-limits them, pings, and closes with the documented codes.
//!
//! The connection task writes frames itself: every frame it has at one
//! wake-up (up to [`WRITE_BATCH`] data messages taken with one `recv_many`)
//! is encoded into one buffer and sent with one `write` under one timeout,
//! so a backlog costs one system call per batch, not one per message.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use fastwebsockets::upgrade::{IncomingUpgrade, UpgradeFut};
use fastwebsockets::{OpCode, Role, WebSocketError, WebSocketRead};
use hyper_util::rt::TokioIo;
use sequencer::limits::{WS_COMMANDS_BURST, WS_COMMANDS_PER_SECOND, WS_MESSAGE_BYTES_MAX};
use sequencer::types::AccountId;
use sequencer::ErrorCode as ApiCode;
use serde_json::{json, Value};
use tokio::io::{AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot};

use super::masked::{self, MaskWatch};
use super::protocol::{self, Command, ErrorCode, WsError};
use super::publisher::{Control, Out, Sid};
use super::{Hub, Slot};
use crate::api::rest::App;
use crate::engine::{now_ms, Caller};
use crate::error::ApiError;

type Stream = TokioIo<hyper::upgrade::Upgraded>;
type Reader = WebSocketRead<MaskWatch<ReadHalf<Stream>>>;

/// Close codes sent by the server.
pub mod close {
    /// The server is shutting down, or the client stopped answering pings.
    pub const GOING_AWAY: u16 = 1001;
    /// A frame broke the websocket protocol.
    pub const PROTOCOL: u16 = 1002;
    /// A text message that is not UTF-8.
    pub const INVALID_DATA: u16 = 1007;
    /// Commands over the rate, or the key stopped being valid.
    pub const POLICY: u16 = 1008;
    /// A client message over 64 KB.
    pub const TOO_BIG: u16 = 1009;
}

/// A write (of one batch of frames) that takes longer than this ends the
/// connection (a client that does not read).
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// After closing on an error, the connection is kept this long so the
/// client can read the close frame before the socket goes.
const LINGER: Duration = Duration::from_secs(1);
/// How long a command waits for the publisher or the sequencer.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);
/// Data messages written per wake-up before looking at commands again.
const WRITE_BATCH: usize = 256;
/// Frames are written once this many bytes are waiting, even mid-batch.
const FLUSH_BYTES: usize = 32 * 1024;
/// The write buffer keeps at most this much memory between batches (a
/// large snapshot may grow it past that once).
const OUT_KEEP: usize = 64 * 1024;

/// An authenticated connection's key.
#[derive(Clone, Debug)]
struct Auth {
    caller: Caller,
    account: AccountId,
}

/// `GET /v1/ws`: the upgrade. Refusals are HTTP answers in the spec's error
/// shape: 400 without a websocket upgrade, 429 over 20 connections from the
/// address, 401/429 for a bearer key that is refused. Any Origin is
/// accepted: nothing rides on cookies, a private channel needs the key.
pub async fn handler(
    State(app): State<Arc<App>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    upgrade: Result<IncomingUpgrade, StatusCode>,
) -> Response {
    let hub = app.ws.clone();
    let upgrade = match upgrade {
        Ok(u) if is_upgrade(&headers) => u,
        _ => {
            let mut refused = ApiError::bad_request(
                "This endpoint is a websocket: send an HTTP/1.1 upgrade (Connection: Upgrade, \
                 Upgrade: websocket, Sec-WebSocket-Version: 13).",
            )
            .into_response();
            // RFC 6455 §4.4: a refused handshake names the version served.
            refused.headers_mut().insert(
                "sec-websocket-version",
                axum::http::HeaderValue::from_static("13"),
            );
            return refused;
        }
    };
    let ip = peer.ip();
    let Some(slot) = hub.acquire(ip) else {
        return ApiError::rate_limited(
            format!(
                "At most {} websocket connections per IP address.",
                sequencer::limits::WS_CONNECTIONS_PER_IP
            ),
            1,
        )
        .into_response();
    };
    let auth = if headers.contains_key(header::AUTHORIZATION) {
        match authenticate(&app, &headers, ip).await {
            Ok(auth) => Some(auth),
            Err(e) => return e.into_response(),
        }
    } else {
        None
    };
    let (response, fut) = match upgrade.upgrade() {
        Ok(pair) => pair,
        Err(_) => return ApiError::bad_request("The upgrade failed.").into_response(),
    };
    tokio::spawn(run(app, fut, slot, auth, ip));
    response.into_response()
}

fn header_has(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

fn is_upgrade(headers: &HeaderMap) -> bool {
    header_has(headers, header::CONNECTION, "upgrade")
        && header_has(headers, header::UPGRADE, "websocket")
}

/// The REST path for a key: format and lockout here, secret, revocation,
/// expiry, address and suspension on the sequencer thread.
async fn authenticate(app: &App, headers: &HeaderMap, ip: IpAddr) -> Result<Auth, ApiError> {
    let caller = app.caller(headers, ip, false)?;
    let account = app
        .submitter
        .read(Some(caller.clone()), |state, key| {
            Ok(state.authorize_read(key.expect("authenticated"))?.account)
        })
        .await?;
    Ok(Auth { caller, account })
}

/// Writes `bytes`, failing after [`WRITE_TIMEOUT`]. The first attempt
/// goes without a timer: the socket usually has room for the whole batch,
/// and a timeout costs a runtime handle and a clock reading.
async fn write_all(io: &mut WriteHalf<Stream>, bytes: &[u8]) -> bool {
    let first = std::future::poll_fn(|cx| {
        Poll::Ready(match Pin::new(&mut *io).poll_write(cx, bytes) {
            Poll::Ready(Ok(n)) => Some(n),
            Poll::Ready(Err(_)) => None,
            Poll::Pending => Some(0),
        })
    })
    .await;
    let Some(n) = first else {
        return false;
    };
    n == bytes.len()
        || matches!(
            tokio::time::timeout(WRITE_TIMEOUT, io.write_all(&bytes[n..])).await,
            Ok(Ok(()))
        )
}

/// What the reader task hands the connection task.
enum Incoming {
    Text(String),
    Binary,
    Ping(Vec<u8>),
    Pong,
    Close(Vec<u8>),
    TooBig,
    Broken(u16, &'static str),
}

async fn read_loop(mut reader: Reader, unmasked: Arc<AtomicU64>, tx: mpsc::Sender<Incoming>) {
    let mut partial: Option<(bool, Vec<u8>)> = None;
    // Frames read so far: the position of the next one.
    let mut frames: u64 = 0;
    loop {
        let frame = match reader
            .read_frame::<_, WebSocketError>(&mut |_| async { Ok(()) })
            .await
        {
            // RFC 6455 §5.1: the server closes on a frame from the client
            // that is not masked (the frames before it are taken).
            Ok(_) if unmasked.load(Ordering::Relaxed) == frames => {
                let _ = tx
                    .send(Incoming::Broken(
                        close::PROTOCOL,
                        "Frames from a client must be masked.",
                    ))
                    .await;
                return;
            }
            Ok(frame) => {
                frames += 1;
                frame
            }
            Err(WebSocketError::FrameTooLarge) => {
                let _ = tx.send(Incoming::TooBig).await;
                return;
            }
            Err(WebSocketError::InvalidUTF8) => {
                let _ = tx
                    .send(Incoming::Broken(close::INVALID_DATA, "Text must be UTF-8."))
                    .await;
                return;
            }
            Err(WebSocketError::UnexpectedEOF | WebSocketError::IoError(_)) => return,
            Err(_) => {
                let _ = tx
                    .send(Incoming::Broken(close::PROTOCOL, "Protocol error."))
                    .await;
                return;
            }
        };
        let message = match frame.opcode {
            OpCode::Text | OpCode::Binary if partial.is_some() => {
                Incoming::Broken(close::PROTOCOL, "A new message inside a fragmented one.")
            }
            OpCode::Text | OpCode::Binary if !frame.fin => {
                partial = Some((frame.opcode == OpCode::Text, frame.payload.to_vec()));
                continue;
            }
            OpCode::Text => match String::from_utf8(frame.payload.to_vec()) {
                Ok(text) => Incoming::Text(text),
                Err(_) => Incoming::Broken(close::INVALID_DATA, "Text must be UTF-8."),
            },
            OpCode::Binary => Incoming::Binary,
            OpCode::Continuation => match partial.as_mut() {
                None => Incoming::Broken(close::PROTOCOL, "A continuation without a message."),
                Some((_, buffer)) if buffer.len() + frame.payload.len() > WS_MESSAGE_BYTES_MAX => {
                    Incoming::TooBig
                }
                Some((_, buffer)) => {
                    buffer.extend_from_slice(&frame.payload);
                    if !frame.fin {
                        continue;
                    }
                    let (text, buffer) = partial.take().expect("present");
                    if !text {
                        Incoming::Binary
                    } else {
                        match String::from_utf8(buffer) {
                            Ok(text) => Incoming::Text(text),
                            Err(_) => Incoming::Broken(close::INVALID_DATA, "Text must be UTF-8."),
                        }
                    }
                }
            },
            OpCode::Ping => Incoming::Ping(frame.payload.to_vec()),
            OpCode::Pong => Incoming::Pong,
            OpCode::Close => Incoming::Close(frame.payload.to_vec()),
        };
        let last = matches!(
            message,
            Incoming::Close(_) | Incoming::TooBig | Incoming::Broken(..)
        );
        if tx.send(message).await.is_err() || last {
            return;
        }
    }
}

/// A token bucket: 10 commands per second, bursts of 20.
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn new() -> Self {
        Self {
            tokens: f64::from(WS_COMMANDS_BURST),
            last: Instant::now(),
        }
    }
    fn take(&mut self) -> bool {
        let now = Instant::now();
        let refill =
            now.duration_since(self.last).as_secs_f64() * f64::from(WS_COMMANDS_PER_SECOND);
        self.tokens = (self.tokens + refill).min(f64::from(WS_COMMANDS_BURST));
        self.last = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Session {
    app: Arc<App>,
    hub: Arc<Hub>,
    conn: u64,
    ip: IpAddr,
    /// The socket's write half. Frames are encoded by
    /// [`protocol::frame`]/[`protocol::data_frame`] into `out` and leave
    /// with [`Session::flush`].
    io: WriteHalf<Stream>,
    /// Frames encoded and not yet written.
    out: Vec<u8>,
    /// Scratch for one envelope's head.
    head: Vec<u8>,
    /// Sids whose data may be written: `subscribed` sent, `unsubscribed` not.
    live: BTreeSet<Sid>,
    auth: Option<Auth>,
    bucket: Bucket,
    /// The client's pings and pongs, on a bucket of their own of the same
    /// size: a pong flood cost a core (a security trial), while a pong a
    /// ping interval must never use up a burst of commands.
    control: Bucket,
}

/// How a session ended.
enum End {
    /// The peer went away or the socket failed: nothing more to send.
    Gone,
    /// We sent a close frame: keep the socket a moment for the peer.
    Closed,
}

async fn run(app: Arc<App>, fut: UpgradeFut, slot: Slot, auth: Option<Auth>, ip: IpAddr) {
    let Ok(ws) = fut.await else {
        return;
    };
    let hub = app.ws.clone();
    // fastwebsockets reads; the connection task writes its frames itself
    // (the `WebSocketWrite` half is unused: a sink).
    let (read, io) = tokio::io::split(ws.into_inner());
    let unmasked = Arc::new(AtomicU64::new(masked::NONE));
    let read = MaskWatch::new(read, unmasked.clone());
    let (mut reader, _) =
        fastwebsockets::after_handshake_split(read, tokio::io::sink(), Role::Server);
    reader.set_auto_pong(false);
    reader.set_auto_close(false);
    // fastwebsockets refuses a frame of `max` bytes or more: 64 KB passes.
    reader.set_max_message_size(WS_MESSAGE_BYTES_MAX + 1);
    let (in_tx, mut in_rx) = mpsc::channel(8);
    let read_task = tokio::spawn(read_loop(reader, unmasked, in_tx));
    let conn = hub.next_conn_id();
    let (out_tx, mut out_rx) = mpsc::channel(hub.settings.queue_capacity.max(1));
    hub.send(Control::Open {
        conn,
        tx: out_tx,
        account: auth.as_ref().map(|a| a.account),
    });
    let mut session = Session {
        app,
        hub: hub.clone(),
        conn,
        ip,
        io,
        out: Vec::with_capacity(1024),
        head: Vec::with_capacity(96),
        live: BTreeSet::new(),
        auth,
        bucket: Bucket::new(),
        control: Bucket::new(),
    };
    let end = session.serve(&mut in_rx, &mut out_rx).await;
    hub.send(Control::Close { conn });
    drop(out_rx);
    if let End::Closed = end {
        // Read (and drop) until the peer's close, EOF, or the linger ends.
        let _ = tokio::time::timeout(LINGER, async {
            loop {
                match in_rx.recv().await {
                    Some(Incoming::Close(_)) => return,
                    Some(_) => {}
                    None => std::future::pending::<()>().await,
                }
            }
        })
        .await;
    }
    read_task.abort();
    drop(slot);
}

impl Session {
    /// Writes every frame encoded so far: one `write_all`, one timeout.
    async fn flush(&mut self) -> bool {
        if self.out.is_empty() {
            return true;
        }
        let written = write_all(&mut self.io, &self.out).await;
        self.out.clear();
        if self.out.capacity() > OUT_KEEP {
            self.out.shrink_to(OUT_KEEP);
        }
        written
    }

    /// Writes one frame, and whatever was encoded before it.
    async fn write(&mut self, opcode: OpCode, payload: &[u8]) -> bool {
        protocol::frame(&mut self.out, opcode, payload);
        self.flush().await
    }

    async fn text(&mut self, text: &str) -> bool {
        self.write(OpCode::Text, text.as_bytes()).await
    }

    async fn close(&mut self, code: u16, reason: &str) -> End {
        let mut end = reason.len().min(123);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        let mut payload = Vec::with_capacity(2 + end);
        payload.extend_from_slice(&code.to_be_bytes());
        payload.extend_from_slice(&reason.as_bytes()[..end]);
        let _ = self.write(OpCode::Close, &payload).await;
        End::Closed
    }

    /// Writes a batch of data messages (those of live sids), all stamped
    /// with one `ts_ms`: one write per [`FLUSH_BYTES`], usually one in all.
    async fn data(&mut self, batch: &mut Vec<Out>) -> bool {
        let ts_ms = now_ms();
        for out in batch.drain(..) {
            if !self.live.contains(&out.sid) {
                continue;
            }
            protocol::data_frame(
                &mut self.out,
                &mut self.head,
                out.kind,
                out.sid,
                out.seq,
                ts_ms,
                &out.msg,
            );
            if self.out.len() >= FLUSH_BYTES && !self.flush().await {
                return false;
            }
        }
        self.flush().await
    }

    async fn serve(
        &mut self,
        in_rx: &mut mpsc::Receiver<Incoming>,
        out_rx: &mut mpsc::Receiver<Out>,
    ) -> End {
        let interval = self
            .hub
            .settings
            .ping_interval
            .max(Duration::from_millis(10));
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        let shutdown = self.hub.shutdown_signal();
        let mut last_seen = Instant::now();
        let mut batch: Vec<Out> = Vec::new();
        if *shutdown.borrow() {
            return self
                .close(close::GOING_AWAY, "The server is shutting down.")
                .await;
        }
        // One wait for the shutdown for the whole loop (a fresh `changed()`
        // per wake-up would join and leave the watch's waiter list each time).
        let shutting_down = async move {
            let mut shutdown = shutdown;
            let _ = shutdown.changed().await;
        };
        tokio::pin!(shutting_down);
        loop {
            // Biased: shutdown, then commands, then the ping (ready once an
            // interval, so a busy data stream cannot starve it), then data.
            tokio::select! {
                biased;
                () = &mut shutting_down => {
                    return self.close(close::GOING_AWAY, "The server is shutting down.").await;
                }
                incoming = in_rx.recv() => {
                    let Some(incoming) = incoming else { return End::Gone };
                    last_seen = Instant::now();
                    match incoming {
                        Incoming::Text(text) => {
                            if !self.bucket.take() {
                                return self.close(close::POLICY, &format!(
                                    "Too many commands: at most {WS_COMMANDS_PER_SECOND} per second, bursts of {WS_COMMANDS_BURST}."
                                )).await;
                            }
                            for frame in self.command(&text).await {
                                protocol::frame(&mut self.out, OpCode::Text, frame.as_bytes());
                            }
                            if !self.flush().await {
                                return End::Gone;
                            }
                        }
                        Incoming::Binary => {
                            if !self.bucket.take() {
                                return self.close(close::POLICY, "Too many commands.").await;
                            }
                            let e = WsError::new(ErrorCode::BadParams, "Commands are JSON text frames.");
                            if !self.text(&protocol::error(&Value::Null, &e)).await {
                                return End::Gone;
                            }
                        }
                        Incoming::Ping(_) | Incoming::Pong if !self.control.take() => {
                            return self.close(close::POLICY, &format!(
                                "Too many pings and pongs: at most {WS_COMMANDS_PER_SECOND} per second, bursts of {WS_COMMANDS_BURST}."
                            )).await;
                        }
                        Incoming::Ping(payload) => {
                            if !self.write(OpCode::Pong, &payload).await {
                                return End::Gone;
                            }
                        }
                        Incoming::Pong => {}
                        Incoming::Close(payload) => {
                            // Answer the peer's close (RFC 6455 5.5.1), then go.
                            let answer: &[u8] = if payload.len() >= 2 {
                                &1000u16.to_be_bytes()
                            } else {
                                &[]
                            };
                            let _ = self.write(OpCode::Close, answer).await;
                            return End::Gone;
                        }
                        Incoming::TooBig => {
                            return self.close(close::TOO_BIG, "A message is limited to 64 KB.").await;
                        }
                        Incoming::Broken(code, reason) => return self.close(code, reason).await,
                    }
                }
                _ = ping.tick() => {
                    if last_seen.elapsed() > 2 * interval {
                        return self.close(close::GOING_AWAY, "No answer to pings.").await;
                    }
                    if !self.write(OpCode::Ping, &[]).await {
                        return End::Gone;
                    }
                    if let Some(reason) = self.key_refused().await {
                        return self.close(close::POLICY, &reason).await;
                    }
                }
                // Every message waiting, up to WRITE_BATCH, in one write.
                taken = out_rx.recv_many(&mut batch, WRITE_BATCH) => {
                    if taken == 0 {
                        return End::Gone;
                    }
                    if !self.data(&mut batch).await {
                        return End::Gone;
                    }
                }
            }
        }
    }

    /// Revocation, expiry and suspension reach an open connection within a
    /// ping interval: the key is checked again at every ping, as proven
    /// (`Caller::proven`): other clients' failed keys from the same address
    /// lock that address out for new keys, not this connection.
    async fn key_refused(&mut self) -> Option<String> {
        let caller = Caller {
            proven: true,
            ..self.auth.as_ref()?.caller.clone()
        };
        let answer = self
            .app
            .submitter
            .read(Some(caller), |state, key| {
                state.authorize_read(key.expect("authenticated"))?;
                Ok(())
            })
            .await;
        match answer {
            Err(e) if e.code != ApiCode::ExchangeUnavailable => Some(e.message),
            _ => None,
        }
    }

    /// Runs one command; returns the frames to write, in order.
    async fn command(&mut self, text: &str) -> Vec<String> {
        let (id, parsed) = protocol::parse(text);
        let command = match parsed {
            Ok(c) => c,
            Err(e) => return vec![protocol::error(&id, &e)],
        };
        if let Command::Login { api_key } = &command {
            return vec![self.login(&id, api_key).await];
        }
        let (reply, rx) = oneshot::channel();
        let sent = self.hub.send(Control::Command {
            conn: self.conn,
            id: id.clone(),
            command,
            reply,
        });
        let answer = match tokio::time::timeout(COMMAND_TIMEOUT, rx).await {
            Ok(Ok(answer)) if sent => answer,
            _ => {
                let e = WsError::new(
                    ErrorCode::Unavailable,
                    "The server could not answer in time; retry.",
                );
                return vec![protocol::error(&id, &e)];
            }
        };
        self.live.extend(answer.added);
        for sid in answer.removed {
            self.live.remove(&sid);
        }
        answer.frames
    }

    async fn login(&mut self, id: &Value, api_key: &str) -> String {
        if self.auth.is_some() {
            let e = WsError::new(
                ErrorCode::AlreadyAuthenticated,
                "This connection is already authenticated.",
            );
            return protocol::error(id, &e);
        }
        let refused =
            |message: String| protocol::error(id, &WsError::new(ErrorCode::InvalidKey, message));
        let invalid = sequencer::auth::KeyRefusal::Invalid.message().to_string();
        let mut headers = HeaderMap::new();
        match HeaderValue::from_str(&format!("Bearer {api_key}")) {
            Ok(value) if api_key.starts_with("tk_") => {
                headers.insert(header::AUTHORIZATION, value);
            }
            _ => {
                if let Err(e) = self.app.lockout.check(self.ip) {
                    return refused(e.message);
                }
                self.app.lockout.fail(self.ip);
                return refused(invalid);
            }
        }
        match authenticate(&self.app, &headers, self.ip).await {
            Ok(auth) => {
                let key_id = auth.caller.key_id;
                self.hub.send(Control::Authenticated {
                    conn: self.conn,
                    account: auth.account,
                });
                self.auth = Some(auth);
                protocol::reply(id, "ok", json!({ "key_id": key_id.as_str() }))
            }
            Err(e) if e.code == ApiCode::ExchangeUnavailable => {
                protocol::error(id, &WsError::new(ErrorCode::Unavailable, e.message))
            }
            Err(e) => refused(e.message),
        }
    }
}
