//! The object volume's part of the builder: the store's client (S3 or
//! RADOS), the object disk opened or created (or, read-only, a reader),
//! and its layer.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn_policy::Bytes;

use super::super::spec::{self, ObjectsSpec};
use super::super::types::{OpenLayer, VolumeError};
use super::{Builder, Built, Leaf};
use crate::device::Device;

impl Builder<'_> {
    /// An object volume: the store's client (S3: keys from the environment;
    /// RADOS: connected to the cluster), retries for `retry_for` seconds,
    /// the disk opened (lease, recovery, fence, checkpoint) or created; or,
    /// read-only, opened as a reader.
    pub(super) fn objects(
        &mut self,
        name: &str,
        field: &str,
        o: &spec::ObjectsSpec,
    ) -> Result<Built, VolumeError> {
        use crate::objdisk::ObjectDisk;
        use cairn_objects::{ObjectStore, RetryPolicy, Retrying};
        let policy = RetryPolicy {
            deadline: Some(std::time::Duration::from_secs(o.retry_for)),
            ..RetryPolicy::default()
        };
        let store: Arc<dyn ObjectStore> = match o.backend {
            spec::ObjectsBackend::S3 => Arc::new(Retrying::new(s3_store(field, o)?, policy)),
            spec::ObjectsBackend::Rados => Arc::new(Retrying::new(
                rados_store(field, o, self.data_dir, &policy)?,
                policy,
            )),
        };
        let options = object_disk_options(name, o);
        if self.read_only {
            return self.objects_read_only(name, field, store, &options);
        }
        let log = match o.flush {
            spec::ObjectsFlush::Remote => None,
            spec::ObjectsFlush::Local => {
                let field = format!("{field}.local_log");
                let log = self
                    .local_file(
                        &field,
                        o.local_log.as_ref(),
                        format!("{name}.wlog"),
                        o.local_log_size,
                    )?
                    .with_direct_writes();
                // Written whole once (a new log is sparse), so that a FLUSH
                // never allocates and the space is the log's.
                let t = std::time::Instant::now();
                let filled = log
                    .fill_holes()
                    .map_err(|e| VolumeError::new(&field, e.to_string()))?;
                if filled > 0 {
                    tracing::info!(
                        "{field}: {} of the local write log allocated and zeroed in {:.1} s (once)",
                        Bytes(filled),
                        t.elapsed().as_secs_f64()
                    );
                }
                Some(Arc::new(log) as Arc<dyn Device>)
            }
        };
        // The log's batches and the cache's segment objects are written
        // whole and page-aligned: with O_DIRECT, at no copy into the page
        // cache (reads, rare, go through it).
        let cache = match o.local_cache_size.get() {
            0 => None,
            _ => Some(Arc::new(
                self.local_file(
                    &format!("{field}.local_cache"),
                    o.local_cache.as_ref(),
                    format!("{name}.segcache"),
                    o.local_cache_size,
                )?
                .with_direct_writes(),
            ) as Arc<dyn Device>),
        };
        let disk = Arc::new(
            ObjectDisk::open_local(store, &options, log, cache)
                .map_err(|e| VolumeError::new(field, e.to_string()))?,
        );
        let r = disk.report();
        let durable = match o.flush {
            spec::ObjectsFlush::Local => "a FLUSH is durable in the local write log",
            spec::ObjectsFlush::Remote => "a FLUSH is durable in the store",
        };
        let line = format!(
            "{field}: object volume {}: generation {}, through segment {} ({} rolled forward, {} objects deleted, {} local log records written again), {} blocks mapped; {durable}",
            disk.describe(),
            r.generation,
            r.sequence,
            r.rolled,
            r.deleted,
            r.replayed,
            r.mapped
        );
        if r.rolled > 0 || r.replayed > 0 {
            self.warnings
                .push(format!("{line}; the last writer did not stop cleanly"));
        } else {
            self.notes.push(line);
        }
        Ok(self.object_layer(name, disk))
    }

    /// The object volume `disk` as `device.{name}`: a layer to stop and
    /// report at the end.
    fn object_layer(&mut self, name: &str, disk: Arc<crate::objdisk::ObjectDisk>) -> Built {
        let device = self.stacked(name, Arc::clone(&disk) as _, Arc::clone(&disk));
        self.layers.push(OpenLayer::Objects {
            name: name.to_owned(),
            disk,
        });
        Built {
            device,
            leaves: vec![Leaf::Used(format!("the object volume device.{name}"))],
            placement: None,
        }
    }

    /// An object volume served read-only: no lease, nothing local (no
    /// write log, no segment cache), a reader pin in the store for as long
    /// as it is served (`objdisk/readonly.rs`); a writer may hold it.
    fn objects_read_only(
        &mut self,
        name: &str,
        field: &str,
        store: Arc<dyn cairn_objects::ObjectStore>,
        options: &crate::objdisk::ObjectDiskOptions,
    ) -> Result<Built, VolumeError> {
        let disk = Arc::new(
            crate::objdisk::ObjectDisk::open_read_only(store, options)
                .map_err(|e| VolumeError::new(field, e.to_string()))?,
        );
        let r = disk.report();
        self.notes.push(format!(
            "{field}: object volume {} opened read-only: as of checkpoint {} and {} segments \
             rolled forward, through segment {}, {} blocks mapped; a writer may hold it \
             (its later writes are not seen); a reader pin keeps what this view reads",
            disk.describe(),
            r.checkpoint,
            r.rolled,
            r.sequence,
            r.mapped
        ));
        Ok(self.object_layer(name, disk))
    }
}

/// An object volume's S3 client, its keys from the environment. Sends
/// nothing: a wrong endpoint or key shows at the first request.
fn s3_store(field: &str, o: &ObjectsSpec) -> Result<cairn_objects::S3Store, VolumeError> {
    let key = |var: &str, what: &str| {
        std::env::var(var).map_err(|_| {
            VolumeError::new(
                field,
                format!("the {what} is read from ${var}, which is not set"),
            )
        })
    };
    let config = cairn_objects::S3Config {
        endpoint: o.endpoint.clone().unwrap_or_default(),
        bucket: o.bucket.clone().unwrap_or_default(),
        region: o.region().to_owned(),
        access_key: key(o.access_key_env(), "access key")?,
        secret_key: key(o.secret_key_env(), "secret key")?,
        timeout: Duration::from_secs(o.request_timeout),
    };
    cairn_objects::S3Store::new(&config)
        .map_err(|e| VolumeError::new(format!("{field}.endpoint"), e.to_string()))
}

/// An object volume's RADOS client, connected to its cluster and pool
/// (`ceph_conf` relative to the data directory). A cluster that does not
/// answer (a retryable failure after `request_timeout`) is tried again,
/// with doubling pauses, until `retry_for` has passed, as a failing request
/// would be.
fn rados_store(
    field: &str,
    o: &ObjectsSpec,
    data_dir: &Path,
    policy: &cairn_objects::RetryPolicy,
) -> Result<cairn_objects::RadosStore, VolumeError> {
    let config = cairn_objects::RadosConfig {
        conf: data_dir.join(o.ceph_conf()),
        pool: o.pool.clone().unwrap_or_default(),
        client: o.client().to_owned(),
        namespace: o.namespace.clone(),
        op_timeout: Duration::from_secs(o.request_timeout),
    };
    let start = Instant::now();
    let mut pause = policy.first_delay;
    loop {
        match cairn_objects::RadosStore::new(&config) {
            Ok(store) => return Ok(store),
            Err(e)
                if e.is_retryable()
                    && policy.deadline.is_none_or(|d| start.elapsed() + pause < d) =>
            {
                tracing::warn!("{field}: {e}; trying again in {pause:?}");
                std::thread::sleep(pause);
                pause = (pause * 2).min(policy.max_delay);
            }
            Err(e) => return Err(VolumeError::new(field, e.to_string())),
        }
    }
}

/// The object disk's options from an object volume's spec.
fn object_disk_options(name: &str, o: &spec::ObjectsSpec) -> crate::objdisk::ObjectDiskOptions {
    crate::objdisk::ObjectDiskOptions {
        prefix: o
            .prefix
            .clone()
            .unwrap_or_else(|| format!("volumes/{name}/")),
        size: o.size.map_or(0, Bytes::get),
        block_size: o.block_size.get() as u32,
        object_size: o.object_size.get() as u32,
        uploaders: o.uploaders,
        upload_queue: o.upload_queue_bytes(),
        stall_timeout: (o.stall_timeout > 0)
            .then(|| std::time::Duration::from_secs(o.stall_timeout)),
        checkpoint_every: o.checkpoint_every,
        force_takeover: o.force_takeover,
        read_cache: o.read_cache.get(),
        takeover_grace: std::time::Duration::from_secs(2 * o.request_timeout),
        clean_below: o.clean_below,
        cleaner: o.cleaner.into(),
        ..crate::objdisk::ObjectDiskOptions::default()
    }
}
