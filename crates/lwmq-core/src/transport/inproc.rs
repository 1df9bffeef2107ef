//! inproc://name — two channels in one process. The pools live in anonymous memory and received frames
//! are views into them (zero-copy), through the same ring link that ipc:// uses across processes.

use super::options::{direction, Options};
use super::pool::{Layout, Region};
use super::ring_link::RingLink;
use super::{Capabilities, Link, Listener, Provider, Registration, Uri};
use crate::error::{Error, Result};
use crate::sync::Deadline;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

pub struct Inproc;

inventory::submit! { Registration(&Inproc) }

struct Backlog {
    options: Options,
    pending: Mutex<VecDeque<RingLink>>,
    ready: Condvar,
    closed: AtomicBool,
}

type Names = (Mutex<HashMap<String, Arc<Backlog>>>, Condvar);

/// Bound names, and a condvar that connectors wait on until a listener appears.
fn names() -> &'static Names {
    static NAMES: OnceLock<Names> = OnceLock::new();
    NAMES.get_or_init(|| (Mutex::new(HashMap::new()), Condvar::new()))
}

fn until(deadline: Deadline) -> Option<Duration> {
    match deadline {
        None => Some(Duration::from_millis(100)),
        Some(d) => d.checked_duration_since(Instant::now()).filter(|t| !t.is_zero()),
    }
}

impl Provider for Inproc {
    fn name(&self) -> &'static str {
        "inproc"
    }
    fn schemes(&self) -> &'static [&'static str] {
        &["inproc"]
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities { send: true, receive: true, zero_copy: true, ..Capabilities::default() }
    }
    fn check_address(&self, uri: &Uri) -> Result<()> {
        let name = &uri.rest;
        if name.is_empty() || name.len() > 255 || name.chars().any(char::is_whitespace) {
            return Err(Error::Address(format!(
                "{uri}: an inproc name is 1 to 255 bytes without whitespace"
            )));
        }
        Ok(())
    }

    fn listen(&self, uri: &Uri, options: &Options) -> Result<Box<dyn Listener>> {
        let (map, appeared) = names();
        let mut map = map.lock().unwrap();
        if map.contains_key(&uri.rest) {
            return Err(Error::AddressInUse(uri.to_string()));
        }
        let backlog = Arc::new(Backlog {
            options: options.clone(),
            pending: Mutex::new(VecDeque::new()),
            ready: Condvar::new(),
            closed: AtomicBool::new(false),
        });
        map.insert(uri.rest.clone(), backlog.clone());
        appeared.notify_all();
        Ok(Box::new(InprocListener { name: uri.rest.clone(), backlog }))
    }

    fn connect(&self, uri: &Uri, options: &Options, deadline: Deadline) -> Result<Box<dyn Link>> {
        let backlog = {
            let (map, appeared) = names();
            let mut map = map.lock().unwrap();
            loop {
                if let Some(b) = map.get(&uri.rest) {
                    break b.clone();
                }
                let Some(wait) = until(deadline) else {
                    return Err(Error::Timeout(format!("no listener at {uri}")));
                };
                map = appeared.wait_timeout(map, wait).unwrap().0;
            }
        };
        // Direction 0: connector → listener; direction 1: listener → connector.
        let layout = Layout::new([direction(options, &backlog.options), direction(&backlog.options, options)])?;
        let region = Region::anonymous(layout)?;
        let ours = RingLink::attach(&region, 0, options.wait_policy(), format!("{uri} (listener)"))?;
        let theirs = RingLink::attach(&region, 1, backlog.options.wait_policy(), format!("{uri} (connector)"))?;
        let mut pending = backlog.pending.lock().unwrap();
        if backlog.closed.load(Ordering::Acquire) {
            return Err(Error::PeerGone(format!("the listener at {uri} closed")));
        }
        pending.push_back(theirs);
        backlog.ready.notify_one();
        Ok(Box::new(ours))
    }
}

struct InprocListener {
    name: String,
    backlog: Arc<Backlog>,
}

impl Listener for InprocListener {
    fn accept(&self, deadline: Deadline) -> Result<Box<dyn Link>> {
        let mut pending = self.backlog.pending.lock().unwrap();
        loop {
            if self.backlog.closed.load(Ordering::Acquire) {
                return Err(Error::ChannelClosed);
            }
            if let Some(link) = pending.pop_front() {
                return Ok(Box::new(link));
            }
            let Some(wait) = until(deadline) else {
                return Err(Error::Timeout(format!("no peer connected to inproc://{}", self.name)));
            };
            pending = self.backlog.ready.wait_timeout(pending, wait).unwrap().0;
        }
    }

    fn close(&self) {
        if self.backlog.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        let (map, _) = names();
        let mut map = map.lock().unwrap();
        if map.get(&self.name).is_some_and(|b| Arc::ptr_eq(b, &self.backlog)) {
            map.remove(&self.name);
        }
        drop(map);
        // Links never accepted close now: their connectors see PeerGone.
        self.backlog.pending.lock().unwrap().clear();
        self.backlog.ready.notify_all();
    }

    fn address(&self) -> String {
        format!("inproc://{}", self.name)
    }
}

impl Drop for InprocListener {
    fn drop(&mut self) {
        self.close();
    }
}
