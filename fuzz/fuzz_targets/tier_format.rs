//! Arbitrary bytes through the flash tier's on-disk decoders: the superblock,
//! a checkpoint slot, a journal block and journal records, chosen by the
//! first byte. Nothing panics, and whatever decodes re-encodes to the bytes it
//! was decoded from (every byte of these structures is a field, reserved zero
//! or the CRC), which decode back to the same value. The low bits of the
//! first byte may stamp the magic and version (and the fields that must match
//! the superblock) and reseal the CRC32C, so the fuzzer also reaches the field
//! checks behind them. Lengths are the fuzzer's unless it stamps or seals.
#![no_main]

use cairn_store::logdisk::format::crc32c;
use cairn_store::tier::format::{
    self, CHECKPOINT_HEADER, CHECKPOINT_MAGIC, Checkpoint, Geometry, JOURNAL_HEADER, JOURNAL_MAGIC,
    JournalHeader, RECORD, SLOT_ENTRY, SUPERBLOCK_MAGIC, VERSION,
};
use libfuzzer_sys::fuzz_target;

/// Makes `b` pass the magic/version/CRC checks: `magic` and [`VERSION`] at
/// the start (when `stamp`), and the CRC32C at `crc_at` over every other byte
/// (when `seal`).
fn doctor(b: &mut [u8], magic: [u8; 8], crc_at: usize, stamp: bool, seal: bool) {
    if stamp && b.len() >= 12 {
        b[..8].copy_from_slice(&magic);
        b[8..12].copy_from_slice(&VERSION.to_le_bytes());
    }
    if seal && crc_at + 4 <= b.len() {
        b[crc_at..crc_at + 4].fill(0);
        let crc = crc32c(b);
        b[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
    }
}

/// What checkpoints, journal blocks and records are checked against, as a
/// superblock would give it: the slot count (1 to 256), the cache id and the
/// backing device's blocks (1 to 2^32), from 16 bytes.
fn context(b: &[u8; 16]) -> (u64, u64, u64) {
    let slots = 1 + u64::from(b[0]);
    let cache_id = u64::from_le_bytes(b[4..12].try_into().expect("8 bytes"));
    let backing = 1 + u64::from(u32::from_le_bytes(b[12..16].try_into().expect("4 bytes")));
    (slots, cache_id, backing)
}

fn superblock(rest: &[u8], stamp: bool, seal: bool) {
    let mut b = rest.to_vec();
    if stamp || seal {
        b.resize(b.len().max(512), 0);
        let size = u32::from_le_bytes(b[12..16].try_into().expect("4 bytes"));
        if size.is_power_of_two() && (512..=65_536).contains(&size) {
            b.resize(size as usize, 0);
        }
        if stamp {
            // The first data block the geometry gives, when it is one.
            let g = Geometry {
                block_size: size,
                bucket_blocks: u32::from_le_bytes(b[16..20].try_into().expect("4 bytes")),
                buckets: u32::from_le_bytes(b[20..24].try_into().expect("4 bytes")),
                journal_blocks: u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")),
                backing_blocks: u64::from_le_bytes(b[32..40].try_into().expect("8 bytes")),
            };
            if g.validate().is_ok() {
                b[48..56].copy_from_slice(&g.data_start().to_le_bytes());
            }
        }
        let len = b.len();
        doctor(&mut b, SUPERBLOCK_MAGIC, len - 4, stamp, seal);
    }
    if let Ok(sb) = format::decode_superblock(&b) {
        let again = format::encode_superblock(&sb);
        assert_eq!(again, b, "a decoded superblock re-encodes differently");
        assert_eq!(format::decode_superblock(&again), Ok(sb));
    }
}

fn checkpoint(rest: &[u8], stamp: bool, seal: bool) {
    let Some((ctx, rest)) = rest.split_first_chunk::<16>() else {
        return;
    };
    let (slots, cache_id, backing) = context(ctx);
    let mut b = rest.to_vec();
    if stamp || seal {
        b.resize(CHECKPOINT_HEADER + slots as usize * SLOT_ENTRY, 0);
        if stamp {
            b[32..40].copy_from_slice(&cache_id.to_le_bytes());
            b[40..44].copy_from_slice(&(slots as u32).to_le_bytes());
        }
        doctor(&mut b, CHECKPOINT_MAGIC, 12, stamp, seal);
    }
    if let Ok(c) = format::decode_checkpoint(&b, slots, cache_id, backing) {
        assert_eq!(c.slots.len() as u64, slots);
        assert_eq!(c.cache_id, cache_id);
        let mut again = vec![0u8; b.len()];
        format::encode_checkpoint_into(&mut again, &c);
        assert_eq!(again, b, "a decoded checkpoint re-encodes differently");
        let back: Checkpoint = format::decode_checkpoint(&again, slots, cache_id, backing)
            .expect("a re-encoded checkpoint decodes");
        assert_eq!(back, c);
    }
}

fn journal_block(rest: &[u8], stamp: bool, seal: bool) {
    let Some((ctx, rest)) = rest.split_first_chunk::<16>() else {
        return;
    };
    let (slots, cache_id, backing) = context(ctx);
    let Some((&size, rest)) = rest.split_first() else {
        return;
    };
    let mut b = rest.to_vec();
    if stamp || seal {
        b.resize(512 << (size % 8), 0);
        if stamp {
            b[32..40].copy_from_slice(&cache_id.to_le_bytes());
        }
        doctor(&mut b, JOURNAL_MAGIC, 12, stamp, seal);
    }
    let mut records = Vec::new();
    if let Ok(h) = format::decode_journal_block(&b, cache_id, slots, backing, &mut records) {
        assert_eq!(usize::from(h.records), records.len());
        assert!(h.flushed_through < h.seq);
        let mut again = vec![0u8; b.len()];
        for (i, r) in records.iter().enumerate() {
            let at = JOURNAL_HEADER + i * RECORD;
            format::encode_record(r, &mut again[at..at + RECORD]);
        }
        format::seal_journal_block(&mut again, &h);
        assert_eq!(again, b, "a decoded journal block re-encodes differently");
        let mut back = Vec::new();
        let h2: JournalHeader =
            format::decode_journal_block(&again, cache_id, slots, backing, &mut back)
                .expect("a re-encoded journal block decodes");
        assert_eq!((h2, back), (h, records));
    }
}

fn records(rest: &[u8]) {
    let Some((ctx, rest)) = rest.split_first_chunk::<16>() else {
        return;
    };
    let (slots, _, backing) = context(ctx);
    let chunks = rest.chunks(RECORD);
    for chunk in chunks {
        if let Ok(r) = format::decode_record(chunk, slots, backing) {
            assert!(u64::from(r.slot()) < slots && r.block() < backing);
            let mut again = [0u8; RECORD];
            format::encode_record(&r, &mut again);
            assert_eq!(
                again[..],
                chunk[..],
                "a decoded record re-encodes differently"
            );
            assert_eq!(format::decode_record(&again, slots, backing), Ok(r));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (stamp, seal) = (mode & 1 != 0, mode & 2 != 0);
    match (mode >> 2) % 4 {
        0 => superblock(rest, stamp, seal),
        1 => checkpoint(rest, stamp, seal),
        2 => journal_block(rest, stamp, seal),
        _ => records(rest),
    }
});
