//! The process's limit on open file descriptors (`RLIMIT_NOFILE`, `ulimit -n`).
//!
//! The daemon holds a descriptor for every file it spills to disk (see `fs/buffer.rs`), for
//! the shards its local store keeps open, and briefly for every shard it reads or commits. A
//! soft limit of 1024 (the usual default, kept low only for programs that use `select`) is
//! reached by a couple of thousand files being written at once, so at startup the soft limit
//! is raised to the hard one, as far as the kernel allows (`fs.nr_open`). Nothing here uses
//! `select`. What remains is read by the local store (to size its cache of open files) and by
//! the error log (to say which limit ran out).

/// Most descriptors ever asked for, whatever the hard limit says (`unlimited` cannot be set).
const CEILING: u64 = 1 << 20;

fn get() -> Option<libc::rlimit> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    (unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0).then_some(limit)
}

/// A limit as a number (`rlim_t` is narrower on 32-bit targets).
#[allow(clippy::useless_conversion)]
fn n(value: libc::rlim_t) -> u64 {
    u64::from(value)
}

/// The soft limit now (`None` if it cannot be read).
pub fn soft() -> Option<u64> {
    get().map(|l| n(l.rlim_cur))
}

/// The most the soft limit can be: the hard limit, within what the kernel allows at all.
fn reachable(hard: u64) -> u64 {
    let nr_open = std::fs::read_to_string("/proc/sys/fs/nr_open")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(CEILING);
    hard.min(nr_open).min(CEILING)
}

/// Raise the soft limit to the hard one; returns (before, after) when it changed.
pub fn raise() -> Option<(u64, u64)> {
    let limit = get()?;
    let before = n(limit.rlim_cur);
    let want = reachable(n(limit.rlim_max));
    if want <= before {
        return None;
    }
    let raised = libc::rlimit {
        rlim_cur: libc::rlim_t::try_from(want).ok()?,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit reads one rlimit we own.
    (unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0).then_some((before, want))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_raised_to_the_hard_one() {
        let limit = get().unwrap();
        raise();
        let want = reachable(n(limit.rlim_max)).max(n(limit.rlim_cur));
        assert_eq!(soft(), Some(want));
        assert_eq!(raise(), None, "a second raise changes nothing");
    }
}
