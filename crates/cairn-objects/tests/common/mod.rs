//! The test store from the environment, shared by the integration tests.
#![allow(dead_code)]

use std::time::Duration;

use cairn_objects::{ObjectStore, S3Config};

/// The test store from the environment, or `None` (after saying why).
pub fn s3_config(test: &str) -> Option<S3Config> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let Some(endpoint) = var("CAIRN_TEST_S3_ENDPOINT") else {
        eprintln!(
            "{test}: skipped: CAIRN_TEST_S3_ENDPOINT is not set (./test.sh starts a Ceph RGW and sets it)"
        );
        return None;
    };
    Some(S3Config {
        endpoint,
        bucket: var("CAIRN_TEST_S3_BUCKET").unwrap_or_else(|| "cairn-test".into()),
        region: var("CAIRN_TEST_S3_REGION").unwrap_or_else(|| "us-east-1".into()),
        access_key: var("CAIRN_TEST_S3_ACCESS_KEY").unwrap_or_default(),
        secret_key: var("CAIRN_TEST_S3_SECRET_KEY").unwrap_or_default(),
        timeout: Duration::from_secs(30),
    })
}

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
