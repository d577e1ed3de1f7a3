//! The writer threads of the log: group commit, pipelined syncs, the interval between
//! syncs, the CPU kept awake during one, preallocation, rotation and trimming (see the
//! [`super`] docs).

use super::record::encode_record;
use super::{Command, Gate, INTERVAL_AFTER, PREALLOCATE, Snapshot};
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// What the writer threads share.
pub(super) struct Writers {
    pub(super) path: PathBuf,
    /// The queue. The thread holding it takes the next batch and writes it, and lets it
    /// go before its sync, so that another thread writes and syncs the next batch.
    /// A std mutex, not parking_lot's: it is held across a blocking `recv`, and
    /// parking_lot's waiters spin and `sched_yield` before they sleep (seen in the
    /// writers' profile with three of them).
    pub(super) commands: std::sync::Mutex<mpsc::Receiver<Command>>,
    pub(super) file: Mutex<FileState>,
    /// Batches synced and not yet answered (an earlier one is still syncing).
    pub(super) acks: Mutex<Acks>,
    pub(super) size: Arc<AtomicU64>,
    pub(super) rotated_size: Arc<AtomicU64>,
    pub(super) gate: Arc<Gate>,
    /// Syncs running, and the thread waiting for them with the next batch.
    pub(super) in_flight: InFlight,
    /// Age a sync in flight must reach before the next batch's sync starts beside it.
    pub(super) overlap_after: Duration,
    /// The CPU kept running while a sync is in flight.
    pub(super) awake: Arc<Awake>,
    /// Shortest time between two syncs' starts, and when the last one started with how
    /// many records.
    pub(super) interval: Duration,
    pub(super) last_sync: Mutex<Option<(Instant, usize)>>,
    /// A sync failed: what the file holds after the last good sync is unknown, and a
    /// reader stops at the first damaged record, so no later batch is written or
    /// acknowledged until a rotation has rewritten the file from the pool.
    pub(super) sync_failed: AtomicBool,
    #[cfg(test)]
    pub(super) test: TestHooks,
}

/// A thread of the lowest scheduling class that spins while a sync is in flight, at most
/// `limit` per sync, and sleeps otherwise (see the module docs).
pub(super) struct Awake {
    /// Syncs in flight.
    pub(super) syncing: AtomicUsize,
    pub(super) limit: Duration,
    pub(super) stop: AtomicBool,
    /// The spinning thread (unparked when a sync starts with none in flight).
    pub(super) thread: std::sync::OnceLock<std::thread::Thread>,
    /// Whether it is spinning now, how many times it started, and how many times it
    /// stopped at its limit with the sync still in flight (tests).
    pub(super) spinning: AtomicBool,
    pub(super) spins: AtomicU64,
    pub(super) capped: AtomicU64,
    /// Whether it runs in the lowest scheduling class (it does not spin otherwise).
    pub(super) lowered: AtomicBool,
}

impl Awake {
    pub(super) fn new(limit: Duration) -> Self {
        Self {
            syncing: AtomicUsize::new(0),
            limit,
            stop: AtomicBool::new(false),
            thread: std::sync::OnceLock::new(),
            spinning: AtomicBool::new(false),
            spins: AtomicU64::new(0),
            capped: AtomicU64::new(0),
            lowered: AtomicBool::new(false),
        }
    }

    /// A sync starts.
    pub(super) fn begin(&self) {
        if self.syncing.fetch_add(1, Ordering::AcqRel) == 0
            && let Some(thread) = self.thread.get()
        {
            thread.unpark();
        }
    }

    /// A sync returned.
    pub(super) fn end(&self) {
        self.syncing.fetch_sub(1, Ordering::AcqRel);
    }

    pub(super) fn run(&self) {
        // Spinning at a normal priority would take CPU from admission: not at all then.
        if !moat_sched::set_idle(true) {
            return;
        }
        self.lowered.store(true, Ordering::Release);
        let busy = || self.syncing.load(Ordering::Acquire) > 0;
        while !self.stop.load(Ordering::Acquire) {
            if !busy() {
                std::thread::park();
                continue;
            }
            self.spinning.store(true, Ordering::Release);
            self.spins.fetch_add(1, Ordering::Relaxed);
            let until = Instant::now() + self.limit;
            while busy() && Instant::now() < until {
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
            }
            self.spinning.store(false, Ordering::Release);
            if busy() {
                self.capped.fetch_add(1, Ordering::Relaxed);
            }
            // A sync slower than the limit is waited out without spinning.
            while busy() && !self.stop.load(Ordering::Acquire) {
                std::thread::park_timeout(self.limit);
            }
        }
    }
}

/// The syncs running: when each started, by batch number.
#[derive(Default)]
pub(super) struct InFlight {
    pub(super) started: Mutex<std::collections::BTreeMap<u64, Instant>>,
    /// A batch waiting for a sync to return or to grow old (unparked when one returns).
    pub(super) waiter: Mutex<Option<std::thread::Thread>>,
}

impl InFlight {
    pub(super) fn oldest(&self) -> Option<Instant> {
        self.started.lock().values().next().copied()
    }

    pub(super) fn wait_by(&self, me: &std::thread::Thread) {
        let mut waiter = self.waiter.lock();
        if waiter.as_ref().is_none_or(|w| w.id() != me.id()) {
            *waiter = Some(me.clone());
        }
    }

    pub(super) fn start(&self, batch: u64) {
        self.started.lock().insert(batch, Instant::now());
    }

    pub(super) fn end(&self, batch: u64) {
        self.started.lock().remove(&batch);
        if let Some(waiter) = self.waiter.lock().take() {
            waiter.unpark();
        }
    }
}

/// The file and where its next batch goes.
pub(super) struct FileState {
    pub(super) file: Arc<File>,
    /// Where the next record goes: the end of the last one.
    pub(super) end: u64,
    /// The file's length: records up to `end`, zeros after.
    pub(super) allocated: u64,
    /// Number of the next batch written (batches are answered in this order).
    pub(super) next_batch: u64,
}

/// A batch written and waiting for its sync.
pub(super) struct Batch {
    pub(super) number: u64,
    pub(super) file: Arc<File>,
    pub(super) written: io::Result<()>,
    pub(super) records: usize,
    pub(super) waiting: Vec<oneshot::Sender<io::Result<()>>>,
}

/// The appends of a batch, waiting for its answer.
pub(super) type Answers = Vec<oneshot::Sender<io::Result<()>>>;

/// Synced batches held back until every earlier batch is synced too.
#[derive(Default)]
pub(super) struct Acks {
    /// The batch to answer next.
    pub(super) next: u64,
    /// The first batch whose sync failed since the last rotation: it and every batch
    /// after it are answered with an error.
    pub(super) failed_from: Option<u64>,
    pub(super) synced: std::collections::BTreeMap<u64, (io::Result<()>, Answers)>,
}

#[cfg(test)]
#[derive(Default)]
pub(super) struct TestHooks {
    /// A delay before each sync, by batch number.
    pub(super) delays: Mutex<std::collections::HashMap<u64, Duration>>,
    /// Batches whose sync fails (as an I/O error of the disk would).
    pub(super) failing_syncs: Mutex<std::collections::HashSet<u64>>,
    /// Syncs running now, and the most seen at once.
    pub(super) syncing: AtomicUsize,
    pub(super) most_syncing: AtomicUsize,
}

impl Writers {
    pub(super) fn run(self: Arc<Self>) {
        let me = std::thread::current();
        let mut records = Vec::new();
        let mut waiting = Vec::new();
        loop {
            // Nothing panics while holding it; a poisoned queue is still the queue.
            let commands = self.commands.lock().unwrap_or_else(|e| e.into_inner());
            let Ok(first) = commands.recv() else {
                break;
            };
            let gather = Duration::from_nanos(self.gate.gather_ns.load(Ordering::Relaxed));
            let mut next = Some(first);
            // The batch waits for the records announced when it started, until they are
            // settled or the deadline passes.
            let mut deadline: Option<Instant> = None;
            let mut gathered = gather.is_zero();
            loop {
                // Everything queued by now goes in this batch; a rotation closes it.
                while let Some(command) = next.take().or_else(|| commands.try_recv().ok()) {
                    match command {
                        Command::Append { record, done } => {
                            records.extend_from_slice(&record);
                            waiting.push(done);
                        }
                        Command::Rotate { snapshot, done } => {
                            if let Some(batch) = self.write(&mut records, &mut waiting) {
                                self.sync(batch);
                            }
                            let _ = done.send(self.rotate(snapshot));
                        }
                    }
                }
                if waiting.is_empty() {
                    break;
                }
                let now = Instant::now();
                let mut until: Option<Instant> = None;
                if !gathered {
                    let gate = &self.gate;
                    let end = match deadline {
                        Some(end) => Some(end),
                        None => {
                            // `settled` before `coming`: a record settled in between is
                            // counted in neither, so the target errs low, never high.
                            let settled = gate.settled.load(Ordering::Acquire);
                            let coming = gate.coming.load(Ordering::Acquire) as u64;
                            (coming > 0).then(|| {
                                *gate.gatherer.lock() = Some(me.clone());
                                gate.target.store(settled + coming, Ordering::Release);
                                *deadline.insert(now + gather)
                            })
                        }
                    };
                    match end {
                        Some(end)
                            if now < end
                                && gate.settled.load(Ordering::Acquire)
                                    < gate.target.load(Ordering::Acquire) =>
                        {
                            until = Some(end)
                        }
                        _ => {
                            gathered = true;
                            gate.target.store(0, Ordering::Release);
                        }
                    }
                }
                // Syncs start `interval` apart at the least while many records come side
                // by side: a batch that comes sooner after a sync of `INTERVAL_AFTER` or
                // more waits (an unpark ends a gather's wait, never this one). After a
                // smaller one it does not: one or two callers sending one tx after
                // another would only wait, as each has one record in flight at a time.
                if let Some((last, records)) = *self.last_sync.lock() {
                    let at = last + self.interval;
                    if records >= INTERVAL_AFTER && now < at {
                        until = Some(until.map_or(at, |u| u.max(at)));
                    }
                }
                // A sync in flight for less than `overlap_after`: the batch waits for it
                // (taking what comes meanwhile), as most syncs return by then and one
                // sync for both costs less CPU than two; a slower one is overlapped.
                if let Some(oldest) = self.in_flight.oldest() {
                    let at = oldest + self.overlap_after;
                    if now < at {
                        self.in_flight.wait_by(&me);
                        until = Some(until.map_or(at, |u| u.min(at)));
                    }
                }
                let Some(until) = until else {
                    break;
                };
                std::thread::park_timeout(until - now);
            }
            self.gate.target.store(0, Ordering::Release);
            let batch = self.write(&mut records, &mut waiting);
            // The next batch may be taken and written while this one syncs.
            drop(commands);
            if let Some(batch) = batch {
                self.sync(batch);
            }
        }
    }

    /// Writes the batch after the last one (one write), growing the zeroed space first
    /// when it does not fit in it; the sync comes after, without the file's lock.
    pub(super) fn write(
        &self,
        records: &mut Vec<u8>,
        waiting: &mut Vec<oneshot::Sender<io::Result<()>>>,
    ) -> Option<Batch> {
        if waiting.is_empty() {
            return None;
        }
        let mut f = self.file.lock();
        let written = if self.sync_failed.load(Ordering::Acquire) {
            Err(io::Error::other(
                "the pool journal is waiting to be rewritten after a failed sync",
            ))
        } else {
            f.write(records)
        };
        if written.is_ok() {
            self.size.store(f.end, Ordering::Relaxed);
        }
        let number = f.next_batch;
        f.next_batch += 1;
        // In flight from now: a batch taken after the queue is let go sees it.
        self.in_flight.start(number);
        records.clear();
        Some(Batch {
            number,
            file: Arc::clone(&f.file),
            written,
            records: waiting.len(),
            waiting: std::mem::take(waiting),
        })
    }

    /// Makes `batch` durable, then answers every batch whose own sync and all earlier
    /// ones' have returned.
    pub(super) fn sync(&self, batch: Batch) {
        self.awake.begin();
        #[cfg(test)]
        let delay = self.test.delays.lock().remove(&batch.number);
        #[cfg(test)]
        {
            let now = self.test.syncing.fetch_add(1, Ordering::AcqRel) + 1;
            self.test.most_syncing.fetch_max(now, Ordering::AcqRel);
            if let Some(delay) = delay {
                std::thread::sleep(delay);
            }
        }
        let started = Instant::now();
        if !self.interval.is_zero() {
            *self.last_sync.lock() = Some((started, batch.records));
        }
        let written = batch.written.is_ok();
        let result = batch.written.and_then(|()| batch.file.sync_data());
        #[cfg(test)]
        let result = result.and_then(|()| {
            if self.test.failing_syncs.lock().remove(&batch.number) {
                Err(io::Error::other("injected sync failure"))
            } else {
                Ok(())
            }
        });
        // A failed write leaves the end where it was (the next batch writes over it); a
        // failed sync leaves the file in doubt.
        let sync_failed = written && result.is_err();
        if sync_failed {
            self.sync_failed.store(true, Ordering::Release);
        }
        metrics::histogram!("moat_pool_journal_sync_seconds").record(started.elapsed());
        self.awake.end();
        #[cfg(test)]
        self.test.syncing.fetch_sub(1, Ordering::AcqRel);
        self.in_flight.end(batch.number);
        match &result {
            Ok(()) => {
                self.gate.syncs.fetch_add(1, Ordering::Relaxed);
                metrics::counter!("moat_pool_journal_syncs_total").increment(1);
                metrics::counter!("moat_pool_journal_records_total")
                    .increment(batch.records as u64);
            }
            Err(e) => tracing::warn!(error = %e, "pool journal write failed"),
        }
        let mut answer = Vec::new();
        {
            let mut acks = self.acks.lock();
            if sync_failed && acks.failed_from.is_none_or(|f| batch.number < f) {
                acks.failed_from = Some(batch.number);
            }
            acks.synced.insert(batch.number, (result, batch.waiting));
            loop {
                let next = acks.next;
                let Some((mut result, waiting)) = acks.synced.remove(&next) else {
                    break;
                };
                if result.is_ok() && acks.failed_from.is_some_and(|f| next > f) {
                    result = Err(io::Error::other("an earlier pool journal sync failed"));
                }
                acks.next += 1;
                answer.push((result, waiting));
            }
        }
        for (result, waiting) in answer {
            for done in waiting {
                let _ = done.send(match &result {
                    Ok(()) => Ok(()),
                    Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
                });
            }
        }
    }

    /// Cuts off the free space after the last record (the writers have stopped).
    pub(super) fn trim(&self) {
        let f = self.file.lock();
        if f.allocated > f.end
            && let Err(e) = f.file.set_len(f.end).and_then(|()| f.file.sync_all())
        {
            tracing::warn!(error = %e, "pool journal: cannot trim its preallocated space");
        }
    }

    /// Rewrites the file from `snapshot`. The thread holds the queue: no batch is being
    /// written, and those still syncing hold the old file, whose records are in the
    /// snapshot (a record is queued after its tx is pooled).
    pub(super) fn rotate(&self, snapshot: Snapshot) -> io::Result<usize> {
        let entries = snapshot();
        let mut unique = std::collections::HashSet::with_capacity(entries.len());
        let mut bytes = Vec::new();
        let mut count = 0;
        for tx in &entries {
            if unique.insert(alloy_primitives::keccak256(tx)) {
                bytes.extend_from_slice(&encode_record(tx));
                count += 1;
            }
        }
        let tmp = self.path.with_extension("rotating");
        // The new file comes with its first step of zeroed space, synced with its
        // records, as at open: otherwise the first batch after a rotation (the one at
        // start above all) would write and sync that MiB before it is answered.
        let allocated = preallocated_end(bytes.len() as u64 + 1);
        {
            let mut f = File::create(&tmp)?;
            f.write_all(&bytes)?;
            write_zeros(&f, bytes.len() as u64, allocated)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent()
            && let Ok(d) = File::open(dir)
        {
            d.sync_all()?;
        }
        let file = OpenOptions::new().read(true).write(true).open(&self.path)?;
        let mut f = self.file.lock();
        f.file = Arc::new(file);
        f.end = bytes.len() as u64;
        f.allocated = allocated;
        self.size.store(bytes.len() as u64, Ordering::Relaxed);
        self.rotated_size
            .store(bytes.len() as u64, Ordering::Relaxed);
        // A fresh file: later batches are written and acknowledged again.
        if self.sync_failed.swap(false, Ordering::AcqRel) {
            self.acks.lock().failed_from = None;
            tracing::info!("pool journal rewritten after a failed sync: writing again");
        }
        Ok(count)
    }
}

impl FileState {
    /// Writes `records` at the end of the last record, growing the zeroed space first
    /// when they do not fit in it (the batch's sync then covers both).
    pub(super) fn write(&mut self, records: &[u8]) -> io::Result<()> {
        let need = self.end + records.len() as u64;
        self.grow(need)?;
        self.file.write_all_at(records, self.end)?;
        self.end = need;
        Ok(())
    }

    /// Grows the zeroed space in [`PREALLOCATE`] steps until `need` bytes fit (written
    /// from a static buffer: no MiB of fresh zeroed memory per step).
    pub(super) fn grow(&mut self, need: u64) -> io::Result<()> {
        if need <= self.allocated {
            return Ok(());
        }
        let grown = preallocated_end(need);
        write_zeros(&self.file, self.allocated, grown)?;
        self.allocated = grown;
        Ok(())
    }
}

/// Where the zeroed space ends once `need` bytes fit: the next [`PREALLOCATE`] step.
pub(super) fn preallocated_end(need: u64) -> u64 {
    need.div_ceil(PREALLOCATE) * PREALLOCATE
}

/// Writes zeros over `from..to` of `file`, from a static buffer (no MiB of fresh zeroed
/// memory per step).
pub(super) fn write_zeros(file: &File, mut from: u64, to: u64) -> io::Result<()> {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    while from < to {
        let n = (to - from).min(ZEROS.len() as u64) as usize;
        file.write_all_at(&ZEROS[..n], from)?;
        from += n as u64;
    }
    Ok(())
}
