//! The bus's shared segment: a sealed memfd (transport/memfd.rs) holding a header, a table of subscribers and a ring of
//! fixed-size slots. Layout (all little-endian, offsets in bytes):
//!
//! ```text
//! 0        Header         magic "LWMQBUS\0", version, flags, geometry, then on their own cache lines:
//!                         the append lock, tail (the next sequence number), the two futex words,
//!                         member epoch, member-id counter, recoveries
//! 4096     Member[256]    64 B each: owner id (0 = free), cursor, pid, start time
//! slots    Slot[capacity] slot_size B each: 32-B slot header, then the payload
//! ```
//!
//! Slot header: stamp u64 (see sync::seqlock) | publisher u64 | timestamp_ns u64 | len u32 |
//! topic_len u16 | nframes u16. Payload: the topic padded to 8, then per frame a u64 length and the
//! bytes padded to 8 (so a frame copied out stays 8-byte aligned for numpy).
//!
//! Everything another member can write is read as hostile: geometry is read once and checked at
//! attach, every length read from a slot is bounds-checked, nothing read is used as a pointer.

use super::mutex::{self, RobustMutex};
use crate::error::{Error, Result};
use crate::sync::WaitWord;
use crossbeam_utils::CachePadded;
use crate::transport::memfd;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering::Acquire;
use std::sync::atomic::{AtomicU16, AtomicU32, AtomicU64};

pub const MAGIC: u64 = u64::from_le_bytes(*b"LWMQBUS\0");
pub const VERSION: u32 = 1;
pub const MAX_MEMBERS: usize = 256;
pub const SLOT_HEADER: usize = 32;
const HEADER_REGION: usize = 4096;
const FLAG_BACKPRESSURE: u32 = 1;

#[repr(C)]
pub struct Header {
    magic: u64,
    version: u32,
    flags: u32,
    capacity: u32,
    slot_size: u32,
    max_message_size: u32,
    max_members: u32,
    created_unix_ns: u64,
    pub lock: CachePadded<[u8; mutex::RESERVED]>,
    /// The next sequence number: every sequence below it is a whole message (or was, before overwrite).
    pub tail: CachePadded<AtomicU64>,
    /// Subscribers sleep here for the tail to move.
    pub tail_wait: CachePadded<WaitWord>,
    /// Publishers blocked by backpressure sleep here for cursors to move.
    pub space_wait: CachePadded<WaitWord>,
    /// Bumped whenever a subscriber joins or leaves, so publishers rescan cursors.
    pub member_epoch: CachePadded<AtomicU64>,
    /// One past the highest member slot ever used: scans stop there (a hint; clamped to MAX_MEMBERS).
    pub members_high: AtomicU32,
    pub next_member_id: AtomicU64,
    /// How many times a locker found the lock owner-dead and repaired the ring.
    pub recoveries: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_REGION);

#[repr(C, align(64))]
pub struct Member {
    /// The subscriber's member id; 0 = free.
    pub owner: AtomicU64,
    /// The next sequence the subscriber will read (backpressure holds publishers below cursor + capacity).
    pub cursor: AtomicU64,
    pub pid: AtomicU32,
    pub start: AtomicU64,
}

#[repr(C)]
pub struct SlotHeader {
    pub stamp: AtomicU64,
    pub publisher: AtomicU64,
    pub timestamp_ns: AtomicU64,
    pub len: AtomicU32,
    pub topic_len: AtomicU16,
    pub nframes: AtomicU16,
}

const _: () = assert!(std::mem::size_of::<SlotHeader>() == SLOT_HEADER);

/// The fixed shape of a bus, set by whoever creates it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    pub capacity: u32,
    pub max_message_size: u32,
    pub backpressure: bool,
}

impl Geometry {
    pub fn slot_size(&self) -> usize {
        (SLOT_HEADER + self.max_message_size as usize).div_ceil(64) * 64
    }

    fn slots_at() -> usize {
        HEADER_REGION + MAX_MEMBERS * std::mem::size_of::<Member>()
    }

    pub fn total(&self) -> Result<usize> {
        (self.capacity as usize)
            .checked_mul(self.slot_size())
            .and_then(|n| n.checked_add(Self::slots_at()))
            .filter(|&n| n <= 1 << 40)
            .ok_or_else(|| Error::InvalidOption("bus too large (capacity x max_message_size)".into()))
    }
}

fn align8(n: usize) -> usize {
    n.div_ceil(8) * 8
}

/// Payload bytes a message takes in a slot.
pub fn encoded_len(topic: &[u8], frames: &[&[u8]]) -> usize {
    align8(topic.len()) + frames.iter().map(|f| 8 + align8(f.len())).sum::<usize>()
}

/// A mapped bus segment.
pub struct Segment {
    map: memmap2::MmapMut,
    pub geometry: Geometry,
    pub lock: RobustMutex,
    pub fd: OwnedFd,
}

impl Segment {
    /// Creates and initialises a new segment. Nothing is named on disk or in /dev/shm: the kernel frees
    /// it when its last member's mapping and descriptor go, crash included.
    pub fn create(geometry: Geometry) -> Result<Segment> {
        let total = geometry.total()?;
        let fd = memfd::create_sealed(c"lwmq-bus", total)?;
        let mut map = memfd::map(&fd, total)?;
        let base = map.as_mut_ptr();
        // SAFETY: the mapping is fresh, zeroed, at least HEADER_REGION bytes and page-aligned, and no one
        // else has it yet; Header is repr(C) of plain integers and atomics, for which zero is valid.
        unsafe {
            let h = &mut *(base as *mut Header);
            h.version = VERSION;
            h.flags = if geometry.backpressure { FLAG_BACKPRESSURE } else { 0 };
            h.capacity = geometry.capacity;
            h.slot_size = geometry.slot_size() as u32;
            h.max_message_size = geometry.max_message_size;
            h.max_members = MAX_MEMBERS as u32;
            h.created_unix_ns = super::now_ns();
            RobustMutex::init(h.lock.as_mut_ptr())?;
            // The magic last: a half-made header is never taken for a bus.
            h.magic = MAGIC;
        }
        // SAFETY: the mutex was initialised above inside this mapping, which the Segment keeps.
        let lock = unsafe { RobustMutex::attach(Self::lock_ptr(&mut map)) };
        Ok(Segment { map, geometry, lock, fd })
    }

    /// Maps a segment another member passed us, after checking the seals, the header and the size.
    pub fn attach(fd: OwnedFd) -> Result<Segment> {
        let size = memfd::sealed_size(&fd)?;
        if size < HEADER_REGION as u64 {
            return Err(Error::Protocol(format!("bus segment of {size} bytes is too small")));
        }
        let mut map = memfd::map(&fd, size as usize)?;
        // SAFETY: at least HEADER_REGION bytes are mapped; the fields read are plain integers (a torn or
        // hostile value is checked below, never trusted).
        let h = unsafe { &*(map.as_ptr() as *const Header) };
        if h.magic != MAGIC {
            return Err(Error::Protocol("not an lwmq bus segment (bad magic)".into()));
        }
        if h.version != VERSION {
            return Err(Error::Protocol(format!("bus format version {} (this lwmq speaks {VERSION})", h.version)));
        }
        let geometry = Geometry {
            capacity: h.capacity,
            max_message_size: h.max_message_size,
            backpressure: h.flags & FLAG_BACKPRESSURE != 0,
        };
        let valid = geometry.capacity.is_power_of_two()
            && h.slot_size as usize == geometry.slot_size()
            && h.max_members as usize == MAX_MEMBERS
            && geometry.total().ok() == Some(size as usize);
        if !valid {
            return Err(Error::Protocol(format!("bus segment geometry is inconsistent ({geometry:?}, {size} bytes)")));
        }
        // SAFETY: the creator initialised the mutex before publishing the magic; the Segment keeps the map.
        let lock = unsafe { RobustMutex::attach(Self::lock_ptr(&mut map)) };
        Ok(Segment { map, geometry, lock, fd })
    }

    fn lock_ptr(map: &mut memmap2::MmapMut) -> *mut u8 {
        // SAFETY: the header lies at the start of the mapping (at least HEADER_REGION bytes).
        unsafe { (*(map.as_mut_ptr() as *mut Header)).lock.as_mut_ptr() }
    }

    pub fn header(&self) -> &Header {
        // SAFETY: checked at create/attach: the mapping holds a Header at offset 0; only its atomics are
        // used after that (the geometry was copied out once).
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    pub fn member(&self, i: usize) -> &Member {
        assert!(i < MAX_MEMBERS);
        // SAFETY: the member table lies between HEADER_REGION and slots_at, inside the mapping (checked
        // size); Member is atomics only, any bit pattern valid.
        unsafe { &*(self.map.as_ptr().add(HEADER_REGION + i * std::mem::size_of::<Member>()) as *const Member) }
    }

    /// When the bus was created (Unix ns): tells one incarnation of a bus name from the next.
    pub fn created_ns(&self) -> u64 {
        self.header().created_unix_ns
    }

    /// How many member slots scans must look at.
    pub fn members_high(&self) -> usize {
        (self.header().members_high.load(Acquire) as usize).min(MAX_MEMBERS)
    }

    /// The slot a sequence number lands in: its header and its payload area.
    pub fn slot(&self, seq: u64) -> (&SlotHeader, *mut u8) {
        let index = (seq & (self.geometry.capacity as u64 - 1)) as usize;
        let at = Geometry::slots_at() + index * self.geometry.slot_size();
        // SAFETY: index < capacity, so the slot lies inside the mapping (total() checked at attach).
        // The header is atomics only; the payload pointer is used only through `write_payload` and
        // `read_payload`, within max_message_size bytes.
        unsafe {
            let p = self.map.as_ptr().add(at) as *mut u8;
            (&*(p as *const SlotHeader), p.add(SLOT_HEADER))
        }
    }
}

/// Writes a message's payload into a slot's payload area (the caller holds the append lock and has
/// checked `encoded_len <= max_message_size`).
///
/// # Safety
/// `dst` must be a slot payload area of at least `encoded_len(topic, frames)` bytes.
pub unsafe fn write_payload(dst: *mut u8, topic: &[u8], frames: &[&[u8]], before_frames: impl FnOnce()) {
    std::ptr::copy_nonoverlapping(topic.as_ptr(), dst, topic.len());
    let mut at = align8(topic.len());
    before_frames();
    for f in frames {
        std::ptr::copy_nonoverlapping((f.len() as u64).to_le_bytes().as_ptr(), dst.add(at), 8);
        std::ptr::copy_nonoverlapping(f.as_ptr(), dst.add(at + 8), f.len());
        at += 8 + align8(f.len());
    }
}

/// Walks a copied-out payload's frames, checking every length (the bytes came from shared memory
/// another member writes); calls `frame` with each frame's byte range.
pub fn check_payload(payload: &[u8], topic_len: usize, nframes: usize, mut frame: impl FnMut(std::ops::Range<usize>)) -> Result<()> {
    let bad = |why: &str| Error::Protocol(format!("corrupt bus message: {why}"));
    if topic_len > payload.len() {
        return Err(bad("topic longer than the message"));
    }
    if nframes == 0 {
        return Err(bad("no frames"));
    }
    let mut at = align8(topic_len);
    for _ in 0..nframes {
        let Some(len_bytes) = payload.get(at..at + 8) else { return Err(bad("frame header out of bounds")) };
        let len = u64::from_le_bytes(len_bytes.try_into().expect("8 bytes"));
        let start = at + 8;
        let end = usize::try_from(len).ok().and_then(|l| start.checked_add(l)).filter(|&e| e <= payload.len());
        let Some(end) = end else { return Err(bad("frame longer than the message")) };
        frame(start..end);
        at = start + align8(end - start);
    }
    Ok(())
}

/// Splits a copied-out payload into its topic and frames (checked by `check_payload`).
pub fn split_payload(payload: &bytes::Bytes, topic_len: usize, nframes: usize) -> Result<(bytes::Bytes, crate::message::Frames)> {
    let mut frames = crate::message::Frames::new();
    check_payload(payload, topic_len, nframes, |r| frames.push(payload.slice(r)))?;
    Ok((payload.slice(..topic_len), frames))
}
