//! Channel options shared by every transport (the contract's keyword arguments of listen/connect).

use crate::error::{Error, Result};
use crate::sync::WaitPolicy;
use std::time::Duration;

pub const DEFAULT_BUFFER_SIZE: usize = 256 * 1024;
pub const DEFAULT_BUFFERS: u32 = 32;
/// Bytes a default pool may span: small enough for buffers to be reused while still in the last-level
/// cache (a 64 MiB pool of 2 MiB buffers copied at DRAM speed, 2.6x slower than 4 of them; see
/// docs/performance.md), large enough to keep a busy channel pipelined.
pub const DEFAULT_POOL_BYTES: usize = 8 << 20;
pub const MIN_DEFAULT_BUFFERS: u32 = 4;
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

/// Each direction's pool is decided by its sender's options, else by its receiver's wish, else defaults
/// (as many buffers as fit `DEFAULT_POOL_BYTES`, 4 to 32).
pub fn direction(sender: &Options, receiver: &Options) -> PoolGeometry {
    let size = sender.buffer_size.or(receiver.buffer_size).unwrap_or(DEFAULT_BUFFER_SIZE);
    let fitting = (DEFAULT_POOL_BYTES / size).clamp(MIN_DEFAULT_BUFFERS as usize, DEFAULT_BUFFERS as usize) as u32;
    PoolGeometry { count: sender.send_buffers.or(receiver.recv_buffers).unwrap_or(fitting), size }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_pools_fit_the_byte_budget_and_explicit_counts_win() {
        let with = |size: usize| Options { buffer_size: Some(size), ..Options::default() };
        assert_eq!(direction(&Options::default(), &Options::default()), PoolGeometry { count: 32, size: 256 << 10 });
        assert_eq!(direction(&with(2 << 20), &Options::default()).count, 4);
        assert_eq!(direction(&with(64 << 20), &Options::default()).count, 4);
        assert_eq!(direction(&with(1 << 20), &Options::default()).count, 8);
        let explicit = Options { buffer_size: Some(2 << 20), send_buffers: Some(100), ..Options::default() };
        assert_eq!(direction(&explicit, &Options::default()).count, 100);
        let wish = Options { recv_buffers: Some(7), ..Options::default() };
        assert_eq!(direction(&Options::default(), &wish).count, 7);
    }
}
