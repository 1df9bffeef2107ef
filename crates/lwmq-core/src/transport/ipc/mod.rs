//! ipc:// — the shared-memory transport between processes of one machine.
//!
//! - `ipc://name` listens on "\0lwmq:name" in the abstract socket namespace (nothing on disk);
//!   `ipc:///abs/path.sock` on a filesystem socket of mode 0600 (removed when the listener closes).
//! - The listener checks each peer's uid (SO_PEERCRED) against `allowed_uids` (default: its own).
//! - Handshake (handshake.rs), then the buffers live in a sealed memfd mapped by both (segment.rs), with
//!   the same pool layout and checks as every shared-memory link (pool.rs, ring_link.rs).
//! - The socket stays open as the channel's heartbeat (liveness.rs).

mod handshake;
mod liveness;
mod segment;
pub(crate) mod socket;

use super::options::{direction, Options};
use super::pool::{Layout, Region};
use super::ring_link::RingLink;
use super::{Capabilities, Link, Listener, Provider, Registration, TxBuf, Uri};
use crate::error::{Error, Result};
use crate::sync::Deadline;
use crate::wire::BufferWriter;
use bytes::Bytes;
use socket::SocketAddress;
use std::collections::VecDeque;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long either side waits for the other's handshake packet.
const HANDSHAKE: Duration = Duration::from_secs(5);

pub struct Ipc;

inventory::submit! { Registration(&Ipc) }

fn parse(uri: &Uri) -> Result<SocketAddress> {
    let rest = &uri.rest;
    if rest.starts_with('/') {
        if rest.len() > 107 || rest.contains('\0') {
            return Err(Error::Address(format!("{uri}: a socket path is at most 107 bytes")));
        }
        return Ok(SocketAddress::Path(rest.into()));
    }
    if rest.is_empty() || rest.len() > 100 || rest.chars().any(|c| c.is_whitespace() || c == '\0') {
        return Err(Error::Address(format!(
            "{uri}: expected ipc://name (1 to 100 bytes, no whitespace) or ipc:///absolute/path.sock"
        )));
    }
    Ok(SocketAddress::Abstract([socket::ABSTRACT_PREFIX, rest.as_bytes()].concat()))
}

impl Provider for Ipc {
    fn name(&self) -> &'static str {
        "ipc"
    }
    fn schemes(&self) -> &'static [&'static str] {
        &["ipc"]
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities { send: true, receive: true, zero_copy: true, ..Capabilities::default() }
    }
    fn check_address(&self, uri: &Uri) -> Result<()> {
        parse(uri).map(|_| ())
    }

    fn listen(&self, uri: &Uri, options: &Options) -> Result<Box<dyn Listener>> {
        let address = parse(uri)?;
        let fd = socket::listen(&address)?;
        let shared = Arc::new(ListenerShared {
            address,
            options: options.clone(),
            // SAFETY: getuid cannot fail.
            allowed: options.allowed_uids.clone().unwrap_or_else(|| vec![unsafe { libc::getuid() }]),
            ready: Mutex::new(VecDeque::new()),
            arrived: Condvar::new(),
            refusals: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("lwmq-listener".into())
            .stack_size(256 * 1024)
            .spawn(move || worker.serve(fd))
            .map_err(|e| Error::Os { what: "spawning the listener thread".into(), errno: e.raw_os_error().unwrap_or(0) })?;
        Ok(Box::new(IpcListener { shared, thread: Mutex::new(Some(thread)) }))
    }

    fn connect(&self, uri: &Uri, options: &Options, deadline: Deadline) -> Result<Box<dyn Link>> {
        let address = parse(uri)?;
        let conn = socket::connect(&address, deadline)?;
        socket::send_packet(&conn, &handshake::hello(options), None)?;
        let (answer, fd) = socket::recv_packet(&conn, handshake::MAX_PACKET, Some(Instant::now() + HANDSHAKE))?;
        let dirs = handshake::read_welcome(&answer)?;
        let fd = fd.ok_or_else(|| Error::Protocol("the listener's welcome carried no segment".into()))?;
        let region = segment::attach(&fd, Layout::new(dirs)?)?;
        drop(fd); // the mapping keeps the memory; no descriptor stays open for it
        let (pid, _) = socket::peer_credentials(&conn)?;
        let ring = RingLink::attach(&region, 0, options.wait_policy(), format!("{} (listener pid {pid})", socket::describe(&address)))?;
        IpcLink::new(ring, region, 0, conn).map(|l| Box::new(l) as Box<dyn Link>)
    }
}

struct ListenerShared {
    address: SocketAddress,
    options: Options,
    allowed: Vec<u32>,
    ready: Mutex<VecDeque<IpcLink>>,
    arrived: Condvar,
    refusals: Mutex<Vec<String>>,
    stop: AtomicBool,
}

impl ListenerShared {
    /// The listener thread: accepts and completes handshakes as peers arrive, so a connector never waits
    /// for the application to call accept.
    fn serve(&self, fd: OwnedFd) {
        while !self.stop.load(Ordering::Acquire) {
            match socket::accept(&fd, Some(Instant::now() + Duration::from_millis(100))) {
                Ok(Some(conn)) => match self.handshake(conn) {
                    Ok(link) => {
                        self.ready.lock().unwrap().push_back(link);
                        self.arrived.notify_all();
                    }
                    Err(why) => self.refusals.lock().unwrap().push(why),
                },
                Ok(None) => {}
                Err(e) => {
                    self.refusals.lock().unwrap().push(format!("accept failed: {e}"));
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        drop(fd);
        if let Some(p) = socket::path_of(&self.address) {
            let _ = std::fs::remove_file(p);
        }
    }

    fn handshake(&self, conn: OwnedFd) -> std::result::Result<IpcLink, String> {
        let where_ = socket::describe(&self.address);
        let (pid, uid) = socket::peer_credentials(&conn).map_err(|e| format!("{where_}: {e}"))?;
        let refuse = |status: u32, why: String| {
            let _ = socket::send_packet(&conn, &handshake::refusal(status, &why), None);
            format!("{where_}: refused pid {pid} (uid {uid}): {why}")
        };
        // Read the hello before anything else: closing with it unread would reset the connection and the
        // peer would never learn why it was refused.
        let (hello, _) = socket::recv_packet(&conn, handshake::MAX_PACKET, Some(Instant::now() + HANDSHAKE))
            .map_err(|e| format!("{where_}: pid {pid} sent no hello: {e}"))?;
        if !self.allowed.contains(&uid) {
            return Err(refuse(handshake::REFUSED, format!("uid {uid} is not in allowed_uids {:?}", self.allowed)));
        }
        let wishes = handshake::read_hello(&hello).map_err(|(status, why)| refuse(status, why))?;
        let dirs = [direction(&wishes, &self.options), direction(&self.options, &wishes)];
        let setup = || -> Result<IpcLink> {
            let (region, memfd) = segment::create(Layout::new(dirs)?)?;
            let ring = RingLink::attach(&region, 1, self.options.wait_policy(), format!("{where_} (connector pid {pid})"))?;
            socket::send_packet(&conn, &handshake::welcome(dirs), Some(memfd.as_raw_fd()))?;
            drop(memfd);
            IpcLink::new(ring, region, 1, conn.try_clone().map_err(|_| Error::os("dup"))?)
        };
        setup().map_err(|e| refuse(handshake::BAD_REQUEST, e.to_string()))
    }
}

struct IpcListener {
    shared: Arc<ListenerShared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Listener for IpcListener {
    fn accept(&self, deadline: Deadline) -> Result<Box<dyn Link>> {
        let mut ready = self.shared.ready.lock().unwrap();
        loop {
            if self.shared.stop.load(Ordering::Acquire) {
                return Err(Error::ChannelClosed);
            }
            if let Some(link) = ready.pop_front() {
                return Ok(Box::new(link));
            }
            let wait = match deadline {
                None => Duration::from_millis(100),
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(t) if !t.is_zero() => t,
                    _ => return Err(Error::Timeout(format!("no peer connected to {}", socket::describe(&self.shared.address)))),
                },
            };
            ready = self.shared.arrived.wait_timeout(ready, wait).unwrap().0;
        }
    }

    fn take_refusals(&self) -> Vec<String> {
        std::mem::take(&mut *self.shared.refusals.lock().unwrap())
    }

    fn close(&self) {
        self.shared.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.lock().unwrap().take() {
            let _ = t.join();
        }
        // Peers that connected but were never accepted see PeerGone.
        self.shared.ready.lock().unwrap().clear();
        self.shared.arrived.notify_all();
    }

    fn address(&self) -> String {
        socket::describe(&self.shared.address)
    }
}

impl Drop for IpcListener {
    fn drop(&mut self) {
        self.close();
    }
}

/// A ring link whose peer is another process: adds the socket that tells us when the peer is gone.
struct IpcLink {
    ring: RingLink,
    /// The heartbeat socket and its watch; both released by `close` (the watch first, so the descriptor
    /// number is never reused while still registered).
    heartbeat: Mutex<Option<(liveness::Watch, OwnedFd)>>,
}

impl IpcLink {
    fn new(ring: RingLink, region: Arc<Region>, send_dir: usize, socket: OwnedFd) -> Result<IpcLink> {
        let watch = liveness::watch(socket.as_raw_fd(), move || {
            region.close_direction(1 - send_dir, true); // the peer will ship nothing more
            region.close_direction(send_dir, false); // and will free nothing more
        })
        .map_err(|e| Error::Os { what: "watching the peer".into(), errno: e.raw_os_error().unwrap_or(0) })?;
        Ok(IpcLink { ring, heartbeat: Mutex::new(Some((watch, socket))) })
    }
}

impl Link for IpcLink {
    fn send_buffer_size(&self) -> usize {
        self.ring.send_buffer_size()
    }
    fn acquire(&self, deadline: Deadline) -> Result<TxBuf> {
        self.ring.acquire(deadline)
    }
    fn ship(&self, buf: TxBuf, len: usize) -> Result<()> {
        self.ring.ship(buf, len)
    }
    fn append(&self, fill: &mut dyn FnMut(&mut BufferWriter<'_>)) -> Result<bool> {
        self.ring.append(fill)
    }
    fn receive(&self, deadline: Deadline) -> Result<Bytes> {
        self.ring.receive(deadline)
    }
    fn receive_pool_use(&self) -> Option<(u32, u32)> {
        self.ring.receive_pool_use()
    }
    fn segment(&self) -> Option<(*mut u8, usize)> {
        self.ring.segment()
    }
    fn forge_descriptor(&self, value: u64) -> Result<()> {
        self.ring.forge_descriptor(value)
    }
    fn close(&self) {
        self.ring.close();
        if let Some((watch, socket)) = self.heartbeat.lock().unwrap().take() {
            drop(watch);
            drop(socket); // the peer's watcher sees the hang-up
        }
    }
    fn peer(&self) -> String {
        self.ring.peer()
    }
}

impl Drop for IpcLink {
    fn drop(&mut self) {
        self.close();
    }
}
