//! Checkpoints while writes go on (`state.rs`, invariant 5): a writer that
//! keeps a segment open still gets checkpoints as of what is durable.

use std::sync::Arc;

use cairn_objects::{MemStore, ObjectStore};

use super::{
    BLOCKS, BS, assert_no_leak, block, copy, everything_durable, image, open_local, options,
    wait_until,
};
use crate::device::Device;
use crate::objdisk::ObjectDisk;

/// A writer that never leaves the disk idle (a segment always open) still
/// gets checkpoints, as of what is durable: dead segments are deleted
/// while it writes, not at its close, and a crash recovers every flushed
/// write (bucket + log) or the durable image (the bucket alone).
#[test]
fn checkpoints_go_on_while_a_segment_is_open() {
    let store: Arc<MemStore> = Arc::new(MemStore::new());
    let log: Arc<dyn Device> = Arc::new(crate::device::MemoryDevice::new(1024 * BS as u64));
    let disk = open_local(store.clone(), log.clone(), "a", false).expect("create");
    let mut model = vec![0u64; BLOCKS as usize];
    let mut durable_model = model.clone();
    let segments = |s: &MemStore| s.list("vol/seg/").expect("list").len();
    for round in 1..=12u64 {
        // Every block (eight segments; the last one sealed by the next
        // write), then three more into a segment left open.
        for b in 0..BLOCKS {
            let tag = (round << 16) | (b + 1);
            disk.write_at(&block(tag), b * BS as u64).expect("write");
            model[b as usize] = tag;
        }
        durable_model.clone_from(&model);
        for b in 0..3 {
            let tag = (round << 16) | 0x8000 | b;
            disk.write_at(&block(tag), b * BS as u64).expect("write");
            model[b as usize] = tag;
        }
        disk.flush().expect("flush");
        wait_until("the sealed segments uploaded", || everything_durable(&disk));
        // One is due every 3 segments: the background thread writes it
        // (a local FLUSH never does), with the three blocks open.
        wait_until(
            &format!("round {round}: no checkpoint as of durable"),
            || {
                let st = disk.shared.state();
                st.checkpointed + 3 > st.durable
            },
        );
        assert!(!disk.shared.state().open.is_empty(), "a segment stays open");
        disk.verify().expect("invariants");
    }
    // Twelve rounds wrote 96 segments; the store keeps the last round's
    // eight and the few that died after the last checkpoint (one every
    // three segments: how many depends on when the uploads landed). The
    // deletes follow the checkpoint's write, on its thread: waited for,
    // still before the close.
    wait_until("dead segments deleted while writing", || {
        segments(store.as_ref()) <= (BLOCKS / 8) as usize + 4
    });
    assert_eq!(image(&disk), model);
    // A crash: from the bucket alone, the durable image; with the log,
    // every flushed write.
    let bucket = copy(&store, &Arc::new(MemStore::new()));
    drop(disk);
    let alone = ObjectDisk::open(bucket, &options("b", true)).expect("bucket alone");
    assert_eq!(image(&alone), durable_model);
    let disk = open_local(store.clone(), log, "c", true).expect("bucket and log");
    assert_eq!(image(&disk), model);
    disk.close().expect("close");
    assert_no_leak(store.as_ref());
}
