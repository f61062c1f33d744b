//! Points inside operations where a unit test runs code of its own: a release arriving between
//! two steps of a rename, a writer getting a file the moment a commit lets go of it. The races
//! they pin down need another thread at exactly that moment, which a test cannot arrange
//! otherwise. Compiled into unit tests only; a hook is per thread and runs once.

use std::cell::RefCell;

/// Where a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    /// A write-back commit has released the content of a file it committed.
    ContentReleased,
    /// A rename has moved a held file to its new name, before its last step.
    Moved,
    /// An open for writing holds its file, before it takes the file's pending mark.
    Held,
}

type Hook = Box<dyn FnOnce()>;

thread_local! {
    static HOOKS: RefCell<Vec<(Point, Hook)>> = const { RefCell::new(Vec::new()) };
}

/// Run `hook` the next time this thread reaches `point`.
pub(crate) fn at(point: Point, hook: impl FnOnce() + 'static) {
    HOOKS.with(|h| h.borrow_mut().push((point, Box::new(hook))));
}

/// This thread reached `point`: run the first hook set there.
pub(crate) fn reached(point: Point) {
    let hook = HOOKS.with(|h| {
        let mut hooks = h.borrow_mut();
        let i = hooks.iter().position(|(p, _)| *p == point)?;
        Some(hooks.remove(i).1)
    });
    if let Some(hook) = hook {
        hook();
    }
}

/// Whether a hook set at `point` has not run yet.
pub(crate) fn waiting(point: Point) -> bool {
    HOOKS.with(|h| h.borrow().iter().any(|(p, _)| *p == point))
}
