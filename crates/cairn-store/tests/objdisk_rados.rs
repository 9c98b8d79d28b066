//! The object disk on a real RADOS pool (the Ceph cluster `test.sh`
//! starts), through librados: writes across many segment objects read back,
//! after a clean stop and after the writer vanished without one; the pool
//! holds no more than the checkpoint needs (`common::objdisk`). Skips
//! (saying why) without `CAIRN_TEST_CEPH_CONF` and `CAIRN_TEST_CEPH_POOL`.
#![allow(clippy::unwrap_used)] // the shared helpers in tests/common unwrap

mod common;

use std::sync::Arc;

use cairn_objects::{ObjectStore, RadosStore, RetryPolicy, Retrying};

#[test]
fn a_volume_on_rados_survives_a_clean_stop_and_a_vanished_writer() {
    let Some(config) = cairn_objects::testing::rados_config("objdisk_rados") else {
        return;
    };
    let rados = RadosStore::new(&config).expect("client");
    let store: Arc<dyn ObjectStore> = Arc::new(Retrying::new(rados, RetryPolicy::default()));
    common::objdisk::survives_a_clean_stop_and_a_vanished_writer(&store, "objdisk_rados");
}
