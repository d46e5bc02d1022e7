//! HTTP connections as the listener hands them out: at most so many per
//! address and in all, and closed after a stretch with no byte either way.
//!
//! Without these, one client with no key held the venue's every file
//! descriptor with idle or half-sent requests (a security trial: 20,000
//! connections from one host, after which nobody could connect), at about
//! 21 KB of memory each. A connection over a cap is answered at once with
//! the API's error body and closed, without reading its request.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

/// Descriptors kept for the venue itself, out of the process's limit,
/// whatever the public clients hold: journal segments and the directory
/// syncs of a roll, snapshot and history files, the admin listener and
/// its connections (at most [`ADMIN_CONNECTIONS_MAX`]), the runtime's own.
/// A flood that took them all failed a segment roll with EMFILE, and the
/// journal, failed, took no more writes until a restart (a resource trial,
/// twelfth session). A quarter of the limit when that is less.
pub const DESCRIPTORS_RESERVED: u64 = 256;

/// Open connections to the admin listener (an operator's tools, loopback
/// by default), inside the reserve.
pub const ADMIN_CONNECTIONS_MAX: usize = 64;

/// The cap on open public connections for a wanted `total`: the soft limit
/// on open descriptors is raised as far as the system allows first, and
/// the cap is lowered, with a warning, to leave the reserve.
pub fn total_within_descriptor_limit(total: usize) -> usize {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: plain calls on a local struct.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return total;
            }
            // The hard limit, or where that is refused (an unlimited hard
            // limit, which macOS does not take for descriptors), steps
            // down from it.
            let mut want = limit.rlim_max;
            while limit.rlim_cur < want {
                let raised = libc::rlimit {
                    rlim_cur: want,
                    rlim_max: limit.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit = raised;
                    break;
                }
                want = want.min(1 << 21) / 2;
            }
        }
        if limit.rlim_cur == libc::RLIM_INFINITY {
            return total;
        }
        let reserved = DESCRIPTORS_RESERVED.min(limit.rlim_cur / 4);
        let room = (limit.rlim_cur - reserved).max(1);
        if total as u64 > room {
            tracing::warn!(
                http_connections_max = total,
                descriptor_limit = limit.rlim_cur,
                reserved,
                cap = room,
                "http_connections_max is over what the process's descriptor limit leaves after the venue's own: connections are capped lower (raise the limit, e.g. LimitNOFILE or ulimit -n, to have more)"
            );
            return room as usize;
        }
        total
    }
    #[cfg(not(unix))]
    total
}

/// The caps and the idle timeout.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Open connections from one address (an IPv6 /64 counts as one).
    pub per_address: usize,
    /// Open connections in all.
    pub total: usize,
    /// A connection with no byte read or written for this long is closed.
    pub idle: Duration,
}

#[derive(Default)]
struct Open {
    by_address: HashMap<IpAddr, usize>,
    total: usize,
}

/// A listener that keeps to [`Limits`].
pub struct Guarded {
    inner: TcpListener,
    limits: Limits,
    open: Arc<Mutex<Open>>,
    /// Where refusals are counted (the public listener's).
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

impl Guarded {
    pub fn new(
        inner: TcpListener,
        limits: Limits,
        metrics: Option<Arc<crate::metrics::Metrics>>,
    ) -> Self {
        Self {
            inner,
            limits,
            open: Arc::default(),
            metrics,
        }
    }

    /// Counts a new connection from `ip` in, or says which cap it is over.
    fn admit(&self, ip: IpAddr) -> Result<Slot, &'static [u8]> {
        let mut open = self.open.lock().expect("connections lock");
        if open.total >= self.limits.total {
            return Err(REFUSED_TOTAL);
        }
        let count = open.by_address.entry(ip).or_default();
        if *count >= self.limits.per_address {
            return Err(REFUSED_ADDRESS);
        }
        *count += 1;
        open.total += 1;
        Ok(Slot {
            ip,
            open: self.open.clone(),
        })
    }
}

/// A complete HTTP answer: the API's error body, then the connection closes.
const REFUSED_ADDRESS: &[u8] = b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 106\r\n\r\n{\"code\":\"RATE_LIMITED\",\"message\":\"Too many connections are open from this address; close some and retry.\"}";
const REFUSED_TOTAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 94\r\n\r\n{\"code\":\"EXCHANGE_UNAVAILABLE\",\"message\":\"The exchange has too many connections open; retry.\"}";

impl axum::serve::Listener for Guarded {
    type Io = Conn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Conn, SocketAddr) {
        loop {
            let (stream, addr) = match self.inner.accept().await {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of descriptors or memory: wait instead of spinning
                    // (as axum's own listener does).
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            match self.admit(crate::auth::party(addr.ip())) {
                Ok(slot) => {
                    let _ = stream.set_nodelay(true);
                    return (Conn::new(stream, slot, self.limits.idle), addr);
                }
                Err(answer) => {
                    if let Some(metrics) = &self.metrics {
                        let counter = if answer == REFUSED_TOTAL {
                            &metrics.connections_refused_total
                        } else {
                            &metrics.connections_refused_address
                        };
                        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    // Best effort, never waiting: the socket is new, so its
                    // buffer has room.
                    let _ = stream.try_write(answer);
                }
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }
}

/// One admitted connection's place in the counts, given back on drop.
struct Slot {
    ip: IpAddr,
    open: Arc<Mutex<Open>>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.open.lock().expect("connections lock");
        open.total -= 1;
        if let Some(count) = open.by_address.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.by_address.remove(&self.ip);
            }
        }
    }
}

/// An admitted connection: fails its next read or write with `TimedOut`
/// once no byte has moved for the idle time, which ends it.
pub struct Conn {
    stream: TcpStream,
    _slot: Slot,
    idle: Duration,
    deadline: Pin<Box<Sleep>>,
}

impl Conn {
    fn new(stream: TcpStream, slot: Slot, idle: Duration) -> Self {
        Self {
            stream,
            _slot: slot,
            idle,
            deadline: Box::pin(tokio::time::sleep(idle)),
        }
    }

    fn moved(&mut self) {
        self.deadline.as_mut().reset(Instant::now() + self.idle);
    }

    /// While the stream waits: an error once the idle time is over.
    fn idle_over(&mut self, cx: &mut Context<'_>) -> bool {
        self.deadline.as_mut().poll(cx).is_ready()
    }

    /// A write's outcome, seen by the idle timer.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match polled {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.moved();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending if self.idle_over(cx) => Poll::Ready(Err(timed_out())),
            other => other,
        }
    }
}

fn timed_out() -> io::Error {
    io::Error::new(io::ErrorKind::TimedOut, "connection idle too long")
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.moved();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending if this.idle_over(cx) => Poll::Ready(Err(timed_out())),
            other => other,
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(cx, data);
        this.wrote(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.wrote(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_canned_answers_say_their_length_right() {
        for answer in [REFUSED_ADDRESS, REFUSED_TOTAL] {
            let text = std::str::from_utf8(answer).unwrap();
            let (head, body) = text.split_once("\r\n\r\n").unwrap();
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(length, body.len(), "{text}");
            let json: serde_json::Value = serde_json::from_str(body).unwrap();
            assert!(json["code"].is_string() && json["message"].is_string());
        }
    }
}
