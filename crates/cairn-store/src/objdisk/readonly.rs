//! Read-only opens of a volume, in use by a writer or not.
//!
//! A reader takes no lease and writes nothing but its pin (`pins.rs`): it
//! puts the pin first, then recovers as a takeover would — the newest valid
//! checkpoint and the valid segments after it up to the first gap — but
//! writes no fence and no checkpoint and deletes nothing. Its view is fixed
//! as of that moment (what the writer does later is not seen; open again to
//! see it). It starts no uploader and no cleaner; one thread refreshes the
//! pin every heartbeat; the close deletes it. Writes and trims are refused
//! (`DeviceError::ReadOnly`, EPERM through NBD); a flush has nothing to do.
//!
//! Reads go through the DRAM chunk cache and ranged GETs, never a local
//! segment cache: a read-only export creates and writes nothing locally,
//! and the writer's cache (its slots installed and evicted by the writer,
//! the file claimed by it) is not the reader's to use.
//!
//! A reader whose pin expired (it hung longer than three of its refresh
//! intervals) may find a segment deleted: the read fails naming it, and
//! says the volume moved on; never other data (every block is checked
//! against its CRC32C, and a segment's key, with its generation, is never
//! reused).

use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use cairn_objects::{ObjectError, ObjectStore};

use super::error::ObjectDiskError;
use super::format::Keys;
use super::pins::{Pin, Reader};
use super::recover::{self, Recovered};
use super::{ObjectDisk, ObjectDiskOptions, OpenReport, Parts, Shared, device_error};
use crate::device::{Device, DeviceError, DeviceOp};

/// Recoveries tried when an object vanishes meanwhile (a writer replaced
/// the newest checkpoint and deleted the older one).
const ATTEMPTS: usize = 5;

impl ObjectDisk {
    /// Opens the volume under `options.prefix` read-only, whether or not a
    /// writer holds it (module docs): pins it, recovers its view as of the
    /// newest checkpoint and the durable segments after it, starts the
    /// pin's refresh. `options.size` (and geometry), when given, must match
    /// the volume's; nothing is created.
    pub fn open_read_only(
        store: Arc<dyn ObjectStore>,
        options: &ObjectDiskOptions,
    ) -> Result<Self, ObjectDiskError> {
        let keys = Keys {
            prefix: options.prefix.clone(),
        };
        let volume = super::volume_for(store.as_ref(), &keys, options, false)?;
        // The pin before the listing: a writer that lists the pins after
        // this defers its deletes; one that listed before wrote the
        // checkpoint that left them dead before, and the listing below
        // finds it (`pins.rs`).
        let reader = Reader::pin(
            store.as_ref(),
            keys.reader(crate::codec::new_id()),
            Pin {
                holder: options.holder.clone(),
                checkpoint: 0,
                through: 0,
                time_ms: 0,
                refresh_ms: u64::try_from(options.heartbeat.as_millis())
                    .unwrap_or(u64::MAX)
                    .max(1),
            },
        )?;
        let bps = (volume.object_size / volume.block_size) as usize;
        let recovered = match recover_view(store.as_ref(), &keys, &volume, bps) {
            Ok(r) => r,
            Err(e) => {
                let _ = reader.unpin(store.as_ref());
                return Err(e);
            }
        };
        let last = recovered.state.durable;
        if let Err(e) = reader.refresh(store.as_ref(), |p| {
            p.checkpoint = recovered.checkpoint;
            p.through = last;
        }) {
            let _ = reader.unpin(store.as_ref());
            return Err(e.into());
        }
        let report = OpenReport {
            generation: 0,
            sequence: last,
            checkpoint: recovered.checkpoint,
            rolled: recovered.rolled,
            deleted: 0,
            deferred: 0,
            mapped: recovered.state.map.len(),
            replayed: 0,
        };
        let shared = Shared::new(
            Parts {
                store,
                keys,
                volume,
                generation: 0,
                state: recovered.state,
                lease: None,
                journal: None,
                segcache: None,
                deferred: super::pins::Deferred::default(),
                reader: Some(reader),
            },
            options,
        );
        let refresh = start_refresh(&shared, options.heartbeat);
        Ok(Self {
            shared,
            queue: Mutex::new(None),
            workers: Mutex::new(vec![refresh]),
            cleaner: Mutex::new(None),
            report,
            background: false,
        })
    }

    /// Whether the disk was opened read-only.
    pub fn is_read_only(&self) -> bool {
        self.shared.reader.is_some()
    }

    /// A read-only close: the refresh stopped, the pin deleted.
    pub(super) fn close_reader(&self) -> Result<(), DeviceError> {
        self.stop_workers();
        let Some(reader) = &self.shared.reader else {
            return Ok(());
        };
        reader
            .unpin(self.shared.store.as_ref())
            .map_err(|e| device_error(DeviceOp::Flush, 0, 0, &self.describe(), e))
    }

    /// The error of a read-only open's read whose segment `key` is gone:
    /// the volume moved on (a writer deleted it after this view's pin
    /// expired).
    pub(super) fn gone(&self, offset: u64, len: u64, key: &str) -> DeviceError {
        let pin = self.shared.reader.as_ref().map(Reader::get);
        let (checkpoint, through) = pin.map_or((0, 0), |p| (p.checkpoint, p.through));
        let segment = key
            .rsplit('/')
            .next()
            .and_then(super::format::parse_numbered)
            .map_or_else(|| "a segment".to_owned(), |(s, _)| format!("segment {s}"));
        device_error(
            DeviceOp::Read,
            offset,
            len,
            &self.describe(),
            format!(
                "{segment} ({key}) is no longer in the store: the volume moved on since this \
                 read-only open (its view as of checkpoint {checkpoint}, through segment \
                 {through}; a writer deleted the segment, so this reader's pin had expired); \
                 open it again to read the volume as it is now"
            ),
        )
    }
}

/// The reader's view: a recovery that deletes nothing, tried again when
/// an object it reads vanished meanwhile (a writer's newer checkpoint
/// replaced the one it listed: the next listing finds that one).
fn recover_view(
    store: &dyn ObjectStore,
    keys: &Keys,
    volume: &super::format::VolumeRecord,
    blocks_per_segment: usize,
) -> Result<Recovered, ObjectDiskError> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        match recover::recover(store, keys, volume, u64::MAX, blocks_per_segment) {
            Err(ObjectDiskError::Store(ObjectError::NotFound { key })) if attempt < ATTEMPTS => {
                tracing::debug!(volume = %keys.prefix, "{key} vanished while reading the volume: again");
            }
            other => return other,
        }
    }
}

/// The reader's thread: refreshes the pin every `every` until the close.
fn start_refresh(shared: &Arc<Shared>, every: Duration) -> JoinHandle<()> {
    let shared = Arc::clone(shared);
    std::thread::Builder::new()
        .name("cairn-pin".into())
        .spawn(move || {
            loop {
                if shared.pause(every) {
                    break;
                }
                let Some(reader) = &shared.reader else { break };
                if let Err(e) = reader.refresh(shared.store.as_ref(), |_| {}) {
                    tracing::warn!(pin = %reader.key, "refreshing the reader pin: {e}");
                }
            }
        })
        .expect("spawn the reader pin thread")
}
