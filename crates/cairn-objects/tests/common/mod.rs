//! The test store from the environment, shared by the integration tests.
#![allow(dead_code)]

use cairn_objects::ObjectStore;
pub use cairn_objects::testing::{rados_config, s3_config};

/// A prefix no other run uses.
pub fn unique_prefix(test: &str) -> String {
    cairn_objects::testing::unique_prefix(&format!("contract/{test}"))
}

pub fn remove_all(store: &dyn ObjectStore, prefix: &str) {
    cairn_objects::testing::remove_all(store, prefix).expect("cleanup");
}
