//! Arbitrary bytes through the NV write cache's decoders: a slot entry (a
//! slot's header in the slot table) and the region header, chosen by the
//! first byte, and a whole region opened and scanned. Nothing panics, and
//! whatever decodes encodes to the same bytes and decodes back to the same
//! value. The low bits of the first byte may reseal the CRC32C (and stamp the
//! header's magic), so the fuzzer also reaches what lies behind it.
#![no_main]

use std::sync::Arc;

use cairn_store::logdisk::format;
use cairn_store::logdisk::nv::{self, HEADER_BYTES, NV_MAGIC, NvCache, SLOT_ENTRY_BYTES};
use cairn_store::ntl::{Region, SimRegion};
use libfuzzer_sys::fuzz_target;

/// A slot entry's CRC32C over its first 20 bytes.
fn seal_entry(e: &mut [u8; SLOT_ENTRY_BYTES]) {
    let crc = format::crc32c(&e[..20]);
    e[20..].copy_from_slice(&crc.to_le_bytes());
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (stamp, seal) = (mode & 1 != 0, mode & 2 != 0);
    match (mode >> 2) % 3 {
        0 => {
            // Slot entries, 24 bytes each.
            for chunk in rest.chunks_exact(SLOT_ENTRY_BYTES) {
                let mut e: [u8; SLOT_ENTRY_BYTES] = chunk.try_into().expect("24 bytes");
                if seal {
                    seal_entry(&mut e);
                }
                if let Some(entry) = nv::decode_slot_entry(&e) {
                    assert_ne!(entry.sequence, 0);
                    let again = nv::encode_slot_entry(&entry);
                    assert_eq!(again, e, "a decoded slot entry re-encodes differently");
                    assert_eq!(nv::decode_slot_entry(&again), Some(entry));
                }
            }
        }
        1 => {
            // The region header, for the block size and volume it claims
            // (bytes 12..16 and 24..32) and for ones it does not.
            let Some((h, rest)) = rest.split_first_chunk::<HEADER_BYTES>() else {
                return;
            };
            let mut h = *h;
            if stamp {
                h[..8].copy_from_slice(&NV_MAGIC);
                h[8..12].copy_from_slice(&1u32.to_le_bytes());
            }
            if seal {
                h[60..].fill(0);
                let crc = format::crc32c(&h[..60]);
                h[60..].copy_from_slice(&crc.to_le_bytes());
            }
            let claimed = (
                u32::from_le_bytes(h[12..16].try_into().expect("4 bytes")),
                u64::from_le_bytes(h[24..32].try_into().expect("8 bytes")),
            );
            let other = match rest.split_first_chunk::<12>() {
                Some((b, _)) => (
                    u32::from_le_bytes(b[..4].try_into().expect("4 bytes")),
                    u64::from_le_bytes(b[4..].try_into().expect("8 bytes")),
                ),
                None => (4096, 0),
            };
            for (block_size, volume) in [claimed, other] {
                if let Ok(header) = nv::decode_header(&h, block_size, volume) {
                    assert_eq!((header.block_size, header.volume), (block_size, volume));
                    let again = nv::encode_header(&header);
                    assert_eq!(again, h, "a decoded NV header re-encodes differently");
                    assert_eq!(
                        nv::decode_header(&again, block_size, volume).ok(),
                        Some(header)
                    );
                }
            }
        }
        _ => {
            // A whole region of 512-byte slots: a header for it, then the
            // fuzzer's bytes over the slot table (entries resealed when
            // `seal`) and the slot data; opened and scanned.
            let region = Arc::new(SimRegion::new(16 * 1024));
            let Ok(cache) = NvCache::format(Box::new(region.clone()), 512, 7) else {
                return;
            };
            let slots = cache.slots();
            drop(cache);
            let mut table = rest.to_vec();
            table.truncate(slots as usize * 32);
            if seal {
                for chunk in table.chunks_exact_mut(32) {
                    let e: &mut [u8; SLOT_ENTRY_BYTES] = (&mut chunk[..SLOT_ENTRY_BYTES])
                        .try_into()
                        .expect("24 bytes");
                    seal_entry(e);
                }
            }
            region.write(4096, &table).expect("the table fits");
            let data = &rest[table.len()..];
            let data_at = (4096 + slots as usize * 32).div_ceil(4096) * 4096;
            let data = &data[..data.len().min(slots as usize * 512)];
            region.write(data_at as u64, data).expect("the data fits");
            if stamp {
                // Another volume's cache: refused, never replayed.
                assert!(NvCache::open(Box::new(region.clone()), 512, 8).is_err());
            }
            let cache =
                NvCache::open(Box::new(region.clone()), 512, 7).expect("its own header opens");
            let mut block = [0u8; 512];
            for found in cache.scan().expect("a memory region reads") {
                // Each slot found has a valid entry that names it, and its data
                // matches the entry's CRC.
                let mut e = [0u8; SLOT_ENTRY_BYTES];
                region
                    .read(4096 + u64::from(found.slot) * 32, &mut e)
                    .expect("reads");
                let entry = nv::decode_slot_entry(&e).expect("a slot found has a valid entry");
                assert_eq!(
                    (entry.sequence, entry.logical, entry.crc),
                    (found.sequence, found.logical, found.crc)
                );
                cache.read(found.slot, &mut block).expect("reads");
                assert_eq!(format::crc32c(&block), found.crc);
            }
        }
    }
});
