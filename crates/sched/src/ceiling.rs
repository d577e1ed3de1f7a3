//! Ceiling locks: mutexes and read-write locks whose critical sections run at normal
//! priority on any thread, for state that the untrusted lane's threads and trusted work
//! both lock (the pool, the budgets' ledger, the peer table, the fetcher).

use crate::{Raised, current};

/// A mutex whose sections run at normal priority on any thread ([`Raised`]): for state
/// that the untrusted lane's threads and trusted work both lock.
///
/// A lock that is found held is timed: `moat_lock_wait_seconds{lock,lane}` (the waiter's
/// lane) and `moat_lock_waits_total`; the uncontended path reads no clock.
#[derive(Debug, Default)]
pub struct CeilingMutex<T> {
    lock: parking_lot::Mutex<T>,
    name: &'static str,
}

/// Takes a lock through `try_take` when it is free; otherwise waits in `take` and records
/// the wait ([`waited`]).
fn take_timed<G>(
    name: &'static str,
    try_take: impl FnOnce() -> Option<G>,
    take: impl FnOnce() -> G,
) -> G {
    if let Some(guard) = try_take() {
        return guard;
    }
    let since = std::time::Instant::now();
    let guard = take();
    waited(name, since);
    guard
}

/// Records a wait for a contended lock ([`CeilingMutex`], [`CeilingRwLock`]).
fn waited(name: &'static str, since: std::time::Instant) {
    let lane = current().as_str();
    metrics::histogram!("moat_lock_wait_seconds", "lock" => name, "lane" => lane)
        .record(since.elapsed());
    metrics::counter!("moat_lock_waits_total", "lock" => name, "lane" => lane).increment(1);
}

/// A lock guard `G` of a ceiling lock, held at normal priority: the priority goes back
/// down after the lock is free. One type for [`CeilingMutex`]'s and [`CeilingRwLock`]'s
/// guards.
pub struct Ceiling<G> {
    // Field order is drop order: the lock first, then the priority.
    guard: G,
    _raised: Raised,
}

impl<G> Ceiling<G> {
    /// Raises the thread, then takes the lock ([`take_timed`]).
    fn take(
        name: &'static str,
        try_take: impl FnOnce() -> Option<G>,
        take: impl FnOnce() -> G,
    ) -> Self {
        let raised = Raised::new();
        Ceiling {
            guard: take_timed(name, try_take, take),
            _raised: raised,
        }
    }

    /// Raises the thread and takes the lock if it is free (lowered again if not).
    fn try_take(try_take: impl FnOnce() -> Option<G>) -> Option<Self> {
        let raised = Raised::new();
        Some(Ceiling {
            guard: try_take()?,
            _raised: raised,
        })
    }
}

impl<G: std::ops::Deref> std::ops::Deref for Ceiling<G> {
    type Target = G::Target;
    fn deref(&self) -> &G::Target {
        &self.guard
    }
}

impl<G: std::ops::DerefMut> std::ops::DerefMut for Ceiling<G> {
    fn deref_mut(&mut self) -> &mut G::Target {
        &mut self.guard
    }
}

/// The lock of a [`CeilingMutex`].
pub type CeilingGuard<'a, T> = Ceiling<parking_lot::MutexGuard<'a, T>>;
/// A read lock of a [`CeilingRwLock`].
pub type CeilingReadGuard<'a, T> = Ceiling<parking_lot::RwLockReadGuard<'a, T>>;
/// A write lock of a [`CeilingRwLock`].
pub type CeilingWriteGuard<'a, T> = Ceiling<parking_lot::RwLockWriteGuard<'a, T>>;

impl<T> CeilingMutex<T> {
    /// A mutex whose waits are reported under the lock name `other`.
    pub fn new(value: T) -> Self {
        Self::named("other", value)
    }

    /// A mutex whose waits are reported under `name`.
    pub fn named(name: &'static str, value: T) -> Self {
        Self {
            lock: parking_lot::Mutex::new(value),
            name,
        }
    }

    /// Locks, blocking, at normal priority ([`Raised`]); a contended wait is timed under
    /// this lock's name.
    pub fn lock(&self) -> CeilingGuard<'_, T> {
        Ceiling::take(self.name, || self.lock.try_lock(), || self.lock.lock())
    }

    /// Locks if the mutex is free, at normal priority; `None` (and the priority back
    /// down) if it is held.
    pub fn try_lock(&self) -> Option<CeilingGuard<'_, T>> {
        Ceiling::try_take(|| self.lock.try_lock())
    }
}

/// A read-write lock whose sections run at normal priority on any thread ([`Raised`]):
/// the peer table, which the untrusted lane reads and the runtime writes (a peer
/// arriving or leaving). A writer waiting for a preempted reader would hold up every
/// later reader behind it.
#[derive(Debug, Default)]
pub struct CeilingRwLock<T> {
    lock: parking_lot::RwLock<T>,
    name: &'static str,
}

impl<T> CeilingRwLock<T> {
    /// A lock whose waits are reported under the lock name `other`.
    pub fn new(value: T) -> Self {
        Self::named("other", value)
    }

    /// A lock whose waits are reported under `name` (as [`CeilingMutex`]'s).
    pub fn named(name: &'static str, value: T) -> Self {
        Self {
            lock: parking_lot::RwLock::new(value),
            name,
        }
    }

    /// Takes a shared read lock, blocking, at normal priority ([`Raised`]); a contended
    /// wait is timed.
    pub fn read(&self) -> CeilingReadGuard<'_, T> {
        Ceiling::take(self.name, || self.lock.try_read(), || self.lock.read())
    }

    /// Takes the exclusive write lock, blocking, at normal priority ([`Raised`]); a
    /// contended wait is timed.
    pub fn write(&self) -> CeilingWriteGuard<'_, T> {
        Ceiling::take(self.name, || self.lock.try_write(), || self.lock.write())
    }
}
