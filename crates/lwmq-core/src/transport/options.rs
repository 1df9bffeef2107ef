//! Channel options shared by every transport (the contract's keyword arguments of listen/connect).

use crate::error::{Error, Result};
use crate::sync::WaitPolicy;
use std::time::Duration;

pub const DEFAULT_BUFFER_SIZE: usize = 256 * 1024;
pub const DEFAULT_BUFFERS: u32 = 32;
pub const MAX_BUFFERS: u32 = 1 << 20;
pub const MIN_BUFFER_SIZE: usize = 64;
/// Frame lengths are u32 on the wire; stay well below so offsets never overflow.
pub const MAX_BUFFER_SIZE: usize = 1 << 31;

#[derive(Clone, Debug)]
pub struct Options {
    /// Bytes per transport buffer of the direction this side sends on (`None`: the peer's wish or default).
    pub buffer_size: Option<usize>,
    pub send_buffers: Option<u32>,
    pub recv_buffers: Option<u32>,
    pub spin: Duration,
    pub busy_poll: bool,
    pub priorities: Vec<(String, u32)>,
    /// Uids allowed to connect to an ipc listener (`None`: our own uid only).
    pub allowed_uids: Option<Vec<u32>>,
    /// Messages `send` may queue ahead of the transport before it blocks.
    pub send_hwm: usize,
    /// How long `close` keeps shipping queued messages.
    pub linger: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            buffer_size: None,
            send_buffers: None,
            recv_buffers: None,
            spin: WaitPolicy::default().spin,
            busy_poll: false,
            priorities: vec![("high".into(), 8), ("normal".into(), 4), ("low".into(), 1)],
            allowed_uids: None,
            send_hwm: 1000,
            linger: Duration::from_secs(1),
        }
    }
}

/// The pool of one direction: its buffer count and size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolGeometry {
    pub count: u32,
    pub size: usize,
}

impl Options {
    pub fn validate(&self) -> Result<()> {
        if let Some(size) = self.buffer_size {
            if !(MIN_BUFFER_SIZE..=MAX_BUFFER_SIZE).contains(&size) {
                return Err(Error::InvalidOption(format!(
                    "buffer_size {size} is outside {MIN_BUFFER_SIZE}..={MAX_BUFFER_SIZE}"
                )));
            }
        }
        for (name, n) in [("send_buffers", self.send_buffers), ("recv_buffers", self.recv_buffers)] {
            if let Some(n) = n {
                if !(1..=MAX_BUFFERS).contains(&n) {
                    return Err(Error::InvalidOption(format!("{name} {n} is outside 1..={MAX_BUFFERS}")));
                }
            }
        }
        if self.priorities.is_empty() {
            return Err(Error::InvalidOption("priorities needs at least one group".into()));
        }
        if let Some((name, _)) = self.priorities.iter().find(|(_, w)| *w == 0) {
            return Err(Error::InvalidOption(format!("priority group {name:?} has weight 0")));
        }
        if self.send_hwm == 0 {
            return Err(Error::InvalidOption("send_hwm must be at least 1".into()));
        }
        Ok(())
    }

    pub fn wait_policy(&self) -> WaitPolicy {
        WaitPolicy { spin: self.spin, busy_poll: self.busy_poll }
    }

    /// The group `send` posts to: "normal" when it exists, else the first group.
    pub fn default_group(&self) -> &str {
        self.priorities.iter().find(|(n, _)| n == "normal").unwrap_or(&self.priorities[0]).0.as_str()
    }
}

/// Each direction's pool is decided by its sender's options, else by its receiver's wish, else defaults.
pub fn direction(sender: &Options, receiver: &Options) -> PoolGeometry {
    PoolGeometry {
        count: sender.send_buffers.or(receiver.recv_buffers).unwrap_or(DEFAULT_BUFFERS),
        size: sender.buffer_size.or(receiver.buffer_size).unwrap_or(DEFAULT_BUFFER_SIZE),
    }
}
