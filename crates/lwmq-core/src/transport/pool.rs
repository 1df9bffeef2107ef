//! Buffer pools in one memory segment: for each direction, `count` buffers of `size` bytes and two SPSC
//! descriptor rings — `filled` (sender → receiver: buffer index and length) and `freed` (receiver →
//! sender: buffer index). The same layout serves inproc (anonymous memory) and ipc (a memfd mapped by
//! both processes), so everything read from the segment is checked as if a hostile peer wrote it.
//!
//! Ownership protocol: a buffer index is owned by exactly one side at a time. The receiver puts every
//! index into `freed` when it attaches; the sender pops one to fill, pushes it to `filled` to ship; the
//! receiver pops it and pushes it back to `freed` when the last view of it is dropped. Each side tracks
//! what it owns, so a descriptor for a buffer it should not get is a protocol error, never a double use.

use crate::error::{Error, Result};
use crate::queue::spsc::{self, Claim, Consumer, Producer, RingControl};
use crate::sync::{Deadline, WaitPolicy, WaitWord};
use crate::transport::options::PoolGeometry;
use crate::transport::TxBuf;
use crate::wire::BufferWriter;
use bytes::Bytes;
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::{Acquire, Release};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};
use std::sync::{Arc, Mutex};

/// Reads a shared close flag: 0 open, 1 closed, anything else written by a hostile peer.
fn flag(word: &AtomicU32) -> Result<bool> {
    match word.load(Acquire) {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(Error::Protocol(format!("corrupt control block: close flag {v:#x}"))),
    }
}

/// The shared control block of one direction.
#[repr(C)]
#[derive(Default)]
pub struct DirectionControl {
    filled: RingControl,
    freed: RingControl,
    /// The receiver sleeps here; the sender notifies after shipping.
    filled_wait: CachePadded<WaitWord>,
    /// The sender sleeps here; the receiver notifies after freeing.
    freed_wait: CachePadded<WaitWord>,
    sender_closed: CachePadded<AtomicU32>,
    receiver_closed: CachePadded<AtomicU32>,
}

const ALIGN: usize = 64;
const PAGE: usize = 4096;

fn align_up(n: usize, a: usize) -> usize {
    n.div_ceil(a) * a
}

/// Where each part of a two-direction segment lies. Both peers compute it from the geometry alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub dirs: [PoolGeometry; 2],
    ctl: [usize; 2],
    filled_slots: [usize; 2],
    freed_slots: [usize; 2],
    buffers: [usize; 2],
    ring_capacity: [u32; 2],
    stride: [usize; 2],
    pub total: usize,
}

impl Layout {
    pub fn new(dirs: [PoolGeometry; 2]) -> Result<Layout> {
        let mut at = 0usize;
        let mut take = |len: usize, align: usize| -> Result<usize> {
            let start = align_up(at, align);
            at = start.checked_add(len).ok_or_else(|| Error::InvalidOption("pool too large".into()))?;
            Ok(start)
        };
        let ctl_len = std::mem::size_of::<DirectionControl>();
        let ctl = [take(ctl_len, ALIGN)?, take(ctl_len, ALIGN)?];
        let ring_capacity = dirs.map(|g| g.count.next_power_of_two());
        let slots = |d: usize| ring_capacity[d] as usize * 8;
        let filled_slots = [take(slots(0), ALIGN)?, take(slots(1), ALIGN)?];
        let freed_slots = [take(slots(0), ALIGN)?, take(slots(1), ALIGN)?];
        let stride = dirs.map(|g| align_up(g.size, ALIGN));
        let mut buffers = [0; 2];
        for d in 0..2 {
            let len = stride[d]
                .checked_mul(dirs[d].count as usize)
                .ok_or_else(|| Error::InvalidOption("pool too large".into()))?;
            buffers[d] = take(len, PAGE)?;
        }
        let total = align_up(at, PAGE);
        Ok(Layout { dirs, ctl, filled_slots, freed_slots, buffers, ring_capacity, stride, total })
    }
}

/// A mapped segment; kept alive by every end and every received view.
pub struct Region {
    map: memmap2::MmapMut,
    layout: Layout,
}

impl Region {
    /// Anonymous memory for an in-process channel (zeroed, committed lazily by the kernel).
    pub fn anonymous(layout: Layout) -> Result<Arc<Region>> {
        let map = memmap2::MmapMut::map_anon(layout.total).map_err(|e| Error::Os {
            what: format!("mapping {} bytes", layout.total),
            errno: e.raw_os_error().unwrap_or(0),
        })?;
        Ok(Arc::new(Region { map, layout }))
    }

    /// A segment mapped from a file (e.g. a memfd); `map.len()` must be at least `layout.total`.
    pub fn from_map(map: memmap2::MmapMut, layout: Layout) -> Result<Arc<Region>> {
        if map.len() < layout.total {
            return Err(Error::Protocol(format!("segment of {} bytes is smaller than its layout", map.len())));
        }
        Ok(Arc::new(Region { map, layout }))
    }

    /// The whole mapping (tests that play a hostile peer scribble on it).
    pub fn raw(&self) -> (*mut u8, usize) {
        (self.base(), self.layout.total)
    }

    fn base(&self) -> *mut u8 {
        self.map.as_ptr() as *mut u8
    }

    fn ctl(&self, d: usize) -> &DirectionControl {
        // SAFETY: `ctl[d]` is a 64-aligned offset inside the mapping, sized for a DirectionControl, whose
        // fields are all atomics (valid for any bit pattern, including zeroed memory) and so may be shared.
        unsafe { &*(self.base().add(self.layout.ctl[d]) as *const DirectionControl) }
    }

    fn slots(&self, offset: usize) -> *const AtomicU64 {
        // SAFETY: the offset and the ring's slot count come from the layout, inside the mapping.
        unsafe { self.base().add(offset) as *const AtomicU64 }
    }

    fn buffer(&self, d: usize, index: u32) -> *mut u8 {
        debug_assert!(index < self.layout.dirs[d].count);
        // SAFETY: `index < count` (checked by callers), so the buffer lies inside the pool's range.
        unsafe { self.base().add(self.layout.buffers[d] + index as usize * self.layout.stride[d]) }
    }

    /// Marks direction `d` closed by its sender (`by_sender`) or its receiver and wakes both sides.
    pub fn close_direction(&self, d: usize, by_sender: bool) {
        let ctl = self.ctl(d);
        let flag = if by_sender { &ctl.sender_closed } else { &ctl.receiver_closed };
        flag.store(1, Release);
        ctl.filled_wait.wake_all();
        ctl.freed_wait.wake_all();
    }

    fn filled_ring(&self, d: usize) -> (Producer, Consumer) {
        // SAFETY: the control block and slots lie in this mapping, which the ends keep alive through their
        // Arc<Region>; each direction's ring has one sender end and one receiver end (`attach`).
        unsafe { spsc::ring(&self.ctl(d).filled, self.slots(self.layout.filled_slots[d]), self.layout.ring_capacity[d]) }
    }

    fn freed_ring(&self, d: usize) -> (Producer, Consumer) {
        // SAFETY: as in `filled_ring`.
        unsafe { spsc::ring(&self.ctl(d).freed, self.slots(self.layout.freed_slots[d]), self.layout.ring_capacity[d]) }
    }
}

/// The sending end of direction `d`.
pub struct PoolSender {
    region: Arc<Region>,
    d: usize,
    /// Closed by our own side: kept in private memory, which the peer cannot write.
    closed: Arc<AtomicBool>,
    filled: Producer,
    freed: Consumer,
    /// Buffers this side holds between acquire and ship.
    owned: Vec<bool>,
    /// Freed buffers taken from the ring, most recently freed last: reused first, while still in cache.
    hot: Vec<u32>,
    /// The buffer shipped last, while the receiver may not have claimed it: `append` adds to it.
    open: Option<Open>,
    policy: WaitPolicy,
}

/// The buffer shipped last: its descriptor as published (index and length) and its message count.
#[derive(Clone, Copy)]
struct Open {
    index: u32,
    descriptor: u64,
    count: u32,
}

fn descriptor(index: u32, len: usize) -> u64 {
    ((index as u64) << 32) | len as u64
}

/// The receiving end of direction `d`.
pub struct PoolReceiver {
    region: Arc<Region>,
    d: usize,
    closed: Arc<AtomicBool>,
    filled: Consumer,
    releaser: Arc<Releaser>,
    policy: WaitPolicy,
}

/// Gives received buffers back; shared by every view of a received buffer (views drop on any thread).
struct Releaser {
    region: Arc<Region>,
    d: usize,
    freed: Mutex<Producer>,
    /// Buffers lent to the application (views alive).
    held: Box<[AtomicBool]>,
    held_count: AtomicU32,
}

/// Builds the sending end of direction `d`. Exactly one per direction and segment.
pub fn sender(region: &Arc<Region>, d: usize, policy: WaitPolicy, closed: Arc<AtomicBool>) -> PoolSender {
    let (filled, _) = region.filled_ring(d);
    let (_, freed) = region.freed_ring(d);
    let count = region.layout.dirs[d].count as usize;
    PoolSender { region: region.clone(), d, closed, filled, freed, owned: vec![false; count], hot: Vec::with_capacity(count), open: None, policy }
}

/// Builds the receiving end of direction `d` and lends the sender every buffer. Exactly one per direction.
pub fn receiver(region: &Arc<Region>, d: usize, policy: WaitPolicy, closed: Arc<AtomicBool>) -> Result<PoolReceiver> {
    let (_, filled) = region.filled_ring(d);
    let (mut freed, _) = region.freed_ring(d);
    let count = region.layout.dirs[d].count;
    for i in 0..count {
        if freed.push(i as u64) != Ok(true) {
            return Err(Error::Protocol("freed ring not empty at attach".into()));
        }
    }
    region.ctl(d).freed_wait.notify();
    let held = (0..count).map(|_| AtomicBool::new(false)).collect();
    let releaser = Arc::new(Releaser { region: region.clone(), d, freed: Mutex::new(freed), held, held_count: AtomicU32::new(0) });
    Ok(PoolReceiver { region: region.clone(), d, closed, filled, releaser, policy })
}

impl PoolSender {
    pub fn buffer_size(&self) -> usize {
        self.region.layout.dirs[self.d].size
    }

    /// A free buffer, waiting until `deadline`. The most recently freed buffer is reused first (LIFO), so
    /// a busy channel keeps touching the same few buffers, which stay in the CPU's caches.
    pub fn acquire(&mut self, deadline: Deadline) -> Result<TxBuf> {
        let ctl = self.region.ctl(self.d);
        let count = self.region.layout.dirs[self.d].count;
        if self.hot.is_empty() {
            let freed = &mut self.freed;
            let hot = &mut self.hot;
            let closed = &self.closed;
            let open = &mut self.open;
            let got = ctl.freed_wait.wait_for(self.policy, deadline, || {
                if closed.load(Acquire) {
                    return Some(Err(Error::ChannelClosed));
                }
                match flag(&ctl.receiver_closed) {
                    Err(e) => return Some(Err(e)),
                    Ok(true) => return Some(Err(Error::PeerGone("the peer closed its end or died".into()))),
                    Ok(false) => {}
                }
                loop {
                    match freed.pop() {
                        Err(e) => return Some(Err(Error::Protocol(e.0.into()))),
                        Ok(Some(v)) if v < count as u64 => {
                            if open.is_some_and(|o| o.index as u64 == v) {
                                *open = None; // claimed and freed: no longer ours to grow
                            }
                            hot.push(v as u32)
                        }
                        Ok(Some(v)) => return Some(Err(Error::Protocol(format!("freed descriptor {v} out of range (pool of {count})")))),
                        Ok(None) => return if hot.is_empty() { None } else { Some(Ok(())) },
                    }
                }
            });
            match got {
                None => return Err(Error::Timeout("no free transport buffer".into())),
                Some(r) => r?,
            }
        } else if self.closed.load(Acquire) {
            return Err(Error::ChannelClosed);
        } else if flag(&ctl.receiver_closed)? {
            return Err(Error::PeerGone("the peer closed its end or died".into()));
        }
        let index = self.hot.pop().expect("a freed buffer");
        if std::mem::replace(&mut self.owned[index as usize], true) {
            return Err(Error::Protocol(format!("buffer {index} handed back while we hold it")));
        }
        // SAFETY: we now own buffer `index` (ownership protocol, checked above) until we ship it; it is
        // `size` bytes inside the mapping kept alive by `self.region`.
        Ok(unsafe { TxBuf::from_raw(self.region.buffer(self.d, index), self.buffer_size(), index as u64) })
    }

    /// Pushes an arbitrary descriptor into the filled ring, as a hostile peer could (tests only).
    pub fn forge_descriptor(&mut self, value: u64) -> Result<()> {
        self.filled.push(value).map_err(|e| Error::Protocol(e.0.into()))?;
        self.region.ctl(self.d).filled_wait.notify();
        Ok(())
    }

    /// Ships the first `len` bytes of `buf`, an encoded buffer (wire format); it stays open to `append`
    /// until the receiver claims it.
    pub fn ship(&mut self, mut buf: TxBuf, len: usize) -> Result<()> {
        let index = buf.token as u32;
        assert!(len <= self.buffer_size() && self.owned[index as usize], "shipping a buffer we do not own");
        self.owned[index as usize] = false;
        // Our own header, but in memory the peer can write: bounded by what `len` bytes can hold.
        let count = crate::wire::message_count(buf.as_mut_slice()).min(len as u32 / 16);
        let descriptor = descriptor(index, len);
        // The RELEASE store inside push (ring pair P1) publishes the buffer's bytes to the receiver.
        self.open = None;
        match self.filled.push(descriptor) {
            Ok(true) => {}
            Ok(false) => return Err(Error::Protocol("filled ring full: peer broke the buffer protocol".into())),
            Err(e) => return Err(Error::Protocol(e.0.into())),
        }
        self.open = Some(Open { index, descriptor, count });
        self.region.ctl(self.d).filled_wait.notify();
        Ok(())
    }

    /// Adds messages to the buffer shipped last if the receiver has not claimed it yet: `fill` gets a
    /// writer placed after the messages already there. Returns false (without calling `fill`) when there
    /// is no such buffer. This is how messages posted one at a time club while the receiver is busy,
    /// without any waiting: the buffer grows in place until it is full or claimed.
    pub fn append(&mut self, fill: &mut dyn FnMut(&mut BufferWriter<'_>)) -> bool {
        let Some(open) = self.open else { return false };
        if !self.filled.begin_amend(open.descriptor) {
            self.open = None; // claimed: the receiver owns it now
            return false;
        }
        let len = (open.descriptor & 0xffff_ffff) as usize;
        // SAFETY: the slot is marked busy, so the receiver cannot claim (read) the buffer until `end_amend`;
        // it is `size` bytes inside the mapping kept alive by `self.region`, and only this sender writes it.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.region.buffer(self.d, open.index), self.buffer_size()) };
        let mut writer = BufferWriter::resume(bytes, len, open.count);
        fill(&mut writer);
        let count = writer.message_count();
        let added = count != open.count;
        let new_len = writer.finish();
        let descriptor = descriptor(open.index, new_len);
        self.filled.end_amend(descriptor);
        // Nothing fitted: the buffer is full enough, the next message goes into a new one.
        self.open = added.then_some(Open { descriptor, count, ..open });
        // A receiver that found the slot busy may have gone to sleep meanwhile.
        self.region.ctl(self.d).filled_wait.notify();
        added
    }

}

/// Reads how many received buffers of a pool the application holds (see `PoolReceiver::usage`).
pub struct PoolUsage(Arc<Releaser>);

impl PoolUsage {
    /// (buffers the application holds, buffers in the pool).
    pub fn held(&self) -> (u32, u32) {
        (self.0.held_count.load(Acquire), self.0.region.layout.dirs[self.0.d].count)
    }
}

/// A received buffer lent to the application; released when the last `Bytes` view of it drops.
struct RxBuffer {
    releaser: Arc<Releaser>,
    index: u32,
    ptr: *const u8,
    len: usize,
}

// SAFETY: RxBuffer only reads its buffer, which no one on our side writes while we hold it (ownership
// protocol); the pointer stays valid because `releaser` keeps the Region mapped.
unsafe impl Send for RxBuffer {}
unsafe impl Sync for RxBuffer {}

impl AsRef<[u8]> for RxBuffer {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: see the Send/Sync justification above; `len` was bounds-checked at receive.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for RxBuffer {
    fn drop(&mut self) {
        self.releaser.release(self.index);
    }
}

impl Releaser {
    fn release(&self, index: u32) {
        self.held[index as usize].store(false, Release);
        self.held_count.fetch_sub(1, Release);
        // The RELEASE store inside push (ring pair P1 of the freed ring) orders our reads of the buffer
        // before the sender's reuse of it. A full or corrupt ring means the peer broke the protocol; the
        // sender side then stalls and its own checks report it, so there is nothing more to do here.
        let _ = self.freed.lock().unwrap().push(index as u64);
        self.region.ctl(self.d).freed_wait.notify();
    }
}

impl PoolReceiver {
    /// A handle that reads how much of this pool the application holds, without the receiver's lock.
    pub fn usage(&self) -> PoolUsage {
        PoolUsage(self.releaser.clone())
    }

    /// The next shipped buffer, waiting until `deadline`; zero-copy.
    pub fn receive(&mut self, deadline: Deadline) -> Result<Bytes> {
        let ctl = self.region.ctl(self.d);
        let filled = &mut self.filled;
        let closed = &self.closed;
        let got = ctl.filled_wait.wait_for(self.policy, deadline, || {
            if closed.load(Acquire) {
                return Some(Err(Error::ChannelClosed));
            }
            let peer_gone = match flag(&ctl.sender_closed) {
                Ok(gone) => gone,
                Err(e) => return Some(Err(e)),
            };
            // Check the ring after reading the flag: whatever was shipped before the close is delivered.
            match filled.claim() {
                Err(e) => Some(Err(Error::Protocol(e.0.into()))),
                Ok(Claim::Value(v)) => Some(Ok(v)),
                Ok(Claim::Empty) if peer_gone => Some(Err(Error::PeerGone("the peer closed its end or died".into()))),
                Ok(Claim::Busy) if peer_gone => Some(Err(Error::PeerGone(
                    "the peer died while adding messages to its last buffer: the messages of that buffer are lost".into(),
                ))),
                Ok(_) => None,
            }
        });
        let v = match got {
            None => return Err(Error::Timeout("nothing received".into())),
            Some(r) => r?,
        };
        let geometry = self.region.layout.dirs[self.d];
        let (index, len) = ((v >> 32) as u32, (v & 0xffff_ffff) as usize);
        if index >= geometry.count || len > geometry.size {
            return Err(Error::Protocol(format!(
                "filled descriptor (buffer {index}, {len} bytes) out of range (pool of {} x {} bytes)",
                geometry.count, geometry.size
            )));
        }
        if self.releaser.held[index as usize].swap(true, Acquire) {
            return Err(Error::Protocol(format!("buffer {index} shipped while we still hold it")));
        }
        self.releaser.held_count.fetch_add(1, Release);
        let ptr = self.region.buffer(self.d, index);
        Ok(Bytes::from_owner(RxBuffer { releaser: self.releaser.clone(), index, ptr, len }))
    }

}
