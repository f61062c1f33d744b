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
