//! The test store from the environment, shared by the integration tests.
#![allow(dead_code)]

use cairn_objects::ObjectStore;
pub use cairn_objects::testing::s3_config;

/// A prefix no other run uses.
pub fn unique_prefix(test: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!("contract/{test}-{}-{nanos}/", std::process::id())
}

pub fn remove_all(store: &dyn ObjectStore, prefix: &str) {
    for o in store.list(prefix).expect("list for cleanup") {
        store.delete(&o.key).expect("delete for cleanup");
    }
}
