//! `bus://name`: many publishers and many subscribers on one node, through one shared ring, with no
//! broker. See docs/bus.md for the guarantees and the design; in short:
//!
//! - **Total order.** Publishers append under one robust process-shared lock (mutex.rs); the tail
//!   counter gives every message its global sequence number, the same for every subscriber.
//! - **Loss detection.** Slots are reused a lap later; a subscriber reads each slot under a sequence
//!   lock (sync::seqlock) and learns exactly how many sequence numbers it skipped.
//! - **Backpressure (optional).** Subscribers publish their cursors; publishers wait (with a timeout)
//!   until the slowest live subscriber has read the slot they would overwrite. Dead subscribers are
//!   detected by pid and start time (liveness.rs) and dropped.
//! - **Crash safety.** A publisher killed mid-append leaves the lock owner-dead: the next locker repairs
//!   the ring (publishing the message if it was whole, else leaving the slot to be rewritten) and goes
//!   on. Readers never see a torn slot: its stamp is odd until it is whole.
//! - **Rendezvous and cleanup** (rendezvous.rs): a sealed memfd passed between members; nothing on disk.

mod liveness;
mod mutex;
mod rendezvous;
mod segment;

use crate::error::{Error, Result};
use crate::message::Message;
use crate::sync::{seqlock, Deadline, WaitPolicy};
use bytes::Bytes;
use segment::{Geometry, Segment};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

pub use segment::{encoded_len, MAX_MEMBERS};

pub const DEFAULT_CAPACITY: u32 = 16384;
pub const DEFAULT_MAX_MESSAGE_SIZE: u32 = 1024;
/// A publisher blocked by backpressure re-checks whether the laggards are alive this often.
const REAP_EVERY: Duration = Duration::from_millis(5);
/// A subscriber record's owner while it is being filled in: this bit and the joiner's pid.
const RESERVED: u64 = 1 << 63;
/// A batch publish moves the tail (making messages visible) at least this often.
const PUBLISH_EVERY: usize = 64;
/// A subscriber copies messages into chunks of this size (one allocation for many messages).
const ARENA: usize = 64 * 1024;
/// A batch buffer larger than this is freed rather than kept for reuse.
const MAX_SPARE: usize = 16 << 20;
/// At most this much is reserved ahead for a batch's payloads and records (more grows on demand).
const PRESIZE_BYTES: usize = 4 << 20;
const PRESIZE_ENTRIES: usize = 65536;
/// Within a long batch, a subscriber publishes its cursor this often (backpressure).
const CURSOR_EVERY: usize = 256;

pub(crate) fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// What a member asks of the bus. Geometry fields left `None` take the bus's (or, when creating it,
/// the defaults); a joiner that names a value different from the live bus's gets `Error::Mismatch`.
#[derive(Clone, Debug, Default)]
pub struct BusOptions {
    pub capacity: Option<u32>,
    pub max_message_size: Option<u32>,
    pub backpressure: Option<bool>,
    pub policy: WaitPolicy,
    /// How long joining may wait for another process that is joining at the same moment.
    pub join_timeout: Option<Duration>,
}

impl BusOptions {
    fn geometry(&self) -> Result<Geometry> {
        let capacity = self.capacity.unwrap_or(DEFAULT_CAPACITY);
        if !(2..=1 << 30).contains(&capacity) {
            return Err(Error::InvalidOption(format!("capacity must be 2..2**30 slots, not {capacity}")));
        }
        let max = self.max_message_size.unwrap_or(DEFAULT_MAX_MESSAGE_SIZE);
        if !(16..=1 << 30).contains(&max) {
            return Err(Error::InvalidOption(format!("max_message_size must be 16 B..1 GiB, not {max}")));
        }
        let g = Geometry { capacity: capacity.next_power_of_two(), max_message_size: max.div_ceil(8) * 8, backpressure: self.backpressure.unwrap_or(false) };
        g.total()?;
        Ok(g)
    }

    fn check_against(&self, live: &Geometry, name: &str) -> Result<()> {
        let asked = self.geometry()?;
        let mut differ = Vec::new();
        if self.capacity.is_some() && asked.capacity != live.capacity {
            differ.push(format!("capacity {} (asked {})", live.capacity, asked.capacity));
        }
        if self.max_message_size.is_some() && asked.max_message_size != live.max_message_size {
            differ.push(format!("max_message_size {} (asked {})", live.max_message_size, asked.max_message_size));
        }
        if self.backpressure.is_some() && asked.backpressure != live.backpressure {
            differ.push(format!("backpressure {} (asked {})", live.backpressure, asked.backpressure));
        }
        if differ.is_empty() {
            Ok(())
        } else {
            Err(Error::Mismatch(format!("bus://{name} was created with {}", differ.join(", "))))
        }
    }
}

/// Parses `bus://name`: a name of 1–64 letters, digits, '.', '_' or '-'.
pub fn parse_uri(uri: &str) -> Result<String> {
    let parsed = crate::transport::uri::Uri::parse(uri)?;
    if parsed.scheme != "bus" {
        return Err(Error::Address(format!("{uri:?} is not a bus:// address")));
    }
    let name = parsed.rest;
    let ok = !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
    if !ok {
        return Err(Error::Address(format!("bus name {name:?} must be 1-64 characters of A-Z a-z 0-9 . _ -")));
    }
    Ok(name)
}

/// One process's membership of one bus, shared by all its publishers and subscribers on that bus.
pub struct Bus {
    pub name: String,
    seg: Segment,
    _server: rendezvous::Server,
    created: bool,
}

fn buses() -> &'static Mutex<HashMap<String, Weak<Bus>>> {
    static BUSES: std::sync::OnceLock<Mutex<HashMap<String, Weak<Bus>>>> = std::sync::OnceLock::new();
    BUSES.get_or_init(Default::default)
}

impl Bus {
    /// Joins bus `name` (or shares this process's existing membership of it).
    pub fn join(name: &str, options: &BusOptions) -> Result<Arc<Bus>> {
        let wanted = options.geometry()?;
        let mut map = buses().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bus) = map.get(name).and_then(Weak::upgrade) {
            options.check_against(&bus.seg.geometry, name)?;
            return Ok(bus);
        }
        let deadline = Some(Instant::now() + options.join_timeout.unwrap_or(Duration::from_secs(5)));
        let (seg, created, server) = rendezvous::join(name, wanted, deadline)?;
        let bus = Arc::new(Bus { name: name.to_string(), seg, _server: server, created });
        if !created {
            options.check_against(&bus.seg.geometry, name)?;
        }
        map.retain(|_, w| w.strong_count() > 0);
        map.insert(name.to_string(), Arc::downgrade(&bus));
        Ok(bus)
    }

    pub fn geometry(&self) -> Geometry {
        self.seg.geometry
    }

    /// Whether this process created the segment (rather than joining a live one).
    pub fn created(&self) -> bool {
        self.created
    }

    pub fn tail(&self) -> u64 {
        self.seg.header().tail.load(Acquire)
    }

    /// Takes the append lock; repairs the ring first if its last holder died holding it.
    fn lock(&self, deadline: Deadline) -> Result<Option<mutex::Guard<'_>>> {
        let Some(mut guard) = self.seg.lock.lock(deadline)? else { return Ok(None) };
        if guard.owner_died {
            self.repair();
            guard.consistent();
        }
        Ok(Some(guard))
    }

    /// The dead holder was appending from sequence `tail` on. Slots it finished (whole stamps, in
    /// sequence) only missed being published: publish them now. The first slot it did not finish is
    /// torn (odd stamp) and invisible to readers, since the tail never passed it; the next append
    /// rewrites it.
    fn repair(&self) {
        let h = self.seg.header();
        let tail = h.tail.load(Relaxed);
        let mut s = tail;
        while s - tail < self.seg.geometry.capacity as u64 && self.seg.slot(s).0.stamp.load(Acquire) == seqlock::whole(s) {
            s += 1;
        }
        if s > tail {
            // RELEASE (pair B3): as in `append`.
            h.tail.store(s, Release);
            h.tail_wait.notify();
        }
        h.recoveries.fetch_add(1, Relaxed);
    }

    /// A snapshot for diagnostics and tests: tail, geometry, subscribers, lock state, recoveries.
    pub fn info(&self) -> BusInfo {
        let h = self.seg.header();
        let lock = match self.seg.lock.try_lock() {
            Ok(Some(mut g)) if g.owner_died => {
                self.repair();
                g.consistent();
                "recovered"
            }
            Ok(Some(_)) => "free",
            Ok(None) => "held",
            Err(_) => "unrecoverable",
        };
        let subscribers = (0..self.seg.members_high())
            .filter(|&i| matches!(self.seg.member(i).owner.load(Acquire), o if o != 0 && o & RESERVED == 0))
            .count();
        BusInfo {
            tail: h.tail.load(Acquire),
            geometry: self.seg.geometry,
            subscribers,
            lock,
            recoveries: h.recoveries.load(Relaxed),
            created_ns: self.seg.created_ns(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct BusInfo {
    pub tail: u64,
    pub geometry: Geometry,
    pub subscribers: usize,
    pub lock: &'static str,
    pub recoveries: u64,
    /// Identifies this incarnation of the bus name (a bus whose members all left is gone for good).
    pub created_ns: u64,
}

// ------------------------------------------------------------------------------------------ publisher

pub struct Publisher {
    bus: Arc<Bus>,
    pub id: u64,
    policy: WaitPolicy,
    /// Backpressure: sequences below this may be written without rescanning the cursors.
    limit: AtomicU64,
    limit_epoch: AtomicU64,
    /// Test hook: sleep this long in the middle of every append (to be killed there).
    pub debug_stall: Option<Duration>,
}

impl Publisher {
    pub fn new(bus: Arc<Bus>, options: &BusOptions) -> Publisher {
        let id = bus.seg.header().next_member_id.fetch_add(1, Relaxed) + 1;
        Publisher { bus, id, policy: options.policy, limit: AtomicU64::new(0), limit_epoch: AtomicU64::new(u64::MAX), debug_stall: None }
    }

    pub fn bus(&self) -> &Arc<Bus> {
        &self.bus
    }

    fn check(&self, topic: &[u8], frames: &[&[u8]]) -> Result<()> {
        let max = self.bus.seg.geometry.max_message_size as usize;
        let size = encoded_len(topic, frames);
        if frames.is_empty() {
            return Err(Error::InvalidOption("a message needs at least one frame".into()));
        }
        if size > max || topic.len() > u16::MAX as usize || frames.len() > u16::MAX as usize {
            return Err(Error::MessageTooLarge { size, max });
        }
        Ok(())
    }

    /// Publishes one message; returns its global sequence number. Waits only in backpressure mode, for
    /// the slowest live subscriber, until `deadline`.
    pub fn publish(&self, topic: &[u8], frames: &[&[u8]], deadline: Deadline) -> Result<u64> {
        self.check(topic, frames)?;
        let mut sent = None;
        self.append(&[(topic, frames)], deadline, &mut |s| sent = Some(s))?;
        sent.ok_or_else(|| Error::Timeout("the bus stayed locked, or (backpressure) full, until the deadline".into()))
    }

    /// Publishes many messages under one lock hold where room allows; returns how many were published
    /// (all of them unless backpressure held them past `deadline`) and the first one's sequence number.
    pub fn publish_many(&self, items: &[(&[u8], &[&[u8]])], deadline: Deadline) -> Result<(usize, u64)> {
        for (topic, frames) in items {
            self.check(topic, frames)?;
        }
        let (mut n, mut first) = (0usize, 0u64);
        self.append(items, deadline, &mut |s| {
            if n == 0 {
                first = s;
            }
            n += 1;
        })?;
        Ok((n, first))
    }

    fn append(&self, items: &[(&[u8], &[&[u8]])], deadline: Deadline, on_sent: &mut dyn FnMut(u64)) -> Result<()> {
        let seg = &self.bus.seg;
        let h = seg.header();
        let mut done = 0;
        while done < items.len() {
            let Some(guard) = self.bus.lock(deadline)? else { return Ok(()) };
            let start = done;
            let now = now_ns(); // one clock read per lock hold: a batch shares its publish time
            let mut s = h.tail.load(Relaxed);
            while done < items.len() {
                if seg.geometry.backpressure && !self.room_for(s) {
                    break;
                }
                let (topic, frames) = items[done];
                self.write_slot(s, now, topic, frames);
                on_sent(s);
                done += 1;
                s += 1;
                if (done - start) % PUBLISH_EVERY == 0 {
                    // RELEASE (pair B3 with the ACQUIRE tail loads in `Subscriber::take_raw`): the slots
                    // before the tail that covers them.
                    h.tail.store(s, Release);
                }
            }
            // RELEASE (pair B3): as above, for the rest of this hold.
            h.tail.store(s, Release);
            drop(guard);
            if done > start {
                h.tail_wait.notify();
            }
            if done < items.len() && !self.wait_for_room(deadline)? {
                return Ok(());
            }
        }
        Ok(())
    }

    fn write_slot(&self, s: u64, now: u64, topic: &[u8], frames: &[&[u8]]) {
        let (slot, payload) = self.bus.seg.slot(s);
        let stall = self.debug_stall;
        seqlock::write(&slot.stamp, s, || {
            slot.publisher.store(self.id, Relaxed);
            slot.timestamp_ns.store(now, Relaxed);
            slot.len.store(encoded_len(topic, frames) as u32, Relaxed);
            slot.topic_len.store(topic.len() as u16, Relaxed);
            slot.nframes.store(frames.len() as u16, Relaxed);
            // SAFETY: `payload` is this slot's payload area of max_message_size bytes, and `check` made
            // sure the message fits; we hold the append lock, so no other writer touches the slot.
            unsafe {
                segment::write_payload(payload, topic, frames, || {
                    if let Some(d) = stall {
                        std::thread::sleep(d);
                    }
                })
            };
        });
    }

    /// Backpressure: whether sequence `s` may be written without overwriting a slot some live subscriber
    /// has not read. Rescans the cursors only when the cached limit is reached or members changed.
    fn room_for(&self, s: u64) -> bool {
        let epoch = self.bus.seg.header().member_epoch.load(Acquire);
        if s < self.limit.load(Relaxed) && epoch == self.limit_epoch.load(Relaxed) {
            return true;
        }
        let limit = self.scan(false);
        self.limit.store(limit, Relaxed);
        self.limit_epoch.store(epoch, Relaxed);
        s < limit
    }

    /// min(cursor) + capacity over live subscribers (u64::MAX with none). With `reap`, laggards whose
    /// process is gone are removed first.
    fn scan(&self, reap: bool) -> u64 {
        let seg = &self.bus.seg;
        let tail = seg.header().tail.load(Relaxed);
        let cap = seg.geometry.capacity as u64;
        let mut min = u64::MAX;
        for i in 0..seg.members_high() {
            let m = seg.member(i);
            // ACQUIRE (pair M1 with the RELEASE in `Subscriber::join`): the member's fields before its owner.
            let owner = m.owner.load(Acquire);
            if owner == 0 || owner & RESERVED != 0 {
                continue; // free, or a joiner filling it in (it counts once its owner is published)
            }
            // ACQUIRE (pair C1 with the RELEASE cursor stores in `Subscriber`): its reads of the slots
            // below the cursor happen before we overwrite them.
            let cursor = m.cursor.load(Acquire);
            if reap && cursor.saturating_add(cap) <= tail && !liveness::alive(m.pid.load(Relaxed), m.start.load(Relaxed)) {
                if m.owner.compare_exchange(owner, 0, AcqRel, Relaxed).is_ok() {
                    seg.header().member_epoch.fetch_add(1, AcqRel);
                }
                continue;
            }
            min = min.min(cursor.saturating_add(cap));
        }
        min
    }

    /// Waits (without the lock) until backpressure lets the next append through; false at the deadline.
    fn wait_for_room(&self, deadline: Deadline) -> Result<bool> {
        let h = self.bus.seg.header();
        let mut last_reap = Instant::now();
        loop {
            let slice_end = Instant::now() + REAP_EVERY;
            let slice = Some(deadline.map_or(slice_end, |d| d.min(slice_end)));
            // Reap (read /proc for laggards) once per slice, not on every spin of the wait below.
            if last_reap.elapsed() >= REAP_EVERY {
                last_reap = Instant::now();
                self.scan(true);
            }
            let got = h.space_wait.wait_for(self.policy, slice, || {
                let limit = self.scan(false);
                self.limit.store(limit, Relaxed);
                (h.tail.load(Relaxed) < limit).then_some(())
            });
            if got.is_some() {
                return Ok(true);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(false);
            }
        }
    }
}

// ------------------------------------------------------------------------------------------ subscriber

/// Where a subscriber starts reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// Only messages published after joining.
    Latest,
    /// The oldest message the ring still holds.
    Oldest,
    /// This sequence number; if it is no longer in the ring, the gap is counted as lost.
    At(u64),
}

/// Which topics a subscriber takes: everything when both lists are empty.
#[derive(Clone, Debug, Default)]
pub struct TopicFilter {
    pub exact: Vec<Vec<u8>>,
    pub prefixes: Vec<Vec<u8>>,
}

impl TopicFilter {
    fn matches(&self, topic: &[u8]) -> bool {
        (self.exact.is_empty() && self.prefixes.is_empty())
            || self.exact.iter().any(|t| t.as_slice() == topic)
            || self.prefixes.iter().any(|p| topic.starts_with(p))
    }
}

/// One delivered message.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub seq: u64,
    pub topic: Bytes,
    pub message: Message,
    pub publisher: u64,
    pub timestamp_ns: u64,
    /// Messages lost (overrun) just before this one.
    pub lost: u64,
}

/// Many deliveries as columns: their payloads copied back to back into one buffer, and one `Entry` per
/// message. Cheaper than a `Delivery` each (no per-message reference counts or frame lists); a
/// `Delivery` is made on demand by `delivery(i)`.
#[derive(Clone, Debug, Default)]
pub struct Received {
    pub data: Bytes,
    pub entries: Vec<Entry>,
    /// Where `entries` goes back for reuse when this is dropped.
    home: Weak<Mutex<Spares>>,
}

impl Drop for Received {
    fn drop(&mut self) {
        if let Some(home) = self.home.upgrade() {
            home.lock().unwrap_or_else(|e| e.into_inner()).keep_entries(std::mem::take(&mut self.entries));
        }
    }
}

/// Buffers of dropped batches, kept for the next ones (no allocation and no fresh pages per batch).
#[derive(Debug, Default)]
struct Spares {
    data: Vec<Vec<u8>>,
    entries: Vec<Vec<Entry>>,
}

impl Spares {
    fn keep_data(&mut self, mut data: Vec<u8>) {
        if self.data.len() < 2 && data.capacity() <= MAX_SPARE {
            data.clear();
            self.data.push(data);
        }
    }

    fn keep_entries(&mut self, mut entries: Vec<Entry>) {
        if self.entries.len() < 2 && entries.capacity() * std::mem::size_of::<Entry>() <= MAX_SPARE {
            entries.clear();
            self.entries.push(entries);
        }
    }
}

/// One message of a `Received`: where its payload lies in `data`, and its metadata.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub seq: u64,
    pub publisher: u64,
    pub timestamp_ns: u64,
    /// Messages lost (overrun) just before this one.
    pub lost: u64,
    pub offset: usize,
    pub len: u32,
    pub topic_len: u16,
    pub nframes: u16,
    /// Bytes over all its frames (headers and topic excluded).
    pub nbytes: u32,
}

impl Received {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn topic(&self, i: usize) -> &[u8] {
        let e = &self.entries[i];
        &self.data[e.offset..][..e.topic_len as usize]
    }

    /// Message `i` as a `Delivery` sharing this batch's buffer (no copy).
    pub fn delivery(&self, i: usize) -> Result<Delivery> {
        let e = &self.entries[i];
        let payload = self.data.slice(e.offset..e.offset + e.len as usize);
        let (topic, frames) = segment::split_payload(&payload, e.topic_len as usize, e.nframes as usize)?;
        Ok(Delivery { seq: e.seq, topic, message: Message::new(frames), publisher: e.publisher, timestamp_ns: e.timestamp_ns, lost: e.lost })
    }
}

/// A slot copied out by `Subscriber::take_raw`: its payload is at `at` in the caller's buffer.
struct Raw {
    seq: u64,
    at: usize,
    len: usize,
    topic_len: usize,
    nframes: usize,
    publisher: u64,
    timestamp_ns: u64,
    lost: u64,
}

/// Where `take_raw` copies messages: the arena (`BytesMut`) or a batch buffer (`Vec<u8>`).
trait CopyTarget: std::ops::Deref<Target = [u8]> {
    /// Pads with zeros to `at` (>= len), then appends `bytes`.
    fn append_at(&mut self, at: usize, bytes: &[u8]);
    fn truncate(&mut self, len: usize);
}

impl CopyTarget for Vec<u8> {
    fn append_at(&mut self, at: usize, bytes: &[u8]) {
        self.resize(at, 0);
        self.extend_from_slice(bytes);
    }

    fn truncate(&mut self, len: usize) {
        Vec::truncate(self, len)
    }
}

impl CopyTarget for bytes::BytesMut {
    fn append_at(&mut self, at: usize, bytes: &[u8]) {
        self.resize(at, 0);
        self.extend_from_slice(bytes);
    }

    fn truncate(&mut self, len: usize) {
        bytes::BytesMut::truncate(self, len)
    }
}

/// A batch's buffer: given back to its subscriber's spares when the last `Bytes` of it is dropped.
struct Recycled {
    data: Vec<u8>,
    home: Weak<Mutex<Spares>>,
}

impl AsRef<[u8]> for Recycled {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

impl Drop for Recycled {
    fn drop(&mut self) {
        if let Some(home) = self.home.upgrade() {
            home.lock().unwrap_or_else(|e| e.into_inner()).keep_data(std::mem::take(&mut self.data));
        }
    }
}

pub struct Subscriber {
    bus: Arc<Bus>,
    member: usize,
    pub id: u64,
    filter: TopicFilter,
    policy: WaitPolicy,
    next: u64,
    /// Lost since the last delivery (reported on it), and in all.
    pending_lost: u64,
    pub lost: u64,
    /// A corrupt slot met after a batch had started: reported by the next call.
    pending_error: Option<Error>,
    /// Received messages are copied here, many per allocation (the arena's chunks are freed when the
    /// last message copied into them is dropped).
    arena: bytes::BytesMut,
    /// Buffers of `recv_columns` batches come back here when the batch (and every delivery sliced
    /// from it) is dropped, to be reused: no allocation and no fresh pages to fault in per batch.
    spares: Arc<Mutex<Spares>>,
    closed: bool,
}

impl Subscriber {
    pub fn join(bus: Arc<Bus>, filter: TopicFilter, start: Start, options: &BusOptions) -> Result<Subscriber> {
        let seg = &bus.seg;
        let h = seg.header();
        let cap = seg.geometry.capacity as u64;
        let id = h.next_member_id.fetch_add(1, Relaxed) + 1;
        let (pid, started) = liveness::me();
        let tail = h.tail.load(Acquire);
        let next = match start {
            Start::Latest => tail,
            Start::Oldest => tail.saturating_sub(cap),
            Start::At(s) => s,
        };
        let mut member = None;
        'search: for reap in [false, true] {
            for i in 0..MAX_MEMBERS {
                let m = seg.member(i);
                let owner = m.owner.load(Acquire);
                let free = owner == 0
                    || (reap && owner & RESERVED != 0 && !liveness::alive_pid((owner & !RESERVED) as u32))
                    || (reap && owner & RESERVED == 0 && !liveness::alive(m.pid.load(Relaxed), m.start.load(Relaxed)));
                // Reserve the record first (marked with our pid, so a joiner that dies right here is
                // recognised later), fill it in, then publish it under our id.
                if !free || m.owner.compare_exchange(owner, RESERVED | pid as u64, Acquire, Relaxed).is_err() {
                    continue;
                }
                m.cursor.store(next.max(tail.saturating_sub(cap)), Relaxed);
                m.pid.store(pid, Relaxed);
                m.start.store(started, Relaxed);
                // Before the owner store and the epoch bump, so a publisher that rescans for us scans here.
                h.members_high.fetch_max(i as u32 + 1, AcqRel);
                // RELEASE (pair M1 with the ACQUIRE in `Publisher::scan`): the fields above before the owner.
                m.owner.store(id, Release);
                member = Some(i);
                break 'search;
            }
        }
        let Some(member) = member else {
            return Err(Error::InvalidOption(format!("bus://{} already has {MAX_MEMBERS} subscribers", bus.name)));
        };
        h.member_epoch.fetch_add(1, AcqRel);
        Ok(Subscriber { bus, member, id, filter, policy: options.policy, next, pending_lost: 0, lost: 0, pending_error: None, arena: bytes::BytesMut::new(), spares: Default::default(), closed: false })
    }

    pub fn bus(&self) -> &Arc<Bus> {
        &self.bus
    }

    /// The next sequence number this subscriber will look at.
    pub fn position(&self) -> u64 {
        self.next
    }

    fn usable(&self) -> Result<()> {
        if self.closed {
            Err(Error::ChannelClosed)
        } else {
            Ok(())
        }
    }

    fn skip_to(&mut self, to: u64) {
        if to > self.next {
            self.pending_lost += to - self.next;
            self.lost += to - self.next;
            self.next = to;
        }
    }

    /// Copies up to `max` matching messages from the ring into `buf` (each 8-byte aligned), passing
    /// each one's place and metadata to `took`; stops early when nothing more is available now.
    /// Skipped (overrun) sequences are reported on the next message taken. A corrupt slot (or `took`
    /// refusing a message) ends the run with that error, after the messages before it were taken.
    fn take_raw<B: CopyTarget>(&mut self, buf: &mut B, max: usize, mut took: impl FnMut(&B, Raw) -> Result<()>) -> Result<usize> {
        let bus = Arc::clone(&self.bus);
        let seg = &bus.seg;
        let h = seg.header();
        let cap = seg.geometry.capacity as u64;
        let max_size = seg.geometry.max_message_size as usize;
        let filter_all = self.filter.exact.is_empty() && self.filter.prefixes.is_empty();
        let mut taken = 0;
        // ACQUIRE (pair B3 with the RELEASE tail store in `Publisher::append`); re-read only once
        // reached, so the tail's cache line is not pulled from a publisher for every message.
        let mut tail = h.tail.load(Acquire);
        while taken < max {
            if self.next >= tail {
                // ACQUIRE (pair B3): as above.
                tail = h.tail.load(Acquire);
                if self.next >= tail {
                    break;
                }
            }
            if tail - self.next > cap {
                self.skip_to(tail - cap);
            }
            let s = self.next;
            let (slot, payload) = seg.slot(s);
            let mark = buf.len();
            let read = seqlock::read(&slot.stamp, s, || {
                let len = slot.len.load(Relaxed) as usize;
                let topic_len = slot.topic_len.load(Relaxed) as usize;
                if len > max_size || topic_len > len {
                    return Err(());
                }
                if !filter_all {
                    // SAFETY: topic_len <= max_size (checked) bytes of this slot's payload area; torn
                    // bytes only make a wrong match, which the stamp re-check throws away.
                    let topic = unsafe { std::slice::from_raw_parts(payload, topic_len) };
                    if !self.filter.matches(topic) {
                        return Ok(None);
                    }
                }
                let at = mark.next_multiple_of(8);
                // SAFETY: `payload` is this slot's payload area and `len` <= max_message_size (checked).
                // The bytes may be overwritten while we copy (another process writes them); such a copy
                // is then discarded by the stamp re-check, never interpreted.
                buf.append_at(at, unsafe { std::slice::from_raw_parts(payload, len) });
                let meta = (slot.nframes.load(Relaxed) as usize, slot.publisher.load(Relaxed), slot.timestamp_ns.load(Relaxed));
                Ok(Some((at, len, topic_len, meta)))
            });
            match read {
                seqlock::Read::Whole(Ok(None)) => self.next += 1,
                seqlock::Read::Whole(Ok(Some((at, len, topic_len, (nframes, publisher, timestamp_ns))))) => {
                    self.next += 1;
                    let lost = std::mem::take(&mut self.pending_lost);
                    took(buf, Raw { seq: s, at, len, topic_len, nframes, publisher, timestamp_ns, lost })?;
                    taken += 1;
                    if taken % CURSOR_EVERY == 0 {
                        self.publish_cursor(); // a long batch lets blocked publishers go on as it reads
                    }
                }
                seqlock::Read::Whole(Err(())) => {
                    self.next += 1;
                    return Err(Error::Protocol(format!("corrupt bus slot for sequence {s}")));
                }
                seqlock::Read::Overrun => {
                    buf.truncate(mark);
                    tail = h.tail.load(Acquire);
                    self.skip_to((s + 1).max(tail.saturating_sub(cap) + 1));
                }
                // Below the tail every slot is whole unless a member scribbled on it: skip it, loudly.
                seqlock::Read::NotYet => {
                    buf.truncate(mark);
                    self.next += 1;
                    return Err(Error::Protocol(format!("bus slot for published sequence {s} is not whole")));
                }
            }
        }
        Ok(taken)
    }

    /// Looks at the ring once: the next matching message as a `Delivery` (its payload in the arena), or
    /// `None` when nothing is available now.
    fn poll(&mut self) -> Result<Option<Delivery>> {
        let room = self.bus.seg.geometry.max_message_size as usize + 8;
        let mut arena = std::mem::take(&mut self.arena);
        if arena.capacity() - arena.len() < room {
            arena = bytes::BytesMut::with_capacity(ARENA.max(room));
        }
        let mut got = None;
        let out = self.take_raw(&mut arena, 1, |_, r| {
            got = Some(r);
            Ok(())
        });
        let out = out.and_then(|_| match got {
            None => Ok(None),
            Some(r) => {
                let message = arena.split().freeze().slice(r.at..r.at + r.len);
                let (topic, frames) = segment::split_payload(&message, r.topic_len, r.nframes)?;
                Ok(Some(Delivery { seq: r.seq, topic, message: Message::new(frames), publisher: r.publisher, timestamp_ns: r.timestamp_ns, lost: r.lost }))
            }
        });
        self.arena = arena;
        out
    }

    /// Publishes how far we have read, so backpressure lets publishers reuse the slots behind us.
    fn publish_cursor(&self) {
        let seg = &self.bus.seg;
        // RELEASE (pair C1 with the ACQUIRE in `Publisher::scan`): our copies of the slots below the
        // cursor before publishers may overwrite them. Stored in overwrite mode too, for `info`.
        seg.member(self.member).cursor.store(self.next, Release);
        if seg.geometry.backpressure {
            seg.header().space_wait.notify();
        }
    }

    /// The next matching message, waiting until `deadline`.
    pub fn recv(&mut self, deadline: Deadline) -> Result<Delivery> {
        self.usable()?;
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        loop {
            let polled = self.poll();
            self.publish_cursor();
            if let Some(d) = polled? {
                return Ok(d);
            }
            let h = self.bus.seg.header();
            let next = self.next;
            let woke = h.tail_wait.wait_for(self.policy, deadline, || (h.tail.load(Acquire) > next).then_some(()));
            if woke.is_none() {
                return Err(Error::Timeout("nothing published".into()));
            }
        }
    }

    /// Up to `max` matching messages: waits until `deadline` for the first, then takes what is there.
    pub fn recv_many(&mut self, max: usize, deadline: Deadline) -> Result<Vec<Delivery>> {
        self.usable()?;
        let first = self.recv(deadline)?;
        let mut out = Vec::with_capacity(max.min(1024));
        out.push(first);
        while out.len() < max {
            if out.len() % CURSOR_EVERY == 0 {
                self.publish_cursor(); // a long batch lets blocked publishers go on as it reads
            }
            match self.poll() {
                Ok(Some(d)) => out.push(d),
                Ok(None) => break,
                Err(e) => {
                    self.pending_error = Some(e); // the slot is skipped; the error is the next call's
                    break;
                }
            }
        }
        self.publish_cursor();
        Ok(out)
    }

    /// Like `recv_many`, as columns (`Received`): up to `max` matching messages, waiting until
    /// `deadline` for the first, then taking what is there. All payloads go into one buffer.
    pub fn recv_columns(&mut self, max: usize, deadline: Deadline) -> Result<Received> {
        self.usable()?;
        if let Some(e) = self.pending_error.take() {
            return Err(e);
        }
        let (mut buf, mut entries) = {
            let mut spares = self.spares.lock().unwrap_or_else(|e| e.into_inner());
            (spares.data.pop().unwrap_or_default(), spares.entries.pop().unwrap_or_default())
        };
        if let Err(e) = self.fill_columns(&mut buf, &mut entries, max, deadline) {
            // Nothing was taken (a timeout: the common case of a first try without waiting): the
            // buffers go back for the next call rather than being freed.
            let mut spares = self.spares.lock().unwrap_or_else(|e| e.into_inner());
            spares.keep_data(buf);
            spares.keep_entries(entries);
            return Err(e);
        }
        let home = Arc::downgrade(&self.spares);
        Ok(Received { data: Bytes::from_owner(Recycled { data: buf, home: home.clone() }), entries, home })
    }

    fn fill_columns(&mut self, buf: &mut Vec<u8>, entries: &mut Vec<Entry>, max: usize, deadline: Deadline) -> Result<()> {
        let bus = Arc::clone(&self.bus);
        let h = bus.seg.header();
        let slot = bus.seg.geometry.max_message_size as usize + 8;
        loop {
            // Room for what is there now (a filter may leave some of it out), within bounds: slots are
            // sized for the largest message, and a huge `max` or ring must not reserve gigabytes. Past
            // the bound the buffers grow as needed (and, recycled, keep their size for later batches).
            let ready = h.tail.load(Acquire).saturating_sub(self.next).min(bus.seg.geometry.capacity as u64).min(max as u64).max(1) as usize;
            buf.reserve(ready.saturating_mul(slot).min(PRESIZE_BYTES));
            entries.reserve(ready.min(PRESIZE_ENTRIES));
            let taken = self.take_raw(buf, max - entries.len(), |buf, r| {
                let mut nbytes = 0;
                segment::check_payload(&buf[r.at..r.at + r.len], r.topic_len, r.nframes, |f| nbytes += f.len())?;
                entries.push(Entry {
                    seq: r.seq,
                    publisher: r.publisher,
                    timestamp_ns: r.timestamp_ns,
                    lost: r.lost,
                    offset: r.at,
                    len: r.len as u32,
                    topic_len: r.topic_len as u16,
                    nframes: r.nframes as u16,
                    nbytes: nbytes as u32,
                });
                Ok(())
            });
            self.publish_cursor();
            match taken {
                Err(e) if entries.is_empty() => return Err(e),
                Err(e) => {
                    self.pending_error = Some(e); // the slot is skipped; the error is the next call's
                    return Ok(());
                }
                Ok(_) if !entries.is_empty() => return Ok(()),
                Ok(_) => {}
            }
            let next = self.next;
            if h.tail_wait.wait_for(self.policy, deadline, || (h.tail.load(Acquire) > next).then_some(())).is_none() {
                return Err(Error::Timeout("nothing published".into()));
            }
        }
    }

    /// Leaves the bus: publishers stop waiting for us at once.
    pub fn close(&mut self) {
        if std::mem::replace(&mut self.closed, true) {
            return;
        }
        let seg = &self.bus.seg;
        let _ = seg.member(self.member).owner.compare_exchange(self.id, 0, AcqRel, Relaxed);
        seg.header().member_epoch.fetch_add(1, AcqRel);
        seg.header().space_wait.notify();
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.close();
    }
}

#[cfg(test)]
mod tests;
