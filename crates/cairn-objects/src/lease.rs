//! [`Lease`]: one writer per volume, by conditional create.
//!
//! A volume's leases are objects `PREFIX lease/GGGGGGGGGGGGGGGG` (the
//! generation, 16 hex digits, so a listing is in generation order), each
//! created with [`ObjectStore::create`]: of two servers taking the same
//! generation exactly one succeeds. The holder of the highest generation is
//! the writer; every object it writes carries its generation, so what a
//! fenced writer writes later is recognisable and ignored (the object tier's
//! rule, `docs/architecture.md` "Object tier").
//!
//! - A clean stop creates `…GGGG.released`: the next opener takes the next
//!   generation without asking.
//! - A lease without that marker is held: another opener is refused, with
//!   the holder, the generation, when it was taken and its last heartbeat
//!   (`…GGGG.alive`, rewritten by [`Lease::heartbeat`]), unless it forces a
//!   takeover (the holder crashed, or its machine is gone).
//! - A holder learns it was fenced with [`Lease::still_held`]: the next
//!   generation exists.
//!
//! A lease record (all little-endian, CRC32C over everything before it):
//!
//! ```text
//!  0       8       12      16              24              32              40      44
//!  +-------+-------+-------+---------------+---------------+---------------+-------+-----------+-----+
//!  | magic | vers. | flags | generation    | nonce         | time (ms)     | n     | holder(n) | crc |
//!  +-------+-------+-------+---------------+---------------+---------------+-------+-----------+-----+
//!  "CAIRNLSE" u32=1  bit 0: forced          random          Unix ms          u32     UTF-8       u32
//! ```

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::{ObjectError, ObjectStore};

const MAGIC: &[u8; 8] = b"CAIRNLSE";
const VERSION: u32 = 1;
const FORCED: u32 = 1;
/// Bytes before the holder's name.
const HEAD: usize = 44;
/// The longest holder name kept.
const MAX_HOLDER: usize = 1024;

/// A lease's record: who took which generation, when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The generation.
    pub generation: u64,
    /// Who holds it: `host pid N` by default.
    pub holder: String,
    /// Random, so a retried create recognises its own record.
    pub nonce: u64,
    /// When it was taken (or, in a heartbeat, last renewed), Unix ms.
    pub time_ms: u64,
    /// Taken by force from a holder that had not released.
    pub forced: bool,
}

impl LeaseRecord {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let holder = truncate(&self.holder, MAX_HOLDER).as_bytes();
        let mut out = Vec::with_capacity(HEAD + holder.len() + 4);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(if self.forced { FORCED } else { 0 }).to_le_bytes());
        out.extend_from_slice(&self.generation.to_le_bytes());
        out.extend_from_slice(&self.nonce.to_le_bytes());
        out.extend_from_slice(&self.time_ms.to_le_bytes());
        out.extend_from_slice(&(holder.len() as u32).to_le_bytes());
        out.extend_from_slice(holder);
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// A record from its bytes, or what is wrong with them.
    pub fn decode(bytes: &[u8]) -> Result<Self, String> {
        if bytes.len() < HEAD + 4 {
            return Err(format!(
                "{} bytes, shorter than a lease record",
                bytes.len()
            ));
        }
        if &bytes[..8] != MAGIC {
            return Err("not a lease record (bad magic)".into());
        }
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"));
        let version = u32_at(8);
        if version != VERSION {
            return Err(format!(
                "lease record version {version}; this build reads {VERSION}"
            ));
        }
        let n = u32_at(40) as usize;
        if n > MAX_HOLDER || bytes.len() != HEAD + n + 4 {
            return Err(format!(
                "holder length {n} does not fit the record's {} bytes",
                bytes.len()
            ));
        }
        let crc = u32_at(HEAD + n);
        let actual = crc32c::crc32c(&bytes[..HEAD + n]);
        if crc != actual {
            return Err(format!(
                "CRC32C {actual:#010x}, the record says {crc:#010x} (torn or corrupted)"
            ));
        }
        let holder = std::str::from_utf8(&bytes[HEAD..HEAD + n])
            .map_err(|_| "the holder's name is not UTF-8".to_owned())?
            .to_owned();
        Ok(Self {
            generation: u64_at(16),
            holder,
            nonce: u64_at(24),
            time_ms: u64_at(32),
            forced: u32_at(12) & FORCED != 0,
        })
    }
}

fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A random 64-bit number (std's per-process random hash keys over the
/// time, so two servers started together still differ).
fn nonce() -> u64 {
    let mut h = std::hash::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

/// `host pid N`: who this process is, for a lease's holder.
pub fn this_holder() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "unknown-host".into(), |h| h.trim().to_owned());
    format!("{host} pid {}", std::process::id())
}

/// Whether `holder` names a process of this host that no longer runs (a
/// server killed or crashed here): its lease can be taken without waiting
/// for its requests, which died with it. A PID reused by another process
/// reads as alive (the safe side).
pub fn holder_is_dead_here(holder: &str) -> bool {
    let mine = this_holder();
    let Some((host, _)) = mine.rsplit_once(" pid ") else {
        return false;
    };
    let Some((their_host, pid)) = holder.rsplit_once(" pid ") else {
        return false;
    };
    their_host == host
        && pid
            .parse::<u32>()
            .is_ok_and(|pid| pid != std::process::id() && !running(pid))
}

/// Whether process `pid` runs: it exists and is not a zombie (an exited
/// process its parent has not reaped yet).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's closing parenthesis.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_none_or(|state| state != 'Z' && state != 'X'),
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// Why a lease was not taken.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    /// Another server holds the volume.
    #[error(
        "{prefix}: held by {holder} (generation {generation}, taken {taken} ago{alive}); \
         stop that server, or force a takeover if it is gone for good"
    )]
    Held {
        /// The volume's prefix.
        prefix: String,
        /// The holder's name.
        holder: String,
        /// Its generation.
        generation: u64,
        /// How long ago it was taken, for people.
        taken: String,
        /// `, last heartbeat Ns ago`, or empty.
        alive: String,
    },
    /// A lease record that does not decode.
    #[error("{key}: {detail}")]
    Corrupt {
        /// The record's key.
        key: String,
        /// What is wrong.
        detail: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] ObjectError),
}

/// The newest lease of a volume, as a reader sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseState {
    /// Its record.
    pub record: LeaseRecord,
    /// Whether its holder released it.
    pub released: bool,
    /// The holder's last heartbeat, Unix ms, if it wrote one.
    pub alive_ms: Option<u64>,
}

/// The lease object's key of `generation` under `prefix`.
fn key(prefix: &str, generation: u64) -> String {
    format!("{prefix}lease/{generation:016x}")
}

fn ago(ms: u64) -> String {
    let d = Duration::from_millis(now_ms().saturating_sub(ms));
    if d.as_secs() < 120 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{} min", d.as_secs() / 60)
    }
}

/// The newest lease of the volume under `prefix`, if any was ever taken.
pub fn current(store: &dyn ObjectStore, prefix: &str) -> Result<Option<LeaseState>, LeaseError> {
    let dir = format!("{prefix}lease/");
    let listed = store.list(&dir)?;
    // Records are the keys of exactly 16 hex digits after the directory.
    let newest = listed
        .iter()
        .filter_map(|o| {
            let name = &o.key[dir.len()..];
            (name.len() == 16)
                .then(|| u64::from_str_radix(name, 16).ok())
                .flatten()
        })
        .max();
    let Some(generation) = newest else {
        return Ok(None);
    };
    let k = key(prefix, generation);
    let record = read_record(store, &k)?;
    if record.generation != generation {
        return Err(LeaseError::Corrupt {
            key: k,
            detail: format!("the record says generation {}", record.generation),
        });
    }
    let released = listed.iter().any(|o| o.key == format!("{k}.released"));
    let alive_ms = if listed.iter().any(|o| o.key == format!("{k}.alive")) {
        match store.get(&format!("{k}.alive")) {
            Ok(bytes) => LeaseRecord::decode(&bytes).ok().map(|r| r.time_ms),
            Err(ObjectError::NotFound { .. }) => None,
            Err(e) => return Err(e.into()),
        }
    } else {
        None
    };
    Ok(Some(LeaseState {
        record,
        released,
        alive_ms,
    }))
}

fn read_record(store: &dyn ObjectStore, key: &str) -> Result<LeaseRecord, LeaseError> {
    let bytes = store.get(key)?;
    LeaseRecord::decode(&bytes).map_err(|detail| LeaseError::Corrupt {
        key: key.to_owned(),
        detail,
    })
}

/// The right to write a volume: the newest generation, taken by this
/// process.
#[derive(Debug)]
pub struct Lease {
    prefix: String,
    record: LeaseRecord,
    /// The generation before, and whether it was released (`None`: the
    /// volume's first lease).
    previous: Option<(u64, bool)>,
}

impl Lease {
    /// Takes the next generation of the volume under `prefix` for `holder`.
    /// Refused ([`LeaseError::Held`]) while the newest lease is not released,
    /// unless `force`; refused as well when another server took the same
    /// generation first.
    pub fn acquire(
        store: &dyn ObjectStore,
        prefix: &str,
        holder: &str,
        force: bool,
    ) -> Result<Self, LeaseError> {
        let state = current(store, prefix)?;
        if let Some(s) = state.as_ref().filter(|s| !s.released && !force) {
            return Err(held(prefix, s));
        }
        let generation = state.as_ref().map_or(1, |s| s.record.generation + 1);
        let record = LeaseRecord {
            generation,
            holder: holder.to_owned(),
            nonce: nonce(),
            time_ms: now_ms(),
            forced: state.as_ref().is_some_and(|s| !s.released),
        };
        match store.create(&key(prefix, generation), &record.encode()) {
            Ok(()) => Ok(Self {
                prefix: prefix.to_owned(),
                record,
                previous: state.map(|s| (s.record.generation, s.released)),
            }),
            Err(ObjectError::Exists { .. }) => {
                // Another server took this generation between our listing
                // and our create: it holds the volume now.
                match current(store, prefix)? {
                    Some(s) => Err(held(prefix, &s)),
                    None => Err(LeaseError::Corrupt {
                        key: key(prefix, generation),
                        detail: "the create found the lease taken, the listing finds no lease"
                            .into(),
                    }),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Our generation: every object we write carries it.
    pub fn generation(&self) -> u64 {
        self.record.generation
    }

    /// Our record.
    pub fn record(&self) -> &LeaseRecord {
        &self.record
    }

    /// The generation before ours and whether its holder released it
    /// (`false`: we took it by force, and must fence what it wrote after).
    pub fn previous(&self) -> Option<(u64, bool)> {
        self.previous
    }

    /// Whether we are still the writer: no server has taken the next
    /// generation.
    pub fn still_held(&self, store: &dyn ObjectStore) -> Result<bool, ObjectError> {
        Ok(store
            .head(&key(&self.prefix, self.record.generation + 1))?
            .is_none())
    }

    /// Records that we are alive now (shown to a refused opener).
    pub fn heartbeat(&self, store: &dyn ObjectStore) -> Result<(), ObjectError> {
        let mut record = self.record.clone();
        record.time_ms = now_ms();
        store.put(
            &format!("{}.alive", key(&self.prefix, record.generation)),
            &record.encode(),
        )
    }

    /// Gives the volume up at a clean stop: the next opener needs no force.
    pub fn release(self, store: &dyn ObjectStore) -> Result<(), ObjectError> {
        let k = format!("{}.released", key(&self.prefix, self.record.generation));
        match store.create(&k, &self.record.encode()) {
            Ok(()) | Err(ObjectError::Exists { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

fn held(prefix: &str, s: &LeaseState) -> LeaseError {
    LeaseError::Held {
        prefix: prefix.to_owned(),
        holder: s.record.holder.clone(),
        generation: s.record.generation,
        taken: ago(s.record.time_ms),
        alive: s
            .alive_ms
            .map(|ms| format!(", last heartbeat {} ago", ago(ms)))
            .unwrap_or_default(),
    }
}
