//! A minimal HTTP/1.1 keep-alive client over a tokio `TcpStream`: one
//! request in flight per connection, the request written with one `write`,
//! the answer read into a reused buffer and framed by its `content-length`.
//! It is the load generator's only client, so it is kept cheap: no header
//! map, no allocation per request once the buffers have grown.

use std::io::{self, Write as _};
use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// One keep-alive connection.
pub struct Conn {
    stream: TcpStream,
    host: String,
    /// The request being written.
    out: Vec<u8>,
    /// The answer being read; `body` indexes into it.
    buf: Vec<u8>,
    body: std::ops::Range<usize>,
}

fn bad(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

impl Conn {
    /// Connects with `TCP_NODELAY`, as the servers set on their side.
    pub async fn connect(addr: SocketAddr) -> io::Result<Self> {
        let stream = TcpStream::connect(addr).await?;
        stream.set_nodelay(true)?;
        Ok(Self {
            stream,
            host: addr.to_string(),
            out: Vec::with_capacity(1024),
            buf: Vec::with_capacity(4096),
            body: 0..0,
        })
    }

    /// Sends one request and reads its answer; returns the status. The body
    /// is then in [`Conn::body`]. `body` may be empty (no content type then).
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
            "{method} {path} HTTP/1.1\r\nhost: {}\r\n",
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

    /// The body of the last answer.
    pub fn body(&self) -> &[u8] {
        &self.buf[self.body.clone()]
    }

    async fn read_answer(&mut self) -> io::Result<u16> {
        self.buf.clear();
        let mut searched = 0;
        let head_end = loop {
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection",
                ));
            }
            if let Some(at) = find(&self.buf[searched..], b"\r\n\r\n") {
                break searched + at + 4;
            }
            searched = self.buf.len().saturating_sub(3);
        };
        let (status, length) = parse_head(&self.buf[..head_end])?;
        let end = head_end + length;
        while self.buf.len() < end {
            self.buf.reserve(end - self.buf.len());
            if self.stream.read_buf(&mut self.buf).await? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the server closed the connection mid-body",
                ));
            }
        }
        if self.buf.len() > end {
            return Err(bad("bytes after the answer, with no request pipelined"));
        }
        self.body = head_end..end;
        Ok(status)
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The status and the `content-length` of an answer's head.
fn parse_head(head: &[u8]) -> io::Result<(u16, usize)> {
    let text = std::str::from_utf8(head).map_err(|_| bad("the head is not UTF-8"))?;
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| bad(format!("bad status line {status_line:?}")))?;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        if name.eq_ignore_ascii_case("content-length") {
            length = value.trim().parse().ok();
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(bad("chunked answers are not supported"));
        }
    }
    length
        .map(|length| (status, length))
        .ok_or_else(|| bad("an answer without content-length"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_are_read() {
        let head =
            b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\ncontent-length: 42\r\n\r\n";
        assert_eq!(parse_head(head).unwrap(), (201, 42));
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n\r\n").is_err());
        assert_eq!(find(b"ab\r\n\r\ncd", b"\r\n\r\n"), Some(2));
    }
}
