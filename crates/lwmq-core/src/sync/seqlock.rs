//! The bus's slot protocol: a sequence lock whose stamp also names the message a slot holds, so a reader
//! knows both whether the slot is whole and whether it is the message it wants (model-checked in
//! tests/loom.rs).
//!
//! Stamp of a slot holding sequence number `s`: `2s + 1` while it is written, `2s + 2` once whole; 0 for
//! a slot never written. A writer (one at a time: the bus's append lock) marks the slot odd, writes, then
//! marks it even. A reader reads the stamp, copies, and re-reads it: the copy is good only if both reads
//! were the even stamp of the sequence it wanted. Because stamps only grow, a stamp above the wanted one
//! means the slot was reused for a later lap: the reader was overrun.

use super::{fence, AtomicU64};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};

/// The stamp of a whole slot holding `seq`.
pub const fn whole(seq: u64) -> u64 {
    seq.wrapping_mul(2).wrapping_add(2)
}

/// Writes one slot for `seq`: `write` fills it between the odd and the even stamp.
pub fn write(stamp: &AtomicU64, seq: u64, write: impl FnOnce()) {
    stamp.store(whole(seq) - 1, Relaxed);
    // RELEASE fence (pair S1 with the ACQUIRE fence in `read`): a reader that sees any byte written below
    // also sees the odd stamp on its second read.
    fence(Release);
    write();
    // RELEASE (pair S2 with the ACQUIRE load in `read`): the slot's bytes before its even stamp.
    stamp.store(whole(seq), Release);
}

/// What a reader found in the slot it expected to hold `seq`.
#[derive(Debug, PartialEq, Eq)]
pub enum Read<T> {
    /// The whole message, copied while it could not change.
    Whole(T),
    /// Not (yet) whole for `seq`: the stamp is older, or `seq` is being written.
    NotYet,
    /// Overwritten by a later lap (or being overwritten): `seq` is gone.
    Overrun,
}

/// Reads the slot expected to hold `seq`; `copy` takes what it needs. `copy` may see torn bytes when the
/// slot is being overwritten: its result is then thrown away, so it must not trust what it read (bounds
/// are checked, nothing is followed).
pub fn read<T>(stamp: &AtomicU64, seq: u64, copy: impl FnOnce() -> T) -> Read<T> {
    let want = whole(seq);
    // ACQUIRE (pair S2 with the RELEASE store in `write`).
    let before = stamp.load(Acquire);
    if before < want {
        return Read::NotYet; // older, or being written for `seq` right now
    }
    if before != want {
        return Read::Overrun;
    }
    let value = copy();
    // ACQUIRE fence (pair S1 with the RELEASE fence in `write`): orders the copy before the re-read.
    fence(Acquire);
    if stamp.load(Relaxed) == want {
        Read::Whole(value)
    } else {
        Read::Overrun
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn stamps_tell_not_yet_whole_and_overrun() {
        let stamp = AtomicU64::new(0);
        assert_eq!(read(&stamp, 0, || 1), Read::NotYet);
        write(&stamp, 0, || {});
        assert_eq!(read(&stamp, 0, || 7), Read::Whole(7));
        assert_eq!(read(&stamp, 4, || 7), Read::NotYet);
        write(&stamp, 4, || {});
        assert_eq!(read(&stamp, 0, || 7), Read::Overrun);
        stamp.store(whole(8) - 1, Relaxed); // a writer of seq 8 in progress
        assert_eq!(read(&stamp, 8, || 7), Read::NotYet);
        assert_eq!(read(&stamp, 4, || 7), Read::Overrun);
    }
}
