//! Which kind of thread the caller is on, for the layers that decide where blocking work runs
//! (local file I/O, shard commits). zarrfs runs one multi-thread tokio runtime; FUSE threads
//! enter it and poll each request inline first (`fuse/request.rs`), so a request that never
//! waits is answered on its FUSE thread without a hand-over.

use tokio::runtime::{Handle, RuntimeFlavor};

/// Inside a task on a worker of a multi-thread runtime: blocking here must go through
/// `block_in_place`, which first hands the worker's other tasks to another thread.
pub fn on_runtime_worker() -> bool {
    tokio::task::try_id().is_some() && multi_thread()
}

/// On a thread that has entered a multi-thread runtime but runs no task of it (a FUSE thread
/// polling its request): work done here holds up no task of the runtime.
pub fn beside_runtime() -> bool {
    tokio::task::try_id().is_none() && multi_thread()
}

fn multi_thread() -> bool {
    Handle::try_current().is_ok_and(|h| h.runtime_flavor() == RuntimeFlavor::MultiThread)
}

/// The ids of the threads that serve the mount: FUSE threads (registered at their first
/// request) and the runtime's threads (registered as they start, removed as they stop).
static SERVING: std::sync::RwLock<Vec<u32>> = std::sync::RwLock::new(Vec::new());

thread_local! {
    static REGISTERED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn current_tid() -> u32 {
    u32::try_from(nix::unistd::gettid().as_raw()).unwrap_or(0)
}

/// Count the calling thread as serving the mount (once per thread).
pub fn register_serving() {
    if REGISTERED.with(|r| r.replace(true)) {
        return;
    }
    let tid = current_tid();
    SERVING.write().unwrap_or_else(|e| e.into_inner()).push(tid);
}

/// The calling thread is ending: its id may be reused by another process's thread.
pub fn unregister_serving() {
    if !REGISTERED.with(|r| r.replace(false)) {
        return;
    }
    let tid = current_tid();
    SERVING.write().unwrap_or_else(|e| e.into_inner()).retain(|t| *t != tid);
}

/// Whether thread `tid` serves the mount: a request it makes of the mount would wait on the
/// mount itself (see `fuse/request.rs`).
pub fn is_serving(tid: u32) -> bool {
    tid != 0 && SERVING.read().unwrap_or_else(|e| e.into_inner()).contains(&tid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_threads_are_known_until_they_stop() {
        let other = std::thread::spawn(|| {
            register_serving();
            register_serving();
            let tid = current_tid();
            assert!(is_serving(tid));
            unregister_serving();
            tid
        })
        .join()
        .unwrap();
        assert!(!is_serving(other));
        assert!(!is_serving(current_tid()), "a thread that never served is not counted");
        assert!(!is_serving(0));
    }
}
