//! The ipc handshake: the connector says hello with its protocol version and its wishes for the pools;
//! the listener answers with the pools' geometry and the segment's memfd, or a refusal with a reason.
//! Every field is read once and checked: either side may be hostile.
//!
//! ```text
//! hello   (32 B): "LWMQIPC\0" | proto u32 | wire u32 | buffer_size u64 | send_buffers u32 | recv_buffers u32
//! welcome (48 B): "LWMQIPC\0" | proto u32 | status u32 | count0 u32 | pad u32 | size0 u64 | count1 u32 | pad u32 | size1 u64
//!                 + the memfd (SCM_RIGHTS) when status = OK; a refusal carries its reason as UTF-8 after 16 B
//! ```
//! Zero in a wish means "no preference". Direction 0 is connector → listener, direction 1 the reverse.

use crate::error::{Error, Result};
use crate::transport::options::{PoolGeometry, Options, MAX_BUFFERS, MAX_BUFFER_SIZE, MIN_BUFFER_SIZE};

pub const MAGIC: &[u8; 8] = b"LWMQIPC\0";
pub const PROTOCOL: u32 = 1;
pub const HELLO_LEN: usize = 32;
pub const WELCOME_LEN: usize = 48;
pub const MAX_PACKET: usize = 1024;

pub const OK: u32 = 0;
pub const BAD_VERSION: u32 = 1;
pub const REFUSED: u32 = 2;
pub const BAD_REQUEST: u32 = 3;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

pub fn hello(options: &Options) -> Vec<u8> {
    let mut b = Vec::with_capacity(HELLO_LEN);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&PROTOCOL.to_le_bytes());
    b.extend_from_slice(&(crate::wire::VERSION as u32).to_le_bytes());
    b.extend_from_slice(&(options.buffer_size.unwrap_or(0) as u64).to_le_bytes());
    b.extend_from_slice(&options.send_buffers.unwrap_or(0).to_le_bytes());
    b.extend_from_slice(&options.recv_buffers.unwrap_or(0).to_le_bytes());
    b
}

/// The connector's wishes as Options (only the pool fields are set), or (status, reason) to refuse.
pub fn read_hello(b: &[u8]) -> std::result::Result<Options, (u32, String)> {
    if b.len() < 16 || &b[0..8] != MAGIC {
        return Err((BAD_REQUEST, "not an lwmq ipc hello".into()));
    }
    let (proto, wire) = (u32_at(b, 8), u32_at(b, 12));
    if proto != PROTOCOL || wire != crate::wire::VERSION as u32 {
        return Err((
            BAD_VERSION,
            format!("version mismatch: peer speaks ipc protocol {proto} / wire {wire}, this listener {PROTOCOL} / {}", crate::wire::VERSION),
        ));
    }
    if b.len() != HELLO_LEN {
        return Err((BAD_REQUEST, format!("hello of {} bytes, expected {HELLO_LEN}", b.len())));
    }
    let size = u64_at(b, 16);
    let (send, recv) = (u32_at(b, 24), u32_at(b, 28));
    let nonzero = |v: u32| (v != 0).then_some(v);
    let options = Options {
        buffer_size: (size != 0).then_some(size as usize),
        send_buffers: nonzero(send),
        recv_buffers: nonzero(recv),
        ..Options::default()
    };
    options.validate().map_err(|e| (BAD_REQUEST, e.to_string()))?;
    Ok(options)
}

pub fn welcome(dirs: [PoolGeometry; 2]) -> Vec<u8> {
    let mut b = Vec::with_capacity(WELCOME_LEN);
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&PROTOCOL.to_le_bytes());
    b.extend_from_slice(&OK.to_le_bytes());
    for g in dirs {
        b.extend_from_slice(&g.count.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&(g.size as u64).to_le_bytes());
    }
    b
}

pub fn refusal(status: u32, reason: &str) -> Vec<u8> {
    let mut b = Vec::with_capacity(16 + reason.len());
    b.extend_from_slice(MAGIC);
    b.extend_from_slice(&PROTOCOL.to_le_bytes());
    b.extend_from_slice(&status.to_le_bytes());
    b.extend_from_slice(&reason.as_bytes()[..reason.len().min(MAX_PACKET - 16)]);
    b
}

/// The geometry the listener chose, checked; or the listener's refusal as an error.
pub fn read_welcome(b: &[u8]) -> Result<[PoolGeometry; 2]> {
    if b.len() < 16 || &b[0..8] != MAGIC {
        return Err(Error::Protocol("the listener did not answer with an lwmq ipc welcome".into()));
    }
    let (proto, status) = (u32_at(b, 8), u32_at(b, 12));
    if proto != PROTOCOL {
        return Err(Error::Protocol(format!("version mismatch: the listener speaks ipc protocol {proto}, we speak {PROTOCOL}")));
    }
    let reason = || String::from_utf8_lossy(&b[16..]).into_owned();
    match status {
        OK => {}
        BAD_VERSION => return Err(Error::Protocol(format!("the listener refused us: {}", reason()))),
        REFUSED => return Err(Error::PeerGone(format!("the listener refused us: {}", reason()))),
        _ => return Err(Error::Protocol(format!("the listener refused us (status {status}): {}", reason()))),
    }
    if b.len() != WELCOME_LEN {
        return Err(Error::Protocol(format!("welcome of {} bytes, expected {WELCOME_LEN}", b.len())));
    }
    let geometry = |at: usize| -> Result<PoolGeometry> {
        let (count, size) = (u32_at(b, at), u64_at(b, at + 8));
        if !(1..=MAX_BUFFERS).contains(&count) || !(MIN_BUFFER_SIZE as u64..=MAX_BUFFER_SIZE as u64).contains(&size) {
            return Err(Error::Protocol(format!("welcome has an impossible pool: {count} buffers of {size} bytes")));
        }
        Ok(PoolGeometry { count, size: size as usize })
    };
    Ok([geometry(16)?, geometry(32)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip_and_version_refusal() {
        let o = Options { buffer_size: Some(4096), send_buffers: Some(3500), ..Options::default() };
        let got = read_hello(&hello(&o)).unwrap();
        assert_eq!((got.buffer_size, got.send_buffers, got.recv_buffers), (Some(4096), Some(3500), None));
        let mut wrong = hello(&o);
        wrong[8] = 9;
        let (status, why) = read_hello(&wrong).unwrap_err();
        assert_eq!(status, BAD_VERSION);
        assert!(why.contains("version mismatch"), "{why}");
        assert_eq!(read_hello(b"GET / HTTP/1.1\r\n").unwrap_err().0, BAD_REQUEST);
    }

    #[test]
    fn welcome_round_trip_and_checks() {
        let dirs = [PoolGeometry { count: 3500, size: 4096 }, PoolGeometry { count: 500, size: 1 << 26 }];
        assert_eq!(read_welcome(&welcome(dirs)).unwrap(), dirs);
        let mut bad = welcome(dirs);
        bad[16..20].copy_from_slice(&0u32.to_le_bytes());
        assert!(matches!(read_welcome(&bad), Err(Error::Protocol(_))));
        let refused = refusal(REFUSED, "uid 1000 is not allowed");
        assert!(matches!(read_welcome(&refused), Err(Error::PeerGone(w)) if w.contains("uid 1000")));
    }
}
