//! How processes find a bus without a broker, a daemon or a file: every process that is a member serves
//! the segment's memfd on its own abstract Unix socket `@lwmq-bus/NAME/m/PID.N`; a joiner lists those
//! names in /proc/net/unix, takes the memfd from any one of them (SCM_RIGHTS), and creates a new bus
//! only when none answers. Joins are serialised by binding `@lwmq-bus/NAME/join` (an abstract name is
//! released by the kernel when its holder exits, crash included), so two joiners can never both create
//! the bus. Both ends check SO_PEERCRED: only processes of our own uid are served or trusted.
//!
//! Nothing outlives the members: abstract names vanish with their sockets, the memfd with its last
//! descriptor and mapping, so a bus whose members all crashed leaves nothing behind to reclaim.

use super::segment::{Geometry, Segment, MAGIC, VERSION};
use crate::error::{Error, Result};
use crate::sync::Deadline;
use crate::transport::ipc::socket::{self, SocketAddress};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

fn prefix(name: &str) -> String {
    format!("lwmq-bus/{name}/")
}

fn hello() -> Vec<u8> {
    let mut b = MAGIC.to_le_bytes().to_vec();
    b.extend_from_slice(&VERSION.to_le_bytes());
    b
}

fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// Member sockets of bus `name` listed by the kernel (abstract names show as "@...").
fn member_names(name: &str) -> Vec<Vec<u8>> {
    let want = format!("@{}m/", prefix(name));
    let Ok(table) = std::fs::read_to_string("/proc/net/unix") else { return Vec::new() };
    let mut names: Vec<Vec<u8>> = table
        .lines()
        .filter_map(|line| line.split_ascii_whitespace().nth(7))
        .filter(|path| path.starts_with(&want))
        .map(|path| path.as_bytes()[1..].to_vec())
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Asks one member for the segment.
fn fetch(addr: &SocketAddress) -> Result<OwnedFd> {
    let conn = socket::connect(addr, Some(Instant::now()))?;
    let (_, peer_uid) = socket::peer_credentials(&conn)?;
    if peer_uid != uid() {
        return Err(Error::Protocol(format!("bus member runs as uid {peer_uid}, not ours")));
    }
    let (data, fd) = socket::recv_packet(&conn, 64, Some(Instant::now() + Duration::from_secs(2)))?;
    if data != hello() {
        return Err(Error::Protocol("a bus member answered with another format version".into()));
    }
    fd.ok_or_else(|| Error::Protocol("a bus member sent no segment".into()))
}

/// Joins bus `name`: attaches to the live segment, or creates one with `create` when no member answers.
/// Returns the segment, whether we created it, and the server that makes us findable.
pub fn join(name: &str, create: Geometry, deadline: Deadline) -> Result<(Segment, bool, Server)> {
    let lock_addr = SocketAddress::Abstract(format!("{}join", prefix(name)).into_bytes());
    let _join_lock = loop {
        match socket::listen(&lock_addr) {
            Ok(fd) => break fd,
            Err(Error::AddressInUse(_)) => {
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Err(Error::Timeout(format!("another process kept joining bus://{name}")));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(e),
        }
    };
    let mut found = None;
    for member in member_names(name) {
        // A member that is leaving right now refuses or hangs up: try the next.
        if let Ok(fd) = fetch(&SocketAddress::Abstract(member)) {
            found = Some(fd);
            break;
        }
    }
    let (segment, created) = match found {
        Some(fd) => (Segment::attach(fd)?, false),
        None => (Segment::create(create)?, true),
    };
    let server = Server::start(name, &segment)?;
    Ok((segment, created, server))
}

/// Serves the segment's memfd to joiners, on a thread that lives as long as this process's membership.
pub struct Server {
    wake: OwnedFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    fn start(name: &str, segment: &Segment) -> Result<Server> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let me = format!("{}m/{}.{}", prefix(name), std::process::id(), COUNTER.fetch_add(1, Relaxed));
        let listener = socket::listen(&SocketAddress::Abstract(me.into_bytes()))?;
        // SAFETY: plain syscalls; the descriptors returned are owned below.
        let (wake, memfd) = unsafe {
            let wake = libc::eventfd(0, libc::EFD_CLOEXEC);
            let memfd = libc::fcntl(segment.fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0);
            if wake < 0 || memfd < 0 {
                return Err(Error::os("eventfd/dup for the bus server"));
            }
            (OwnedFd::from_raw_fd(wake), OwnedFd::from_raw_fd(memfd))
        };
        let wake_fd = wake.as_raw_fd();
        let thread = std::thread::Builder::new()
            .name("lwmq-bus".into())
            .stack_size(128 * 1024)
            .spawn(move || serve(listener, memfd, wake_fd))
            .map_err(|e| Error::Os { what: "spawning the bus server".into(), errno: e.raw_os_error().unwrap_or(0) })?;
        Ok(Server { wake, thread: Some(thread) })
    }
}

fn serve(listener: OwnedFd, memfd: OwnedFd, wake: i32) {
    let hello = hello();
    loop {
        let mut fds = [
            libc::pollfd { fd: listener.as_raw_fd(), events: libc::POLLIN, revents: 0 },
            libc::pollfd { fd: wake, events: libc::POLLIN, revents: 0 },
        ];
        // SAFETY: two valid pollfds for the duration of the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
        if rc < 0 {
            continue; // EINTR
        }
        if fds[1].revents != 0 {
            return;
        }
        if let Ok(Some(conn)) = socket::accept(&listener, Some(Instant::now())) {
            // Only our own uid gets the segment; anyone else is hung up on.
            if socket::peer_credentials(&conn).is_ok_and(|(_, u)| u == uid()) {
                let _ = socket::send_packet(&conn, &hello, Some(memfd.as_raw_fd()));
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writing 8 bytes to our eventfd wakes the server's poll.
        unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr() as *const libc::c_void, 8) };
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
