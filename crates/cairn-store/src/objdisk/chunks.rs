//! The read cache: aligned 1 MiB chunks of segment objects in DRAM, so a
//! read that misses fetches a large range once (its neighbours, written
//! together, usually follow) instead of a 4 KiB GET per block, and the GETs
//! of one read's chunks run in parallel.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use cairn_objects::{ObjectError, ObjectStore};

/// Bytes of a chunk: what one GET fetches.
pub(crate) const CHUNK: u64 = 1 << 20;

/// GETs one read issues at once.
const PARALLEL_GETS: usize = 16;

/// A chunk: (segment, chunk index within its object).
type Id = (u64, u64);

/// Chunks by id, evicted oldest first past the capacity.
pub(crate) struct Chunks {
    capacity: u64,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    map: hashbrown::HashMap<Id, Arc<Vec<u8>>>,
    order: VecDeque<Id>,
    bytes: u64,
}

/// A block to read: where it goes in the caller's buffer, its segment and
/// object, its byte offset there, its CRC32C.
pub(crate) struct Want {
    pub index: usize,
    pub segment: u64,
    pub key: String,
    pub at: u64,
    pub crc: u32,
}

impl Chunks {
    pub(crate) fn new(capacity: u64) -> Self {
        Self {
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn insert(&self, id: Id, chunk: Arc<Vec<u8>>) {
        if self.capacity == 0 {
            return;
        }
        let mut inner = self.lock();
        if inner.map.contains_key(&id) {
            return;
        }
        inner.bytes += chunk.len() as u64;
        inner.map.insert(id, chunk);
        inner.order.push_back(id);
        while inner.bytes > self.capacity {
            let Some(old) = inner.order.pop_front() else {
                break;
            };
            if let Some(c) = inner.map.remove(&old) {
                inner.bytes -= c.len() as u64;
            }
        }
    }

    /// Fills `buf` (blocks of `bs` bytes) with the blocks `wants` names,
    /// from cached chunks or chunks fetched now, checking each block's
    /// CRC32C.
    pub(crate) fn read(
        &self,
        store: &dyn ObjectStore,
        buf: &mut [u8],
        bs: usize,
        wants: &[Want],
    ) -> Result<(), ObjectError> {
        let mut have: hashbrown::HashMap<Id, Arc<Vec<u8>>> = hashbrown::HashMap::new();
        let mut missing: Vec<(Id, &str)> = Vec::new();
        {
            let inner = self.lock();
            for w in wants {
                let id = (w.segment, w.at / CHUNK);
                if have.contains_key(&id) || missing.iter().any(|(m, _)| *m == id) {
                    continue;
                }
                match inner.map.get(&id) {
                    Some(c) => {
                        have.insert(id, Arc::clone(c));
                    }
                    None => missing.push((id, &w.key)),
                }
            }
        }
        let get = |(id, key): (Id, &str)| -> Result<(Id, Arc<Vec<u8>>), ObjectError> {
            let mut chunk = vec![0u8; CHUNK as usize];
            let n = store.read_at(key, id.1 * CHUNK, &mut chunk)?;
            chunk.truncate(n);
            Ok((id, Arc::new(chunk)))
        };
        let fetched: Vec<(Id, Arc<Vec<u8>>)> = if missing.len() <= 1 {
            missing.into_iter().map(get).collect::<Result<_, _>>()?
        } else {
            let threads = missing.len().min(PARALLEL_GETS);
            let mut groups: Vec<Vec<(Id, &str)>> = (0..threads).map(|_| Vec::new()).collect();
            for (k, m) in missing.into_iter().enumerate() {
                groups[k % threads].push(m);
            }
            std::thread::scope(|scope| {
                let handles: Vec<_> = groups
                    .into_iter()
                    .map(|g| {
                        scope.spawn(move || g.into_iter().map(get).collect::<Result<Vec<_>, _>>())
                    })
                    .collect();
                let mut all = Vec::new();
                for h in handles {
                    all.extend(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?);
                }
                Ok::<_, ObjectError>(all)
            })?
        };
        for (id, chunk) in fetched {
            self.insert(id, Arc::clone(&chunk));
            have.insert(id, chunk);
        }
        for w in wants {
            let chunk = &have[&(w.segment, w.at / CHUNK)];
            let from = (w.at % CHUNK) as usize;
            let Some(block) = chunk.get(from..from + bs) else {
                return Err(ObjectError::failed(
                    cairn_objects::Op::Get,
                    &w.key,
                    format!("the object ends before byte {}", w.at + bs as u64),
                    false,
                ));
            };
            let got = crate::codec::crc32c(block);
            if got != w.crc {
                return Err(ObjectError::failed(
                    cairn_objects::Op::Get,
                    &w.key,
                    format!(
                        "block at byte {} has CRC32C {got:#010x}, the map says {:#010x}",
                        w.at, w.crc
                    ),
                    false,
                ));
            }
            buf[w.index * bs..(w.index + 1) * bs].copy_from_slice(block);
        }
        Ok(())
    }
}
