//! Is a member's process still alive? A pid alone can be reused, so a member records its pid and its
//! process start time (field 22 of /proc/PID/stat, in clock ticks since boot); the pair names one
//! process for the life of the machine. Members of a bus share one pid namespace (one node).

/// The start time of process `pid`, or `None` when there is no such process.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces or ')': parse after the last ')'.
    let after = stat.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&stat[after + 1..]).ok()?;
    // Fields after the name start at field 3; the start time is field 22.
    rest.split_ascii_whitespace().nth(22 - 3)?.parse().ok()
}

/// This process: (pid, start time).
pub fn me() -> (u32, u64) {
    let pid = std::process::id();
    (pid, start_time(pid).unwrap_or(0))
}

/// Whether some process `pid` runs (for a record reserved a moment ago, when no start time is written yet).
pub fn alive_pid(pid: u32) -> bool {
    pid != 0 && start_time(pid).is_some()
}

/// Whether the process identified by (pid, start) is still running (a zombie counts as gone).
pub fn alive(pid: u32, start: u64) -> bool {
    if pid == 0 {
        return false;
    }
    if pid == std::process::id() {
        return true;
    }
    match std::fs::read(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let zombie = stat.iter().rposition(|&b| b == b')').and_then(|i| stat.get(i + 2)).is_some_and(|&s| s == b'Z' || s == b'X');
            !zombie && start_time(pid) == Some(start)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_wrong_start_time_is_not() {
        let (pid, start) = me();
        assert!(start > 0);
        assert!(alive(pid, start));
        assert!(!alive(1 << 30, 1));
        let parent = std::os::unix::process::parent_id();
        let parent_start = start_time(parent).unwrap();
        assert!(alive(parent, parent_start));
        assert!(!alive(parent, parent_start + 1));
    }
}
