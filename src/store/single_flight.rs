//! Single flight: at most one request per name in flight; whoever needs the same answer
//! meanwhile waits for it instead of sending a duplicate.
//!
//! A cache that fetches `name` first [`Flights::board`]s it: the first caller goes straight
//! on; a caller that finds a flight on waits until it lands, and is told it waited, so that it
//! looks in the cache again (where the first caller left its answer) before fetching. The
//! answer itself travels through the cache, not through the flight, so nothing is handed on
//! that the cache would not keep (a listing that raced a write, an answer of a TTL of zero):
//! then the waiter fetches for itself, which is what it would have done without the wait.
//!
//! A flight is a per-name async mutex in a map; the last one to leave removes the entry. A
//! waiter dropped while waiting (a cancelled request) may leave an unused entry behind, which
//! the next flight of that name reuses and removes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

/// The flights in progress, by name.
#[derive(Debug, Default)]
pub struct Flights {
    on: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// A flight held: the name is this caller's to fetch until it is dropped.
#[derive(Debug)]
pub struct Flight<'a> {
    flights: &'a Flights,
    name: String,
    guard: Option<OwnedMutexGuard<()>>,
}

impl Flights {
    /// Hold the flight of `name`, waiting for one in progress to land first. Returns whether
    /// it waited (the caller then looks for the answer the other flight left before fetching).
    pub async fn board(&self, name: &str) -> (Flight<'_>, bool) {
        let lock = self
            .on
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(name.to_string())
            .or_default()
            .clone();
        let (guard, waited) = match lock.clone().try_lock_owned() {
            Ok(guard) => (guard, false),
            Err(_) => (lock.lock_owned().await, true),
        };
        let flight = Flight {
            flights: self,
            name: name.to_string(),
            guard: Some(guard),
        };
        (flight, waited)
    }

    /// Wait for the flight of `name` to land, if one is on, without holding it. Returns
    /// whether one was on.
    pub async fn wait(&self, name: &str) -> bool {
        let lock = self.on.lock().unwrap_or_else(|e| e.into_inner()).get(name).cloned();
        let Some(lock) = lock else {
            return false;
        };
        let waited = lock.try_lock().is_err();
        if waited {
            drop(lock.lock().await);
        }
        waited
    }

    /// Names with a flight on or waited for (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.on.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let mut on = self.flights.on.lock().unwrap_or_else(|e| e.into_inner());
        let Some(guard) = self.guard.take() else {
            return;
        };
        let lock = OwnedMutexGuard::mutex(&guard).clone();
        drop(guard);
        // Held by the map and by `lock` alone: nobody waits. Waiters take their clone under
        // the map's lock, so none can appear while it is held.
        if Arc::strong_count(&lock) == 2 {
            on.remove(&self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn a_second_caller_waits_for_the_first_and_is_told() {
        let flights = Arc::new(Flights::default());
        let fetched = Arc::new(AtomicUsize::new(0));
        let answer = Arc::new(Mutex::new(None::<u32>));
        let fetch = |flights: Arc<Flights>, fetched: Arc<AtomicUsize>, answer: Arc<Mutex<Option<u32>>>| async move {
            let (_flight, waited) = flights.board("k").await;
            if let Some(kept) = *answer.lock().unwrap() {
                return (kept, waited);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            fetched.fetch_add(1, Ordering::SeqCst);
            *answer.lock().unwrap() = Some(7);
            (7, waited)
        };
        let (a, b) = tokio::join!(
            fetch(flights.clone(), fetched.clone(), answer.clone()),
            fetch(flights.clone(), fetched.clone(), answer.clone())
        );
        assert_eq!((a.0, b.0), (7, 7));
        assert_eq!(fetched.load(Ordering::SeqCst), 1, "one fetch for two callers");
        assert!(a.1 != b.1, "exactly one of them waited: {a:?} {b:?}");
        assert_eq!(flights.len(), 0, "nothing left behind");
    }

    #[tokio::test]
    async fn other_names_fly_at_once_and_a_cancelled_waiter_blocks_nothing() {
        let flights = Flights::default();
        let (_a, waited_a) = flights.board("a").await;
        let (_b, waited_b) = flights.board("b").await;
        assert!(!waited_a && !waited_b);
        // A waiter for "a" given up before the flight lands.
        let gave_up = tokio::time::timeout(Duration::from_millis(20), flights.board("a")).await;
        assert!(gave_up.is_err());
        drop(_a);
        let (again, waited) = flights.board("a").await;
        assert!(!waited);
        drop(again);
        drop(_b);
        assert_eq!(flights.len(), 0);
    }
}
