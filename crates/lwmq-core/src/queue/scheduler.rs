//! The scheduler picks which input queue the encoder takes its next message from:
//! - priority groups are served by smooth weighted round-robin (nginx's algorithm): over any stretch in
//!   which the same groups have messages, group shares equal their weights, interleaved rather than bursty;
//! - queues of one group are served round-robin;
//! - each queue is FIFO.

use super::input::InputQueue;
use crate::message::Message;
use std::sync::Arc;

struct Group {
    name: String,
    weight: i64,
    current: i64,
    queues: Vec<Arc<InputQueue>>,
    next_queue: usize,
}

impl Group {
    fn has_messages(&self) -> bool {
        self.queues.iter().any(|q| !q.is_empty())
    }

    fn pop_round_robin(&mut self) -> Option<Message> {
        let n = self.queues.len();
        for k in 0..n {
            let i = (self.next_queue + k) % n;
            if let Some(m) = self.queues[i].pop() {
                self.next_queue = (i + 1) % n;
                return Some(m);
            }
        }
        None
    }
}

pub struct Scheduler {
    groups: Vec<Group>,
}

impl Scheduler {
    /// Groups and their weights (each at least 1), e.g. high: 8, normal: 4, low: 1.
    pub fn new(priorities: &[(String, u32)]) -> Self {
        let groups = priorities
            .iter()
            .map(|(name, w)| Group { name: name.clone(), weight: (*w).max(1) as i64, current: 0, queues: Vec::new(), next_queue: 0 })
            .collect();
        Scheduler { groups }
    }

    pub fn group_names(&self) -> impl Iterator<Item = &str> {
        self.groups.iter().map(|g| g.name.as_str())
    }

    /// Adds a queue to a group; `None` if no group has that name.
    pub fn add_queue(&mut self, group: &str, queue: Arc<InputQueue>) -> Option<()> {
        let g = self.groups.iter_mut().find(|g| g.name == group)?;
        g.queues.push(queue);
        Some(())
    }

    /// Messages waiting in all queues.
    pub fn queued(&self) -> usize {
        self.groups.iter().flat_map(|g| &g.queues).map(|q| q.len()).sum()
    }

    /// The next message to encode, or `None` when every queue is empty.
    pub fn next_message(&mut self) -> Option<Message> {
        loop {
            let mut total = 0;
            let mut best: Option<usize> = None;
            for i in 0..self.groups.len() {
                let g = &mut self.groups[i];
                if !g.has_messages() {
                    continue;
                }
                g.current += g.weight;
                total += g.weight;
                let current = g.current;
                if best.is_none_or(|b| current > self.groups[b].current) {
                    best = Some(i);
                }
            }
            let b = best?;
            self.groups[b].current -= total;
            if let Some(m) = self.groups[b].pop_round_robin() {
                return Some(m);
            }
            // The group emptied between the check and the pop (another consumer cannot exist, but a
            // queue may have been detached); look again.
            self.forget_detached();
        }
    }

    /// Closes every queue: posts are refused from now on.
    pub fn close_all(&self) {
        self.groups.iter().flat_map(|g| &g.queues).for_each(|q| q.close());
    }

    /// Drops queues whose handle is gone and that have nothing left to send.
    pub fn forget_detached(&mut self) {
        for g in &mut self.groups {
            g.queues.retain(|q| !(q.is_detached() && q.is_empty()));
            if g.next_queue >= g.queues.len() {
                g.next_queue = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::input::Producers;

    fn tagged(tag: u8, i: u32) -> Message {
        Message::single([&[tag][..], &i.to_le_bytes()].concat())
    }

    fn setup(weights: &[(&str, u32)]) -> Scheduler {
        Scheduler::new(&weights.iter().map(|(n, w)| (n.to_string(), *w)).collect::<Vec<_>>())
    }

    #[test]
    fn weights_give_exact_shares_when_all_backlogged() {
        let mut s = setup(&[("high", 8), ("normal", 4), ("low", 1)]);
        for (tag, g) in [(0u8, "high"), (1, "normal"), (2, "low")] {
            let q = Arc::new(InputQueue::new(Producers::One));
            (0..10_000).for_each(|i| q.post(tagged(tag, i), None).unwrap());
            s.add_queue(g, q).unwrap();
        }
        let mut counts = [0usize; 3];
        for _ in 0..1300 {
            counts[s.next_message().unwrap().frames()[0][0] as usize] += 1;
        }
        assert_eq!(counts, [800, 400, 100]);
    }

    #[test]
    fn order_kept_per_queue_and_round_robin_within_a_group() {
        let mut s = setup(&[("normal", 1)]);
        let queues: Vec<_> = (0..3u8)
            .map(|tag| {
                let q = Arc::new(InputQueue::new(Producers::One));
                (0..5).for_each(|i| q.post(tagged(tag, i), None).unwrap());
                s.add_queue("normal", q.clone()).unwrap();
                q
            })
            .collect();
        let picks: Vec<(u8, u32)> = std::iter::from_fn(|| s.next_message())
            .map(|m| (m.frames()[0][0], u32::from_le_bytes(m.frames()[0][1..5].try_into().unwrap())))
            .collect();
        assert_eq!(picks.len(), 15);
        // round-robin: tags cycle 0,1,2,0,1,2...; FIFO: each tag's counters ascend.
        for (k, (tag, i)) in picks.iter().enumerate() {
            assert_eq!(*tag as usize, k % 3);
            assert_eq!(*i as usize, k / 3);
        }
        assert!(queues.iter().all(|q| q.is_empty()));
    }

    #[test]
    fn an_idle_group_does_not_bank_credit() {
        let mut s = setup(&[("high", 8), ("low", 1)]);
        let high = Arc::new(InputQueue::new(Producers::One));
        let low = Arc::new(InputQueue::new(Producers::One));
        s.add_queue("high", high.clone()).unwrap();
        s.add_queue("low", low.clone()).unwrap();
        (0..100).for_each(|i| low.post(tagged(1, i), None).unwrap());
        for _ in 0..50 {
            s.next_message().unwrap();
        }
        (0..100).for_each(|i| high.post(tagged(0, i), None).unwrap());
        let first9: Vec<u8> = (0..9).map(|_| s.next_message().unwrap().frames()[0][0]).collect();
        assert_eq!(first9.iter().filter(|t| **t == 0).count(), 8);
    }

    #[test]
    fn detached_queues_are_forgotten_once_empty() {
        let mut s = setup(&[("normal", 1)]);
        let q = Arc::new(InputQueue::new(Producers::One));
        q.post(tagged(0, 0), None).unwrap();
        s.add_queue("normal", q.clone()).unwrap();
        q.detach();
        assert!(s.next_message().is_some(), "a detached queue still delivers what it holds");
        s.forget_detached();
        assert_eq!(s.groups[0].queues.len(), 0);
        assert!(s.add_queue("nope", q).is_none());
    }
}
