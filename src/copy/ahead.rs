//! How far the copying looks ahead: units whose files are found before their turn, bounded by
//! the keys they hold rather than by their number.
//!
//! `work` finds the files of up to `units_ahead` units at once (on a remote source, so that
//! many shards are in flight). A stored shard's files are known only once its index is read,
//! and a shard of 256 x 256 chunks is 65,536 files, each a path and a node: sixteen such shards
//! found ahead held 400 MiB (issue 35). So a unit is let in only while the keys held by the
//! units let in and not yet copied, with each unit still being found counted as the largest
//! unit seen so far, stay within [`KEYS_AHEAD`]; when nothing is held, the next unit is always
//! let in, so one unit larger than the budget goes through alone. Units are let in in the
//! order the copying takes them (a stream's items, one at a time), so a unit waiting never
//! holds back those before it, whose copies free the keys it waits for.

use std::sync::Mutex;

use tokio::sync::Notify;

/// Keys of the source (files found, chunks of shards being packed) held ahead of and by the
/// copying, beyond which no further unit is let in.
pub const KEYS_AHEAD: u64 = 1 << 17;

/// The gate (see the module notes).
#[derive(Debug)]
pub struct Ahead {
    budget: u64,
    state: Mutex<State>,
    changed: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// Keys of units let in whose keys are known, until they are copied.
    held: u64,
    /// Units let in whose keys are not known yet.
    finding: u64,
    /// The most keys a unit has held so far (none known: 0).
    largest: Option<u64>,
}

impl State {
    fn hold(&mut self, keys: u64) {
        self.held = self.held.saturating_add(keys);
        self.largest = Some(self.largest.unwrap_or(0).max(keys));
    }

    /// Whether a unit holding `keys` (not known yet: `None`) may be let in.
    fn admits(&self, keys: Option<u64>, budget: u64) -> bool {
        if self.held == 0 && self.finding == 0 {
            return true;
        }
        let largest = match self.largest {
            Some(largest) => largest.max(1),
            None if self.finding == 0 => 1,
            // A unit is being found and none has been: how much it holds is not known yet.
            None => return false,
        };
        let unit = keys.unwrap_or(largest);
        let pending = self.finding.saturating_mul(largest).saturating_add(unit);
        self.held.saturating_add(pending) <= budget
    }
}

impl Ahead {
    pub fn new(budget: u64) -> Ahead {
        Ahead {
            budget,
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait until a unit holding `keys` (not known until its files are found: `None`, and
    /// [`Ahead::found`] says them) may be let in, and let it in.
    pub async fn enter(&self, keys: Option<u64>) {
        loop {
            let changed = self.changed.notified();
            {
                let mut state = self.state();
                if state.admits(keys, self.budget) {
                    match keys {
                        Some(keys) => state.hold(keys),
                        None => state.finding += 1,
                    }
                    return;
                }
            }
            changed.await;
        }
    }

    /// A unit let in by `enter(None)` holds `keys`.
    pub fn found(&self, keys: u64) {
        let mut state = self.state();
        state.finding = state.finding.saturating_sub(1);
        state.hold(keys);
        drop(state);
        self.changed.notify_waiters();
    }

    /// A unit holding `keys` is copied.
    pub fn done(&self, keys: u64) {
        let mut state = self.state();
        state.held = state.held.saturating_sub(keys);
        drop(state);
        self.changed.notify_waiters();
    }

    /// Keys held now by units let in (for tests).
    #[cfg(test)]
    fn held(&self) -> u64 {
        self.state().held
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn enters_soon(ahead: &Ahead) -> bool {
        tokio::time::timeout(Duration::from_millis(50), ahead.enter(None))
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn the_first_unit_goes_alone_until_its_size_is_known() {
        let ahead = Ahead::new(100);
        assert!(enters_soon(&ahead).await);
        assert!(!enters_soon(&ahead).await, "a second unit before the first is found");
        ahead.found(30);
        // 30 held, each further unit counted as 30: two more fit in 100.
        assert!(enters_soon(&ahead).await);
        assert!(enters_soon(&ahead).await);
        assert!(!enters_soon(&ahead).await, "30 + 3 x 30 > 100");
        ahead.found(30);
        ahead.found(30);
        assert_eq!(ahead.held(), 90);
        ahead.done(30);
        ahead.done(30);
        assert!(enters_soon(&ahead).await);
    }

    #[tokio::test]
    async fn a_unit_larger_than_the_budget_goes_through_alone() {
        let ahead = Ahead::new(100);
        assert!(enters_soon(&ahead).await);
        ahead.found(500);
        assert!(!enters_soon(&ahead).await);
        ahead.done(500);
        assert!(enters_soon(&ahead).await);
    }

    #[tokio::test]
    async fn units_of_known_size_count_at_once() {
        let ahead = Ahead::new(100);
        let enter = |keys| tokio::time::timeout(Duration::from_millis(50), ahead.enter(Some(keys)));
        assert!(enter(60).await.is_ok());
        assert!(enter(40).await.is_ok());
        assert_eq!(ahead.held(), 100);
        assert!(enter(1).await.is_err(), "100 held");
        ahead.done(60);
        assert!(enter(50).await.is_ok());
        assert!(enter(20).await.is_err(), "40 + 50 + 20 > 100");
    }

    #[tokio::test]
    async fn a_waiting_unit_enters_when_keys_are_given_back() {
        let ahead = std::sync::Arc::new(Ahead::new(10));
        ahead.enter(None).await;
        ahead.found(10);
        let waiting = tokio::spawn({
            let ahead = ahead.clone();
            async move { ahead.enter(None).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished());
        ahead.done(10);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("let in once the keys were given back")
            .expect("the task ran");
    }
}
