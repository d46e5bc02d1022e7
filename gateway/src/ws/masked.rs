//! RFC 6455 §5.1: "a server MUST close the connection upon receiving a
//! frame that is not masked". fastwebsockets unmasks what is masked and
//! takes the rest as it is, without saying which was which, so the bytes
//! are watched on their way to it: [`MaskWatch`] follows the frame
//! headers through the stream and notes the position (0 for the first
//! frame) of the first frame sent without a mask. The reader counts the
//! frames it gets and closes at that one (fastwebsockets reads ahead, so
//! the note can come before the masked frames in front of it are read).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};

/// Where the watcher is in the stream of frames.
#[derive(Debug)]
enum At {
    /// Inside a frame header: the bytes of it seen so far.
    Head { bytes: [u8; 14], seen: usize },
    /// Inside a payload: the bytes of it still to come.
    Payload(u64),
}

/// No unmasked frame seen.
pub const NONE: u64 = u64::MAX;

/// Follows frame headers; notes the position of the first unmasked one.
#[derive(Debug)]
pub struct Frames {
    at: At,
    /// Frame headers read whole.
    headers: u64,
    unmasked: Arc<AtomicU64>,
}

impl Frames {
    pub fn new(unmasked: Arc<AtomicU64>) -> Self {
        Self {
            at: At::Head {
                bytes: [0; 14],
                seen: 0,
            },
            headers: 0,
            unmasked,
        }
    }

    /// Takes the next bytes of the stream.
    pub fn feed(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            match &mut self.at {
                At::Payload(left) => {
                    let take = (*left).min(data.len() as u64);
                    *left -= take;
                    data = &data[take as usize..];
                    if *left == 0 {
                        self.at = At::Head {
                            bytes: [0; 14],
                            seen: 0,
                        };
                    }
                }
                At::Head { bytes, seen } => {
                    bytes[*seen] = data[0];
                    *seen += 1;
                    data = &data[1..];
                    if *seen < 2 {
                        continue;
                    }
                    let masked = bytes[1] & 0x80 != 0;
                    let extended = match bytes[1] & 0x7f {
                        126 => 2,
                        127 => 8,
                        _ => 0,
                    };
                    if *seen < 2 + extended + if masked { 4 } else { 0 } {
                        continue;
                    }
                    let len = match extended {
                        2 => u64::from(u16::from_be_bytes([bytes[2], bytes[3]])),
                        8 => u64::from_be_bytes(bytes[2..10].try_into().expect("8 bytes")),
                        _ => u64::from(bytes[1] & 0x7f),
                    };
                    if !masked && self.unmasked.load(Ordering::Relaxed) == NONE {
                        self.unmasked.store(self.headers, Ordering::Relaxed);
                    }
                    self.headers += 1;
                    self.at = if len == 0 {
                        At::Head {
                            bytes: [0; 14],
                            seen: 0,
                        }
                    } else {
                        At::Payload(len)
                    };
                }
            }
        }
    }
}

/// A reader that shows every byte it passes on to [`Frames`].
pub struct MaskWatch<R> {
    inner: R,
    frames: Frames,
}

impl<R> MaskWatch<R> {
    pub fn new(inner: R, unmasked: Arc<AtomicU64>) -> Self {
        Self {
            inner,
            frames: Frames::new(unmasked),
        }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for MaskWatch<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = polled {
            this.frames.feed(&buf.filled()[before..]);
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(masked: bool, len: usize) -> Vec<u8> {
        let mut out = vec![0x81];
        let bit = if masked { 0x80 } else { 0 };
        match len {
            0..=125 => out.push(bit | len as u8),
            126..=65535 => {
                out.push(bit | 126);
                out.extend_from_slice(&(len as u16).to_be_bytes());
            }
            _ => {
                out.push(bit | 127);
                out.extend_from_slice(&(len as u64).to_be_bytes());
            }
        }
        if masked {
            out.extend_from_slice(&[1, 2, 3, 4]);
        }
        // Payload bytes that look like headers of unmasked frames.
        out.extend(std::iter::repeat_n(0x01u8, len));
        out
    }

    /// The position of the first unmasked frame, if any.
    fn first_unmasked(stream: &[u8], chunk: usize) -> Option<u64> {
        let note = Arc::new(AtomicU64::new(NONE));
        let mut frames = Frames::new(note.clone());
        for piece in stream.chunks(chunk) {
            frames.feed(piece);
        }
        Some(note.load(Ordering::Relaxed)).filter(|&at| at != NONE)
    }

    #[test]
    fn masked_frames_of_every_length_form_pass_in_any_chunking() {
        let mut stream = Vec::new();
        for len in [0, 1, 125, 126, 300, 65535, 65536, 70000] {
            stream.extend(frame(true, len));
        }
        for chunk in [1, 2, 3, 7, 64, 4096, stream.len()] {
            assert_eq!(first_unmasked(&stream, chunk), None, "chunk {chunk}");
        }
    }

    #[test]
    fn the_first_unmasked_frame_is_found_by_its_position() {
        for len in [0, 5, 126, 70000] {
            let mut stream = frame(true, 300);
            stream.extend(frame(true, 0));
            stream.extend(frame(false, len));
            stream.extend(frame(false, 3));
            stream.extend(frame(true, 10));
            for chunk in [1, 5, 4096, stream.len()] {
                assert_eq!(
                    first_unmasked(&stream, chunk),
                    Some(2),
                    "len {len} chunk {chunk}"
                );
            }
        }
    }

    /// A frame of two header bytes (no mask, no extended length, no
    /// payload: an empty ping, pong, close or text) is noted as soon as its
    /// second byte arrives, also when nothing follows it: the reader may
    /// hand that frame on before another byte comes.
    #[test]
    fn an_unmasked_frame_of_two_bytes_is_noted_at_its_last_byte() {
        let mut stream = frame(true, 5);
        stream.extend(frame(false, 0));
        for chunk in [1, 2, stream.len()] {
            assert_eq!(first_unmasked(&stream, chunk), Some(1), "chunk {chunk}");
        }
        assert_eq!(first_unmasked(&frame(false, 0), 2), Some(0));
    }
}
