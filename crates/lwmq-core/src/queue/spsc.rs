//! A bounded single-producer/single-consumer ring of 64-bit descriptors. Its control block and slots may
//! live in memory shared with another process that we do not trust: each side keeps its own index
//! privately (the shared copy is only published), and every index read from the other side is checked.
//!
//! Ordering pairs (both ends marked):
//! - P1: producer RELEASE store of `head` in `push`  ⟷  consumer ACQUIRE load of `head` in `pop`
//!   (the slot, and anything written before the push, e.g. a buffer's bytes, is visible).
//! - P2: consumer RELEASE store of `tail` in `pop`/`claim` ⟷ producer ACQUIRE load of `tail` in `push`
//!   (the consumer has finished reading the slot before the producer reuses it).
//! - P3: producer RELEASE store of the slot in `end_amend` ⟷ consumer ACQUIRE compare-exchange of the
//!   slot in `claim` (bytes written while amending are visible once the amended value is claimed).
//!
//! Amending (the filled ring of a transport pool): until the consumer claims the value pushed last, the
//! producer may replace it (a buffer that grew by more messages). `begin_amend` marks the slot busy with a
//! compare-exchange that fails once the consumer has claimed it; `claim` swaps a slot for `CLAIMED` and
//! skips a busy one for now. Exactly one of the two compare-exchanges on a value wins.

use super::super::sync::{AtomicU32, AtomicU64};
use crossbeam_utils::CachePadded;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// Set in a slot while the producer amends it (descriptors never use the top bit).
pub const BUSY: u64 = 1 << 63;
/// What a claimed slot holds; the producer overwrites it when it reuses the slot.
pub const CLAIMED: u64 = u64::MAX;

#[repr(C)]
#[derive(Default)]
pub struct RingControl {
    /// Next slot the producer fills (written only by the producer).
    head: CachePadded<AtomicU32>,
    /// Next slot the consumer reads (written only by the consumer).
    tail: CachePadded<AtomicU32>,
}

#[cfg(loom)]
impl RingControl {
    pub fn new() -> Self {
        RingControl { head: CachePadded::new(AtomicU32::new(0)), tail: CachePadded::new(AtomicU32::new(0)) }
    }
}

/// The other side broke the ring's invariants (only a hostile or corrupted peer can).
#[derive(Debug, PartialEq, Eq)]
pub struct Corrupt(pub &'static str);

/// Raw view of a ring: control block and `capacity` slots (a power of two).
struct RingRef {
    ctl: *const RingControl,
    slots: *const AtomicU64,
    mask: u32,
}

// SAFETY: RingRef is only a pair of pointers to atomics; the constructor's caller guarantees they stay
// valid while the ring handles live, and all access through them is atomic.
unsafe impl Send for RingRef {}
unsafe impl Sync for RingRef {}

impl RingRef {
    fn ctl(&self) -> &RingControl {
        // SAFETY: valid for the handle's lifetime (constructor contract).
        unsafe { &*self.ctl }
    }
    fn slot(&self, index: u32) -> &AtomicU64 {
        // SAFETY: `index & mask` < capacity and the slot array holds `capacity` atomics (constructor contract).
        unsafe { &*self.slots.add((index & self.mask) as usize) }
    }
    fn capacity(&self) -> u32 {
        self.mask + 1
    }
}

pub struct Producer {
    ring: RingRef,
    head: u32,
}

pub struct Consumer {
    ring: RingRef,
    tail: u32,
}

/// Makes the two ends of a ring.
///
/// # Safety
/// `ctl` and `slots` (of `capacity` elements, a power of two) must stay valid while either end lives, the
/// ring must start empty (head == tail == 0), and there must be exactly one `Producer` and one `Consumer`
/// for it across all processes.
pub unsafe fn ring(ctl: *const RingControl, slots: *const AtomicU64, capacity: u32) -> (Producer, Consumer) {
    assert!(capacity.is_power_of_two(), "ring capacity must be a power of two");
    let make = || RingRef { ctl, slots, mask: capacity - 1 };
    (Producer { ring: make(), head: 0 }, Consumer { ring: make(), tail: 0 })
}

impl Producer {
    /// Appends `value`; `Ok(false)` when full.
    pub fn push(&mut self, value: u64) -> Result<bool, Corrupt> {
        // ACQUIRE (P2): pairs with the consumer's RELEASE store of `tail` in `pop`.
        let tail = self.ring.ctl().tail.load(Acquire);
        let used = self.head.wrapping_sub(tail);
        if used > self.ring.capacity() {
            return Err(Corrupt("ring tail ahead of head"));
        }
        if used == self.ring.capacity() {
            return Ok(false);
        }
        self.ring.slot(self.head).store(value, Relaxed);
        self.head = self.head.wrapping_add(1);
        // RELEASE (P1): pairs with the consumer's ACQUIRE load of `head` in `pop`.
        self.ring.ctl().head.store(self.head, Release);
        Ok(true)
    }

    /// Starts replacing the value pushed last, `expected`: true if the consumer has not claimed it, and it
    /// stays unclaimed until `end_amend`. Only for values below `BUSY`.
    pub fn begin_amend(&mut self, expected: u64) -> bool {
        debug_assert!(expected < BUSY);
        // The consumer has claimed everything pushed: skip the compare-exchange, which would pull the
        // slot's cache line from the consumer's core only to fail (`push` reads `tail` next anyway).
        // ACQUIRE (P2): pairs with the consumer's RELEASE store of `tail` in `claim`.
        if self.ring.ctl().tail.load(Acquire) == self.head {
            return false;
        }
        let slot = self.ring.slot(self.head.wrapping_sub(1));
        // ACQUIRE: nothing written for the amendment moves before the slot is ours (see `claim`).
        slot.compare_exchange(expected, expected | BUSY, Acquire, Relaxed).is_ok()
    }

    /// Ends an amendment begun by `begin_amend`, publishing `value` (which may equal the old one).
    pub fn end_amend(&mut self, value: u64) {
        debug_assert!(value < BUSY);
        // RELEASE (P3): pairs with the consumer's ACQUIRE compare-exchange in `claim`.
        self.ring.slot(self.head.wrapping_sub(1)).store(value, Release);
    }
}

/// What `Consumer::claim` found.
#[derive(Debug, PartialEq, Eq)]
pub enum Claim {
    Empty,
    /// The oldest value is being amended by the producer: try again in a moment.
    Busy,
    Value(u64),
}

impl Consumer {
    /// Takes the oldest value, if any.
    pub fn pop(&mut self) -> Result<Option<u64>, Corrupt> {
        // ACQUIRE (P1): pairs with the producer's RELEASE store of `head` in `push`.
        let head = self.ring.ctl().head.load(Acquire);
        let used = head.wrapping_sub(self.tail);
        if used > self.ring.capacity() {
            return Err(Corrupt("ring head more than a capacity ahead"));
        }
        if used == 0 {
            return Ok(None);
        }
        let value = self.ring.slot(self.tail).load(Relaxed);
        self.tail = self.tail.wrapping_add(1);
        // RELEASE (P2): pairs with the producer's ACQUIRE load of `tail` in `push`.
        self.ring.ctl().tail.store(self.tail, Release);
        Ok(Some(value))
    }

    /// Takes the oldest value for good, so the producer can no longer amend it (rings whose producer
    /// amends must be read with `claim`, never `pop`).
    pub fn claim(&mut self) -> Result<Claim, Corrupt> {
        // ACQUIRE (P1): pairs with the producer's RELEASE store of `head` in `push`.
        let head = self.ring.ctl().head.load(Acquire);
        let used = head.wrapping_sub(self.tail);
        if used > self.ring.capacity() {
            return Err(Corrupt("ring head more than a capacity ahead"));
        }
        if used == 0 {
            return Ok(Claim::Empty);
        }
        let slot = self.ring.slot(self.tail);
        let mut value = slot.load(Relaxed);
        loop {
            if value == CLAIMED {
                return Err(Corrupt("a pushed slot was never written"));
            }
            if value & BUSY != 0 {
                return Ok(Claim::Busy);
            }
            // ACQUIRE (P3): pairs with the producer's RELEASE store in `end_amend`.
            match slot.compare_exchange_weak(value, CLAIMED, Acquire, Relaxed) {
                Ok(_) => break,
                Err(now) => value = now,
            }
        }
        self.tail = self.tail.wrapping_add(1);
        // RELEASE (P2): pairs with the producer's ACQUIRE load of `tail` in `push`.
        self.ring.ctl().tail.store(self.tail, Release);
        Ok(Claim::Value(value))
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn new_ring(cap: u32) -> (Box<RingControl>, Vec<AtomicU64>, Producer, Consumer) {
        let ctl = Box::new(RingControl::default());
        let slots: Vec<AtomicU64> = (0..cap).map(|_| AtomicU64::new(0)).collect();
        // SAFETY: ctl and slots are kept alive by the caller alongside the handles; one producer, one consumer.
        let (p, c) = unsafe { ring(&*ctl, slots.as_ptr(), cap) };
        (ctl, slots, p, c)
    }

    #[test]
    fn fifo_full_and_empty() {
        let (_c, _s, mut p, mut c) = new_ring(4);
        assert_eq!(c.pop(), Ok(None));
        for i in 0..4 {
            assert_eq!(p.push(i), Ok(true));
        }
        assert_eq!(p.push(9), Ok(false));
        for i in 0..4 {
            assert_eq!(c.pop(), Ok(Some(i)));
        }
        assert_eq!(c.pop(), Ok(None));
    }

    #[test]
    fn wraps_around_u32() {
        let (ctl, _s, mut p, mut c) = new_ring(2);
        p.head = u32::MAX - 1;
        c.tail = u32::MAX - 1;
        ctl.head.store(u32::MAX - 1, Relaxed);
        ctl.tail.store(u32::MAX - 1, Relaxed);
        for i in 0..10 {
            assert_eq!(p.push(i), Ok(true));
            assert_eq!(c.pop(), Ok(Some(i)));
        }
    }

    #[test]
    fn the_last_value_can_be_amended_until_claimed() {
        let (_c, _s, mut p, mut c) = new_ring(4);
        assert_eq!(c.claim(), Ok(Claim::Empty));
        assert_eq!(p.push(10), Ok(true));
        assert!(p.begin_amend(10));
        assert_eq!(c.claim(), Ok(Claim::Busy), "a slot being amended is not taken");
        p.end_amend(11);
        assert!(!p.begin_amend(10), "the expected value is the amended one");
        assert!(p.begin_amend(11));
        p.end_amend(12);
        assert_eq!(c.claim(), Ok(Claim::Value(12)));
        assert!(!p.begin_amend(12), "claimed: no more amendments");
        assert_eq!(c.claim(), Ok(Claim::Empty));
        assert_eq!(p.push(20), Ok(true));
        assert_eq!(c.claim(), Ok(Claim::Value(20)));
    }

    #[test]
    fn hostile_indices_are_refused() {
        let (ctl, _s, mut p, mut c) = new_ring(4);
        ctl.head.store(100, Relaxed); // a peer scribbled the producer's index
        assert!(c.pop().is_err());
        ctl.tail.store(50, Relaxed); // and the consumer's
        assert!(p.push(1).is_err());
    }
}
