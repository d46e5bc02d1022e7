//! A small HTTP/1.1 keep-alive client over a tokio `TcpStream`: one request
//! in flight per connection, the request written with one `write`, the
//! answer read into a reused buffer and framed by `content-length` (or
//! chunked encoding, which the venue does not use but a proxy might).
//! `updown loadgen` and the REST benchmark (`benches`) both drive servers
//! with it: a few microseconds a request, no copy of a `content-length`
//! body.

use std::io::{self, Write as _};
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One keep-alive connection.
pub struct Conn {
    stream: TcpStream,
    host: String,
    out: Vec<u8>,
    buf: Vec<u8>,
    /// The last answer's body: a range of `buf`, or `chunks` when chunked.
    body: Body,
    chunks: Vec<u8>,
    closing: bool,
}

enum Body {
    In(std::ops::Range<usize>),
    Chunked,
}

fn bad(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

fn eof(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, what.to_string())
}

impl Conn {
    /// Connects with `TCP_NODELAY`.
    pub async fn connect(addr: SocketAddr) -> io::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            host: addr.to_string(),
            out: Vec::with_capacity(1024),
            buf: Vec::with_capacity(8192),
            body: Body::In(0..0),
            chunks: Vec::new(),
            closing: false,
        })
    }

    /// Sends one request and reads its answer; returns the status. The body
    /// is then in [`Conn::body`].
    pub async fn request(
        &mut self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        body: &[u8],
    ) -> io::Result<u16> {
        self.out.clear();
        write!(
            self.out,
            "{method} {path} HTTP/1.1\r\nhost: {}\r\nuser-agent: updown-loadgen\r\n",
            self.host
        )?;
        if let Some(bearer) = bearer {
            write!(self.out, "authorization: Bearer {bearer}\r\n")?;
        }
        if !body.is_empty() || method == "POST" {
            write!(
                self.out,
                "content-type: application/json\r\ncontent-length: {}\r\n",
                body.len()
            )?;
        }
        self.out.extend_from_slice(b"\r\n");
        self.out.extend_from_slice(body);
        self.stream.write_all(&self.out).await?;
        self.read_answer().await
    }

    /// True when the last answer said `connection: close`: connect again.
    pub fn closing(&self) -> bool {
        self.closing
    }

    /// The body of the last answer.
    pub fn body(&self) -> &[u8] {
        match &self.body {
            Body::In(range) => &self.buf[range.clone()],
            Body::Chunked => &self.chunks,
        }
    }

    async fn fill(&mut self, what: &str) -> io::Result<()> {
        if self.stream.read_buf(&mut self.buf).await? == 0 {
            return Err(eof(what));
        }
        Ok(())
    }

    async fn read_answer(&mut self) -> io::Result<u16> {
        self.buf.clear();
        self.chunks.clear();
        let mut searched = 0;
        let head_end = loop {
            self.fill("the server closed the connection").await?;
            if let Some(at) = find(&self.buf[searched..], b"\r\n\r\n") {
                break searched + at + 4;
            }
            searched = self.buf.len().saturating_sub(3);
        };
        let head = parse_head(&self.buf[..head_end])?;
        match head.framing {
            Framing::Length(length) => {
                let end = head_end + length;
                while self.buf.len() < end {
                    self.buf.reserve(end - self.buf.len());
                    self.fill("the server closed the connection mid-body")
                        .await?;
                }
                if self.buf.len() > end {
                    return Err(bad("bytes after the answer, with no request pipelined"));
                }
                self.body = Body::In(head_end..end);
            }
            Framing::Chunked => {
                self.body = Body::Chunked;
                let mut at = head_end;
                loop {
                    let line_end = loop {
                        if let Some(i) = find(&self.buf[at..], b"\r\n") {
                            break at + i;
                        }
                        self.fill("closed in a chunk header").await?;
                    };
                    let size_text = std::str::from_utf8(&self.buf[at..line_end])
                        .map_err(|_| bad("bad chunk size"))?;
                    let size =
                        usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
                            .map_err(|_| bad("bad chunk size"))?;
                    let data = line_end + 2;
                    while self.buf.len() < data + size + 2 {
                        self.fill("closed in a chunk").await?;
                    }
                    if size == 0 {
                        break;
                    }
                    self.chunks.extend_from_slice(&self.buf[data..data + size]);
                    at = data + size + 2;
                }
            }
        }
        self.closing = head.close;
        Ok(head.status)
    }
}

enum Framing {
    Length(usize),
    Chunked,
}

struct Head {
    status: u16,
    framing: Framing,
    close: bool,
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The status and framing of an answer's head.
fn parse_head(head: &[u8]) -> io::Result<Head> {
    let text = std::str::from_utf8(head).map_err(|_| bad("the head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .or_else(|| status_line.strip_prefix("HTTP/1.0 "))
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| bad(format!("bad status line {status_line:?}")))?;
    let mut framing = None;
    let mut close = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            framing = value.parse().ok().map(Framing::Length);
        } else if name.eq_ignore_ascii_case("transfer-encoding")
            && value.eq_ignore_ascii_case("chunked")
        {
            framing = Some(Framing::Chunked);
        } else if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close") {
            close = true;
        }
    }
    Ok(Head {
        status,
        framing: framing.unwrap_or(Framing::Length(0)),
        close,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_read() {
        let head =
            b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\ncontent-length: 42\r\n\r\n";
        let parsed = parse_head(head).unwrap();
        assert_eq!(parsed.status, 201);
        assert!(matches!(parsed.framing, Framing::Length(42)));
        let chunked = parse_head(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n").unwrap();
        assert!(matches!(chunked.framing, Framing::Chunked));
        assert!(parse_head(b"HTTP/2 200\r\n\r\n").is_err());
        assert_eq!(find(b"ab\r\n\r\ncd", b"\r\n\r\n"), Some(2));
    }

    /// Against a scripted server: a `content-length` body, a chunked one,
    /// `connection: close`, and bytes after an answer refused.
    #[tokio::test]
    async fn bodies_are_framed() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let answers: [&[u8]; 3] = [
                b"HTTP/1.1 201 Created\r\ncontent-length: 7\r\n\r\n{\"a\":1}",
                b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n3\r\n{\"b\r\n4\r\n\":2}\r\n0\r\n\r\n",
                b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\nextra",
            ];
            let mut buf = [0u8; 4096];
            for answer in answers {
                let _ = socket.read(&mut buf).await.unwrap();
                socket.write_all(answer).await.unwrap();
            }
        });
        let mut conn = Conn::connect(addr).await.unwrap();
        assert_eq!(
            conn.request("POST", "/x", Some("tk_a"), b"{}")
                .await
                .unwrap(),
            201
        );
        assert_eq!(conn.body(), b"{\"a\":1}");
        assert!(!conn.closing());
        assert_eq!(conn.request("GET", "/y", None, b"").await.unwrap(), 200);
        assert_eq!(conn.body(), b"{\"b\":2}");
        assert!(conn.closing());
        let err = conn.request("GET", "/z", None, b"").await.unwrap_err();
        assert!(err.to_string().contains("bytes after the answer"), "{err}");
        server.await.unwrap();
    }
}
