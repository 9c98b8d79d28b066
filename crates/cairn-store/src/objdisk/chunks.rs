//! The read cache: aligned 1 MiB chunks of segment objects in DRAM, so a
//! read that misses many blocks of one chunk fetches it once (its
//! neighbours, written together, usually follow), and the GETs of one read
//! run in parallel.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use cairn_objects::{ObjectError, ObjectStore};

/// Bytes of a chunk: what one GET fetches.
pub(crate) const CHUNK: u64 = 1 << 20;

/// GETs one read issues at once.
const PARALLEL_GETS: usize = 16;

/// A missing chunk holding at least this many bytes a read wants is
/// fetched whole: its other blocks were written with these and usually
/// follow.
const DENSE: u64 = CHUNK / 8;

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
    pub generation: u64,
    /// Whether half its segment's blocks or more are live: worth fetching
    /// whole into the local segment cache.
    pub dense: bool,
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
    /// checking each block's CRC32C: from cached chunks; else a chunk that
    /// holds at least [`DENSE`] of them, or of a segment half live or
    /// more, is fetched whole (and cached), and
    /// the others are read run by run (neighbouring entries of one segment,
    /// one ranged GET each): a read of blocks scattered over many segments
    /// by random writes must not fetch a whole chunk per block. The GETs of
    /// one read run in parallel.
    pub(crate) fn read(
        &self,
        store: &dyn ObjectStore,
        buf: &mut [u8],
        bs: usize,
        wants: &[Want],
    ) -> Result<(), ObjectError> {
        let mut have: hashbrown::HashMap<Id, Arc<Vec<u8>>> = hashbrown::HashMap::new();
        // Wanted blocks per missing chunk.
        let mut missing: hashbrown::HashMap<Id, Vec<usize>> = hashbrown::HashMap::new();
        {
            let inner = self.lock();
            for (k, w) in wants.iter().enumerate() {
                let id = (w.segment, w.at / CHUNK);
                if have.contains_key(&id) {
                    continue;
                }
                match inner.map.get(&id) {
                    Some(c) => {
                        have.insert(id, Arc::clone(c));
                    }
                    None => missing.entry(id).or_default().push(k),
                }
            }
        }
        // The GETs: a whole chunk, or a run of wanted blocks.
        let mut gets: Vec<Get> = Vec::new();
        let mut missing: Vec<(Id, Vec<usize>)> = missing.into_iter().collect();
        missing.sort_unstable_by_key(|(id, _)| *id);
        for (id, ks) in missing {
            // Its segment is half live or more: the chunk's other blocks
            // are likely read soon too.
            if ks.len() as u64 * bs as u64 >= DENSE || wants[ks[0]].dense {
                gets.push(Get::Chunk(id, &wants[ks[0]].key));
                continue;
            }
            let mut i = 0;
            while i < ks.len() {
                let mut j = i + 1;
                while j < ks.len()
                    && ks[j] == ks[j - 1] + 1
                    && wants[ks[j]].at == wants[ks[j - 1]].at + bs as u64
                {
                    j += 1;
                }
                gets.push(Get::Run(ks[i..j].to_vec()));
                i = j;
            }
        }
        let fetch = |get| fetch_one(store, wants, bs, get);
        let fetched = in_parallel(gets, fetch)?;
        // Where each wanted block's bytes are: a chunk, or a run's bytes.
        let mut runs: Vec<Option<(usize, usize)>> = vec![None; wants.len()];
        let mut run_bytes: Vec<Vec<u8>> = Vec::new();
        for (get, bytes) in fetched {
            match get {
                Get::Chunk(id, _) => {
                    let chunk = Arc::new(bytes);
                    self.insert(id, Arc::clone(&chunk));
                    have.insert(id, chunk);
                }
                Get::Run(ks) => {
                    for (n, k) in ks.into_iter().enumerate() {
                        runs[k] = Some((run_bytes.len(), n * bs));
                    }
                    run_bytes.push(bytes);
                }
            }
        }
        for (k, w) in wants.iter().enumerate() {
            let (bytes, from): (&[u8], usize) = match runs[k] {
                Some((r, from)) => (&run_bytes[r], from),
                None => (&have[&(w.segment, w.at / CHUNK)], (w.at % CHUNK) as usize),
            };
            let Some(block) = bytes.get(from..from + bs) else {
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

/// One GET of a read.
enum Get<'a> {
    /// A whole chunk of an object, to cache.
    Chunk(Id, &'a str),
    /// Wanted blocks (indices into the wants) that follow each other in one
    /// object.
    Run(Vec<usize>),
}

/// One GET: its bytes (fewer at the object's end).
fn fetch_one<'a>(
    store: &dyn ObjectStore,
    wants: &'a [Want],
    bs: usize,
    get: Get<'a>,
) -> Result<(Get<'a>, Vec<u8>), ObjectError> {
    let (key, at, len) = match &get {
        Get::Chunk(id, key) => (*key, id.1 * CHUNK, CHUNK as usize),
        Get::Run(ks) => (wants[ks[0]].key.as_str(), wants[ks[0]].at, ks.len() * bs),
    };
    let mut bytes = vec![0u8; len];
    let n = store.read_at(key, at, &mut bytes)?;
    bytes.truncate(n);
    Ok((get, bytes))
}

/// Runs `fetch` on every GET, on up to [`PARALLEL_GETS`] threads.
fn in_parallel<'a>(
    gets: Vec<Get<'a>>,
    fetch: impl Fn(Get<'a>) -> Result<(Get<'a>, Vec<u8>), ObjectError> + Sync,
) -> Result<Vec<(Get<'a>, Vec<u8>)>, ObjectError> {
    if gets.len() <= 1 {
        return gets.into_iter().map(fetch).collect();
    }
    let threads = gets.len().min(PARALLEL_GETS);
    let mut groups: Vec<Vec<Get<'a>>> = (0..threads).map(|_| Vec::new()).collect();
    for (k, g) in gets.into_iter().enumerate() {
        groups[k % threads].push(g);
    }
    let fetch = &fetch;
    std::thread::scope(|scope| {
        let handles: Vec<_> = groups
            .into_iter()
            .map(|g| scope.spawn(move || g.into_iter().map(fetch).collect::<Result<Vec<_>, _>>()))
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().unwrap_or_else(|p| std::panic::resume_unwind(p))?);
        }
        Ok(all)
    })
}
