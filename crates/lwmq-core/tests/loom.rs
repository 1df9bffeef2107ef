//! Model checks of the lock-free protocols: `RUSTFLAGS="--cfg loom" cargo test -p lwmq-core --test loom --release`
//! (`make loom`). Loom explores every interleaving allowed by the memory model.
#![cfg(loom)]

use loom::sync::atomic::{AtomicU32, AtomicU64};
use loom::sync::Arc;
use loom::thread;
use lwmq_core::queue::spsc::{ring, RingControl};
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
