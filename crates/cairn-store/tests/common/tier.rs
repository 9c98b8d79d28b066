//! Helpers the tier's integration tests share: a small tier over two
//! faulty devices (cache and backing), block contents that name their block
//! and version, and [`Model`], what each block may read back.

use std::collections::BTreeMap;
use std::sync::Arc;

use cairn_policy::PolicyConfig;
use cairn_store::Device;
use cairn_store::tier::open::{Want, open_or_format};
use cairn_store::tier::{Layout, Mode, Options, Tier};

pub const B: usize = 512;
/// Blocks of the backing device.
pub const BLOCKS: u64 = 48;
/// Bytes of the cache device: 8 buckets of 4 blocks and the metadata.
pub const CACHE_LEN: u64 = 24 << 10;

pub fn want(mode: Mode, policy: &str) -> Want {
    Want {
        layout: Layout {
            block_size: B as u32,
            bucket_size: 4 * B as u32,
            journal_blocks: 6,
        },
        options: Options {
            mode,
            policy: PolicyConfig::default_for(policy).expect("a policy"),
            admission: cairn_policy::AdmissionConfig::default(),
            sequential_cutoff_bytes: 6 * B as u64,
            overprovision: 0.1,
            shards: 1,
            background: false,
            ..Options::default()
        },
        marker: None,
    }
}

pub fn open(
    cache: &Arc<impl Device + 'static>,
    backing: &Arc<impl Device + 'static>,
    want: &Want,
) -> Tier {
    open_or_format(cache.clone(), backing.clone(), want).unwrap_or_else(|e| panic!("open: {e}"))
}

/// A block's contents that name the block and the version written.
pub fn pattern(block: u64, version: u64) -> Vec<u8> {
    let mut v = vec![0u8; B];
    for (i, chunk) in v.chunks_exact_mut(16).enumerate() {
        chunk[..8].copy_from_slice(&block.to_le_bytes());
        chunk[8..].copy_from_slice(&(version ^ i as u64).to_le_bytes());
    }
    v
}

pub fn version_of(block: u64, data: &[u8]) -> Option<u64> {
    if data.iter().all(|&b| b == 0) {
        return Some(0);
    }
    let version = u64::from_le_bytes(data[8..16].try_into().ok()?);
    (data == pattern(block, version).as_slice()).then_some(version)
}

/// What a block may read back after a crash.
#[derive(Clone, Debug, Default)]
struct Allowed {
    /// Version as of the last completed flush (0 = never written).
    durable: u64,
    /// Versions written since (any may have survived).
    since: Vec<u64>,
}

/// Every block's allowed versions.
#[derive(Default)]
pub struct Model {
    blocks: BTreeMap<u64, Allowed>,
}

impl Model {
    /// A write that completed (or may have, when it failed).
    pub fn write(&mut self, block: u64, version: u64) {
        self.blocks.entry(block).or_default().since.push(version);
    }

    pub fn flushed(&mut self) {
        for a in self.blocks.values_mut() {
            if let Some(&last) = a.since.last() {
                a.durable = last;
                a.since.clear();
            }
        }
    }

    /// The version a live read must return.
    pub fn latest(&self, block: u64) -> u64 {
        self.blocks
            .get(&block)
            .map_or(0, |a| a.since.last().copied().unwrap_or(a.durable))
    }

    /// Every block reads its latest version (no crash since).
    pub fn check_live(&self, tier: &Tier, context: &str) {
        let mut buf = vec![0u8; B];
        for b in 0..BLOCKS {
            tier.read_at(&mut buf, b * B as u64)
                .unwrap_or_else(|e| panic!("{context}: block {b} unreadable: {e}"));
            let got = version_of(b, &buf)
                .unwrap_or_else(|| panic!("{context}: block {b} holds data never written"));
            assert_eq!(got, self.latest(b), "{context}: block {b}");
        }
    }

    /// After a crash: every block reads an allowed version, which is then
    /// what it holds (durable, nothing since).
    pub fn check_and_settle(&mut self, tier: &Tier, context: &str) {
        let mut buf = vec![0u8; B];
        for b in 0..BLOCKS {
            tier.read_at(&mut buf, b * B as u64)
                .unwrap_or_else(|e| panic!("{context}: block {b} unreadable: {e}"));
            let got = version_of(b, &buf)
                .unwrap_or_else(|| panic!("{context}: block {b} holds data never written"));
            let a = self.blocks.entry(b).or_default();
            assert!(
                got == a.durable || a.since.contains(&got),
                "{context}: block {b} reads version {got}; durable {} / since {:?}",
                a.durable,
                a.since
            );
            a.durable = got;
            a.since.clear();
        }
    }
}
