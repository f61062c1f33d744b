//! How the adapter answers a request. Its future is first polled once, inline, on the FUSE
//! worker thread that received it: a request answered from caches or the local disk completes
//! right there, without handing the work to another thread (a handoff costs as much as a
//! page-cache read). A request that has to wait (a remote read) returns pending and is moved
//! onto the tokio runtime, so it never holds a FUSE worker thread and never stalls the others.
//!
//! Every request's time from arrival to reply is recorded by operation (`fs/latency.rs`).
//!
//! Every request runs in a tracing span `fuse{op, ino, fh, name}`: with `RUST_LOG=debug`,
//! every event on its way through the layers carries it, and its end is logged with its
//! duration. A failure is logged as loudly as the error says, and answered with the errno
//! `fs/error.rs` chose.

use std::ffi::OsStr;
use std::future::Future;
use std::sync::Arc;
use std::task::Context;
use std::time::Instant;

use fuser::{FileHandle, INodeNo, Request};
use tracing::Instrument;

use super::adapter::ZarrFuse;
use super::reply::ErrorReply;
use crate::fs::{Fs, FsError, FsResult};

/// The request being answered, for its span and its failure log, and who sent it.
pub(super) struct Op<'a> {
    name: &'static str,
    ino: u64,
    fh: Option<u64>,
    entry: Option<&'a str>,
    /// The calling thread's id.
    pid: u32,
}

pub(super) fn op(req: &Request, name: &'static str, ino: INodeNo) -> Op<'static> {
    Op {
        name,
        ino: ino.0,
        fh: None,
        entry: None,
        pid: req.pid(),
    }
}

impl<'a> Op<'a> {
    pub(super) fn fh(self, fh: FileHandle) -> Self {
        Op { fh: Some(fh.0), ..self }
    }

    pub(super) fn entry<'b>(self, entry: &'b str) -> Op<'b> {
        Op {
            name: self.name,
            ino: self.ino,
            fh: self.fh,
            entry: Some(entry),
            pid: self.pid,
        }
    }

    pub(super) fn span(&self) -> tracing::Span {
        tracing::debug_span!("fuse", op = self.name, ino = self.ino, fh = ?self.fh, name = ?self.entry)
    }
}

impl ZarrFuse {
    /// Run a request: inline if it completes at once, else as a task on the runtime.
    pub(super) fn run(&self, op: &'static str, request: impl Future<Output = ()> + Send + 'static) {
        crate::sys::threads::register_serving();
        let _context = self.rt.enter();
        let mut request = Box::pin(request);
        let mut cx = Context::from_waker(futures::task::noop_waker_ref());
        if request.as_mut().poll(&mut cx).is_pending() {
            // Whatever it waits on is registered again with the task's real waker when the
            // runtime polls it, so the no-op waker of the first poll is never relied upon.
            tracing::trace!(op, "request waits; continued on the runtime");
            self.rt.spawn(request);
        }
    }

    /// Answer a request: `done` replies with its value, a failure replies with its errno (and
    /// is logged as loudly as the error says). A request the daemon sent itself is refused
    /// before anything runs (see [`from_this_daemon`]).
    pub(super) fn answer<R: ErrorReply, T: Send + 'static>(
        &self,
        op: Op<'_>,
        reply: R,
        request: impl Future<Output = FsResult<T>> + Send + 'static,
        done: impl FnOnce(R, T) + Send + 'static,
    ) {
        let (fs, name, ino) = (self.fs.clone(), op.name, op.ino);
        if from_this_daemon(op.pid) {
            fs.fail(name, ino, &FsError::OwnMount);
            return reply.fail(&FsError::OwnMount);
        }
        let span = op.span();
        let arrived = Instant::now();
        self.run(
            name,
            async move {
                match request.await {
                    Ok(value) => done(reply, value),
                    Err(e) => {
                        fs.fail(name, ino, &e);
                        reply.fail(&e);
                    }
                }
                fs.answered(name, arrived.elapsed());
            }
            .instrument(span),
        );
    }

    /// [`answer`](Self::answer) a request about `name` in `ino`; a name that is not UTF-8 (no
    /// Zarr key can hold it) is answered with `refusal`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn answer_named<R: ErrorReply, T: Send + 'static, F>(
        &self,
        op: Op<'static>,
        name: &OsStr,
        refusal: FsError,
        reply: R,
        request: impl FnOnce(Arc<Fs>, String) -> F,
        done: impl FnOnce(R, T) + Send + 'static,
    ) where
        F: Future<Output = FsResult<T>> + Send + 'static,
    {
        let Some(name) = name.to_str() else {
            return reply.fail(&refusal);
        };
        let request = request(self.fs.clone(), name.to_string());
        self.answer(op.entry(name), reply, request, done);
    }
}

/// Whether `pid`, the thread that made a request, serves this mount (a FUSE thread or one of
/// the runtime's). Such a thread reaches its own mount only through the source: a symlink or
/// bind mount in a local source that leads into the mountpoint (a source that contains the
/// mountpoint is refused at mount). It then waits in the kernel for the answer to a request
/// that another FUSE thread would serve by going through the mount again, and so on until
/// every FUSE thread waits and the mount hangs for good. Such a request is refused at once
/// (ELOOP), so the daemon's own access fails instead. Other threads of the process (a test
/// that mounts in-process) are served as any caller.
fn from_this_daemon(pid: u32) -> bool {
    crate::sys::threads::is_serving(pid)
}
