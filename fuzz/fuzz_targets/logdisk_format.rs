//! Arbitrary bytes through the log disk's on-disk decoders: the superblock,
//! a segment summary (of either disk version) and a checkpoint, chosen by
//! the first byte. Nothing panics, whatever decodes encodes to bytes that
//! decode back to the same value, and a summary block reads as this
//! volume's exactly when it decodes. The low bits of the first byte may stamp
//! the magic and version and reseal the CRC32C, so the fuzzer also reaches
//! the field checks behind them.
#![no_main]

use cairn_store::logdisk::format::{
    self, CHECKPOINT_MAGIC, CHECKPOINT_VERSION, Geometry, SUMMARY_MAGIC, SUPERBLOCK_MAGIC,
    SummaryBlock, Superblock, VERSION,
};
use libfuzzer_sys::fuzz_target;

/// Makes `b` pass the magic/version/CRC checks: `magic` and `version` at
/// the start (when `stamp`), and the CRC32C at `crc_at` over every other byte
/// (when `seal`).
fn doctor(b: &mut [u8], (magic, version): ([u8; 8], u32), crc_at: usize, stamp: bool, seal: bool) {
    if stamp && b.len() >= 12 {
        b[..8].copy_from_slice(&magic);
        b[8..12].copy_from_slice(&version.to_le_bytes());
    }
    if seal && crc_at + 4 <= b.len() {
        b[crc_at..crc_at + 4].fill(0);
        let crc = format::crc32c(b);
        b[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// A small valid geometry from 8 bytes (512- to 4,096-byte blocks, 4 to 67
/// segments of 2 to 33 blocks), or `None`.
fn geometry(b: &[u8; 8]) -> Option<Geometry> {
    let block_size = 512u32 << (b[0] % 4);
    let segment_blocks = 2 + u32::from(b[1] % 32);
    let segments = 4 + u32::from(b[2] % 64);
    let data_slots = u64::from(segments) * u64::from(segment_blocks - 1);
    let logical_blocks = 1 + u64::from(u32::from_le_bytes([b[3], b[4], b[5], b[6]])) % data_slots;
    let g = Geometry {
        block_size,
        segment_blocks,
        segments,
        logical_blocks,
    };
    g.validate().ok().map(|()| g)
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (stamp, seal) = (mode & 1 != 0, mode & 2 != 0);
    match (mode >> 2) % 3 {
        0 => {
            // The superblock: at least 512 bytes, its block size read from it.
            let mut b = rest.to_vec();
            if seal || stamp {
                b.resize(b.len().max(512), 0);
                let size = format::superblock_block_size(&b) as usize;
                b.resize(b.len().max(size), 0);
                doctor(
                    &mut b[..size],
                    (SUPERBLOCK_MAGIC, VERSION),
                    size - 4,
                    stamp,
                    seal,
                );
            }
            if let Ok(sb) = format::decode_superblock(&b) {
                let again = format::encode_superblock(&sb);
                assert_eq!(format::decode_superblock(&again), Ok(sb));
            }
        }
        1 => {
            // A summary block of a valid block size and disk version, both
            // named by the next byte.
            let Some((&size, rest)) = rest.split_first() else {
                return;
            };
            let block_size = 512u32 << (size % 8);
            let version = if size & 0x80 != 0 { 1 } else { VERSION };
            let mut b = rest.to_vec();
            if seal || stamp {
                b.resize(block_size as usize, 0);
                doctor(
                    &mut b,
                    (SUMMARY_MAGIC, version),
                    block_size as usize - 4,
                    stamp,
                    seal,
                );
            }
            // The volume the block names (version 2), so it may be ours.
            let id = b
                .get(40..48)
                .and_then(|x| x.try_into().ok())
                .map_or(1, u64::from_le_bytes);
            let sb = Superblock {
                geometry: Geometry {
                    block_size,
                    segment_blocks: 2,
                    segments: 4,
                    logical_blocks: 1,
                },
                id,
                version,
            };
            let read = format::read_summary(&b, &sb);
            if let Ok(s) = format::decode_summary(&b, &sb) {
                assert_eq!(read, SummaryBlock::Ours(s.clone()));
                let again = format::encode_summary(&s, &sb).expect("a decoded summary encodes");
                assert_eq!(format::decode_summary(&again, &sb), Ok(s));
            } else {
                assert!(!matches!(read, SummaryBlock::Ours(_)));
            }
        }
        _ => {
            // A checkpoint slot of a small geometry named by the next 8 bytes.
            let Some((g, rest)) = rest.split_first_chunk::<8>() else {
                return;
            };
            let Some(g) = geometry(g) else {
                return;
            };
            let size = (g.checkpoint_blocks() * u64::from(g.block_size)) as usize;
            let mut b = rest.to_vec();
            if seal || stamp {
                b.resize(size, 0);
                if stamp {
                    // The geometry the slot must have been written for.
                    b[40..48].copy_from_slice(&g.logical_blocks.to_le_bytes());
                    b[48..52].copy_from_slice(&g.segments.to_le_bytes());
                }
                doctor(
                    &mut b,
                    (CHECKPOINT_MAGIC, CHECKPOINT_VERSION),
                    12,
                    stamp,
                    seal,
                );
            }
            if let Ok(c) = format::decode_checkpoint(&b, &g) {
                let again =
                    format::encode_checkpoint(&c, &g).expect("a decoded checkpoint encodes");
                assert_eq!(format::decode_checkpoint(&again, &g), Ok(c));
            }
        }
    }
});
