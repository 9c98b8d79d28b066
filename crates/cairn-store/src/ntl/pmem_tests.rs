//! Tests of the persistent-memory mapping (`pmem.rs`).

use super::*;

fn region(len: u64, req: PersistenceRequest) -> (tempfile::TempDir, MmapRegion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let r = MmapRegion::open(&dir.path().join("pm"), len, true, req).expect("open");
    (dir, r)
}

#[test]
fn bytes_and_words_round_trip_and_survive_reopen() {
    for req in [
        PersistenceRequest::Auto,
        PersistenceRequest::CacheLine,
        PersistenceRequest::Msync,
        PersistenceRequest::None,
    ] {
        let (dir, r) = region(64 * 1024, req);
        r.write(100, b"hello pmem").expect("write");
        r.store_u64(4096, 0xdead_beef_0123_4567).expect("store");
        r.flush(&[(100, 10), (4096, 8)]).expect("flush");
        r.fence().expect("fence");
        let mut buf = [0u8; 10];
        r.read(100, &mut buf).expect("read");
        assert_eq!(&buf, b"hello pmem");
        assert_eq!(r.load_u64(4096).expect("load"), 0xdead_beef_0123_4567);
        drop(r);
        let r2 = MmapRegion::open(&dir.path().join("pm"), 64 * 1024, false, req).expect("reopen");
        assert_eq!(r2.load_u64(4096).expect("load"), 0xdead_beef_0123_4567);
        let mut raw = [0u8; 8];
        r2.read(4096, &mut raw).expect("read");
        assert_eq!(
            u64::from_le_bytes(raw),
            0xdead_beef_0123_4567,
            "words are little-endian"
        );
    }
}

#[test]
fn write_flushed_matches_write_at_every_alignment() {
    for req in [PersistenceRequest::CacheLine, PersistenceRequest::None] {
        let (_d, r) = region(8192, req);
        let mut model = vec![0u8; 8192];
        let data: Vec<u8> = (0..700u32).map(|i| (i * 7 + 1) as u8).collect();
        for (offset, len) in [
            (0u64, 700usize),
            (1, 63),
            (63, 2),
            (64, 64),
            (100, 500),
            (4000, 200),
            (8191, 1),
            (128, 0),
        ] {
            r.write_flushed(offset, &data[..len])
                .expect("write_flushed");
            model[offset as usize..offset as usize + len].copy_from_slice(&data[..len]);
        }
        r.fence().expect("fence");
        let mut back = vec![0u8; 8192];
        r.read(0, &mut back).expect("read");
        assert_eq!(back, model, "{req:?}");
        assert!(r.write_flushed(8190, &[0; 3]).is_err());
    }
}

#[test]
fn out_of_range_and_unaligned_are_errors() {
    let (_d, r) = region(8192, PersistenceRequest::Auto);
    assert!(matches!(
        r.write(8190, &[0; 4]),
        Err(DeviceError::OutOfRange { .. })
    ));
    assert!(matches!(
        r.read(u64::MAX, &mut [0; 1]),
        Err(DeviceError::OutOfRange { .. })
    ));
    assert!(matches!(
        r.store_u64(12, 1),
        Err(DeviceError::Unaligned { .. })
    ));
    assert!(matches!(
        r.load_u64(8192),
        Err(DeviceError::OutOfRange { .. })
    ));
    assert!(r.flush(&[(8000, 500)]).is_err());
}

#[test]
fn persistence_is_chosen_and_reported() {
    let (_d, r) = region(4096, PersistenceRequest::Auto);
    // tmpfs/ext4 in the test environment are not DAX: MAP_SYNC must be refused.
    if !r.is_dax() {
        assert_eq!(r.persistence(), Persistence::Msync);
    }
    assert!(r.describe().contains("persistence"));
    let (_d, r) = region(4096, PersistenceRequest::None);
    assert_eq!(r.persistence(), Persistence::None);
    let (_d, r) = region(4096, PersistenceRequest::CacheLine);
    assert_eq!(
        r.persistence(),
        FlushInstr::detect().map_or(Persistence::Msync, Persistence::CacheLine)
    );
}

/// Whether `addr` is PMD-mapped, from this process's `smaps` (the VMA
/// holding it: its `ShmemPmdMapped` or `FilePmdMapped` line).
fn pmd_mapped_kib(addr: usize) -> u64 {
    let smaps = std::fs::read_to_string("/proc/self/smaps").expect("smaps");
    let mut inside = false;
    let mut kib = 0;
    for line in smaps.lines() {
        if let Some((range, _)) = line.split_once(' ')
            && let Some((a, b)) = range.split_once('-')
            && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            inside = (a..b).contains(&addr);
            continue;
        }
        if inside && (line.starts_with("ShmemPmdMapped:") || line.starts_with("FilePmdMapped:")) {
            kib += line
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    kib
}

#[test]
fn regions_are_huge_page_aligned_and_collapse_on_tmpfs_without_changing_data() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("SKIPPED: no /dev/shm");
        return;
    }
    let dir = tempfile::tempdir_in(shm).expect("tempdir");
    let path = dir.path().join("pm");
    let len = 3 * HUGE_PAGE + 4096;
    let mut r = MmapRegion::open(&path, len, true, PersistenceRequest::None).expect("open");
    assert_eq!(
        r.ptr.as_ptr() as u64 % HUGE_PAGE,
        0,
        "the mapping is 2 MiB aligned"
    );
    assert_eq!(r.page_size(), PageSize::Default);
    let pattern: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
    // Fill all but the middle range: that one stays a hole, not filled in.
    let (hole, hole_end) = (HUGE_PAGE as usize, 2 * HUGE_PAGE as usize);
    r.write(0, &pattern[..hole]).expect("write");
    r.write(hole_end as u64, &pattern[hole_end..])
        .expect("write");
    let pages = r.collapse_huge_pages();
    if matches!(pages, PageSize::Collapsed { huge: 0, .. })
        && std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled")
            .map_or(true, |s| s.contains("[deny]"))
    {
        eprintln!("SKIPPED: this kernel does not collapse tmpfs pages: {pages}");
        return;
    }
    assert_eq!(
        pages,
        PageSize::Collapsed {
            huge: 2,
            ranges: 3,
            refused: Some(rustix::io::Errno::INVAL)
        }
    );
    assert!(
        r.describe().contains("2 MiB pages on 2 of 3 ranges"),
        "{}",
        r.describe()
    );
    assert_eq!(
        pmd_mapped_kib(r.ptr.as_ptr() as usize),
        2 * HUGE_PAGE / 1024,
        "the two ranges with data are PMD-mapped"
    );
    let mut back = vec![0u8; len as usize];
    r.read(0, &mut back).expect("read");
    let mut expect = pattern.clone();
    expect[hole..hole_end].fill(0);
    assert!(back == expect, "collapsing changed the data");
    // One page of data in the hole is enough: the range collapses, its
    // other pages zero.
    r.write(hole as u64, &pattern[hole..hole + 4096])
        .expect("write");
    expect[hole..hole + 4096].copy_from_slice(&pattern[hole..hole + 4096]);
    assert_eq!(
        r.collapse_huge_pages(),
        PageSize::Collapsed {
            huge: 3,
            ranges: 3,
            refused: None
        }
    );
    assert!(
        r.describe().contains("2 MiB pages (3 of 3)"),
        "{}",
        r.describe()
    );
    assert_eq!(
        pmd_mapped_kib(r.ptr.as_ptr() as usize),
        3 * HUGE_PAGE / 1024
    );
    r.read(0, &mut back).expect("read");
    assert!(back == expect, "collapsing changed the data");
}

#[test]
fn dram_buffers_collapse_without_changing_data() {
    let mut buf: Vec<u8> = (0..3 * HUGE_PAGE).map(|i| (i % 253) as u8).collect();
    let before = buf.clone();
    if collapse_buffer(&mut buf).is_err() {
        eprintln!("SKIPPED: this kernel has no MADV_COLLAPSE");
        return;
    }
    assert!(buf == before, "collapsing changed the data");
    assert_eq!(
        collapse_buffer(&mut buf[..4096]),
        Err(rustix::io::Errno::INVAL)
    );
}
