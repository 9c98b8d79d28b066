//! The object disk on a real S3 store (the Ceph RGW `test.sh` starts):
//! writes across many segment objects read back, after a clean stop and
//! after the writer vanished without one; the bucket holds no more than the
//! checkpoint needs (`common::objdisk`). Skips (saying why) without
//! `CAIRN_TEST_S3_ENDPOINT`.
#![allow(clippy::unwrap_used)] // the shared helpers in tests/common unwrap

mod common;

use std::sync::Arc;

use cairn_objects::{ObjectStore, RetryPolicy, Retrying, S3Store};

#[test]
fn a_volume_on_rgw_survives_a_clean_stop_and_a_vanished_writer() {
    let Some(config) = cairn_objects::testing::s3_config("objdisk_s3") else {
        return;
    };
    let s3 = S3Store::new(&config).expect("client");
    let store: Arc<dyn ObjectStore> = Arc::new(Retrying::new(s3, RetryPolicy::default()));
    common::objdisk::survives_a_clean_stop_and_a_vanished_writer(&store, "objdisk_s3");
}
