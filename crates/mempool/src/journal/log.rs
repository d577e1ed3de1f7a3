//! The journal's write-ahead log: durable appends of records of bytes (here, each a tx
//! in its network form, blob sidecar included), read back at open. It is an
//! append-only file of records, `len: u32 LE | crc32(body): u32 LE | body`
//! ([`record`]). One writer thread owns the file:
//! - **Group commit.** Appends queue on a channel; a writer takes everything queued,
//!   writes it in one `write`, makes it durable with one `fdatasync`, and only then
//!   answers each append. Concurrent submissions share one sync: the batch is whatever
//!   arrived while the writers were busy, and the records announced
//!   ([`Journal::announce`]: local txs being admitted) when it starts: it waits for them
//!   up to [`JournalOptions::gather`] (zero: no wait), woken once when the last is queued
//!   or withdrawn, so that they share this sync instead of each waiting for the next.
//! - **Pipelined syncs.** Up to [`JournalOptions::syncs_in_flight`] writer threads take
//!   turns at the queue: one takes a batch and writes it, lets the queue go, then syncs,
//!   so the next batch is written and its sync started while the first is still on the
//!   disk. Answers keep the batches' order: a batch is answered once its own sync and
//!   every earlier batch's have returned (a record is read back only if every record
//!   before it is intact, so a later batch is not durable before the earlier ones are).
//!   A batch's sync starts beside one in flight only once that one is
//!   [`JournalOptions::overlap_after`] old (most syncs return by then, and one sync for
//!   both batches costs less CPU than two); until then the batch waits for it and grows.
//!   Submitters never wait for a writer: the queue is unbounded.
//! - **A least interval between syncs.** A batch that comes sooner than
//!   [`JournalOptions::interval`] ([`INTERVAL`] by default) after the start of a sync of
//!   [`INTERVAL_AFTER`] records or more waits out the rest, taking what arrives
//!   meanwhile: many concurrent callers get at most one sync per interval, each for more
//!   records. After a smaller sync nothing is held back, so one or two callers sending
//!   one tx after another, or a record after a quiet spell, are synced at once. On a
//!   2-vCPU VM whose host stalled it for 4–17 ms every 100 ms while syncs ran with the
//!   vCPUs busy, 500 µs cut the syncs of 16 connections by ~45 % and their p99 from a
//!   median of 6.3 to 4.7 ms at the same or a higher rate (docs/BENCHMARKS.md, RPC
//!   ingestion). Answers still wait for their record's `fdatasync`.
//! - **A CPU kept awake during a sync (off by default).** With
//!   [`JournalOptions::awake`] set, while a sync is in flight a thread of the lowest
//!   scheduling class (`SCHED_IDLE`: it runs only on a CPU with nothing else to run)
//!   spins, at most that long per sync, so that a CPU is running, not halted, when the
//!   disk answers: on this Firecracker VM, mostly idle, a lone sync returned in ~100 µs
//!   (p50) with such a thread beside it against ~160 µs without. Under 16 connections of
//!   eth_sendRawTransaction on an idle machine it bought no rate (16.3–17.4k tx/s with it,
//!   16.2–19.1k without) and cost 7–11 µs of CPU per tx, so it is off unless asked for
//!   (docs/bench-history/rpc-ingestion.md). It changes when an answer is sent, never
//!   whether: the answer still waits for the record's `fdatasync`.
//! - **Preallocation.** The file is grown ahead of its records in zeroed steps of
//!   [`PREALLOCATE`] (the first at open and with a rotation's records; each written and
//!   synced once), and records overwrite those zeros in place. A batch's `fdatasync`
//!   then changes no file size and writes the data block alone; appending at the end
//!   would also make every sync write the inode (ext4 must persist the new size).
//!   Reading stops at the first zero length: the zeros after the last record are free
//!   space, not damage. A graceful close cuts them off.
//! - **Rotation.** The file is rewritten from a snapshot (the pool's local transactions,
//!   plus entries held back at the last reload): written beside with its first step of
//!   zeroed space, synced, renamed over the journal, the directory synced. The snapshot
//!   is taken on the writer thread, between two batches, so a tx acknowledged before the
//!   rotation is in the pool and in the snapshot, and one acknowledged after it is
//!   appended to the new file.
//! - **Damage.** A torn or corrupt tail (a kill in the middle of a write) is skipped with
//!   a warning and cut off, so that later appends stay readable; it never stops a start.
//!
//! The log knows records of bytes only: what they hold, and what becomes of them at a
//! start, is the reload's business ([`super::reload`]).

mod record;
#[cfg(test)]
mod tests;
mod writer;

use parking_lot::Mutex;
pub use record::{encode_record, parse_records};
use std::fs::OpenOptions;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use writer::{Acks, Awake, FileState, InFlight, Writers};

/// The file is rotated early once it has grown past this many times its size after the
/// last rotation (and past [`MIN_ROTATE_SIZE`]).
const GROWTH_FACTOR: u64 = 4;
const MIN_ROTATE_SIZE: u64 = 64 << 20;
/// The file is grown ahead of its records in zeroed steps of this size.
pub(crate) const PREALLOCATE: u64 = 1 << 20;
/// Held entries (see [`Journal::hold_more`]) kept at most, in count and in bytes; past
/// either the oldest are forgotten.
pub(crate) const MAX_HELD: usize = 4_096;
pub(crate) const MAX_HELD_BYTES: usize = 64 << 20;

/// Batches being synced at once by default. One: on an idle machine a second sync in
/// flight cost ~15 % more CPU per transaction and gave no higher rate
/// (docs/bench-history/rpc-ingestion.md); more pay off on a disk whose lone syncs are slow.
pub(crate) const SYNCS_IN_FLIGHT: usize = 1;

/// Age a sync must reach by default before the next batch's sync starts beside it: on
/// this kind of disk most syncs return within ~200 µs, some take milliseconds.
pub(crate) const OVERLAP_AFTER: Duration = Duration::from_micros(200);

/// Shortest time by default from the start of a sync of [`INTERVAL_AFTER`] records or
/// more to the next sync's start: on a 2-vCPU VM whose host stalled it while syncs ran,
/// 500 µs took the syncs of 4,000 RPC txs over 16 connections from ~1,000 to ~580 and
/// their p99 from a median of 6.3 to 4.7 ms over 14 runs each (1 ms: ~360 syncs,
/// 3.8 ms); with 16 calls in flight it caps them at 32k txs/s, past any rate measured
/// here (1 ms would cap them at 16k, below the 18–21k of a faster VM).
pub(crate) const INTERVAL: Duration = Duration::from_micros(500);
/// Records a sync must hold for the interval to apply to the next one. Two callers
/// sending one tx after another (each batch one or two records) lost 15 % of their rate
/// to a wait after every batch of two; sixteen make batches of three and more.
pub(crate) const INTERVAL_AFTER: usize = 3;

/// How the journal's writers batch and sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalOptions {
    /// Longest a batch waits for the records announced when it starts (zero: no wait).
    pub gather: Duration,
    /// Batches being synced at once, at most (at least one).
    pub syncs_in_flight: usize,
    /// Age a sync in flight must reach before the next batch's sync starts beside it
    /// (zero: at once). Before that the next batch waits for it, and grows.
    pub overlap_after: Duration,
    /// Longest a thread of the lowest scheduling class spins per sync in flight, so that
    /// a CPU is running when the disk answers (zero: no such thread).
    pub awake: Duration,
    /// Shortest time from the start of a sync of [`INTERVAL_AFTER`] records or more to
    /// the next sync's start (zero: none). A batch that comes sooner waits, taking what
    /// arrives meanwhile; after a smaller sync, or a quiet spell, nothing waits.
    pub interval: Duration,
}

impl Default for JournalOptions {
    fn default() -> Self {
        Self {
            gather: GATHER_MAX,
            syncs_in_flight: SYNCS_IN_FLIGHT,
            overlap_after: OVERLAP_AFTER,
            awake: Duration::ZERO,
            interval: INTERVAL,
        }
    }
}

/// Entries kept though the pool does not hold them, oldest first, within bounds.
#[derive(Debug)]
struct Held {
    entries: std::collections::VecDeque<Vec<u8>>,
    bytes: usize,
    max: usize,
    max_bytes: usize,
    /// Entries forgotten at the bounds since the journal was opened.
    forgotten: u64,
}

impl Held {
    fn new() -> Self {
        Self {
            entries: Default::default(),
            bytes: 0,
            max: MAX_HELD,
            max_bytes: MAX_HELD_BYTES,
            forgotten: 0,
        }
    }

    /// Adds `entries` after the others, then forgets the oldest until within bounds;
    /// returns how many were forgotten.
    fn extend(&mut self, entries: Vec<Vec<u8>>) -> usize {
        for e in entries {
            self.bytes += e.len();
            self.entries.push_back(e);
        }
        let mut gone = 0;
        while self.entries.len() > self.max || self.bytes > self.max_bytes {
            let Some(e) = self.entries.pop_front() else {
                break;
            };
            self.bytes -= e.len();
            gone += 1;
        }
        self.forgotten += gone as u64;
        gone
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

/// What the journal file held when it was opened.
#[derive(Debug, Default)]
pub struct JournalContents {
    /// Network bytes of each record, oldest first (a replacement comes after what it
    /// replaced).
    pub entries: Vec<Vec<u8>>,
    /// Bytes at the end that did not form whole, intact records (skipped and cut off);
    /// zeros after the last record are preallocated space, not counted.
    pub damaged_tail: u64,
}

/// Snapshot of what a rotation writes: network bytes of each tx to keep.
pub type Snapshot = Box<dyn FnOnce() -> Vec<Vec<u8>> + Send>;

enum Command {
    Append {
        record: Vec<u8>,
        done: oneshot::Sender<io::Result<()>>,
    },
    Rotate {
        snapshot: Snapshot,
        done: oneshot::Sender<io::Result<usize>>,
    },
}

struct Inner {
    path: PathBuf,
    commands: Mutex<Option<mpsc::Sender<Command>>>,
    /// Entries kept though the pool did not take them back (a transient refusal such as
    /// a full pool): each rotation writes them again.
    held: Mutex<Held>,
    /// Current file size, and the size right after the last rotation.
    size: Arc<AtomicU64>,
    rotated_size: Arc<AtomicU64>,
    /// Records announced and not yet queued ([`Journal::announce`]).
    gate: Arc<Gate>,
    /// What the writer threads share, and the threads.
    writers: Arc<Writers>,
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The thread that spins during syncs, if any.
    awake: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Inner {
    /// Stops the writers after what is queued is written, then cuts off the free space,
    /// so the file ends with its last record (once; later calls do nothing).
    fn stop(&self) {
        self.commands.lock().take();
        let threads = std::mem::take(&mut *self.threads.lock());
        if threads.is_empty() {
            return;
        }
        for handle in threads {
            let _ = handle.join();
        }
        if let Some(handle) = self.awake.lock().take() {
            self.writers.awake.stop.store(true, Ordering::Release);
            handle.thread().unpark();
            let _ = handle.join();
        }
        self.writers.trim();
    }
}

/// The journal: a handle on the writer thread. Cloning shares it.
#[derive(Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("path", &self.inner.path)
            .field("size", &self.size())
            .finish()
    }
}

/// The records of the journal file at `path`, read without changing it (for a check of
/// a datadir: [`crate::verify`]); a damaged tail is counted, not cut off.
pub fn read_journal(path: &Path) -> io::Result<JournalContents> {
    let raw = std::fs::read(path)?;
    let (entries, good) = parse_records(&raw);
    let damaged_tail = raw[good..]
        .iter()
        .rposition(|&b| b != 0)
        .map_or(0, |last| last as u64 + 1);
    Ok(JournalContents {
        entries,
        damaged_tail,
    })
}

impl Journal {
    /// Opens (or creates) the journal at `path`, reads its records, cuts off a damaged
    /// tail, and starts the writer threads, with the default [`JournalOptions`].
    pub fn open(path: &Path) -> io::Result<(Journal, JournalContents)> {
        Self::open_with(path, JournalOptions::default())
    }

    /// [`Journal::open`] with `options`.
    pub fn open_with(
        path: &Path,
        options: JournalOptions,
    ) -> io::Result<(Journal, JournalContents)> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let mut raw = Vec::new();
        file.read_to_end(&mut raw)?;
        let (entries, good) = parse_records(&raw);
        // Up to the last non-zero byte: the zeros after it are preallocated space.
        let damaged_tail = raw[good..]
            .iter()
            .rposition(|&b| b != 0)
            .map_or(0, |last| last as u64 + 1);
        if damaged_tail > 0 {
            tracing::warn!(
                path = %path.display(),
                skipped_bytes = damaged_tail,
                records = entries.len(),
                "pool journal: damaged tail skipped (an interrupted write); the records before it are kept"
            );
        }
        if raw.len() > good {
            // Cut to the last intact record (damage and free space alike): what is
            // appended next is then read back, and nothing stale lies after it.
            file.set_len(good as u64)?;
            file.sync_all()?;
        }
        let size = Arc::new(AtomicU64::new(good as u64));
        let rotated_size = Arc::new(AtomicU64::new(good as u64));
        let gate = Arc::new(Gate::default());
        gate.gather_ns
            .store(options.gather.as_nanos() as u64, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel();
        let mut state = FileState {
            file: Arc::new(file),
            end: good as u64,
            allocated: good as u64,
            next_batch: 0,
        };
        // The first step of free space is made now, not by the first batch.
        state.grow(good as u64 + 1)?;
        state.file.sync_data()?;
        let awake = Arc::new(Awake::new(options.awake));
        let awake_thread = if options.awake.is_zero() {
            None
        } else {
            let a = Arc::clone(&awake);
            // Without it the journal works as before: syncs are only slower on some VMs.
            std::thread::Builder::new()
                .name("pool-journal-awake".into())
                .spawn(move || a.run())
                .ok()
        };
        if let Some(handle) = &awake_thread {
            let _ = awake.thread.set(handle.thread().clone());
        }
        let writers = Arc::new(Writers {
            path: path.to_path_buf(),
            commands: std::sync::Mutex::new(rx),
            file: Mutex::new(state),
            acks: Mutex::new(Acks::default()),
            size: Arc::clone(&size),
            rotated_size: Arc::clone(&rotated_size),
            gate: Arc::clone(&gate),
            in_flight: InFlight::default(),
            overlap_after: options.overlap_after,
            awake,
            interval: options.interval,
            last_sync: Mutex::new(None),
            sync_failed: AtomicBool::new(false),
            #[cfg(test)]
            test: Default::default(),
        });
        let mut threads = Vec::new();
        for _ in 0..options.syncs_in_flight.max(1) {
            let w = Arc::clone(&writers);
            let spawned = std::thread::Builder::new()
                .name("pool-journal".into())
                .spawn(move || w.run());
            match spawned {
                Ok(handle) => threads.push(handle),
                // At least one writer, else no journal.
                Err(e) if threads.is_empty() => return Err(e),
                Err(_) => break,
            }
        }
        let journal = Journal {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                commands: Mutex::new(Some(tx)),
                held: Mutex::new(Held::new()),
                size,
                rotated_size,
                gate,
                writers,
                threads: Mutex::new(threads),
                awake: Mutex::new(awake_thread),
            }),
        };
        Ok((
            journal,
            JournalContents {
                entries,
                damaged_tail,
            },
        ))
    }

    /// The journal file's path, as given to [`Journal::open`].
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Current size of the file in bytes.
    pub fn size(&self) -> u64 {
        self.inner.size.load(Ordering::Relaxed)
    }

    /// Whether the file has grown enough since the last rotation to rotate it now.
    pub fn wants_rotation(&self) -> bool {
        if self.is_failed() {
            return true;
        }
        let size = self.size();
        let base = self.inner.rotated_size.load(Ordering::Relaxed).max(1);
        size > MIN_ROTATE_SIZE && size > base.saturating_mul(GROWTH_FACTOR)
    }

    /// Whether a sync failed since the last rotation: appends fail until a rotation
    /// succeeds ([`Journal::wants_rotation`] asks for one).
    pub fn is_failed(&self) -> bool {
        self.inner.writers.sync_failed.load(Ordering::Acquire)
    }

    fn send(&self, command: Command) -> io::Result<()> {
        let closed = || io::Error::new(io::ErrorKind::BrokenPipe, "the journal is closed");
        let guard = self.inner.commands.lock();
        let sender = guard.as_ref().ok_or_else(closed)?;
        sender.send(command).map_err(|_| closed())
    }

    /// Appends one tx (network bytes) and returns once it is durable.
    pub async fn append(&self, tx: &[u8]) -> io::Result<()> {
        self.append_announced(tx, None).await
    }

    /// Announces a record on its way (a local tx being admitted): a batch the writer
    /// starts while records are announced waits for them, at most [`GATHER_MAX`], so
    /// that they share its sync instead of each paying the next one. The record comes
    /// with [`Journal::append_announced`]; dropping the [`Coming`] (the tx was refused)
    /// withdraws it.
    pub fn announce(&self) -> Coming {
        self.inner.gate.coming.fetch_add(1, Ordering::AcqRel);
        Coming {
            gate: Some(Arc::clone(&self.inner.gate)),
        }
    }

    /// [`Journal::append`] of an announced record.
    pub async fn append_announced(&self, tx: &[u8], coming: Option<Coming>) -> io::Result<()> {
        let (done, wait) = oneshot::channel();
        let record = encode_record(tx);
        let gate = coming.and_then(|mut c| c.gate.take());
        // No longer coming before it is queued, settled after: a batch that starts in
        // between does not count it, so it never waits for a record already queued.
        if let Some(gate) = &gate {
            gate.coming.fetch_sub(1, Ordering::AcqRel);
        }
        let queued = Instant::now();
        let sent = self.send(Command::Append { record, done });
        if let Some(gate) = &gate {
            gate.settle();
        }
        sent?;
        let result = wait
            .await
            .unwrap_or_else(|_| Err(io::Error::other("the journal writer stopped")));
        // Queued to answered, as the caller sees it (its task woken included).
        metrics::histogram!("moat_pool_journal_wait_seconds").record(queued.elapsed());
        result
    }

    /// Rewrites the file from `snapshot` (taken on the writer thread, see the module
    /// docs) plus the held entries; returns the number of records written.
    pub async fn rotate(&self, snapshot: Snapshot) -> io::Result<usize> {
        let held: Vec<Vec<u8>> = self.inner.held.lock().entries.iter().cloned().collect();
        // Held entries first: at a reload the later of two entries with one sender and
        // nonce wins, and the pool's (a replacement submitted since) is the newer.
        let snapshot: Snapshot = Box::new(move || {
            let mut all = held;
            all.extend(snapshot());
            all
        });
        let (done, wait) = oneshot::channel();
        self.send(Command::Rotate { snapshot, done })?;
        wait.await
            .unwrap_or_else(|_| Err(io::Error::other("the journal writer stopped")))
    }

    /// Keeps `entries` in the journal across rotations although the pool does not hold
    /// them (they are offered to the pool again at the next start), instead of those
    /// held so far; within [`MAX_HELD`] and [`MAX_HELD_BYTES`] as [`Journal::hold_more`].
    pub fn hold(&self, entries: Vec<Vec<u8>>) -> usize {
        let mut held = self.inner.held.lock();
        held.clear();
        held.extend(entries)
    }

    /// Keeps `entries` too (local txs the pool let go for room since the last reload).
    /// The held list is bounded: past [`MAX_HELD`] entries or [`MAX_HELD_BYTES`], the
    /// oldest held entries are forgotten (the next rotation no longer writes them, so
    /// the next start does not offer them). Returns how many were forgotten.
    pub fn hold_more(&self, entries: Vec<Vec<u8>>) -> usize {
        self.inner.held.lock().extend(entries)
    }

    /// Entries held back at the last reload, and since then by [`Journal::hold_more`].
    pub fn held(&self) -> usize {
        self.inner.held.lock().entries.len()
    }

    /// Held entries forgotten at the bounds since the journal was opened.
    pub fn held_forgotten(&self) -> u64 {
        self.inner.held.lock().forgotten
    }

    /// Makes the sync of batch `number` (0 is the first since open) fail (tests).
    #[cfg(test)]
    pub(crate) fn fail_sync_of(&self, number: u64) {
        self.inner.writers.test.failing_syncs.lock().insert(number);
    }

    /// Bounds of the held list other than [`MAX_HELD`] and [`MAX_HELD_BYTES`] (tests).
    #[cfg(test)]
    fn bound_held(&self, max: usize, max_bytes: usize) {
        let mut held = self.inner.held.lock();
        held.max = max;
        held.max_bytes = max_bytes;
    }

    /// Batches written and synced since the journal was opened.
    pub fn syncs(&self) -> u64 {
        self.inner.gate.syncs.load(Ordering::Relaxed)
    }

    /// Stops the writers after what is queued is written (appends after this fail).
    pub fn close(&self) {
        self.inner.stop();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the writer and the submitters of announced records share.
#[derive(Debug, Default)]
struct Gate {
    /// Records announced and neither queued nor withdrawn.
    coming: AtomicUsize,
    /// Announced records queued or withdrawn, ever.
    settled: AtomicU64,
    /// While a batch gathers: the `settled` count it waits for (0: none).
    target: AtomicU64,
    /// The writer thread gathering a batch: unparked when the count is reached, not by
    /// each record (a wakeup per record would cost more than the syncs it saves).
    gatherer: Mutex<Option<std::thread::Thread>>,
    /// Longest a batch gathers (ns; 0: it does not).
    gather_ns: AtomicU64,
    /// Batches synced.
    syncs: AtomicU64,
}

impl Gate {
    /// An announced record is queued or withdrawn.
    fn settle(&self) {
        let settled = self.settled.fetch_add(1, Ordering::AcqRel) + 1;
        let target = self.target.load(Ordering::Acquire);
        if target != 0
            && settled >= target
            && let Some(writer) = self.gatherer.lock().as_ref()
        {
            writer.unpark();
        }
    }
}

/// A record announced to the writer ([`Journal::announce`]); dropped, it is withdrawn.
#[derive(Debug)]
pub struct Coming {
    gate: Option<Arc<Gate>>,
}

impl Drop for Coming {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.coming.fetch_sub(1, Ordering::AcqRel);
            gate.settle();
        }
    }
}

/// Longest a batch waits for announced records by default. Records that are being
/// admitted when a batch starts reach the writer within tens of µs; a sync costs the
/// writer ~50 µs of CPU (the disk's requests) and ~100 µs or more of wall time.
pub(crate) const GATHER_MAX: Duration = Duration::from_micros(200);
