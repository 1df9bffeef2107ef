//! lwmq's engine: messages, the wire format, the message-queuing layer and the transports.
//! No Python here: crates/lwmq-py wraps this crate thinly.

pub mod error;
pub mod queue;
pub mod sync;

#[cfg(not(loom))]
pub mod bus;
#[cfg(not(loom))]
pub mod channel;
#[cfg(not(loom))]
pub mod message;
#[cfg(not(loom))]
pub mod transport;
#[cfg(not(loom))]
pub mod wire;

pub use error::{Error, Result};
#[cfg(not(loom))]
pub use {channel::Channel, message::Message};

/// "release" or "debug": so no benchmark is taken on a debug build by mistake.
pub const BUILD_PROFILE: &str = if cfg!(debug_assertions) { "debug" } else { "release" };
