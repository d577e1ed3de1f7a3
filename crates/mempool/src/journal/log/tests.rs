//! The log's tests: durability across reopen, damage, preallocation, rotation, group
//! commit and the writers' pacing.

use super::record::RECORD_HEADER;
use super::*;
use std::io::Write;

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
