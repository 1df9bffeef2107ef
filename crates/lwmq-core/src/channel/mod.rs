//! A channel: the message-queuing layer over one link.
//!
//! Send side: input queues → scheduler (WRR) → encoder → transport buffers. Whoever posts a message
//! tries to run the encoder at once (no hand-off to another thread when a buffer is free, so an idle
//! channel ships a lone message immediately). If no buffer is free, the message stays queued and the
//! channel's flusher thread (started on first need) waits for a buffer and ships everything queued by
//! then, clubbed. The encoder never waits for more messages: a buffer ships when full or when the queues
//! are drained.
//!
//! Receive side: received buffer → decoder → output queue → `recv`.

use crate::error::{Error, Result};
use crate::message::Message;
use crate::queue::input::{InputQueue, PostError, Producers};
use crate::queue::scheduler::Scheduler;
use crate::sync::{no_wait, Combiner, Deadline, Parker};
use crate::transport::{Link, Options, TxBuf};
use crate::wire::{self, BufferWriter};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the flusher waits for a buffer before re-checking whether it should stop.
const FLUSH_SLICE: Duration = Duration::from_millis(50);

#[derive(Default)]
struct Counters {
    messages_sent: AtomicU64,
    bytes_sent: AtomicU64,
    buffers_sent: AtomicU64,
    max_clubbed: AtomicU64,
    buffer_waits: AtomicU64,
    messages_received: AtomicU64,
    bytes_received: AtomicU64,
    buffers_received: AtomicU64,
    unsent_at_close: AtomicU64,
    copied_out: AtomicU64,
    appended: AtomicU64,
    /// Accepted by a queue and not yet shipped (includes the carried message).
    queued: AtomicU64,
}

/// A snapshot of a channel's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub messages_sent: u64,
    pub bytes_sent: u64,
    pub buffers_sent: u64,
    /// Most messages clubbed into one buffer.
    pub max_clubbed: u64,
    /// Times the encoder found no free buffer and left messages queued.
    pub buffer_waits: u64,
    pub messages_received: u64,
    pub bytes_received: u64,
    pub buffers_received: u64,
    /// Messages waiting in input queues now.
    pub queued: u64,
    /// Messages still queued when the channel closed (the peer was gone or `linger` ran out).
    pub unsent_at_close: u64,
    /// Received buffers whose messages were copied out because the application held 3/4 of the pool.
    pub copied_out: u64,
    /// Messages added to a buffer already shipped that the peer had not taken yet (clubbed without waiting).
    pub appended: u64,
}

struct TxState {
    scheduler: Scheduler,
    /// A message taken from its queue that did not fit the last buffer; it goes first into the next one.
    carry: Option<Message>,
    /// Buffers acquired but not used (queues empty after all, a loan given back); used first next time.
    spare: Vec<TxBuf>,
}

struct RxState {
    out: VecDeque<Message>,
}

struct Shared {
    link: Box<dyn Link>,
    buffer_size: usize,
    /// The encoder's state; a poster that finds it busy leaves the run to its holder.
    tx: Combiner<TxState>,
    /// The flusher's doorbell: messages are queued and no buffer was free. Waking the flusher costs a
    /// system call only while it is parked, so a busy channel does not pay for it on every post.
    backlog: AtomicBool,
    doorbell: Parker,
    stop: AtomicBool,
    closed: AtomicBool,
    /// First fatal error (peer gone, protocol error); every later call reports it.
    failure: Mutex<Option<Error>>,
    has_failed: AtomicBool,
    rx: Mutex<RxState>,
    counters: Counters,
    /// Started on first need (no free buffer), joined by `close`.
    flusher: Mutex<Option<JoinHandle<()>>>,
}

pub struct Channel {
    shared: Arc<Shared>,
    default_queue: Arc<InputQueue>,
    linger: Duration,
}

impl Shared {
    fn failed(&self) -> Option<Error> {
        if !self.has_failed.load(Acquire) {
            return None;
        }
        self.failure.lock().unwrap().clone()
    }

    fn fail(&self, e: &Error) {
        if matches!(e, Error::PeerGone(_) | Error::Protocol(_)) {
            let mut failure = self.failure.lock().unwrap();
            if failure.is_none() {
                *failure = Some(e.clone());
                self.has_failed.store(true, Release);
            }
            drop(failure);
            if matches!(e, Error::Protocol(_)) {
                // A malformed peer: tear the channel down.
                self.link.close();
            }
        }
    }

    /// Encodes and ships queued messages until the queues are drained or no buffer comes by `deadline`.
    /// Returns whether messages are still queued.
    fn drain(&self, tx: &mut TxState, deadline: Deadline) -> Result<bool> {
        if tx.carry.is_some() || tx.scheduler.queued() != 0 {
            self.append_queued(tx)?;
        }
        loop {
            if tx.carry.is_none() && tx.scheduler.queued() == 0 {
                return Ok(false);
            }
            // Take a buffer before taking messages out of their queues, so a bounded queue stays exactly
            // as full as it looks while the transport is busy.
            let mut buf = match tx.spare.pop() {
                Some(buf) => buf,
                None => match self.link.acquire(deadline) {
                    Ok(buf) => buf,
                    Err(Error::Timeout(_)) => return Ok(true),
                    Err(e) => return Err(e),
                },
            };
            let mut writer = BufferWriter::new(buf.as_mut_slice());
            let (clubbed, bytes) = push_queued(tx, &mut writer);
            if clubbed == 0 {
                debug_assert!(tx.carry.is_none(), "post checks that every message fits an empty buffer");
                tx.spare.push(buf);
                return Ok(false);
            }
            let len = writer.finish();
            self.counters.queued.fetch_sub(clubbed, Relaxed);
            self.ship_counted(buf, len, clubbed, bytes)?;
        }
    }

    /// Adds queued messages to the buffer shipped last while the peer has not taken it (see
    /// `Link::append`), in scheduler order; a message that does not fit is carried to the next buffer.
    fn append_queued(&self, tx: &mut TxState) -> Result<()> {
        let (mut messages, mut bytes) = (0u64, 0usize);
        self.link.append(&mut |w| (messages, bytes) = push_queued(tx, w))?;
        if messages > 0 {
            self.counters.queued.fetch_sub(messages, Relaxed);
            self.count_appended(messages, bytes);
        }
        Ok(())
    }

    fn count_appended(&self, messages: u64, bytes: usize) {
        let c = &self.counters;
        c.messages_sent.fetch_add(messages, Relaxed);
        c.bytes_sent.fetch_add(bytes as u64, Relaxed);
        c.appended.fetch_add(messages, Relaxed);
    }

    /// Ships a filled buffer, counting it first so stats never lag what the peer already received.
    fn ship_counted(&self, buf: TxBuf, len: usize, messages: u64, bytes: usize) -> Result<()> {
        let c = &self.counters;
        c.messages_sent.fetch_add(messages, Relaxed);
        c.bytes_sent.fetch_add(bytes as u64, Relaxed);
        c.buffers_sent.fetch_add(1, Relaxed);
        c.max_clubbed.fetch_max(messages, Relaxed);
        self.link.ship(buf, len).inspect_err(|_| {
            c.messages_sent.fetch_sub(messages, Relaxed);
            c.bytes_sent.fetch_sub(bytes as u64, Relaxed);
            c.buffers_sent.fetch_sub(1, Relaxed);
        })
    }

    fn ring_flusher(&self) {
        if !self.backlog.swap(true, SeqCst) {
            self.doorbell.notify();
        }
    }

    /// Runs the encoder if no one else is; otherwise leaves the run to whoever is.
    fn pump(self: &Arc<Self>) -> Result<()> {
        let shared = self;
        let mut outcome = Ok(());
        shared.tx.run(|tx| match shared.drain(tx, no_wait()) {
            Ok(false) => true,
            Ok(true) => {
                // No free buffer: the flusher ships the rest as buffers come back.
                shared.counters.buffer_waits.fetch_add(1, Relaxed);
                self.start_flusher();
                shared.ring_flusher();
                false
            }
            Err(e) => {
                shared.fail(&e);
                outcome = Err(e);
                false
            }
        });
        outcome
    }

    fn start_flusher(self: &Arc<Self>) {
        let mut flusher = self.flusher.lock().unwrap();
        if flusher.is_none() && !self.stop.load(Acquire) {
            let shared = self.clone();
            let handle = std::thread::Builder::new()
                .name("lwmq-flusher".into())
                .stack_size(256 * 1024)
                .spawn(move || shared.flusher())
                .expect("spawning the flusher thread");
            *flusher = Some(handle);
        }
    }

    /// Short work on the encoder's state that must wait for it (adding a queue, taking a buffer back);
    /// then the runs asked for meanwhile.
    fn with_tx<R>(self: &Arc<Self>, f: impl FnOnce(&mut TxState) -> R) -> R {
        let mut tx = self.tx.lock();
        let result = f(&mut tx);
        drop(tx);
        if self.tx.must_rerun() {
            let _ = self.pump(); // a failure is recorded by `fail` and reported to the next caller
        }
        result
    }

    /// The flusher thread: ships backlogged messages as buffers come free.
    fn flusher(self: Arc<Self>) {
        loop {
            self.doorbell.wait_until(None, || (self.backlog.swap(false, SeqCst) || self.stop.load(Acquire)).then_some(()));
            if self.stop.load(Acquire) {
                return;
            }
            while !self.stop.load(Acquire) {
                let (mut backlogged, mut failed) = (false, false);
                self.tx.run_locked(|tx| match self.drain(tx, Some(Instant::now() + FLUSH_SLICE)) {
                    Ok(more) => {
                        backlogged = more;
                        true
                    }
                    Err(e) => {
                        self.fail(&e);
                        failed = true;
                        false
                    }
                });
                if failed || !backlogged {
                    break;
                }
            }
        }
    }
}

impl Channel {
    pub fn new(link: Box<dyn Link>, options: &Options) -> Result<Channel> {
        options.validate()?;
        let mut scheduler = Scheduler::new(&options.priorities);
        let default_queue = Arc::new(InputQueue::new(Producers::Many { capacity: options.send_hwm }));
        scheduler.add_queue(options.default_group(), default_queue.clone()).expect("default group exists");
        let shared = Arc::new(Shared {
            buffer_size: link.send_buffer_size(),
            link,
            tx: Combiner::new(TxState { scheduler, carry: None, spare: Vec::new() }),
            backlog: AtomicBool::new(false),
            doorbell: Parker::default(),
            stop: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            failure: Mutex::new(None),
            has_failed: AtomicBool::new(false),
            rx: Mutex::new(RxState { out: VecDeque::new() }),
            counters: Counters::default(),
            flusher: Mutex::new(None),
        });
        Ok(Channel { shared, default_queue, linger: options.linger })
    }

    /// Bytes per transport buffer on our sending side (a message must fit one).
    pub fn buffer_size(&self) -> usize {
        self.shared.buffer_size
    }

    pub fn max_message_size(&self) -> usize {
        wire::max_message_len(self.shared.buffer_size)
    }

    pub fn peer(&self) -> String {
        self.shared.link.peer()
    }

    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Acquire)
    }

    fn usable(&self) -> Result<()> {
        if self.shared.closed.load(Acquire) {
            return Err(Error::ChannelClosed);
        }
        match self.shared.failed() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// A new input queue in priority group `group`.
    pub fn queue(&self, group: &str, producers: Producers) -> Result<Arc<InputQueue>> {
        self.usable()?;
        let queue = Arc::new(InputQueue::new(producers));
        self.shared.with_tx(|tx| {
            tx.scheduler.forget_detached();
            if tx.scheduler.add_queue(group, queue.clone()).is_none() {
                let known: Vec<&str> = tx.scheduler.group_names().collect();
                return Err(Error::InvalidOption(format!("no priority group {group:?} (this channel has {known:?})")));
            }
            Ok(())
        })?;
        Ok(queue)
    }

    /// Posts to one of this channel's queues; the message is handed back on failure.
    pub fn post(&self, queue: &InputQueue, message: Message, deadline: Deadline) -> Result<(), PostError> {
        if let Err(error) = self.usable().and_then(|_| wire::check_postable(&message, self.shared.buffer_size)) {
            return Err(PostError { error, message });
        }
        self.enqueue(queue, message, deadline)?;
        self.shared.pump().map_err(|error| PostError { error, message: Message::default() })
    }

    /// Posts to the default queue (bounded by `send_hwm`): waits only while that queue is full, which
    /// happens only while the transport has no free buffer.
    pub fn send(&self, message: Message, deadline: Deadline) -> Result<(), PostError> {
        self.post(&self.default_queue, message, deadline)
    }

    /// Sends many messages, clubbed: all are checked first, so none is sent if one is too large.
    /// Returns how many were queued when an error stops it (the rest are not sent).
    pub fn send_many(&self, messages: Vec<Message>, deadline: Deadline) -> Result<(), (Error, usize)> {
        self.usable().map_err(|e| (e, 0))?;
        for m in &messages {
            wire::check_postable(m, self.shared.buffer_size).map_err(|e| (e, 0))?;
        }
        for (n, m) in messages.into_iter().enumerate() {
            if let Err(full) = self.enqueue(&self.default_queue, m, no_wait()) {
                if full.error != Error::QueueFull {
                    return Err((full.error, n));
                }
                self.shared.pump().map_err(|e| (e, n))?;
                self.enqueue(&self.default_queue, full.message, deadline).map_err(|e| (e.error, n))?;
            }
        }
        self.shared.pump().map_err(|e| (e, 0))
    }

    fn enqueue(&self, queue: &InputQueue, message: Message, deadline: Deadline) -> Result<(), PostError> {
        // Counted before the post so a concurrent ship never subtracts it first.
        let queued = &self.shared.counters.queued;
        queued.fetch_add(1, Relaxed);
        queue.post(message, deadline).inspect_err(|_| {
            queued.fetch_sub(1, Relaxed);
        })
    }

    /// Sends messages given as borrowed frames straight into free transport buffers, without building
    /// Messages first (one copy instead of two, no allocation), as long as nothing is queued ahead of
    /// them and a buffer is free now. Returns how many of `messages` were sent; the caller posts the rest
    /// the usual way. Every message is checked first, so none is sent if one is too large.
    pub fn send_direct<F: AsRef<[u8]>>(&self, messages: &[&[F]]) -> Result<usize> {
        self.usable()?;
        let shared = &self.shared;
        for m in messages {
            wire::check_frames(m, shared.buffer_size)?;
        }
        let Some(mut tx) = shared.tx.try_enter() else { return Ok(0) };
        let mut sent = 0;
        let mut outcome = Ok(());
        // `queued` counts every accepted, unshipped message (the carried one too), so 0 means nothing is
        // ahead of us; one atomic load instead of a scan of every queue.
        if shared.counters.queued.load(Acquire) == 0 {
            // First into the buffer shipped last, if the peer has not taken it yet.
            let mut bytes = 0;
            if let Err(e) = shared.link.append(&mut |w| bytes = push_given(w, messages, &mut sent)) {
                outcome = Err(e);
            } else if sent > 0 {
                shared.count_appended(sent as u64, bytes);
            }
            while outcome.is_ok() && sent < messages.len() {
                let mut buf = match tx.spare.pop().map(Ok).unwrap_or_else(|| shared.link.acquire(no_wait())) {
                    Ok(buf) => buf,
                    Err(Error::Timeout(_)) => break,
                    Err(e) => {
                        outcome = Err(e);
                        break;
                    }
                };
                let mut writer = BufferWriter::new(buf.as_mut_slice());
                let bytes = push_given(&mut writer, messages, &mut sent);
                let clubbed = writer.message_count() as u64;
                let len = writer.finish();
                if let Err(e) = shared.ship_counted(buf, len, clubbed, bytes) {
                    outcome = Err(e);
                    break;
                }
            }
        }
        drop(tx);
        if let Err(e) = outcome {
            shared.fail(&e);
            return Err(e);
        }
        if shared.tx.must_rerun() {
            shared.pump()?;
        }
        Ok(sent)
    }

    /// Lends a transport buffer for a one-frame message of up to `nbytes` written in place (zero-copy
    /// send). Messages this channel already queued are shipped first, so one thread's order holds.
    pub fn loan(&self, nbytes: usize, deadline: Deadline) -> Result<Loan> {
        self.check_loan(nbytes)?;
        self.loan_entered(self.shared.tx.lock(), nbytes, deadline)
    }

    /// `loan` without waiting at all, not even for the encoder's state (the flusher may hold it while it
    /// waits for a buffer): `None` when a buffer is not free at once.
    pub fn try_loan(&self, nbytes: usize) -> Result<Option<Loan>> {
        self.check_loan(nbytes)?;
        let Some(tx) = self.shared.tx.try_enter() else { return Ok(None) };
        match self.loan_entered(tx, nbytes, no_wait()) {
            Ok(loan) => Ok(Some(loan)),
            Err(Error::Timeout(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn check_loan(&self, nbytes: usize) -> Result<()> {
        self.usable()?;
        if nbytes > wire::max_loan(self.shared.buffer_size) {
            return Err(Error::MessageTooLarge { size: nbytes + wire::LOAN_OFFSET - wire::HEADER_LEN, max: self.max_message_size() });
        }
        Ok(())
    }

    /// The rest of `loan`, holding the encoder's state.
    fn loan_entered(&self, mut tx: crate::sync::MutexGuard<'_, TxState>, nbytes: usize, deadline: Deadline) -> Result<Loan> {
        let shared = &self.shared;
        match shared.drain(&mut tx, deadline) {
            Ok(false) => {}
            Ok(true) => return Err(Error::Timeout("queued messages still waiting for buffers".into())),
            Err(e) => {
                shared.fail(&e);
                return Err(e);
            }
        }
        let buf = match tx.spare.pop() {
            Some(buf) => Ok(buf),
            None => shared.link.acquire(deadline),
        };
        drop(tx);
        if shared.tx.must_rerun() {
            shared.pump()?; // someone posted while we held the encoder
        }
        Ok(Loan { shared: shared.clone(), buf: Some(buf?), len: nbytes })
    }

    /// The next message, waiting until `deadline`.
    pub fn recv(&self, deadline: Deadline) -> Result<Message> {
        let mut rx = self.shared.rx.lock().unwrap();
        if let Some(m) = rx.out.pop_front() {
            return Ok(m);
        }
        self.fill(&mut rx, deadline)?;
        Ok(rx.out.pop_front().expect("a decoded buffer holds at least one message"))
    }

    /// A message if one is there now; `None` otherwise (also while another thread is receiving).
    pub fn try_recv(&self) -> Result<Option<Message>> {
        let Ok(mut rx) = self.shared.rx.try_lock() else { return Ok(None) };
        if let Some(m) = rx.out.pop_front() {
            return Ok(Some(m));
        }
        match self.fill(&mut rx, no_wait()) {
            Ok(()) => Ok(rx.out.pop_front()),
            Err(Error::Timeout(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Up to `max` messages: waits until `deadline` for the first, then takes what is there.
    pub fn recv_many(&self, max: usize, deadline: Deadline) -> Result<Vec<Message>> {
        let mut rx = self.shared.rx.lock().unwrap();
        if rx.out.is_empty() {
            match self.fill(&mut rx, deadline) {
                Ok(()) => {}
                Err(Error::Timeout(_)) => return Ok(Vec::new()),
                Err(e) => return Err(e),
            }
        }
        // Take more buffers only while the application holds under a quarter of the pool, so a caller that
        // keeps the previous batch while taking the next never gets near the copy-out level.
        while rx.out.len() < max && self.pool_level() == PoolLevel::Low {
            match self.fill(&mut rx, no_wait()) {
                Ok(()) => {}
                Err(Error::Timeout(_) | Error::PeerGone(_)) => break,
                Err(e) => return Err(e),
            }
        }
        let n = max.min(rx.out.len());
        Ok(rx.out.drain(..n).collect())
    }

    fn pool_level(&self) -> PoolLevel {
        match self.shared.link.receive_pool_use() {
            None => PoolLevel::Pressed,
            Some((held, count)) if held * 4 >= count * 3 => PoolLevel::Pressed,
            Some((held, count)) if held * 4 >= count => PoolLevel::Busy,
            Some(_) => PoolLevel::Low,
        }
    }

    /// Puts a message back at the head of the output queue (an async receive cancelled after the message
    /// was taken: it must not be lost).
    pub fn unrecv(&self, message: Message) {
        self.shared.rx.lock().unwrap().out.push_front(message);
    }

    /// Receives and decodes one buffer into the output queue.
    fn fill(&self, rx: &mut RxState, deadline: Deadline) -> Result<()> {
        if self.shared.closed.load(Acquire) {
            return Err(Error::ChannelClosed);
        }
        if let Some(e @ Error::Protocol(_)) = self.shared.failed() {
            return Err(e);
        }
        let buf = self.shared.link.receive(deadline)?;
        let mut messages = match wire::decode(&buf) {
            Ok(m) => m,
            Err(e) => {
                self.shared.fail(&e);
                return Err(e);
            }
        };
        let c = &self.shared.counters;
        // Zero-copy views pin their buffer; if the application keeps most of the pool pinned, the peer
        // could run out of buffers and stall forever. Copy these messages out and free the buffer now.
        if self.pool_level() >= PoolLevel::Pressed {
            messages = messages.into_iter().map(|m| m.into_frames().iter().map(|f| Bytes::copy_from_slice(f)).collect()).collect();
            c.copied_out.fetch_add(1, Relaxed);
        }
        c.buffers_received.fetch_add(1, Relaxed);
        c.messages_received.fetch_add(messages.len() as u64, Relaxed);
        c.bytes_received.fetch_add(messages.iter().map(|m| m.nbytes() as u64).sum(), Relaxed);
        rx.out.extend(messages);
        Ok(())
    }

    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        Stats {
            messages_sent: c.messages_sent.load(Relaxed),
            bytes_sent: c.bytes_sent.load(Relaxed),
            buffers_sent: c.buffers_sent.load(Relaxed),
            max_clubbed: c.max_clubbed.load(Relaxed),
            buffer_waits: c.buffer_waits.load(Relaxed),
            messages_received: c.messages_received.load(Relaxed),
            bytes_received: c.bytes_received.load(Relaxed),
            buffers_received: c.buffers_received.load(Relaxed),
            queued: c.queued.load(Relaxed),
            unsent_at_close: c.unsent_at_close.load(Relaxed),
            copied_out: c.copied_out.load(Relaxed),
            appended: c.appended.load(Relaxed),
        }
    }

    /// Closes the channel: refuses new messages, ships what is queued for up to `linger` (the option
    /// given at open unless overridden), then closes the link. Idempotent.
    pub fn close(&self, linger: Option<Duration>) {
        let shared = &self.shared;
        if shared.closed.swap(true, AcqRel) {
            return;
        }
        shared.stop.store(true, Release);
        shared.doorbell.notify();
        if let Some(handle) = shared.flusher.lock().unwrap().take() {
            let _ = handle.join();
        }
        let mut tx = shared.tx.lock();
        tx.scheduler.close_all();
        let deadline = Instant::now() + linger.unwrap_or(self.linger);
        while shared.failed().is_none() {
            match shared.drain(&mut tx, Some(deadline)) {
                Ok(true) if Instant::now() < deadline => continue,
                Ok(_) => break,
                Err(e) => {
                    shared.fail(&e);
                    break;
                }
            }
        }
        let unsent = tx.scheduler.queued() as u64 + tx.carry.take().is_some() as u64;
        shared.counters.unsent_at_close.store(unsent, Relaxed);
        drop(tx);
        shared.link.close();
    }
}

/// Encodes queued messages (the carried one first, then in scheduler order) while they fit; the first
/// that does not is carried to the next buffer. Returns (messages, payload bytes) encoded.
fn push_queued(tx: &mut TxState, w: &mut BufferWriter<'_>) -> (u64, usize) {
    let (mut messages, mut bytes) = (0, 0);
    while let Some(next) = tx.carry.take().or_else(|| tx.scheduler.next_message()) {
        if !w.push(&next) {
            tx.carry = Some(next);
            break;
        }
        messages += 1;
        bytes += next.nbytes();
    }
    (messages, bytes)
}

/// Encodes `messages[*next..]` while they fit, advancing `next`; returns the payload bytes encoded.
fn push_given<F: AsRef<[u8]>>(w: &mut BufferWriter<'_>, messages: &[&[F]], next: &mut usize) -> usize {
    let mut bytes = 0;
    while *next < messages.len() && w.push_frames(messages[*next]) {
        bytes += messages[*next].iter().map(|f| f.as_ref().len()).sum::<usize>();
        *next += 1;
    }
    bytes
}

/// How much of the receive pool the application holds in received messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum PoolLevel {
    /// Under a quarter: `recv_many` may take more buffers.
    Low,
    /// A quarter or more: `recv_many` returns what it has.
    Busy,
    /// Three quarters or more (or unknown): new buffers are copied out and freed at once.
    Pressed,
}

/// A transport buffer lent by `Channel::loan`: write the data in place, then `ship`.
pub struct Loan {
    shared: Arc<Shared>,
    buf: Option<TxBuf>,
    len: usize,
}

impl Loan {
    /// The writable data area (`nbytes` long).
    pub fn data(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.buf.as_mut().expect("not shipped").as_mut_slice()[wire::LOAN_OFFSET..wire::LOAN_OFFSET + len]
    }

    /// Ships the first `n` bytes of the data area as a one-frame message, without copying them.
    pub fn ship(mut self, n: usize) -> Result<()> {
        let shared = self.shared.clone();
        if shared.closed.load(Acquire) {
            return Err(Error::ChannelClosed);
        }
        if let Some(e) = shared.failed() {
            return Err(e);
        }
        if n > self.len {
            return Err(Error::InvalidOption(format!("ship({n}) exceeds the loan of {} bytes", self.len)));
        }
        let mut buf = self.buf.take().expect("not shipped");
        let len = wire::seal_loan(buf.as_mut_slice(), n);
        shared.ship_counted(buf, len, 1, n).inspect_err(|e| shared.fail(e))
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        // Not shipped: the buffer goes back to the encoder for the next messages.
        if let Some(buf) = self.buf.take() {
            self.shared.with_tx(|tx| tx.spare.push(buf));
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.close(None);
    }
}

#[cfg(test)]
mod tests;
