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

/// The cleaner looks up a segment's live blocks, checks their CRCs,
/// stages them and builds their segment with the state's lock released in
/// between: a block a client writes meanwhile must not be moved (its old
/// copy would replace the new one). Mutations: without the look before
/// staging, "moved" counts 4; without the one when the segment is built,
/// block 6's staged (old) copy is moved too ("block 7 moved": 2).
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
    let (staged, _) = disk
        .clean_one_with(sequence, generation, || {
            for b in [4, 5] {
                disk.write_at(&block(b + 200), b * BS as u64)
                    .expect("write");
                model[b as usize] = b + 200;
            }
        })
        .expect("clean");
    assert_eq!(staged, 2, "blocks 6 and 7 only");
    // Block 6 written while staged: its staged copy is void when the
    // segment is built.
    disk.write_at(&block(6 + 300), 6 * BS as u64)
        .expect("write");
    model[6] = 6 + 300;
    assert!(disk.build_now(), "two blocks staged");
    assert_eq!(disk.cleaned_blocks(), 1, "block 7 moved");
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

/// Without a local write log every FLUSH seals the open segment, however
/// little it holds: a write and a flush at a time make one-block segments,
/// each all live by its own count. The cleaner counts a client's segment
/// against a whole segment's room, so it takes them, and it writes what it
/// moves as segments of its own, built whole at a seal and never cut
/// short by a client's FLUSH: with the cleaner running between the
/// client's flushes, every segment it builds is full, the store ends up
/// with about the live data in whole segments, and nothing is moved
/// twice. Mutations: counting live blocks against a segment's own blocks,
/// nothing is cleaned (64 objects stay); moving into the open segment as
/// clients' writes do, the cleaner's segments are cut short by the
/// flushes.
#[test]
fn flushed_one_block_segments_are_merged_into_whole_ones() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let disk = ObjectDisk::open(store.clone(), &options("a", false)).expect("create");
    let mut model = vec![0u64; BLOCKS as usize];
    let segments = |s: &MemStore| s.list("vol/seg/").expect("list").len();
    for b in 0..BLOCKS {
        disk.write_at(&block((b + 1) << 16), b * BS as u64)
            .expect("write");
        model[b as usize] = (b + 1) << 16;
        disk.flush().expect("flush");
        // The cleaner's passes between the client's flushes.
        if b % 4 == 3 {
            disk.clean_pass_with(crate::objdisk::Cleaner::Greedy, 0.6, 4)
                .expect("clean");
        }
    }
    let once = disk.cleaned_blocks();
    eprintln!(
        "{once} blocks moved between flushes, {} segment objects",
        segments(store.as_ref())
    );
    assert!(once >= BLOCKS / 2, "{once} blocks moved");
    assert_eq!(disk.cleaned_blocks(), once);
    {
        let st = disk.shared.state();
        let built: Vec<(u64, u32)> = st
            .segments
            .iter()
            .filter(|(_, s)| s.cleaned)
            .map(|(&seq, s)| (seq, s.blocks))
            .collect();
        assert!(!built.is_empty());
        assert!(
            built.iter().all(|&(_, blocks)| blocks == 8),
            "the cleaner's segments (sequence, blocks): {built:?}"
        );
    }
    assert_eq!(image(&disk), model, "cleaning changes no content");
    // What is left over (fewer than a segment's worth) goes at a forced
    // pass; after it nothing is left to take.
    disk.clean_pass(0.6, 100).expect("clean");
    disk.flush().expect("flush");
    let total = disk.cleaned_blocks();
    assert!(total <= BLOCKS, "{total} moves for {BLOCKS} blocks");
    assert_eq!(disk.clean_pass(0.6, 100).expect("clean"), 0, "moved twice");
    disk.verify().expect("invariants");
    disk.close().expect("close");
    drop(disk);
    let left = segments(store.as_ref());
    eprintln!("{total} blocks moved in all; {left} segment objects after the close");
    assert!(
        left <= (BLOCKS / 8) as usize + 1,
        "{left} segment objects for {BLOCKS} live blocks, 8 a segment"
    );
    assert_no_leak(store.as_ref());
    let disk = ObjectDisk::open(store.clone(), &options("b", false)).expect("reopen");
    assert_eq!(image(&disk), model);
}
