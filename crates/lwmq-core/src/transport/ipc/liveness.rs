//! Peer liveness: the rendezvous socket stays open for a channel's life, and its hang-up means the peer is
//! gone (even after SIGKILL the kernel closes it). One epoll thread per process watches every ipc socket
//! and, on hang-up, marks the channel's shared directions closed and wakes every waiter at once. The
//! thread starts with the first watched socket and ends when none is left.

use std::collections::HashMap;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex, OnceLock};

type OnGone = Box<dyn Fn() + Send>;

struct State {
    epoll: Option<Arc<OwnedFd>>,
    entries: HashMap<u64, (RawFd, OnGone)>,
    next_token: u64,
}

fn state() -> &'static Mutex<State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    STATE.get_or_init(|| Mutex::new(State { epoll: None, entries: HashMap::new(), next_token: 1 }))
}

/// Deregisters its socket when dropped (before the socket is closed: the owner drops this first).
pub struct Watch {
    token: u64,
}

/// Calls `on_gone` once when `fd` hangs up. `fd` must stay open until the returned Watch is dropped.
pub fn watch(fd: RawFd, on_gone: impl Fn() + Send + 'static) -> std::io::Result<Watch> {
    let mut st = state().lock().unwrap();
    let epoll = match &st.epoll {
        Some(e) => e.clone(),
        None => {
            // SAFETY: plain syscall; the descriptor is owned below.
            let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if raw < 0 {
                return Err(std::io::Error::last_os_error());
            }
            // SAFETY: fresh descriptor.
            let e = Arc::new(unsafe { OwnedFd::from_raw_fd(raw) });
            st.epoll = Some(e.clone());
            let for_thread = e.clone();
            std::thread::Builder::new()
                .name("lwmq-liveness".into())
                .stack_size(128 * 1024)
                .spawn(move || run(for_thread))?;
            e
        }
    };
    let token = st.next_token;
    st.next_token += 1;
    let mut ev = libc::epoll_event { events: (libc::EPOLLRDHUP | libc::EPOLLHUP | libc::EPOLLERR) as u32, u64: token };
    // SAFETY: valid epoll and socket descriptors; `ev` lives for the call.
    if unsafe { libc::epoll_ctl(std::os::fd::AsRawFd::as_raw_fd(&*epoll), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    st.entries.insert(token, (fd, Box::new(on_gone)));
    Ok(Watch { token })
}

fn remove(st: &mut State, token: u64) -> Option<OnGone> {
    let (fd, on_gone) = st.entries.remove(&token)?;
    if let Some(e) = &st.epoll {
        // SAFETY: `fd` is still open (the Watch contract) and registered with this epoll instance.
        unsafe { libc::epoll_ctl(std::os::fd::AsRawFd::as_raw_fd(&**e), libc::EPOLL_CTL_DEL, fd, std::ptr::null_mut()) };
    }
    Some(on_gone)
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut st = state().lock().unwrap();
        remove(&mut st, self.token);
    }
}

fn run(epoll: Arc<OwnedFd>) {
    let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
    loop {
        // SAFETY: `events` is a writable array of 64 epoll_event.
        let n = unsafe { libc::epoll_wait(std::os::fd::AsRawFd::as_raw_fd(&*epoll), events.as_mut_ptr(), 64, 100) };
        let mut gone = Vec::new();
        {
            let mut st = state().lock().unwrap();
            for ev in events.iter().take(n.max(0) as usize) {
                let token = ev.u64;
                if let Some(on_gone) = remove(&mut st, token) {
                    gone.push(on_gone);
                }
            }
            if st.entries.is_empty() && gone.is_empty() {
                st.epoll = None; // the next watch starts a new thread
                return;
            }
        }
        for on_gone in gone {
            on_gone();
        }
    }
}
