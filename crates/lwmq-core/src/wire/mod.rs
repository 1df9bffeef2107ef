//! The wire format: how messages are packed ("clubbed") into one transport buffer.
//! Documented with a byte diagram in docs/wire-format.md; this module is its only implementation.
//!
//! ```text
//!  buffer header (16 B)   0      4     5      6      8           12          16
//!                         | LWMQ | ver | flags| rsvd | msg_count | body_len  |
//!  message record (8 B)   | frame_count | rsvd |
//!  frame (8 B + data)     | frame_len   | rsvd | data ... | zero pad to 8 |
//! ```
//! All integers are little-endian u32. Every record starts 8-byte aligned, so frame data is aligned
//! for zero-copy numpy views. The decoder treats its input as hostile: it reads each length once,
//! bounds-checks it before use and never allocates more than the input can justify.

use crate::error::{Error, Result};
use crate::message::Message;
use bytes::Bytes;

pub const MAGIC: [u8; 4] = *b"LWMQ";
pub const VERSION: u8 = 1;
pub const HEADER_LEN: usize = 16;
const MESSAGE_HEADER_LEN: usize = 8;
const FRAME_HEADER_LEN: usize = 8;

#[inline]
fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// Bytes a message takes inside a buffer (its record, frames and padding).
pub fn encoded_len(msg: &Message) -> usize {
    encoded_len_of(msg.frames())
}

/// `encoded_len` for frames given as slices (a message not built yet: the direct send path).
pub fn encoded_len_of<F: AsRef<[u8]>>(frames: &[F]) -> usize {
    MESSAGE_HEADER_LEN + frames.iter().map(|f| FRAME_HEADER_LEN + align8(f.as_ref().len())).sum::<usize>()
}

/// The largest message record a buffer of `buffer_size` bytes can carry.
pub fn max_message_len(buffer_size: usize) -> usize {
    buffer_size.saturating_sub(HEADER_LEN)
}

/// Checks at post time that a message can be shipped at all: no partial message is ever sent.
pub fn check_postable(msg: &Message, buffer_size: usize) -> Result<usize> {
    check_frames(msg.frames(), buffer_size)
}

/// `check_postable` for frames given as slices.
pub fn check_frames<F: AsRef<[u8]>>(frames: &[F], buffer_size: usize) -> Result<usize> {
    if frames.is_empty() {
        return Err(Error::InvalidOption("a message needs at least one frame".into()));
    }
    let size = encoded_len_of(frames);
    let max = max_message_len(buffer_size);
    if size > max || frames.iter().any(|f| f.as_ref().len() > u32::MAX as usize) {
        return Err(Error::MessageTooLarge { size, max });
    }
    Ok(size)
}

fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    buf[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Packs messages into one buffer. `push` refuses (returns false) a message that does not fit the
/// space left, so the caller ships this buffer and starts the next one: the encoder never waits.
pub struct BufferWriter<'a> {
    buf: &'a mut [u8],
    pos: usize,
    count: u32,
}

impl<'a> BufferWriter<'a> {
    pub fn new(buf: &'a mut [u8]) -> Self {
        assert!(buf.len() >= HEADER_LEN && buf.len() <= u32::MAX as usize, "buffer size out of range");
        BufferWriter { buf, pos: HEADER_LEN, count: 0 }
    }

    /// A writer that goes on after the `count` messages already encoded in `buf[..pos]` (a shipped buffer
    /// that grows in place); `finish` rewrites the header for the whole.
    pub fn resume(buf: &'a mut [u8], pos: usize, count: u32) -> Self {
        assert!(pos >= HEADER_LEN && pos <= buf.len() && buf.len() <= u32::MAX as usize, "resume position out of range");
        BufferWriter { buf, pos, count }
    }

    pub fn message_count(&self) -> u32 {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Appends `msg` if it fits; the caller has checked it with `check_postable`.
    pub fn push(&mut self, msg: &Message) -> bool {
        self.push_frames(msg.frames())
    }

    /// Appends a message given as frames (of any byte container) if it fits.
    pub fn push_frames<F: AsRef<[u8]>>(&mut self, frames: &[F]) -> bool {
        let need = encoded_len_of(frames);
        if need > self.remaining() || frames.is_empty() {
            return false;
        }
        put_u32(self.buf, self.pos, frames.len() as u32);
        put_u32(self.buf, self.pos + 4, 0);
        let mut at = self.pos + MESSAGE_HEADER_LEN;
        for frame in frames {
            let frame = frame.as_ref();
            put_u32(self.buf, at, frame.len() as u32);
            put_u32(self.buf, at + 4, 0);
            at += FRAME_HEADER_LEN;
            self.buf[at..at + frame.len()].copy_from_slice(frame);
            let padded = align8(frame.len());
            self.buf[at + frame.len()..at + padded].fill(0);
            at += padded;
        }
        debug_assert_eq!(at - self.pos, need);
        self.pos = at;
        self.count += 1;
        true
    }

    /// Writes the buffer header and returns the number of bytes to ship.
    pub fn finish(self) -> usize {
        self.buf[0..4].copy_from_slice(&MAGIC);
        self.buf[4] = VERSION;
        self.buf[5] = 0;
        self.buf[6..8].fill(0);
        put_u32(self.buf, 8, self.count);
        put_u32(self.buf, 12, (self.pos - HEADER_LEN) as u32);
        self.pos
    }
}

/// Where a loaned frame's data starts in a buffer: after the buffer, message and frame headers (8-aligned).
pub const LOAN_OFFSET: usize = HEADER_LEN + MESSAGE_HEADER_LEN + FRAME_HEADER_LEN;

/// The largest loan a buffer of `buffer_size` bytes can carry (data plus padding must fit).
pub fn max_loan(buffer_size: usize) -> usize {
    buffer_size.saturating_sub(LOAN_OFFSET) & !7
}

/// Writes the headers around a one-frame message whose `len` data bytes are already in place at
/// `LOAN_OFFSET` (zero-copy send), zeroes its padding, and returns the bytes to ship.
pub fn seal_loan(buf: &mut [u8], len: usize) -> usize {
    let end = LOAN_OFFSET + align8(len);
    assert!(len <= max_loan(buf.len()) && end <= buf.len(), "loan of {len} bytes exceeds its buffer");
    buf[LOAN_OFFSET + len..end].fill(0);
    buf[0..4].copy_from_slice(&MAGIC);
    buf[4] = VERSION;
    buf[5..8].fill(0);
    put_u32(buf, 8, 1);
    put_u32(buf, 12, (end - HEADER_LEN) as u32);
    put_u32(buf, HEADER_LEN, 1);
    put_u32(buf, HEADER_LEN + 4, 0);
    put_u32(buf, HEADER_LEN + 8, len as u32);
    put_u32(buf, HEADER_LEN + 12, 0);
    end
}

/// The message count in the header of a buffer this side encoded (for growing it in place later).
pub fn message_count(buf: &[u8]) -> u32 {
    get_u32(buf, 8)
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn bad(why: impl Into<String>) -> Error {
    Error::Protocol(why.into())
}

/// Decodes one shipped buffer into its messages. Frames are zero-copy slices of `buf`.
/// Any malformation gives `Error::Protocol`; it never panics, loops or reads out of bounds.
pub fn decode(buf: &Bytes) -> Result<Vec<Message>> {
    let b: &[u8] = buf;
    if b.len() < HEADER_LEN {
        return Err(bad(format!("buffer of {} bytes is shorter than its header", b.len())));
    }
    if b[0..4] != MAGIC {
        return Err(bad("bad magic: not an lwmq buffer"));
    }
    if b[4] != VERSION {
        return Err(bad(format!("wire version {} is not supported (this build speaks {VERSION})", b[4])));
    }
    if b[5] != 0 || b[6] != 0 || b[7] != 0 {
        return Err(bad("reserved header bytes are not zero"));
    }
    let count = get_u32(b, 8) as usize;
    let body_len = get_u32(b, 12) as usize;
    if body_len != b.len() - HEADER_LEN {
        return Err(bad(format!("body length {body_len} does not match the {} bytes shipped", b.len() - HEADER_LEN)));
    }
    // Each message needs at least a record header and one frame header.
    if count == 0 || count > body_len / (MESSAGE_HEADER_LEN + FRAME_HEADER_LEN) {
        return Err(bad(format!("message count {count} impossible for a body of {body_len} bytes")));
    }
    let mut messages = Vec::with_capacity(count);
    let mut pos = HEADER_LEN;
    for _ in 0..count {
        if b.len() - pos < MESSAGE_HEADER_LEN {
            return Err(bad("truncated message record"));
        }
        let frames = get_u32(b, pos) as usize;
        if get_u32(b, pos + 4) != 0 {
            return Err(bad("reserved message bytes are not zero"));
        }
        pos += MESSAGE_HEADER_LEN;
        if frames == 0 || frames > (b.len() - pos) / FRAME_HEADER_LEN {
            return Err(bad(format!("frame count {frames} impossible for the bytes left")));
        }
        let mut list = crate::message::Frames::with_capacity(frames);
        for _ in 0..frames {
            if b.len() - pos < FRAME_HEADER_LEN {
                return Err(bad("truncated frame header"));
            }
            let len = get_u32(b, pos) as usize;
            if get_u32(b, pos + 4) != 0 {
                return Err(bad("reserved frame bytes are not zero"));
            }
            pos += FRAME_HEADER_LEN;
            let padded = align8(len);
            if padded > b.len() - pos {
                return Err(bad(format!("frame of {len} bytes overruns the buffer")));
            }
            list.push(buf.slice(pos..pos + len));
            pos += padded;
        }
        messages.push(Message::new(list));
    }
    if pos != b.len() {
        return Err(bad(format!("{} trailing bytes after the last message", b.len() - pos)));
    }
    Ok(messages)
}

/// Encodes messages into a fresh buffer of exactly the needed size (tests, golden vectors, tools).
pub fn encode_to_vec(messages: &[Message]) -> Result<Vec<u8>> {
    let size = HEADER_LEN + messages.iter().map(encoded_len).sum::<usize>();
    if size > u32::MAX as usize {
        return Err(Error::MessageTooLarge { size, max: u32::MAX as usize });
    }
    let mut out = vec![0u8; size];
    let mut w = BufferWriter::new(&mut out);
    for m in messages {
        if m.is_empty() {
            return Err(Error::InvalidOption("a message needs at least one frame".into()));
        }
        let pushed = w.push(m);
        debug_assert!(pushed);
    }
    let len = w.finish();
    out.truncate(len);
    Ok(out)
}

#[cfg(test)]
mod tests;
