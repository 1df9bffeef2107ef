//! A `Link` over a two-direction pool segment: we send on one direction and receive on the other.
//! inproc:// uses it directly; ipc:// adds the rendezvous socket and liveness around it.

use super::pool::{self, PoolReceiver, PoolSender, PoolUsage, Region};
use super::{Link, TxBuf};
use crate::error::Result;
use crate::sync::{Deadline, WaitPolicy};
use crate::wire::BufferWriter;
use bytes::Bytes;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

pub struct RingLink {
    region: Arc<Region>,
    send_dir: usize,
    recv_dir: usize,
    tx: Mutex<PoolSender>,
    rx: Mutex<PoolReceiver>,
    rx_usage: PoolUsage,
    tx_size: usize,
    peer: String,
    /// Our own close, private to this process (the shared flags only tell the peer).
    closed: Arc<AtomicBool>,
}

impl RingLink {
    /// Attaches to `region`, sending on `send_dir` and receiving on the other direction. Attaching the
    /// receiving end lends all of its buffers to the peer.
    pub fn attach(region: &Arc<Region>, send_dir: usize, policy: WaitPolicy, peer: String) -> Result<RingLink> {
        let recv_dir = 1 - send_dir;
        let closed = Arc::new(AtomicBool::new(false));
        let tx = pool::sender(region, send_dir, policy, closed.clone());
        let rx = pool::receiver(region, recv_dir, policy, closed.clone())?;
        Ok(RingLink {
            region: region.clone(),
            send_dir,
            recv_dir,
            tx_size: tx.buffer_size(),
            tx: Mutex::new(tx),
            rx_usage: rx.usage(),
            rx: Mutex::new(rx),
            peer,
            closed,
        })
    }
}

impl Link for RingLink {
    fn send_buffer_size(&self) -> usize {
        self.tx_size
    }

    fn acquire(&self, deadline: Deadline) -> Result<TxBuf> {
        self.tx.lock().unwrap().acquire(deadline)
    }

    fn ship(&self, buf: TxBuf, len: usize) -> Result<()> {
        self.tx.lock().unwrap().ship(buf, len)
    }

    fn append(&self, fill: &mut dyn FnMut(&mut BufferWriter<'_>)) -> Result<bool> {
        Ok(self.tx.lock().unwrap().append(fill))
    }

    fn receive(&self, deadline: Deadline) -> Result<Bytes> {
        self.rx.lock().unwrap().receive(deadline)
    }

    fn receive_pool_use(&self) -> Option<(u32, u32)> {
        Some(self.rx_usage.held())
    }

    fn segment(&self) -> Option<(*mut u8, usize)> {
        Some(self.region.raw())
    }

    fn forge_descriptor(&self, value: u64) -> Result<()> {
        self.tx.lock().unwrap().forge_descriptor(value)
    }

    fn close(&self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            // Tells the peer, and wakes our own waiters, which then see `closed`.
            self.region.close_direction(self.send_dir, true);
            self.region.close_direction(self.recv_dir, false);
        }
    }

    fn peer(&self) -> String {
        self.peer.clone()
    }
}

impl Drop for RingLink {
    fn drop(&mut self) {
        self.close();
    }
}
