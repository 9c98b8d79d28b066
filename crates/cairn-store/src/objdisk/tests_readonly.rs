//! Read-only opens (`readonly.rs`) and the reader pins that keep a writer
//! from deleting what they read (`pins.rs`); the shared test helpers are
//! the parent module's.

#[allow(clippy::wildcard_imports)]
use super::*;

/// The test options with a heartbeat (and pin refresh) of `beat_ms`.
fn beat_options(holder: &str, force: bool, beat_ms: u64) -> ObjectDiskOptions {
    ObjectDiskOptions {
        heartbeat: Duration::from_millis(beat_ms),
        ..options(holder, force)
    }
}

fn open_reader(store: &Arc<impl ObjectStore + 'static>, beat_ms: u64) -> ObjectDisk {
    let store: Arc<dyn ObjectStore> = store.clone();
    ObjectDisk::open_read_only(store, &beat_options("reader", false, beat_ms))
        .expect("a read-only open")
}

/// Keys under `dir` of the test volume.
fn keys_under(store: &dyn ObjectStore, dir: &str) -> Vec<String> {
    store
        .list(&format!("vol/{dir}"))
        .expect("list")
        .into_iter()
        .map(|o| o.key)
        .collect()
}

/// Writes every block with tags from `base`, then flushes (a checkpoint
/// every three segments: each round is eight).
fn overwrite(disk: &ObjectDisk, base: u64, model: &mut [u64]) {
    for b in 0..BLOCKS {
        let tag = (base + b) << 16;
        disk.write_at(&block(tag), b * BS as u64).expect("write");
        model[b as usize] = tag;
    }
    disk.flush().expect("flush");
}

/// The writer's heartbeat mark, `…/lease/GGGG.alive`.
fn is_heartbeat(key: &str) -> bool {
    key.rsplit_once('.')
        .is_some_and(|(_, suffix)| suffix == "alive")
}

/// A reader opened while a writer holds the volume sees the volume as of
/// its open (the last flush), writes nothing but its pin, refuses writes
/// and trims, and keeps seeing the same bytes from the store while the
/// writer overwrites everything, checkpoints and cleans: the writer's
/// deletes wait for it. After its close they go.
#[test]
fn a_reader_keeps_its_view_while_the_writer_writes_checkpoints_and_cleans() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let w = ObjectDisk::open(store.clone(), &beat_options("writer", false, 20)).expect("create");
    let (images, _) = run(&w, &workload(11, 200));
    w.flush().expect("flush");
    let seen = images.last().expect("an image").clone();
    // Everything but readers' pins and the writer's heartbeat mark (the
    // writer rewrites `lease/….alive` on its own timer, here every 20 ms,
    // so it may first appear while the reader opens).
    let all = |s: &MemStore| -> Vec<String> {
        s.list("vol/")
            .expect("list")
            .into_iter()
            .map(|o| o.key)
            .filter(|k| !k.starts_with("vol/readers/") && !is_heartbeat(k))
            .collect()
    };
    let before = all(&store);
    let r = open_reader(&store, 20);
    assert!(r.is_read_only());
    assert_eq!(image(&r), seen, "the reader sees the last flush");
    assert_eq!(all(&store), before, "a reader writes nothing but its pin");
    assert_eq!(keys_under(store.as_ref(), "readers/").len(), 1, "its pin");

    let mut model = seen.clone();
    for round in 0..6 {
        overwrite(&w, (round + 1) * 1000, &mut model);
        w.clean_pass(0.6, 100).expect("clean");
        w.flush().expect("flush");
    }
    assert_eq!(image(&w), model);
    assert!(
        w.shared.deferred.waiting() > 0,
        "dead segments wait for the reader"
    );
    assert_eq!(image(&r), seen, "the reader's view does not move");

    let refused = r.write_at(&block(5 << 16), 0).expect_err("a write");
    assert!(
        matches!(refused, crate::device::DeviceError::ReadOnly { .. }),
        "{refused}"
    );
    assert!(r.write_at(&[1; 10], 100).is_err(), "a partial write");
    assert!(r.discard(0, BS as u64).is_err(), "a trim");
    r.flush().expect("a flush has nothing to do");
    assert_eq!(image(&r), seen);
    r.close().expect("close the reader");
    assert!(
        keys_under(store.as_ref(), "readers/").is_empty(),
        "unpinned"
    );
    // The writer's heartbeat deletes what waited.
    wait_until("the deferred deletes did not happen", || {
        w.shared.deferred.waiting() == 0
    });
    w.verify().expect("invariants");
    w.close().expect("close");
    assert_no_leak(store.as_ref());
}

/// Deletes wait while a pin is fresh — a checkpoint's, and those of the
/// next writer's open (a crash left them) — and the reader reads on.
#[test]
fn a_fresh_pin_defers_deletes_across_a_writer_crash() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    // No heartbeat within the test: only checkpoints and the close delete.
    let w = ObjectDisk::open(store.clone(), &options("writer", false)).expect("create");
    let mut model = vec![0; BLOCKS as usize];
    overwrite(&w, 1, &mut model);
    let seen = model.clone();
    let r = open_reader(&store, 60_000);
    overwrite(&w, 1000, &mut model);
    overwrite(&w, 2000, &mut model);
    let waiting = w.shared.deferred.waiting();
    assert!(waiting >= 8, "the first round's segments wait: {waiting}");
    assert!(keys_under(store.as_ref(), "seg/").len() >= 24);
    drop(w); // a crash: what waited stays in the store

    let w = ObjectDisk::open(store.clone(), &options("writer-2", true)).expect("takeover");
    assert!(
        w.report().deferred >= waiting,
        "the open finds them and defers them again: {:?}",
        w.report()
    );
    assert_eq!(image(&w), model);
    assert_eq!(image(&r), seen, "the reader reads on");
    r.close().expect("close the reader");
    overwrite(&w, 3000, &mut model);
    assert_eq!(
        w.shared.deferred.waiting(),
        0,
        "the next checkpoint deletes"
    );
    w.close().expect("close");
    assert_no_leak(store.as_ref());
}

/// A reader that crashed leaves a pin that stops being fresh after three
/// of its refresh intervals: the writer ignores it, deletes, and removes
/// it. A reader whose pin went (it hung) and whose segments were deleted
/// gets an error naming the segment, never a panic or other data.
#[test]
fn a_stale_pin_is_ignored_and_a_reader_left_behind_fails_clearly() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let w = ObjectDisk::open(store.clone(), &options("writer", false)).expect("create");
    let mut model = vec![0; BLOCKS as usize];
    overwrite(&w, 1, &mut model);
    drop(open_reader(&store, 20)); // crashed: its pin stays
    assert_eq!(keys_under(store.as_ref(), "readers/").len(), 1);
    std::thread::sleep(Duration::from_millis(100));
    overwrite(&w, 1000, &mut model);
    assert_eq!(w.shared.deferred.waiting(), 0, "a stale pin holds nothing");
    assert!(
        keys_under(store.as_ref(), "readers/").is_empty(),
        "and is removed"
    );

    // A reader whose pin a writer took for stale.
    let r = open_reader(&store, 3_600_000);
    let seen = model.clone();
    assert_eq!(image(&r), seen);
    let pin = keys_under(store.as_ref(), "readers/");
    assert_eq!(pin.len(), 1);
    store.delete(&pin[0]).expect("the writer removes it");
    overwrite(&w, 2000, &mut model);
    assert_eq!(w.shared.deferred.waiting(), 0);
    let mut buf = vec![0u8; BLOCKS as usize * BS];
    for _ in 0..2 {
        let e = r.read_at(&mut buf, 0).expect_err("its segments are gone");
        let text = e.to_string();
        assert!(
            text.contains("segment ")
                && text.contains("vol/seg/")
                && text.contains("is no longer in the store: the volume moved on"),
            "{text}"
        );
    }
    r.close().expect("close");
    w.close().expect("close");
    assert_no_leak(store.as_ref());
}

/// A read-only open creates nothing: no volume, no geometry of its own.
#[test]
fn a_read_only_open_creates_nothing() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let err = ObjectDisk::open_read_only(store.clone(), &options("reader", false))
        .expect_err("no volume");
    assert!(
        matches!(err, ObjectDiskError::NoVolumeToRead { .. }),
        "{err}"
    );
    assert!(store.is_empty(), "nothing written");
    let w = ObjectDisk::open(store.clone(), &options("writer", false)).expect("create");
    w.close().expect("close");
    let other = ObjectDiskOptions {
        size: 2 * BLOCKS * BS as u64,
        ..options("reader", false)
    };
    let err = ObjectDisk::open_read_only(store.clone(), &other).expect_err("another size");
    assert!(matches!(err, ObjectDiskError::Mismatch { .. }), "{err}");
    assert!(keys_under(store.as_ref(), "readers/").is_empty());
    // Without a size: the volume as it is; a stopped volume reads too.
    let r = ObjectDisk::open_read_only(
        store.clone(),
        &ObjectDiskOptions {
            size: 0,
            ..options("reader", false)
        },
    )
    .expect("open");
    assert_eq!(image(&r), vec![0; BLOCKS as usize]);
    r.close().expect("close");
}

/// A store whose mutations take a while, so a writer's run spans many
/// readers' opens.
struct Slow(MemStore);

impl ObjectStore for Slow {
    fn put(&self, key: &str, body: &[u8]) -> Result<(), cairn_objects::ObjectError> {
        std::thread::sleep(Duration::from_micros(300));
        self.0.put(key, body)
    }
    fn create(&self, key: &str, body: &[u8]) -> Result<(), cairn_objects::ObjectError> {
        self.0.create(key, body)
    }
    fn read_at(
        &self,
        key: &str,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, cairn_objects::ObjectError> {
        self.0.read_at(key, offset, buf)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>, cairn_objects::ObjectError> {
        self.0.get(key)
    }
    fn head(&self, key: &str) -> Result<Option<u64>, cairn_objects::ObjectError> {
        self.0.head(key)
    }
    fn delete(&self, key: &str) -> Result<(), cairn_objects::ObjectError> {
        std::thread::sleep(Duration::from_micros(300));
        self.0.delete(key)
    }
    fn list(
        &self,
        prefix: &str,
    ) -> Result<Vec<cairn_objects::ObjectInfo>, cairn_objects::ObjectError> {
        self.0.list(prefix)
    }
    fn describe(&self) -> String {
        "slow".into()
    }
}

/// Readers opened again and again while a writer runs a workload (writes,
/// trims, flushes, cleaner passes, checkpoints): each one's view is the
/// volume after some prefix of the writer's steps, and every read of it
/// succeeds while the writer goes on.
#[test]
fn readers_opened_during_a_workload_see_a_prefix_and_read_it_whole() {
    let store = Arc::new(Slow(MemStore::new()));
    let w = ObjectDisk::open(store.clone(), &beat_options("writer", false, 20)).expect("create");
    let steps = workload(23, 600);
    let views = std::thread::scope(|scope| {
        let writer = scope.spawn(|| run(&w, &steps));
        let mut views = Vec::new();
        while !writer.is_finished() {
            let r = open_reader(&store, 20);
            let first = image(&r);
            std::thread::sleep(Duration::from_millis(5));
            assert_eq!(image(&r), first, "a reader's view does not move");
            r.close().expect("close the reader");
            views.push(first);
        }
        let (images, _) = writer.join().expect("the writer");
        (views, images)
    });
    let (views, images) = views;
    assert!(views.len() > 3, "only {} readers", views.len());
    for (i, v) in views.iter().enumerate() {
        assert!(
            images.contains(v),
            "reader {i} sees no prefix of the workload: {v:?}"
        );
    }
    w.close().expect("close");
    assert!(keys_under(store.as_ref(), "readers/").is_empty());
    assert_no_leak(store.as_ref());
}
