//! The test cluster's store, for the tests of every crate: `test.sh` starts
//! a single-node Ceph (`bench/ceph-cluster.sh`) and exports where its S3
//! endpoint and its RADOS pool are.

use std::time::Duration;

use crate::{ObjectStore, RadosConfig, S3Config};

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

/// The test cluster's RADOS pool from the environment
/// (`CAIRN_TEST_CEPH_CONF`, `CAIRN_TEST_CEPH_POOL`; `CAIRN_TEST_CEPH_CLIENT`,
/// default `admin`), or `None` (after saying why).
pub fn rados_config(test: &str) -> Option<RadosConfig> {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (Some(conf), Some(pool)) = (var("CAIRN_TEST_CEPH_CONF"), var("CAIRN_TEST_CEPH_POOL"))
    else {
        eprintln!(
            "{test}: skipped: CAIRN_TEST_CEPH_CONF and CAIRN_TEST_CEPH_POOL are not both set (./test.sh starts a Ceph cluster and sets them)"
        );
        return None;
    };
    let mut config = RadosConfig::new(conf, pool);
    if let Some(client) = var("CAIRN_TEST_CEPH_CLIENT") {
        config.client = client;
    }
    Some(config)
}

/// A key prefix no other run uses: `{area}/{pid}-{nanoseconds}/`.
pub fn unique_prefix(area: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{area}/{}-{nanos}/", std::process::id())
}

/// Deletes every object under `prefix` (a test's cleanup).
pub fn remove_all(store: &dyn ObjectStore, prefix: &str) -> Result<(), crate::ObjectError> {
    for o in store.list(prefix)? {
        store.delete(&o.key)?;
    }
    Ok(())
}
