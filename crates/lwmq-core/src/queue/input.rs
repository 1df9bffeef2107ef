//! Input queues: where application threads post messages for the encoder.
//! - `Producers::One`: one producer thread, unbounded, lock-free (crossbeam's SegQueue).
//! - `Producers::Many`: any number of threads, bounded by `capacity`, lock-free (crossbeam's ArrayQueue);
//!   `post` blocks (with a timeout) while full and fails with `QueueFull`, handing the message back.
//!
//! Neither side makes a system call unless a poster actually has to wait for room.

use crate::error::Error;
use crate::message::Message;
use crate::sync::Parker;
use crossbeam_queue::{ArrayQueue, SegQueue};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Producers {
    One,
    Many { capacity: usize },
}

enum Store {
    Unbounded(SegQueue<Message>),
    Bounded {
        items: ArrayQueue<Message>,
        /// Posters waiting for room park here; the consumer wakes them only if one is parked.
        room: Parker,
    },
}

pub struct InputQueue {
    store: Store,
    len: AtomicUsize,
    closed: AtomicBool,
    /// Set when the application dropped its handle: the scheduler forgets the queue once it is empty.
    detached: AtomicBool,
}

/// Why a post failed; the message is handed back so nothing is lost.
#[derive(Debug)]
pub struct PostError {
    pub error: Error,
    pub message: Message,
}

impl InputQueue {
    pub fn new(producers: Producers) -> Self {
        let store = match producers {
            Producers::One => Store::Unbounded(SegQueue::new()),
            Producers::Many { capacity } => Store::Bounded { items: ArrayQueue::new(capacity.max(1)), room: Parker::default() },
        };
        InputQueue { store, len: AtomicUsize::new(0), closed: AtomicBool::new(false), detached: AtomicBool::new(false) }
    }

    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends a message, waiting while a bounded queue is full (until `deadline`; `None` = forever).
    pub fn post(&self, message: Message, deadline: Option<Instant>) -> Result<(), PostError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(PostError { error: Error::ChannelClosed, message });
        }
        match &self.store {
            Store::Unbounded(q) => q.push(message),
            Store::Bounded { items, room } => {
                let mut pending = Some(message);
                let outcome = room.wait_until(deadline, || match items.push(pending.take().expect("message")) {
                    Ok(()) => Some(Ok(())),
                    Err(m) if self.closed.load(Ordering::Acquire) => Some(Err(PostError { error: Error::ChannelClosed, message: m })),
                    Err(m) => {
                        pending = Some(m);
                        None
                    }
                });
                match outcome {
                    Some(r) => r?,
                    None => return Err(PostError { error: Error::QueueFull, message: pending.expect("message") }),
                }
            }
        }
        self.len.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Takes the oldest message (the encoder's side).
    pub fn pop(&self) -> Option<Message> {
        let message = match &self.store {
            Store::Unbounded(q) => q.pop(),
            Store::Bounded { items, room } => {
                let m = items.pop();
                if m.is_some() {
                    room.notify();
                }
                m
            }
        }?;
        self.len.fetch_sub(1, Ordering::AcqRel);
        Some(message)
    }

    /// Refuses further posts and wakes posters blocked on a full queue.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        if let Store::Bounded { room, .. } = &self.store {
            room.notify();
        }
    }

    pub fn detach(&self) {
        self.detached.store(true, Ordering::Release);
    }

    pub fn is_detached(&self) -> bool {
        self.detached.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn m(i: u32) -> Message {
        Message::single(i.to_le_bytes().to_vec())
    }

    #[test]
    fn fifo_in_both_kinds() {
        for kind in [Producers::One, Producers::Many { capacity: 100 }] {
            let q = InputQueue::new(kind);
            (0..50).for_each(|i| q.post(m(i), None).unwrap());
            assert_eq!(q.len(), 50);
            for i in 0..50 {
                assert_eq!(q.pop(), Some(m(i)));
            }
            assert!(q.pop().is_none());
        }
    }

    #[test]
    fn bounded_full_times_out_and_hands_the_message_back() {
        let q = InputQueue::new(Producers::Many { capacity: 2 });
        q.post(m(1), None).unwrap();
        q.post(m(2), None).unwrap();
        let err = q.post(m(3), Some(Instant::now() + Duration::from_millis(20))).unwrap_err();
        assert_eq!(err.error, Error::QueueFull);
        assert_eq!(err.message, m(3));
    }

    #[test]
    fn bounded_post_resumes_when_space_frees() {
        let q = std::sync::Arc::new(InputQueue::new(Producers::Many { capacity: 1 }));
        q.post(m(1), None).unwrap();
        let q2 = q.clone();
        let t = std::thread::spawn(move || q2.post(m(2), Some(Instant::now() + Duration::from_secs(10))));
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(q.pop(), Some(m(1)));
        t.join().unwrap().unwrap();
        assert_eq!(q.pop(), Some(m(2)));
    }

    #[test]
    fn many_producers_keep_each_producers_order() {
        let q = std::sync::Arc::new(InputQueue::new(Producers::Many { capacity: 64 }));
        let producers: Vec<_> = (0..4u32)
            .map(|p| {
                let q = q.clone();
                std::thread::spawn(move || (0..1000u32).for_each(|i| q.post(m(p << 16 | i), None).unwrap()))
            })
            .collect();
        let mut next = [0u32; 4];
        let mut got = 0;
        while got < 4000 {
            if let Some(msg) = q.pop() {
                let v = u32::from_le_bytes(msg.frames()[0][..4].try_into().unwrap());
                let (p, i) = ((v >> 16) as usize, v & 0xffff);
                assert_eq!(i, next[p], "producer {p} out of order");
                next[p] += 1;
                got += 1;
            }
        }
        producers.into_iter().for_each(|t| t.join().unwrap());
    }

    #[test]
    fn closed_queue_refuses_posts() {
        let q = InputQueue::new(Producers::One);
        q.close();
        assert_eq!(q.post(m(1), None).unwrap_err().error, Error::ChannelClosed);
    }
}
