//! The bare broadcast: the same stack under the websocket as the venue
//! (axum 0.8 on a tokio runtime of as many workers as the venue's, the fastwebsockets upgrade,
//! TCP_NODELAY) and nothing above it. The broadcaster runs on the driver's
//! thread: per event it builds the frame once (the venue's envelope and
//! `msg`, the same bytes a subscriber of the venue gets) and `try_send`s
//! the shared bytes to every connection's bounded queue (as long as the
//! venue's); each connection's task writes what its queue holds, one
//! `write_frame` (one `write` system call) per message.
//!
//! The coalescing variant (an experiment, not the reference) differs only
//! in that task: the socket sits behind a 64 KiB `BufWriter`, the task
//! writes every message its queue holds (at most 256 per wake-up, as the
//! venue's connection task does) and flushes once, so a backlog leaves in
//! one system call instead of one per message.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::Bytes;
use fastwebsockets::upgrade::{IncomingUpgrade, UpgradeFut};
use fastwebsockets::{Frame, Payload, Role, WebSocket};
use tokio::io::{AsyncRead, AsyncWrite, BufWriter};
use tokio::sync::mpsc::{self, error::TrySendError};

use crate::engines::BenchError;
use crate::loopback::LoopbackServer;
use crate::ws::client::Stamps;
use crate::ws::plan;

/// The bare server's path.
pub const PATH: &str = "/ws";
/// The market ticker written in the bare frames.
pub const TICKER: &str = "ws-a-261121-0000-2400";

type Registry = Arc<Mutex<Vec<mpsc::Sender<Bytes>>>>;

/// Messages written per wake-up by the coalescing variant before it
/// flushes (the venue's `WRITE_BATCH`).
const COALESCE_MAX: usize = 256;

#[derive(Clone)]
struct Shared {
    registry: Registry,
    capacity: usize,
    coalesce: bool,
}

/// The running bare server.
pub struct Bare {
    /// Stops when dropped, after `drop` below has let the connections go.
    server: LoopbackServer,
    registry: Registry,
    /// The connections of the current subscriber count.
    conns: Vec<mpsc::Sender<Bytes>>,
    /// The event `seq` 2 stands for.
    base: u64,
    buffer: Vec<u8>,
    /// Messages not queued because a connection's queue was full.
    pub dropped: u64,
    /// Messages not queued because the connection was gone.
    pub closed: u64,
}

async fn upgrade(State(shared): State<Shared>, upgrade: IncomingUpgrade) -> Response {
    match upgrade.upgrade() {
        Ok((response, fut)) => {
            tokio::spawn(serve(fut, shared));
            response.into_response()
        }
        Err(_) => axum::http::StatusCode::BAD_REQUEST.into_response(),
    }
}

async fn serve(fut: UpgradeFut, shared: Shared) {
    let Ok(mut ws) = fut.await else {
        return;
    };
    let (tx, mut rx) = mpsc::channel::<Bytes>(shared.capacity);
    shared.registry.lock().expect("registry").push(tx);
    if shared.coalesce {
        let io = BufWriter::with_capacity(64 * 1024, ws.into_inner());
        coalesced(WebSocket::after_handshake(io, Role::Server), rx).await;
        return;
    }
    while let Some(frame) = rx.recv().await {
        if ws
            .write_frame(Frame::text(Payload::Borrowed(&frame)))
            .await
            .is_err()
        {
            break;
        }
    }
}

async fn coalesced<S: AsyncRead + AsyncWrite + Unpin>(
    mut ws: WebSocket<S>,
    mut rx: mpsc::Receiver<Bytes>,
) {
    while let Some(frame) = rx.recv().await {
        let mut frame = Some(frame);
        let mut written = 0;
        while let Some(f) = frame.take() {
            if ws
                .write_frame(Frame::text(Payload::Borrowed(&f)))
                .await
                .is_err()
            {
                return;
            }
            written += 1;
            if written < COALESCE_MAX {
                frame = rx.try_recv().ok();
            }
        }
        if ws.flush().await.is_err() {
            return;
        }
    }
}

impl Bare {
    /// Starts the server; each connection's queue holds `capacity`
    /// messages; `coalesce` picks the coalescing variant.
    pub fn start(capacity: usize, coalesce: bool, workers: usize) -> Result<Bare, BenchError> {
        let registry: Registry = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared {
            registry: registry.clone(),
            capacity: capacity.max(1),
            coalesce,
        };
        let router = Router::new().route(PATH, get(upgrade)).with_state(shared);
        Ok(Bare {
            server: LoopbackServer::start("ws-bare", workers, router)?,
            registry,
            conns: Vec::new(),
            base: 0,
            buffer: Vec::with_capacity(256),
            dropped: 0,
            closed: 0,
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr
    }

    /// Connections upgraded and not yet taken by [`Bare::attach`].
    pub fn pending(&self) -> usize {
        self.registry.lock().expect("registry").len()
    }

    /// Broadcasts from now on to the connections upgraded so far; the next
    /// event, `next`, goes out as `seq` 2.
    pub fn attach(&mut self, next: u64) {
        self.conns = std::mem::take(&mut *self.registry.lock().expect("registry"));
        self.base = next;
    }

    /// Drops every connection's queue: their tasks end and close.
    pub fn detach(&mut self) {
        self.conns.clear();
        self.registry.lock().expect("registry").clear();
    }

    /// Broadcasts event `g`, stamped before its frame is built.
    pub fn send(&mut self, g: u64, stamps: &Stamps) {
        stamps.stamp(g);
        let msg = plan::bare_msg(TICKER, g);
        gateway::ws::protocol::envelope(
            &mut self.buffer,
            plan::KIND,
            1,
            g - self.base + 2,
            gateway::engine::now_ms(),
            &msg,
        );
        let frame = Bytes::copy_from_slice(&self.buffer);
        for tx in &self.conns {
            match tx.try_send(frame.clone()) {
                Ok(()) => {}
                Err(TrySendError::Full(_)) => self.dropped += 1,
                Err(TrySendError::Closed(_)) => self.closed += 1,
            }
        }
    }
}

impl Drop for Bare {
    fn drop(&mut self) {
        // The connections first; the server stops when `server` drops.
        self.detach();
    }
}
