//! The two steps every websocket test client takes, shared by the gateway's
//! websocket tests and the tools' security tests (included there by path):
//! the upgrade, which hands back the HTTP status and JSON body of a
//! refusal, and a frame read that gives up at a deadline. The stream must
//! have a short read timeout, so that a read wakes to look at the clock.

#![allow(dead_code)]

use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::Value;
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};

/// Upgrades `stream` to the venue's websocket at `addr` (`host:port`) with
/// extra headers; the HTTP status and body when refused.
pub fn upgrade(
    stream: TcpStream,
    addr: &str,
    headers: &[(&str, &str)],
) -> Result<WebSocket<TcpStream>, (u16, Value)> {
    let mut request = format!("ws://{addr}/v1/ws")
        .into_client_request()
        .expect("request");
    for (name, value) in headers {
        request.headers_mut().insert(
            tungstenite::http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
            value.parse().expect("value"),
        );
    }
    // The stream's read timeout is short: a handshake not answered within
    // it comes back interrupted, and is resumed (a loaded machine may take
    // longer than one timeout to answer an upgrade).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut attempt = tungstenite::client(request, stream);
    while let Err(tungstenite::HandshakeError::Interrupted(midway)) = attempt {
        assert!(Instant::now() < deadline, "handshake: no answer in 30 s");
        attempt = midway.handshake();
    }
    match attempt {
        Ok((ws, _)) => Ok(ws),
        Err(tungstenite::HandshakeError::Failure(tungstenite::Error::Http(response))) => {
            let body = response
                .body()
                .as_ref()
                .and_then(|b| serde_json::from_slice(b).ok())
                .unwrap_or(Value::Null);
            Err((response.status().as_u16(), body))
        }
        Err(e) => panic!("handshake: {e}"),
    }
}

/// The next frame, or None at the deadline.
pub fn read_frame(ws: &mut WebSocket<TcpStream>, deadline: Instant) -> Option<Message> {
    loop {
        match ws.read() {
            Ok(message) => return Some(message),
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                if Instant::now() >= deadline {
                    return None;
                }
            }
            Err(e) => panic!("read: {e}"),
        }
    }
}
