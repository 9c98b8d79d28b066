//! The cleaner against a model: it empties mostly-dead segments, and never
//! moves a block a client wrote during its pass.

use std::sync::Arc;

use cairn_objects::{MemStore, ObjectStore};

use super::{BLOCKS, BS, assert_no_leak, block, image, options};
use crate::device::Device;
use crate::objdisk::ObjectDisk;

/// The cleaner moves the live blocks of mostly-dead segments, so they die
/// whole and the next checkpoint deletes them: the store ends up holding
/// about the live data, and the volume reads the same after a reopen.
#[test]
fn the_cleaner_empties_mostly_dead_segments() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let disk = ObjectDisk::open(store.clone(), &options("a", false)).expect("create");
    let mut model = vec![0u64; BLOCKS as usize];
    // Every block, in order: eight full segments.
    for b in 0..BLOCKS {
        disk.write_at(&block((b + 1) << 16), b * BS as u64)
            .expect("write");
        model[b as usize] = (b + 1) << 16;
    }
    disk.flush().expect("flush");
    // Half of each segment written again: each old one is 50 % live.
    for b in (0..BLOCKS).filter(|b| b % 8 < 4) {
        disk.write_at(&block((b + 100) << 16), b * BS as u64)
            .expect("write");
        model[b as usize] = (b + 100) << 16;
    }
    disk.flush().expect("flush");
    let segments = |s: &MemStore| s.list("vol/seg/").expect("list").len();
    let moved = disk.clean_pass(0.6, 100).expect("clean");
    assert_eq!(
        moved,
        BLOCKS as usize / 2,
        "the live half of each old segment"
    );
    assert_eq!(disk.cleaned_blocks(), moved as u64);
    assert_eq!(image(&disk), model, "cleaning changes no content");
    // Nothing left under 60 % live.
    disk.flush().expect("flush");
    assert_eq!(disk.clean_pass(0.6, 100).expect("clean"), 0);
    disk.verify().expect("invariants");
    disk.close().expect("close");
    drop(disk);
    assert_eq!(
        segments(store.as_ref()),
        (BLOCKS / 8) as usize,
        "the store holds only full segments of live blocks"
    );
    assert_no_leak(store.as_ref());
    let disk = ObjectDisk::open(store.clone(), &options("b", false)).expect("reopen");
    assert_eq!(image(&disk), model);
}

/// The cleaner looks up a segment's live blocks, checks their CRCs and
/// moves them with the state's lock released in between: a block a client
/// writes meanwhile must not be moved (its old copy would replace the new
/// one).
#[test]
fn the_cleaner_never_moves_a_block_written_during_its_pass() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let disk = ObjectDisk::open(store.clone(), &options("a", false)).expect("create");
    let mut model: Vec<u64> = (1..=BLOCKS).collect();
    for b in 0..BLOCKS {
        disk.write_at(&block(b + 1), b * BS as u64).expect("write");
    }
    disk.flush().expect("flush");
    // Blocks 0-3 of the first segment written again: 4 and 5 are live
    // there, and written while the cleaner moves them (6 and 7 are not).
    for b in 0..4 {
        disk.write_at(&block(b + 100), b * BS as u64)
            .expect("write");
        model[b as usize] = b + 100;
    }
    disk.flush().expect("flush");
    let (sequence, generation) = {
        let st = disk.shared.state();
        let seq = st.map[&4].sequence;
        (seq, st.segments[&seq].generation)
    };
    let moved = disk
        .clean_one_with(sequence, generation, || {
            for b in [4, 5] {
                disk.write_at(&block(b + 200), b * BS as u64)
                    .expect("write");
                model[b as usize] = b + 200;
            }
        })
        .expect("clean");
    assert_eq!(moved, 2, "blocks 6 and 7 only");
    assert_eq!(
        image(&disk),
        model,
        "a block reads something else than its last write"
    );
    disk.flush().expect("flush");
    disk.verify().expect("invariants");
    disk.close().expect("close");
    let disk = ObjectDisk::open(store, &options("b", false)).expect("reopen");
    assert_eq!(image(&disk), model);
}
