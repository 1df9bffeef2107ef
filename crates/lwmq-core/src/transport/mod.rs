//! The Transport Layer Interface (TLI) and the registry of built-in providers.
//!
//! A provider claims URI schemes, states its capabilities and parses its own addresses; `listen` and
//! `connect` give `Link`s: `acquire` a free buffer (bounded by a deadline) → fill it → `ship` it;
//! `receive` a shipped buffer, which goes back to its pool when the last view of it is dropped.
//! Providers register at compile time with `inventory::submit!`; the core never names one.

pub mod inproc;
pub mod ipc;
pub mod memfd;
pub mod options;
pub mod pool;
pub mod ring_link;
pub mod uri;

use crate::error::{Error, Result};
use crate::sync::Deadline;
use crate::wire::BufferWriter;
use bytes::Bytes;
pub use options::Options;
pub use uri::Uri;

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Capabilities {
    pub send: bool,
    pub receive: bool,
    pub multicast: bool,
    pub zero_copy: bool,
    pub remote: bool,
}

impl Capabilities {
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.send, "send"),
            (self.receive, "receive"),
            (self.multicast, "multicast"),
            (self.zero_copy, "zero-copy"),
            (self.remote, "remote"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

/// A writable transport buffer lent by `Link::acquire` until `Link::ship`.
pub struct TxBuf {
    ptr: *mut u8,
    cap: usize,
    /// Which buffer this is, for the link that lent it.
    pub token: u64,
}

// SAFETY: a TxBuf is exclusive access to its buffer until shipped (the pool's ownership protocol); moving
// that access to another thread is fine.
unsafe impl Send for TxBuf {}

impl TxBuf {
    /// # Safety
    /// `ptr..ptr+cap` must be writable and used by nobody else until the buffer is shipped or dropped.
    pub unsafe fn from_raw(ptr: *mut u8, cap: usize, token: u64) -> Self {
        TxBuf { ptr, cap, token }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: exclusive, writable and `cap` long (from_raw's contract).
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.cap) }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: as above; shared access while we hold `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.cap) }
    }

    pub fn capacity(&self) -> usize {
        self.cap
    }
}

/// One end of a connection: buffers out, buffers in.
pub trait Link: Send + Sync {
    /// Size of the buffers this end sends in.
    fn send_buffer_size(&self) -> usize;
    /// A free buffer to fill; waits until `deadline` (`Error::Timeout` then).
    fn acquire(&self, deadline: Deadline) -> Result<TxBuf>;
    /// Hands the first `len` bytes of `buf` to the peer.
    fn ship(&self, buf: TxBuf, len: usize) -> Result<()>;
    /// Adds messages to the buffer this end shipped last, if the peer has not taken it yet: `fill` gets a
    /// writer placed after what the buffer holds. Returns whether it did (`fill` ran and added at least
    /// one message). Links that cannot grow a shipped buffer keep this default.
    fn append(&self, _fill: &mut dyn FnMut(&mut BufferWriter<'_>)) -> Result<bool> {
        Ok(false)
    }
    /// The next shipped buffer; waits until `deadline`. After the peer left, buffers it shipped are still
    /// delivered, then `Error::PeerGone`.
    fn receive(&self, deadline: Deadline) -> Result<Bytes>;
    /// (received buffers the application holds, buffers in the receive pool), when the link knows: the
    /// channel uses it so holding messages can never starve the peer (see `Channel::fill`). `None`: the
    /// link cannot tell, and the channel copies every message out to be safe.
    fn receive_pool_use(&self) -> Option<(u32, u32)> {
        None
    }
    /// The shared segment behind this link, for tests that play a hostile peer (None if not shared memory).
    fn segment(&self) -> Option<(*mut u8, usize)> {
        None
    }
    /// Pushes a raw descriptor to the peer, bypassing every check: tests that play a hostile peer.
    fn forge_descriptor(&self, _value: u64) -> Result<()> {
        Err(Error::InvalidOption("this link has no descriptor ring".into()))
    }
    /// Closes this end: the peer sees `PeerGone`, our own waiters `ChannelClosed`.
    fn close(&self);
    /// Who is at the other end, for messages and logs.
    fn peer(&self) -> String;
}

pub trait Listener: Send + Sync {
    fn accept(&self, deadline: Deadline) -> Result<Box<dyn Link>>;
    /// Peers refused since the last call, each with its reason (the binding logs them).
    fn take_refusals(&self) -> Vec<String> {
        Vec::new()
    }
    fn close(&self);
    fn address(&self) -> String;
}

pub trait Provider: Sync + 'static {
    fn name(&self) -> &'static str;
    fn schemes(&self) -> &'static [&'static str];
    fn capabilities(&self) -> Capabilities;
    /// Checks the address part of the URI (`Error::Address` if malformed).
    fn check_address(&self, uri: &Uri) -> Result<()>;
    fn listen(&self, uri: &Uri, options: &Options) -> Result<Box<dyn Listener>>;
    fn connect(&self, uri: &Uri, options: &Options, deadline: Deadline) -> Result<Box<dyn Link>>;
}

/// A built-in provider's registration: `inventory::submit! { Registration(&MyProvider) }`.
pub struct Registration(pub &'static dyn Provider);
inventory::collect!(Registration);

pub fn builtin_providers() -> Vec<&'static dyn Provider> {
    let mut all: Vec<&'static dyn Provider> = inventory::iter::<Registration>.into_iter().map(|r| r.0).collect();
    all.sort_by_key(|p| p.name());
    all
}

pub fn provider_for(scheme: &str) -> Result<&'static dyn Provider> {
    builtin_providers()
        .into_iter()
        .find(|p| p.schemes().contains(&scheme))
        .ok_or_else(|| Error::UnsupportedScheme(scheme.to_string()))
}

pub fn listen(uri: &str, options: &Options) -> Result<Box<dyn Listener>> {
    options.validate()?;
    let uri = Uri::parse(uri)?;
    let provider = provider_for(&uri.scheme)?;
    provider.check_address(&uri)?;
    provider.listen(&uri, options)
}

pub fn connect(uri: &str, options: &Options, deadline: Deadline) -> Result<Box<dyn Link>> {
    options.validate()?;
    let uri = Uri::parse(uri)?;
    let provider = provider_for(&uri.scheme)?;
    provider.check_address(&uri)?;
    provider.connect(&uri, options, deadline)
}
