//! The engine's one error type. The Python binding maps each variant to the class of the same name
//! (see crates/lwmq-py/src/errors.rs), so the names here are the contract's names.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A timeout expired.
    Timeout(String),
    /// A message does not fit one transport buffer (sizes in bytes).
    MessageTooLarge { size: usize, max: usize },
    /// A URI is malformed.
    Address(String),
    /// No transport claims the URI's scheme.
    UnsupportedScheme(String),
    /// Listening on an address that is taken.
    AddressInUse(String),
    /// The peer closed or died.
    PeerGone(String),
    /// The channel (or queue) was closed locally.
    ChannelClosed,
    /// The peer sent malformed data; the channel is torn down.
    Protocol(String),
    /// A bounded queue is full and the timeout expired.
    QueueFull,
    /// A joiner asked for a bus shape other than the live bus's.
    Mismatch(String),
    /// An invalid option value (the binding raises ValueError/TypeError).
    InvalidOption(String),
    /// An operating-system call failed.
    Os { what: String, errno: i32 },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn os(what: impl Into<String>) -> Self {
        Error::Os { what: what.into(), errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0) }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Timeout(what) => write!(f, "timed out: {what}"),
            Error::MessageTooLarge { size, max } => write!(
                f,
                "message of {size} encoded bytes does not fit one transport buffer (at most {max}); \
                 raise the channel's buffer_size"
            ),
            Error::Address(why) => write!(f, "malformed address: {why}"),
            Error::UnsupportedScheme(s) => write!(f, "no transport claims the scheme {s:?}"),
            Error::AddressInUse(a) => write!(f, "address already in use: {a}"),
            Error::PeerGone(why) => write!(f, "peer gone: {why}"),
            Error::ChannelClosed => write!(f, "channel closed"),
            Error::Protocol(why) => write!(f, "protocol error: {why}"),
            Error::QueueFull => write!(f, "queue full"),
            Error::Mismatch(why) => write!(f, "{why}"),
            Error::InvalidOption(why) => write!(f, "invalid option: {why}"),
            Error::Os { what, errno } => {
                write!(f, "{what}: {}", std::io::Error::from_raw_os_error(*errno))
            }
        }
    }
}

impl std::error::Error for Error {}
