//! The message-queuing layer's queues: input queues (`input`), the weighted round-robin `scheduler`
//! that feeds the encoder, and the lock-free `spsc` descriptor ring that transports use.

pub mod spsc;
#[cfg(not(loom))]
pub mod input;
#[cfg(not(loom))]
pub mod scheduler;
