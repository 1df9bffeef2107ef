//! Model checks of the lock-free protocols: `RUSTFLAGS="--cfg loom" cargo test -p lwmq-core --test loom --release`
//! (`make loom`). Loom explores every interleaving allowed by the memory model.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU32, AtomicU64};
use loom::sync::Arc;
use loom::thread;
use lwmq_core::queue::spsc::{ring, Claim, RingControl};
use lwmq_core::sync::{WaitPolicy, WaitWord};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::time::Duration;

struct Ring {
    ctl: RingControl,
    slots: Vec<AtomicU64>,
}

fn new_ring(cap: u32) -> Arc<Ring> {
    Arc::new(Ring { ctl: RingControl::new(), slots: (0..cap).map(|_| AtomicU64::new(0)).collect() })
}

/// Values cross a ring of capacity 2 in order, none lost or duplicated, with the ring wrapping and full.
#[test]
fn spsc_ring_delivers_in_order() {
    loom::model(|| {
        let r = new_ring(2);
        // SAFETY: the Arc keeps ctl and slots alive for both handles; one producer, one consumer.
        let (mut p, mut c) = unsafe { ring(&r.ctl, r.slots.as_ptr(), 2) };
        let keep = r.clone();
        let producer = thread::spawn(move || {
            let _keep = keep;
            for v in 1..=3u64 {
                while !p.push(v).unwrap() {
                    thread::yield_now();
                }
            }
        });
        let mut got = Vec::new();
        while got.len() < 3 {
            match c.pop().unwrap() {
                Some(v) => got.push(v),
                None => thread::yield_now(),
            }
        }
        producer.join().unwrap();
        assert_eq!(got, vec![1, 2, 3]);
    });
}

/// Data written before a push is visible after the matching pop (the ring's Release/Acquire pair P1),
/// which is what makes a shipped buffer's bytes visible to the receiver.
#[test]
fn spsc_ring_publishes_payload() {
    loom::model(|| {
        let r = new_ring(2);
        let payload = Arc::new(AtomicU32::new(0));
        // SAFETY: as above.
        let (mut p, mut c) = unsafe { ring(&r.ctl, r.slots.as_ptr(), 2) };
        let (keep, pay) = (r.clone(), payload.clone());
        let producer = thread::spawn(move || {
            let _keep = keep;
            pay.store(42, Relaxed);
            assert!(p.push(0).unwrap());
        });
        loop {
            if c.pop().unwrap().is_some() {
                assert_eq!(payload.load(Relaxed), 42);
                break;
            }
            thread::yield_now();
        }
        producer.join().unwrap();
    });
}

/// A value amended after its push (a shipped buffer that grew) is claimed either as pushed or as amended,
/// never while half-amended: exactly one of `begin_amend` and `claim` wins the slot, and what the producer
/// wrote while amending is visible with the amended value (pair P3).
#[test]
fn spsc_ring_amended_values_are_claimed_whole() {
    loom::model(|| {
        let r = new_ring(2);
        let data = Arc::new([AtomicU32::new(0), AtomicU32::new(0)]);
        // SAFETY: the Arc keeps ctl and slots alive for both handles; one producer, one consumer.
        let (mut p, mut c) = unsafe { ring(&r.ctl, r.slots.as_ptr(), 2) };
        let (keep, written) = (r.clone(), data.clone());
        let producer = thread::spawn(move || {
            let _keep = keep;
            written[0].store(1, Relaxed);
            assert!(p.push(1).unwrap());
            if !p.begin_amend(1) {
                return false;
            }
            written[1].store(2, Relaxed);
            p.end_amend(2);
            true
        });
        let claimed = loop {
            match c.claim().unwrap() {
                Claim::Value(v) => break v,
                Claim::Empty | Claim::Busy => thread::yield_now(),
            }
        };
        assert_eq!(data[0].load(Relaxed), 1);
        if claimed == 2 {
            assert_eq!(data[1].load(Relaxed), 2);
        }
        let amended = producer.join().unwrap();
        assert_eq!(claimed, if amended { 2 } else { 1 });
    });
}

/// No lost wake-up: a waiter that finds nothing and sleeps is always woken by a notifier that publishes
/// afterwards (a lost wake-up would leave the waiter spinning forever, which loom reports).
#[test]
fn wait_word_never_loses_a_wakeup() {
    loom::model(|| {
        let word = Arc::new(WaitWord::new());
        let flag = Arc::new(AtomicU32::new(0));
        let (w2, f2) = (word.clone(), flag.clone());
        let notifier = thread::spawn(move || {
            f2.store(1, Release);
            w2.notify();
        });
        let policy = WaitPolicy { spin: Duration::ZERO, busy_poll: false };
        let got = word.wait_for(policy, None, || (flag.load(Acquire) == 1).then_some(()));
        assert!(got.is_some());
        notifier.join().unwrap();
    });
}

/// Parker: a waiter whose condition is made true by another thread always wakes (a missed notify leaves
/// it blocked in the condvar, which loom reports as a deadlock).
#[test]
fn parker_never_misses_a_notify() {
    use lwmq_core::sync::Parker;
    loom::model(|| {
        let parker = Arc::new(Parker::new());
        let flag = Arc::new(AtomicU32::new(0));
        let (p2, f2) = (parker.clone(), flag.clone());
        let notifier = thread::spawn(move || {
            f2.store(1, Relaxed);
            p2.notify();
        });
        assert_eq!(parker.wait_until(None, || (flag.load(Relaxed) == 1).then_some(7)), Some(7));
        notifier.join().unwrap();
    });
}

/// Combiner: every `run` call is followed by a complete run of the work, by whichever thread holds the
/// state: two threads each add an item and call `run`; at the end nothing is left unprocessed.
#[test]
fn combiner_leaves_no_item_behind() {
    use lwmq_core::sync::Combiner;
    loom::model(|| {
        let queued = Arc::new(AtomicU32::new(0));
        let combiner = Arc::new(Combiner::new(0u32)); // state: items processed
        let worker = |queued: Arc<AtomicU32>, combiner: Arc<Combiner<u32>>| {
            move || {
                queued.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                combiner.run(|done| {
                    *done += queued.swap(0, std::sync::atomic::Ordering::SeqCst);
                    true
                });
            }
        };
        let t1 = thread::spawn(worker(queued.clone(), combiner.clone()));
        let t2 = thread::spawn(worker(queued.clone(), combiner.clone()));
        t1.join().unwrap();
        t2.join().unwrap();
        assert_eq!(queued.load(std::sync::atomic::Ordering::SeqCst), 0, "an item was posted and never processed");
        assert_eq!(*combiner.lock(), 2);
    });
}

/// A blocking holder (`run_locked`, the flusher) honours notes left while it held the state, just as a
/// `run` caller does.
#[test]
fn combiner_blocking_holder_honours_notes() {
    use lwmq_core::sync::Combiner;
    use std::sync::atomic::Ordering::SeqCst;
    loom::model(|| {
        let queued = Arc::new(AtomicU32::new(0));
        let combiner = Arc::new(Combiner::new(0u32));
        let (q2, c2) = (queued.clone(), combiner.clone());
        let poster = thread::spawn(move || {
            q2.fetch_add(1, SeqCst);
            c2.run(|done| {
                *done += q2.swap(0, SeqCst);
                true
            });
        });
        queued.fetch_add(1, SeqCst);
        combiner.run_locked(|done| {
            *done += queued.swap(0, SeqCst);
            true
        });
        poster.join().unwrap();
        assert_eq!(queued.load(SeqCst), 0, "an item was posted and never processed");
    });
}

/// The bus's slot sequence lock: a reader that accepts a copy never has a torn one, and it accepts only
/// the sequence it asked for. The writer rewrites one slot for sequences 0 then 1 (a lap of capacity 1).
#[test]
fn seqlock_never_accepts_a_torn_or_wrong_slot() {
    use lwmq_core::sync::seqlock::{self, Read};
    loom::model(|| {
        let slot = Arc::new((AtomicU64::new(0), AtomicU64::new(u64::MAX), AtomicU64::new(u64::MAX)));
        let w = slot.clone();
        let writer = thread::spawn(move || {
            for seq in 0..2u64 {
                seqlock::write(&w.0, seq, || {
                    w.1.store(seq, Relaxed);
                    w.2.store(seq, Relaxed);
                });
            }
        });
        for want in 0..2u64 {
            match seqlock::read(&slot.0, want, || (slot.1.load(Relaxed), slot.2.load(Relaxed))) {
                Read::Whole((a, b)) => assert_eq!((a, b), (want, want), "torn or wrong copy accepted"),
                Read::NotYet | Read::Overrun => {}
            }
        }
        writer.join().unwrap();
    });
}
