//! The local-transaction journal: transactions submitted to this node (RPC) survive a
//! restart, a graceful stop as well as `kill -9`.
//!
//! It is an append-only file of records, `len: u32 LE | crc32(tx): u32 LE | tx`, each tx
//! in its network form (blob sidecar included). One writer thread owns the file:
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
//!   (docs/BENCHMARKS.md, RPC ingestion). It changes when an answer is sent, never
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
//! What the entries become at start is the pool's business ([`super::Pool::reload_journal`]).

use super::Rejection;
use alloy_primitives::B256;
use parking_lot::Mutex;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Bytes before each record: length and checksum.
const RECORD_HEADER: usize = 8;
/// No transaction on the wire is larger (a blob tx with its sidecar is a few MiB).
const MAX_RECORD: usize = 32 << 20;
/// The file is rotated early once it has grown past this many times its size after the
/// last rotation (and past [`MIN_ROTATE_SIZE`]).
const GROWTH_FACTOR: u64 = 4;
const MIN_ROTATE_SIZE: u64 = 64 << 20;
/// The file is grown ahead of its records in zeroed steps of this size.
pub const PREALLOCATE: u64 = 1 << 20;
/// Held entries (see [`Journal::hold_more`]) kept at most, in count and in bytes; past
/// either the oldest are forgotten.
pub const MAX_HELD: usize = 4_096;
pub const MAX_HELD_BYTES: usize = 64 << 20;

/// Batches being synced at once by default. One: on an idle machine a second sync in
/// flight cost ~15 % more CPU per transaction and gave no higher rate (docs/BENCHMARKS.md,
/// RPC ingestion); more pay off on a disk whose lone syncs are slow.
pub const SYNCS_IN_FLIGHT: usize = 1;

/// Age a sync must reach by default before the next batch's sync starts beside it: on
/// this kind of disk most syncs return within ~200 µs, some take milliseconds.
pub const OVERLAP_AFTER: Duration = Duration::from_micros(200);

/// Shortest time by default from the start of a sync of [`INTERVAL_AFTER`] records or
/// more to the next sync's start: on a 2-vCPU VM whose host stalled it while syncs ran,
/// 500 µs took the syncs of 4,000 RPC txs over 16 connections from ~1,000 to ~580 and
/// their p99 from a median of 6.3 to 4.7 ms over 14 runs each (1 ms: ~360 syncs,
/// 3.8 ms); with 16 calls in flight it caps them at 32k txs/s, past any rate measured
/// here (1 ms would cap them at 16k, below the 18–21k of a faster VM).
pub const INTERVAL: Duration = Duration::from_micros(500);
/// Records a sync must hold for the interval to apply to the next one. Two callers
/// sending one tx after another (each batch one or two records) lost 15 % of their rate
/// to a wait after every batch of two; sixteen make batches of three and more.
pub const INTERVAL_AFTER: usize = 3;

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
pub const GATHER_MAX: Duration = Duration::from_micros(200);

/// One record of the file: `len | crc32 | tx`. Public for the fuzz targets only.
#[doc(hidden)]
pub fn encode_record(tx: &[u8]) -> Vec<u8> {
    let mut record = Vec::with_capacity(RECORD_HEADER + tx.len());
    record.extend_from_slice(&(tx.len() as u32).to_le_bytes());
    record.extend_from_slice(&crc32fast::hash(tx).to_le_bytes());
    record.extend_from_slice(tx);
    record
}

/// The intact records of `raw`, and how many bytes they span (the rest is damage).
/// Public for the fuzz targets only.
#[doc(hidden)]
pub fn parse_records(raw: &[u8]) -> (Vec<Vec<u8>>, usize) {
    let mut entries = Vec::new();
    let mut at = 0;
    while raw.len() - at >= RECORD_HEADER {
        let len = u32::from_le_bytes(raw[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(raw[at + 4..at + 8].try_into().expect("4 bytes"));
        let body = at + RECORD_HEADER;
        if len == 0 || len > MAX_RECORD || raw.len() - body < len {
            break;
        }
        let tx = &raw[body..body + len];
        if crc32fast::hash(tx) != crc {
            break;
        }
        entries.push(tx.to_vec());
        at = body + len;
    }
    (entries, at)
}

/// What the writer threads share.
struct Writers {
    path: PathBuf,
    /// The queue. The thread holding it takes the next batch and writes it, and lets it
    /// go before its sync, so that another thread writes and syncs the next batch.
    /// A std mutex, not parking_lot's: it is held across a blocking `recv`, and
    /// parking_lot's waiters spin and `sched_yield` before they sleep (seen in the
    /// writers' profile with three of them).
    commands: std::sync::Mutex<mpsc::Receiver<Command>>,
    file: Mutex<FileState>,
    /// Batches synced and not yet answered (an earlier one is still syncing).
    acks: Mutex<Acks>,
    size: Arc<AtomicU64>,
    rotated_size: Arc<AtomicU64>,
    gate: Arc<Gate>,
    /// Syncs running, and the thread waiting for them with the next batch.
    in_flight: InFlight,
    /// Age a sync in flight must reach before the next batch's sync starts beside it.
    overlap_after: Duration,
    /// The CPU kept running while a sync is in flight.
    awake: Arc<Awake>,
    /// Shortest time between two syncs' starts, and when the last one started with how
    /// many records.
    interval: Duration,
    last_sync: Mutex<Option<(Instant, usize)>>,
    /// A sync failed: what the file holds after the last good sync is unknown, and a
    /// reader stops at the first damaged record, so no later batch is written or
    /// acknowledged until a rotation has rewritten the file from the pool.
    sync_failed: AtomicBool,
    #[cfg(test)]
    test: TestHooks,
}

/// A thread of the lowest scheduling class that spins while a sync is in flight, at most
/// `limit` per sync, and sleeps otherwise (see the module docs).
struct Awake {
    /// Syncs in flight.
    syncing: AtomicUsize,
    limit: Duration,
    stop: AtomicBool,
    /// The spinning thread (unparked when a sync starts with none in flight).
    thread: std::sync::OnceLock<std::thread::Thread>,
    /// Whether it is spinning now, how many times it started, and how many times it
    /// stopped at its limit with the sync still in flight (tests).
    spinning: AtomicBool,
    spins: AtomicU64,
    capped: AtomicU64,
    /// Whether it runs in the lowest scheduling class (it does not spin otherwise).
    lowered: AtomicBool,
}

impl Awake {
    fn new(limit: Duration) -> Self {
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
    fn begin(&self) {
        if self.syncing.fetch_add(1, Ordering::AcqRel) == 0
            && let Some(thread) = self.thread.get()
        {
            thread.unpark();
        }
    }

    /// A sync returned.
    fn end(&self) {
        self.syncing.fetch_sub(1, Ordering::AcqRel);
    }

    fn run(&self) {
        // Spinning at a normal priority would take CPU from admission: not at all then.
        if !super::lanes::set_idle(true) {
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
struct InFlight {
    started: Mutex<std::collections::BTreeMap<u64, Instant>>,
    /// A batch waiting for a sync to return or to grow old (unparked when one returns).
    waiter: Mutex<Option<std::thread::Thread>>,
}

impl InFlight {
    fn oldest(&self) -> Option<Instant> {
        self.started.lock().values().next().copied()
    }

    fn wait_by(&self, me: &std::thread::Thread) {
        let mut waiter = self.waiter.lock();
        if waiter.as_ref().is_none_or(|w| w.id() != me.id()) {
            *waiter = Some(me.clone());
        }
    }

    fn start(&self, batch: u64) {
        self.started.lock().insert(batch, Instant::now());
    }

    fn end(&self, batch: u64) {
        self.started.lock().remove(&batch);
        if let Some(waiter) = self.waiter.lock().take() {
            waiter.unpark();
        }
    }
}

/// The file and where its next batch goes.
struct FileState {
    file: Arc<File>,
    /// Where the next record goes: the end of the last one.
    end: u64,
    /// The file's length: records up to `end`, zeros after.
    allocated: u64,
    /// Number of the next batch written (batches are answered in this order).
    next_batch: u64,
}

/// A batch written and waiting for its sync.
struct Batch {
    number: u64,
    file: Arc<File>,
    written: io::Result<()>,
    records: usize,
    waiting: Vec<oneshot::Sender<io::Result<()>>>,
}

/// The appends of a batch, waiting for its answer.
type Answers = Vec<oneshot::Sender<io::Result<()>>>;

/// Synced batches held back until every earlier batch is synced too.
#[derive(Default)]
struct Acks {
    /// The batch to answer next.
    next: u64,
    /// The first batch whose sync failed since the last rotation: it and every batch
    /// after it are answered with an error.
    failed_from: Option<u64>,
    synced: std::collections::BTreeMap<u64, (io::Result<()>, Answers)>,
}

#[cfg(test)]
#[derive(Default)]
struct TestHooks {
    /// A delay before each sync, by batch number.
    delays: Mutex<std::collections::HashMap<u64, Duration>>,
    /// Batches whose sync fails (as an I/O error of the disk would).
    failing_syncs: Mutex<std::collections::HashSet<u64>>,
    /// Syncs running now, and the most seen at once.
    syncing: AtomicUsize,
    most_syncing: AtomicUsize,
}

impl Writers {
    fn run(self: Arc<Self>) {
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
    fn write(
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
    fn sync(&self, batch: Batch) {
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
    fn trim(&self) {
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
    fn rotate(&self, snapshot: Snapshot) -> io::Result<usize> {
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
    fn write(&mut self, records: &[u8]) -> io::Result<()> {
        let need = self.end + records.len() as u64;
        self.grow(need)?;
        self.file.write_all_at(records, self.end)?;
        self.end = need;
        Ok(())
    }

    /// Grows the zeroed space in [`PREALLOCATE`] steps until `need` bytes fit (written
    /// from a static buffer: no MiB of fresh zeroed memory per step).
    fn grow(&mut self, need: u64) -> io::Result<()> {
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
fn preallocated_end(need: u64) -> u64 {
    need.div_ceil(PREALLOCATE) * PREALLOCATE
}

/// Writes zeros over `from..to` of `file`, from a static buffer (no MiB of fresh zeroed
/// memory per step).
fn write_zeros(file: &File, mut from: u64, to: u64) -> io::Result<()> {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    while from < to {
        let n = (to - from).min(ZEROS.len() as u64) as usize;
        file.write_all_at(&ZEROS[..n], from)?;
        from += n as u64;
    }
    Ok(())
}

/// Why a journal entry left the journal at a reload, or stayed out of the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ReloadFate {
    /// Back in the pool.
    Readmitted,
    /// Its nonce is used on chain: mined (or another tx of the sender's was).
    Mined,
    /// A later journal entry, or a pooled tx, has the same sender and nonce.
    Replaced,
    /// The sender can no longer pay for it.
    Unaffordable,
    /// Not a valid transaction against the current chain (bytes, signature, rules).
    Invalid,
    /// Refused for now (pool full, busy, sender's slots): kept in the journal and
    /// offered again at the next start.
    Held,
}

impl ReloadFate {
    pub const ALL: [ReloadFate; 6] = [
        ReloadFate::Readmitted,
        ReloadFate::Mined,
        ReloadFate::Replaced,
        ReloadFate::Unaffordable,
        ReloadFate::Invalid,
        ReloadFate::Held,
    ];

    pub fn name(self) -> &'static str {
        match self {
            ReloadFate::Readmitted => "readmitted",
            ReloadFate::Mined => "mined",
            ReloadFate::Replaced => "replaced",
            ReloadFate::Unaffordable => "unaffordable",
            ReloadFate::Invalid => "invalid",
            ReloadFate::Held => "held",
        }
    }

    /// Whether the entry stays in the journal.
    pub fn kept(self) -> bool {
        match self {
            ReloadFate::Readmitted | ReloadFate::Held => true,
            ReloadFate::Mined
            | ReloadFate::Replaced
            | ReloadFate::Unaffordable
            | ReloadFate::Invalid => false,
        }
    }
}

/// What becomes of a journal entry the pool refused at a reload. The rule table:
/// refusals that depend on the chain's state decide the entry's end, those that depend on
/// the pool's momentary state keep it.
pub(crate) fn reload_fate(refusal: &Rejection) -> ReloadFate {
    match refusal {
        Rejection::AlreadyKnown => ReloadFate::Readmitted,
        Rejection::NonceTooLow { .. } => ReloadFate::Mined,
        Rejection::ReplacementUnderpriced => ReloadFate::Replaced,
        Rejection::InsufficientFunds { .. } | Rejection::Overdraft { .. } => {
            ReloadFate::Unaffordable
        }
        Rejection::Busy
        | Rejection::OriginBusy
        | Rejection::Aborted
        | Rejection::Underpriced
        | Rejection::AccountLimit { .. }
        | Rejection::AlreadyReserved
        | Rejection::InflightLimit
        | Rejection::AuthorityReserved
        | Rejection::BlobNonceGap { .. }
        | Rejection::JournalFailed(_) => ReloadFate::Held,
        Rejection::Oversized { .. }
        | Rejection::Decode(_)
        | Rejection::RecentlyFailed
        | Rejection::Sidecar(_)
        | Rejection::Stateless(_)
        | Rejection::InvalidSender(_)
        | Rejection::SenderHasCode
        | Rejection::TooManyAuthorizations { .. }
        | Rejection::BlobsNotActive
        | Rejection::BlobFeeCapTooLow => ReloadFate::Invalid,
    }
}

/// What reloading the journal did: a count per fate, and the damage skipped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalReload {
    pub counts: std::collections::BTreeMap<ReloadFate, usize>,
    pub damaged_tail: u64,
    /// Hashes of the readmitted txs, in the order they were admitted.
    pub readmitted: Vec<B256>,
}

impl JournalReload {
    pub fn count(&self, fate: ReloadFate) -> usize {
        self.counts.get(&fate).copied().unwrap_or(0)
    }

    pub fn total(&self) -> usize {
        self.counts.values().sum()
    }

    pub(crate) fn note(&mut self, fate: ReloadFate) {
        *self.counts.entry(fate).or_default() += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A journal path in a directory of its own, removed when the test ends.
    struct Temp {
        dir: PathBuf,
        path: PathBuf,
    }

    impl Drop for Temp {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn temp(tag: &str) -> Temp {
        let dir = std::env::temp_dir().join(format!(
            "moat-journal-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        Temp {
            path: dir.join("journal"),
            dir,
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    /// A failed sync fails its batch and every later one, written or not, until a
    /// rotation rewrites the file; then appends are written and acknowledged again, and
    /// a reopen finds exactly what was acknowledged (and what the rotation kept).
    #[test]
    fn after_a_failed_sync_nothing_is_acknowledged_until_a_rotation() {
        let tmp = temp("failed-sync");
        let path = tmp.path.clone();
        let rt = rt();
        let (j, _) = Journal::open(&path).unwrap();
        j.fail_sync_of(1);
        rt.block_on(async {
            j.append(&[1; 10]).await.unwrap();
            assert!(!j.is_failed());
            j.append(&[2; 10]).await.unwrap_err();
            assert!(j.is_failed() && j.wants_rotation());
            j.append(&[3; 10]).await.unwrap_err();
            let kept = j.rotate(Box::new(|| vec![vec![1; 10]])).await.unwrap();
            assert_eq!(kept, 1);
            assert!(!j.is_failed() && !j.wants_rotation());
            j.append(&[4; 10]).await.unwrap();
        });
        j.close();
        let (_j, contents) = Journal::open(&path).unwrap();
        assert_eq!(contents.entries, vec![vec![1; 10], vec![4; 10]]);
    }

    #[test]
    fn appends_survive_a_reopen_in_order() {
        let tmp = temp("order");
        let path = tmp.path.clone();
        let rt = rt();
        let (j, contents) = Journal::open(&path).unwrap();
        assert!(contents.entries.is_empty());
        rt.block_on(async {
            for i in 1..=5u8 {
                j.append(&[i; 10]).await.unwrap();
            }
        });
        j.close();
        let (_j, contents) = Journal::open(&path).unwrap();
        assert_eq!(
            contents.entries,
            (1..=5u8).map(|i| vec![i; 10]).collect::<Vec<_>>()
        );
        assert_eq!(contents.damaged_tail, 0);
    }

    #[test]
    fn a_truncated_or_corrupt_tail_is_skipped_and_cut_off() {
        let tmp = temp("tail");
        let path = tmp.path.clone();
        let rt = rt();
        let (j, _) = Journal::open(&path).unwrap();
        rt.block_on(async {
            j.append(&[1; 100]).await.unwrap();
            j.append(&[2; 100]).await.unwrap();
        });
        j.close();
        // A kill in the middle of the third record's write.
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(&encode_record(&[3; 100])[..50]).unwrap();
        drop(f);
        let (j, contents) = Journal::open(&path).unwrap();
        assert_eq!(contents.entries, vec![vec![1; 100], vec![2; 100]]);
        assert_eq!(contents.damaged_tail, 50);
        // Appends after the cut are readable.
        rt.block_on(j.append(&[4; 7])).unwrap();
        j.close();
        let (j, contents) = Journal::open(&path).unwrap();
        assert_eq!(contents.entries.len(), 3);
        assert_eq!(contents.entries[2], vec![4; 7]);
        j.close();

        // A flipped byte in the last record: that record is dropped, not the file.
        let mut raw = std::fs::read(&path).unwrap();
        let last = raw.len() - 1;
        raw[last] ^= 0xff;
        std::fs::write(&path, &raw).unwrap();
        let (_j, contents) = Journal::open(&path).unwrap();
        assert_eq!(contents.entries, vec![vec![1; 100], vec![2; 100]]);
        assert_eq!(contents.damaged_tail, (RECORD_HEADER + 7) as u64);
    }

    #[test]
    fn the_file_is_grown_in_zeroed_steps_and_trimmed_at_close() {
        let tmp = temp("prealloc");
        let path = tmp.path.clone();
        let rt = rt();
        let (j, _) = Journal::open(&path).unwrap();
        rt.block_on(async {
            for i in 1..=3u8 {
                j.append(&[i; 100]).await.unwrap();
            }
        });
        let records = 3 * (RECORD_HEADER + 100) as u64;
        assert_eq!(j.size(), records);
        // Open: the records, then zeros up to the step.
        let raw = std::fs::read(&path).unwrap();
        assert_eq!(raw.len() as u64, PREALLOCATE);
        assert!(raw[records as usize..].iter().all(|&b| b == 0));
        let (entries, good) = parse_records(&raw);
        assert_eq!((entries.len(), good as u64), (3, records));
        // Closed: the file ends with its last record.
        j.close();
        let (j, contents) = Journal::open(&path).unwrap();
        assert_eq!(contents.entries.len(), 3);
        j.close();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), records);
    }

    /// A rotated file comes with its zeroed step, so the next batch overwrites zeros in
    /// place instead of growing the file first (which made the first tx after the
    /// rotation at start wait for a MiB to be written and synced).
    #[test]
    fn a_rotation_leaves_zeroed_space_and_the_next_append_fills_it() {
        let tmp = temp("rotate-prealloc");
        let path = tmp.path.clone();
        let rt = rt();
        let (j, _) = Journal::open(&path).unwrap();
        rt.block_on(j.append(&[1; 100])).unwrap();
        let kept = vec![vec![7u8; 60], vec![8u8; 60]];
        let snapshot = kept.clone();
        let written = rt.block_on(j.rotate(Box::new(move || snapshot))).unwrap();
        assert_eq!(written, 2);
        let records = 2 * (RECORD_HEADER + 60) as u64;
        let raw = std::fs::read(&path).unwrap();
        assert_eq!(raw.len() as u64, PREALLOCATE);
        assert!(raw[records as usize..].iter().all(|&b| b == 0));
        assert_eq!(j.inner.writers.file.lock().allocated, PREALLOCATE);
        rt.block_on(j.append(&[9; 100])).unwrap();
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            PREALLOCATE,
            "the append filled the zeroed space, the file did not grow"
        );
        j.close();
        let (_j, contents) = Journal::open(&path).unwrap();
        assert_eq!(contents.entries, [kept, vec![vec![9; 100]]].concat());
    }

    #[test]
    fn a_torn_record_in_the_zeroed_space_is_damage_and_later_appends_read_back() {
        let tmp = temp("torn-prealloc");
        let path = tmp.path.clone();
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // Two records, a record torn after 30 bytes, then preallocated zeros.
        let mut raw = [encode_record(&[1; 50]), encode_record(&[2; 50])].concat();
        raw.extend_from_slice(&encode_record(&[3; 50])[..30]);
        raw.resize(PREALLOCATE as usize, 0);
        std::fs::write(&path, &raw).unwrap();
        let rt = rt();
        let (j, contents) = Journal::open(&path).unwrap();
        assert_eq!(contents.entries, vec![vec![1; 50], vec![2; 50]]);
        assert_eq!(contents.damaged_tail, 30);
        // A shorter record where the torn one was: nothing of the torn one is read after it.
        rt.block_on(j.append(&[4; 5])).unwrap();
        std::mem::forget(j); // as if killed: no trim
        let (j, contents) = Journal::open(&path).unwrap();
        assert_eq!(contents.entries, vec![vec![1; 50], vec![2; 50], vec![4; 5]]);
        assert_eq!(contents.damaged_tail, 0);
        j.close();
    }

    #[test]
    fn concurrent_appends_share_syncs_and_all_land() {
        let tmp = temp("group");
        let path = tmp.path.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let (j, _) = Journal::open(&path).unwrap();
        rt.block_on(async {
            let tasks: Vec<_> = (0..200u32)
                .map(|i| {
                    let j = j.clone();
                    tokio::spawn(async move { j.append(&i.to_le_bytes()).await })
                })
                .collect();
            for t in tasks {
                t.await.unwrap().unwrap();
            }
        });
        j.close();
        let (_j, contents) = Journal::open(&path).unwrap();
        let mut got: Vec<u32> = contents
            .entries
            .iter()
            .map(|e| u32::from_le_bytes(e[..].try_into().unwrap()))
            .collect();
        got.sort_unstable();
        assert_eq!(got, (0..200).collect::<Vec<_>>());
    }

    /// With an interval, a batch that comes sooner than that after the start of a sync of
    /// [`INTERVAL_AFTER`] records or more waits for it, and what arrives meanwhile shares
    /// its sync; a lone caller's records, one after another, are not held back; every
    /// record lands.
    #[test]
    fn syncs_start_an_interval_apart_and_what_comes_meanwhile_shares_one() {
        let tmp = temp("interval");
        let interval = Duration::from_secs(1);
        let options = JournalOptions {
            gather: Duration::ZERO,
            interval,
            ..Default::default()
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let (j, _) = Journal::open_with(&tmp.path, options).unwrap();
        let appends = |range: std::ops::RangeInclusive<u8>| {
            let tasks: Vec<_> = range
                .map(|i| {
                    let j = j.clone();
                    rt.spawn(async move { j.append(&[i; 10]).await })
                })
                .collect();
            rt.block_on(async {
                for t in tasks {
                    t.await.unwrap().unwrap();
                }
            });
            Instant::now()
        };
        // A lone caller: each record after the last one's answer, synced at once.
        for i in 0..3u8 {
            let started = Instant::now();
            rt.block_on(j.append(&[i; 10])).unwrap();
            assert!(started.elapsed() < interval / 2, "{:?}", started.elapsed());
        }
        assert_eq!(j.syncs(), 3);
        // Batch 3's sync is held up, so that the five queued meanwhile make batch 4.
        j.inner
            .writers
            .test
            .delays
            .lock()
            .insert(3, Duration::from_millis(300));
        let held = {
            let j = j.clone();
            rt.spawn(async move { j.append(&[3; 10]).await })
        };
        std::thread::sleep(Duration::from_millis(100));
        let five = appends(4..=8);
        rt.block_on(held).unwrap().unwrap();
        assert_eq!(j.syncs(), 5, "batch 3, then the five together");
        // Queued at once after a sync of several: they wait out the interval from its
        // start, then take one sync together.
        let twenty = appends(9..=28);
        let waited = twenty - five;
        assert!(
            waited >= interval - Duration::from_millis(100),
            "{waited:?}"
        );
        assert_eq!(j.syncs(), 6, "the twenty waited and shared one sync");
        j.close();
        let (_j, contents) = Journal::open(&tmp.path).unwrap();
        let mut got: Vec<u8> = contents.entries.iter().map(|e| e[0]).collect();
        got.sort_unstable();
        assert_eq!(got, (0..=28).collect::<Vec<_>>());
    }

    /// The held list keeps the newest entries within its count and its bytes: past
    /// either bound the oldest are forgotten, and a rotation writes only those kept.
    #[test]
    fn held_entries_are_bounded_in_count_and_bytes_oldest_forgotten() {
        let tmp = temp("held-bound");
        let path = tmp.path.clone();
        let rt = rt();
        let (j, _) = Journal::open(&path).unwrap();
        j.bound_held(3, 1 << 20);
        assert_eq!(j.hold(vec![vec![1; 10], vec![2; 10]]), 0);
        assert_eq!(j.hold_more(vec![vec![3; 10], vec![4; 10]]), 1);
        assert_eq!((j.held(), j.held_forgotten()), (3, 1));
        // Bytes: 25 allow two of these entries, the newest.
        j.bound_held(10, 25);
        assert_eq!(j.hold_more(vec![vec![5; 10]]), 2);
        assert_eq!((j.held(), j.held_forgotten()), (2, 3));
        // One entry larger than the whole bound is not kept at all.
        assert_eq!(j.hold_more(vec![vec![6; 30]]), 3);
        assert_eq!(j.held(), 0);
        j.hold_more(vec![vec![7; 10]]);
        let n = rt
            .block_on(j.rotate(Box::new(|| vec![vec![8; 5]])))
            .unwrap();
        assert_eq!(n, 2);
        j.close();
        let (_j, contents) = Journal::open(&path).unwrap();
        assert_eq!(contents.entries, vec![vec![7; 10], vec![8; 5]]);
    }

    #[test]
    fn a_batch_waits_for_the_records_announced_when_it_starts() {
        let tmp = temp("gather");
        let path = tmp.path.clone();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let (j, _) = Journal::open(&path).unwrap();
        // Long enough that only the announced records can end a batch's wait.
        let long = Duration::from_secs(30);
        j.inner
            .gate
            .gather_ns
            .store(long.as_nanos() as u64, Ordering::Relaxed);
        let gathering = |j: &Journal| {
            let started = Instant::now();
            while j.inner.gate.target.load(Ordering::Acquire) == 0 {
                assert!(started.elapsed() < long / 2, "the batch never gathered");
                std::thread::yield_now();
            }
        };
        let started = Instant::now();
        // Announced while the first record is appended: the first record's batch waits
        // for it, and both take one sync.
        let second = j.announce();
        let first = rt.spawn({
            let j = j.clone();
            async move { j.append(&[1; 10]).await }
        });
        gathering(&j);
        rt.block_on(j.append_announced(&[2; 10], Some(second)))
            .unwrap();
        rt.block_on(first).unwrap().unwrap();
        assert_eq!(j.syncs(), 1);
        // One withdrawn (its tx refused) ends the wait too.
        let refused = j.announce();
        let third = rt.spawn({
            let j = j.clone();
            async move { j.append(&[3; 10]).await }
        });
        gathering(&j);
        drop(refused);
        rt.block_on(third).unwrap().unwrap();
        assert_eq!(j.syncs(), 2);
        assert!(
            started.elapsed() < long / 2,
            "no batch waited out its deadline"
        );
        j.close();
        let (_j, contents) = Journal::open(&path).unwrap();
        assert_eq!(
            contents.entries,
            vec![vec![1; 10], vec![2; 10], vec![3; 10]]
        );
    }

    /// A journal whose batches do not gather, with `syncs` in flight at most and
    /// `overlap_after`, the first batch's sync held back by `first_delay`, and a
    /// two-worker runtime to append from (the pipelining tests' setup).
    struct Piped {
        rt: tokio::runtime::Runtime,
        j: Journal,
        tmp: Temp,
    }

    fn piped(tag: &str, syncs: usize, overlap_after: Duration, first_delay: Duration) -> Piped {
        let tmp = temp(tag);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let options = JournalOptions {
            gather: Duration::ZERO,
            syncs_in_flight: syncs,
            overlap_after,
            awake: Duration::from_millis(2),
            interval: Duration::ZERO,
        };
        let (j, _) = Journal::open_with(&tmp.path, options).unwrap();
        j.inner.writers.test.delays.lock().insert(0, first_delay);
        Piped { rt, j, tmp }
    }

    impl Piped {
        /// Appends `len` bytes of `n` on the runtime.
        fn append(&self, n: u8, len: usize) -> tokio::task::JoinHandle<io::Result<()>> {
            let j = self.j.clone();
            self.rt.spawn(async move { j.append(&vec![n; len]).await })
        }

        /// Waits until a sync is running; fails after `within`.
        fn until_syncing(&self, within: Duration) {
            let started = Instant::now();
            while self.syncing() == 0 {
                assert!(started.elapsed() < within, "no sync started");
                std::thread::yield_now();
            }
        }

        fn syncing(&self) -> usize {
            self.j.inner.writers.test.syncing.load(Ordering::Acquire)
        }

        fn most_syncing(&self) -> usize {
            self.j
                .inner
                .writers
                .test
                .most_syncing
                .load(Ordering::Acquire)
        }

        /// Closes the journal and reads back what a restart finds.
        fn reopened(&self) -> Vec<Vec<u8>> {
            self.j.close();
            Journal::open(&self.tmp.path).unwrap().1.entries
        }
    }

    /// A batch is written and its sync started while an earlier batch's sync is still
    /// running, and its answer waits for that earlier sync: a record is only read back
    /// when every record before it is intact.
    #[test]
    fn the_next_batch_syncs_while_one_is_in_flight_and_answers_keep_their_order() {
        let slow = Duration::from_millis(400);
        let p = piped("pipeline", 2, Duration::from_millis(50), slow);
        let order = Arc::new(Mutex::new(Vec::new()));
        let append = |n: u8| {
            let (done, order) = (p.append(n, 10), Arc::clone(&order));
            p.rt.spawn(async move {
                done.await.unwrap().unwrap();
                order.lock().push(n);
            })
        };
        let first = append(1);
        // The first batch is in its (slow) sync.
        let started = Instant::now();
        p.until_syncing(slow);
        let second = append(2);
        // The second batch's sync runs and returns during the first one's...
        while p.j.syncs() == 0 {
            assert!(
                started.elapsed() < slow * 10,
                "the second batch never synced"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(p.most_syncing(), 2);
        // ...but it is not answered while the first is still syncing.
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(p.syncing(), 1);
        assert!(!second.is_finished() && order.lock().is_empty());
        p.rt.block_on(async {
            first.await.unwrap();
            second.await.unwrap();
        });
        assert_eq!(order.lock().len(), 2);
        assert_eq!(p.j.syncs(), 2);
        assert_eq!(p.reopened(), vec![vec![1; 10], vec![2; 10]]);
    }

    /// A batch waits for a sync in flight that is younger than `overlap_after` (and
    /// takes what comes meanwhile) instead of starting its own beside it.
    #[test]
    fn a_young_sync_in_flight_is_waited_for_not_overlapped() {
        let p = piped(
            "overlap",
            2,
            Duration::from_secs(30),
            Duration::from_millis(200),
        );
        let first = p.append(1, 10);
        let started = Instant::now();
        p.until_syncing(Duration::from_secs(10));
        let later: Vec<_> = (2..6u8).map(|n| p.append(n, 10)).collect();
        p.rt.block_on(async {
            first.await.unwrap().unwrap();
            for t in later {
                t.await.unwrap().unwrap();
            }
        });
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the batch waited out the age"
        );
        assert_eq!(p.most_syncing(), 1);
        // The first batch, then the four that waited for its sync, in one.
        assert_eq!(p.j.syncs(), 2);
        assert_eq!(p.reopened().len(), 5);
    }

    /// With one sync in flight, a batch waits for the sync before it.
    #[test]
    fn one_sync_in_flight_keeps_syncs_one_at_a_time() {
        let p = piped("serial", 1, Duration::ZERO, Duration::from_millis(50));
        let tasks: Vec<_> = (0..20u8).map(|n| p.append(n, 4)).collect();
        p.rt.block_on(async {
            for t in tasks {
                t.await.unwrap().unwrap();
            }
        });
        assert_eq!(p.most_syncing(), 1);
        assert_eq!(p.reopened().len(), 20);
    }

    /// Waits until `cond` holds; fails after `within`.
    fn until(within: Duration, what: &str, cond: impl Fn() -> bool) {
        let started = Instant::now();
        while !cond() {
            assert!(started.elapsed() < within, "{what}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// While a sync is in flight, a thread of the lowest scheduling class spins (a CPU is
    /// running when the disk answers), at most `awake` per sync, and it stops spinning
    /// once the sync returns; the answer still comes only after the sync.
    #[test]
    fn a_sync_in_flight_is_kept_company_by_an_idle_class_spinner_within_its_limit() {
        let tmp = temp("awake");
        // Appended from a thread of its own, so that the sync runs while the test looks.
        let append = |j: &Journal, n: u8| {
            let j = j.clone();
            std::thread::spawn(move || rt().block_on(j.append(&[n; 10])))
        };
        let open = |awake: Duration| {
            let options = JournalOptions {
                gather: Duration::ZERO,
                syncs_in_flight: 1,
                overlap_after: OVERLAP_AFTER,
                awake,
                interval: Duration::ZERO,
            };
            Journal::open_with(&tmp.path, options).unwrap().0
        };
        let long = Duration::from_secs(20);
        let j = open(long);
        let awake = Arc::clone(&j.inner.writers.awake);
        let hooks = &j.inner.writers.test;
        // Long enough for a thread of the lowest class to be seen on a loaded machine.
        hooks.delays.lock().insert(0, Duration::from_secs(2));
        let first = append(&j, 1);
        until(long / 2, "no spinning during the sync", || {
            awake.spinning.load(Ordering::Acquire)
        });
        assert!(awake.lowered.load(Ordering::Acquire));
        // Answered only once the sync is over (its count drops before the answer).
        let answered = first.is_finished();
        assert!(
            !(answered && hooks.syncing.load(Ordering::Acquire) == 1),
            "answered before its sync returned"
        );
        first.join().unwrap().unwrap();
        until(long / 2, "still spinning after the sync", || {
            !awake.spinning.load(Ordering::Acquire)
        });
        assert_eq!(awake.syncing.load(Ordering::Acquire), 0);
        assert_eq!(awake.capped.load(Ordering::Acquire), 0);
        j.close();
        assert!(j.inner.awake.lock().is_none(), "the thread was not stopped");

        // The limit: a sync longer than it is waited out without spinning.
        let j = open(Duration::from_millis(20));
        let awake = Arc::clone(&j.inner.writers.awake);
        let hooks = &j.inner.writers.test;
        hooks.delays.lock().insert(0, Duration::from_secs(3));
        let slow = append(&j, 2);
        until(long / 2, "the slow sync never started", || {
            hooks.syncing.load(Ordering::Acquire) == 1
        });
        until(long / 2, "no spinning during the slow sync", || {
            awake.spins.load(Ordering::Acquire) == 1
        });
        slow.join().unwrap().unwrap();
        // It stopped at its limit, the sync still in flight, and did not start again.
        assert_eq!(awake.capped.load(Ordering::Acquire), 1);
        assert_eq!(awake.spins.load(Ordering::Acquire), 1);
        assert!(!awake.spinning.load(Ordering::Acquire));
        j.close();

        // Zero: no such thread.
        let j = open(Duration::ZERO);
        assert!(j.inner.awake.lock().is_none());
        append(&j, 3).join().unwrap().unwrap();
        j.close();
        let (_j, contents) = Journal::open(&tmp.path).unwrap();
        assert_eq!(
            contents.entries,
            vec![vec![1; 10], vec![2; 10], vec![3; 10]]
        );
    }

    #[test]
    fn rotation_keeps_the_snapshot_and_the_held_entries_once() {
        let tmp = temp("rotate");
        let path = tmp.path.clone();
        let rt = rt();
        let (j, _) = Journal::open(&path).unwrap();
        j.hold(vec![vec![9; 3]]);
        rt.block_on(async {
            for i in 1..=4u8 {
                j.append(&[i; 5]).await.unwrap();
            }
            let n = j
                .rotate(Box::new(|| vec![vec![2; 5], vec![4; 5], vec![2; 5]]))
                .await
                .unwrap();
            assert_eq!(n, 3);
            j.append(&[5; 5]).await.unwrap();
        });
        j.close();
        let (_j, contents) = Journal::open(&path).unwrap();
        // Held entries come first, so the pool's own (newer) entries win at a reload.
        assert_eq!(
            contents.entries,
            vec![vec![9; 3], vec![2; 5], vec![4; 5], vec![5; 5]]
        );
    }
}
