//! Memory-mapped persistent-memory regions and the cache-line persistence primitives.
//!
//! This is one of the two modules allowed `unsafe` (raw access to the mapping and the
//! flush instructions); every block carries a `SAFETY:` comment.
//!
//! Mapping kinds, detected at open:
//!
//! - **device-DAX** (`/dev/daxX.Y`, a character device): loads and stores reach the
//!   media directly; persistence is cache-line flush + fence.
//! - **fs-DAX**: the file is mapped with `MAP_SHARED_VALIDATE | MAP_SYNC`. The kernel
//!   accepts `MAP_SYNC` only when the mapping is truly DAX (it fails with
//!   `EOPNOTSUPP` otherwise), which is the detection: success means metadata is kept
//!   synchronous by the kernel and cache-line flush + fence suffices.
//! - **page cache** (tmpfs, `/dev/shm`, any other file): a plain `MAP_SHARED` mapping;
//!   persistence is `msync(MS_SYNC)` over the flushed pages (a no-op on tmpfs, whose
//!   "media" is DRAM, but the path is the real one for disk-backed files).

#![allow(unsafe_code)]

use std::ffi::c_void;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::mm::{MapFlags, MsyncFlags, ProtFlags};

use super::region::{Region, check, check_word};
use crate::device::{Claim, DeviceError, DeviceOp};

/// Cache-line size assumed for flushing.
pub const CACHE_LINE: u64 = 64;
const PAGE: u64 = 4096;

/// The cache-line write-back instruction in use, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushInstr {
    /// `CLWB`: writes back, keeps the line cached.
    Clwb,
    /// `CLFLUSHOPT`: writes back and evicts, weakly ordered.
    Clflushopt,
    /// `CLFLUSH`: writes back and evicts, serialised.
    Clflush,
}

impl FlushInstr {
    /// The best instruction this CPU has, or `None` off x86-64.
    pub fn detect() -> Option<Self> {
        #[cfg(target_arch = "x86_64")]
        {
            // CPUID leaf 7 sub-leaf 0, EBX bit 23 = CLFLUSHOPT, bit 24 = CLWB.
            // (`is_x86_feature_detected!` has no names for these two.)
            let ebx = std::arch::x86_64::__cpuid_count(7, 0).ebx;
            if ebx & (1 << 24) != 0 {
                return Some(Self::Clwb);
            }
            if ebx & (1 << 23) != 0 {
                return Some(Self::Clflushopt);
            }
            if std::arch::is_x86_feature_detected!("sse2") {
                return Some(Self::Clflush);
            }
        }
        None
    }
}

/// How stores are made durable; chosen at open and reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    /// Cache-line write-back per 64 bytes, then `SFENCE` (DAX mappings).
    CacheLine(FlushInstr),
    /// `msync(MS_SYNC)` over the touched pages (page-cache mappings).
    Msync,
    /// Nothing (eADR platforms, or benchmarking the upper bound). Not crash-safe
    /// unless the platform flushes caches on power loss.
    None,
}

impl std::fmt::Display for Persistence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::CacheLine(i) => write!(f, "cache-line flush ({i:?}) + sfence"),
            Self::Msync => f.write_str("msync"),
            Self::None => f.write_str("none (eADR/benchmark)"),
        }
    }
}

/// What the opener asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PersistenceRequest {
    /// Cache-line flush on DAX mappings, `msync` otherwise.
    #[default]
    Auto,
    /// Force cache-line flushing (falls back to `msync` if the CPU has none).
    CacheLine,
    /// Force `msync`.
    Msync,
    /// No persistence work at all.
    None,
}

/// The size of a huge page (a PMD mapping on x86-64), and the alignment of every
/// region mapping at least this long.
pub const HUGE_PAGE: u64 = 2 << 20;

/// What backs a region's mapping: the kernel's choice, or the outcome of
/// [`MmapRegion::collapse_huge_pages`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageSize {
    /// Whatever the kernel gave at fault time (4 KiB on tmpfs mounted
    /// `huge=never`; 2 MiB on DAX mappings of aligned extents). Huge pages were
    /// not asked for.
    Default,
    /// `MADV_COLLAPSE` was asked for each whole 2 MiB range of the mapping.
    Collapsed {
        /// Ranges now backed by one huge page.
        huge: u64,
        /// Whole 2 MiB ranges in the mapping.
        ranges: u64,
        /// Why the others were refused (the last errno): `EINVAL` for a range
        /// with no page in memory yet (a sparse part of the file stays
        /// unallocated; a range with some pages is collapsed, its holes
        /// zero-filled), a kernel before 6.1, or a disk-backed file (writable
        /// file mappings cannot be collapsed); `EAGAIN`/`ENOMEM` when no free
        /// 2 MiB page could be found.
        refused: Option<rustix::io::Errno>,
    },
}

impl std::fmt::Display for PageSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Self::Default => f.write_str("default pages"),
            Self::Collapsed {
                huge,
                ranges,
                refused: None,
            } => write!(f, "2 MiB pages ({huge} of {ranges})"),
            Self::Collapsed {
                huge,
                ranges,
                refused: Some(e),
            } => write!(
                f,
                "2 MiB pages on {huge} of {ranges} ranges, 4 KiB on the rest (MADV_COLLAPSE: {e})"
            ),
        }
    }
}

/// Backs `buf`'s 2 MiB-aligned interior with huge pages (`MADV_COLLAPSE`), so a
/// DRAM buffer compared against a collapsed region pays the same TLB cost. The
/// contents do not change. Returns the kernel's refusal, if any.
pub fn collapse_buffer(buf: &mut [u8]) -> Result<(), rustix::io::Errno> {
    let start = (buf.as_ptr() as u64).next_multiple_of(HUGE_PAGE);
    let end = (buf.as_ptr() as u64 + buf.len() as u64) / HUGE_PAGE * HUGE_PAGE;
    if end <= start {
        return Err(rustix::io::Errno::INVAL);
    }
    // The range lies inside `buf` (rounded inwards to huge-page boundaries),
    // which we borrow mutably.
    collapse(start, end)
}

/// `MADV_COLLAPSE` over `start..end` (huge-page aligned, inside memory the
/// caller owns).
fn collapse(start: u64, end: u64) -> Result<(), rustix::io::Errno> {
    strict_assert!(
        start < end && start.is_multiple_of(HUGE_PAGE) && end.is_multiple_of(HUGE_PAGE),
        "MADV_COLLAPSE over {start:#x}..{end:#x}"
    );
    // SAFETY: the caller's range is mapped memory it owns; MADV_COLLAPSE only
    // changes which pages back it, never its contents, and concurrent access
    // stays valid while it runs.
    let rc = unsafe {
        libc::madvise(
            start as *mut libc::c_void,
            (end - start) as usize,
            libc::MADV_COLLAPSE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error().raw_os_error().map_or(
            rustix::io::Errno::INVAL,
            rustix::io::Errno::from_raw_os_error,
        ))
    }
}

fn wide_stores() -> bool {
    #[cfg(target_arch = "x86_64")]
    return std::arch::is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// A `Region` over a shared memory mapping of a file or DAX device.
pub struct MmapRegion {
    ptr: NonNull<u8>,
    len: u64,
    persistence: Persistence,
    dax: bool,
    pages: PageSize,
    /// AVX-512F is there: whole lines go out as single 64-byte streaming stores.
    wide_stores: bool,
    path: PathBuf,
    /// Mapped `PROT_READ` from a file opened `O_RDONLY`: every store fails
    /// with [`DeviceError::ReadOnly`] instead of faulting.
    read_only: bool,
    _file: File,
}

// SAFETY: the mapping is plain shared memory owned by this value for its whole life;
// all access goes through raw-pointer copies and atomics, never through `&mut`
// references, so sharing the pointer between threads is sound.
unsafe impl Send for MmapRegion {}
// SAFETY: see `Send` above.
unsafe impl Sync for MmapRegion {}

fn io_err(op: DeviceOp, path: &Path, e: impl Into<std::io::Error>) -> DeviceError {
    DeviceError::Io {
        op,
        offset: 0,
        len: 0,
        device: path.display().to_string(),
        source: e.into(),
    }
}

impl MmapRegion {
    /// Maps `path`, creating or growing it to `len` bytes when `create` is set (files
    /// only; a device-DAX node is used at its own size).
    pub fn open(
        path: &Path,
        len: u64,
        create: bool,
        request: PersistenceRequest,
    ) -> Result<Self, DeviceError> {
        Self::open_claimed(path, len, create, request, Claim::None)
    }

    /// [`MmapRegion::open`], claiming the file first ([`Claim`]): a region
    /// another process (or another handle here) holds is refused, naming the
    /// holder, before anything is changed.
    pub fn open_claimed(
        path: &Path,
        len: u64,
        create: bool,
        request: PersistenceRequest,
        claim: Claim,
    ) -> Result<Self, DeviceError> {
        Self::open_inner(path, len, create, request, claim, false)
    }

    /// Maps `path` whole for reading only (`O_RDONLY`, `PROT_READ`), with a
    /// shared claim: a file owned by another user or on read-only media maps
    /// as long as it is readable, and nothing is ever written to it.
    pub fn open_read_only(path: &Path) -> Result<Self, DeviceError> {
        Self::open_inner(
            path,
            0,
            false,
            PersistenceRequest::None,
            Claim::Shared,
            true,
        )
    }

    fn open_inner(
        path: &Path,
        len: u64,
        create: bool,
        request: PersistenceRequest,
        claim: Claim,
        read_only: bool,
    ) -> Result<Self, DeviceError> {
        let file = OpenOptions::new()
            .read(true)
            .write(!read_only)
            .create(create && !read_only)
            .truncate(false)
            .open(path)
            .map_err(|e| io_err(DeviceOp::Read, path, e))?;
        crate::device::claim(&file, path, claim).map_err(DeviceError::Open)?;
        let meta = file
            .metadata()
            .map_err(|e| io_err(DeviceOp::Read, path, e))?;
        let device_dax = meta.file_type().is_char_device();
        let len = if device_dax {
            len
        } else {
            Self::file_len(&file, &meta, path, len, create)?
        };
        let map_len = usize::try_from(len)
            .ok()
            .filter(|&l| l > 0)
            .ok_or_else(|| {
                io_err(
                    DeviceOp::Read,
                    path,
                    std::io::Error::other("bad region length"),
                )
            })?;
        let (ptr, dax) = Self::map(&file, path, map_len, read_only, device_dax)?;
        let persistence = match request {
            PersistenceRequest::None => Persistence::None,
            PersistenceRequest::CacheLine => {
                FlushInstr::detect().map_or(Persistence::Msync, Persistence::CacheLine)
            }
            PersistenceRequest::Auto if dax => {
                FlushInstr::detect().map_or(Persistence::Msync, Persistence::CacheLine)
            }
            PersistenceRequest::Msync | PersistenceRequest::Auto => Persistence::Msync,
        };
        Ok(Self {
            ptr,
            len,
            persistence,
            dax,
            pages: PageSize::Default,
            wide_stores: wide_stores(),
            path: path.to_path_buf(),
            read_only,
            _file: file,
        })
    }

    /// The region length of a regular file: `len` (growing the file to it
    /// when creating), or the whole file when `len` is 0; an error when the
    /// file is shorter than `len`.
    fn file_len(
        file: &std::fs::File,
        meta: &std::fs::Metadata,
        path: &Path,
        len: u64,
        create: bool,
    ) -> Result<u64, DeviceError> {
        if create && meta.len() < len {
            file.set_len(len)
                .map_err(|e| io_err(DeviceOp::Write, path, e))?;
        }
        let have = if create {
            meta.len().max(len)
        } else {
            meta.len()
        };
        if len == 0 {
            Ok(have)
        } else if len <= have {
            Ok(len)
        } else {
            Err(io_err(
                DeviceOp::Read,
                path,
                std::io::Error::other(format!("file is {have} bytes, region needs {len}")),
            ))
        }
    }

    /// Maps `map_len` bytes of `file` shared, with `MAP_SYNC` when the file
    /// system allows it; returns the mapping and whether it is DAX (`MAP_SYNC`
    /// succeeded, or `device_dax`).
    fn map(
        file: &std::fs::File,
        path: &Path,
        map_len: usize,
        read_only: bool,
        device_dax: bool,
    ) -> Result<(NonNull<u8>, bool), DeviceError> {
        let prot = if read_only {
            ProtFlags::READ
        } else {
            ProtFlags::READ | ProtFlags::WRITE
        };
        // Map at a 2 MiB-aligned address (file offset 0 on a huge-page boundary),
        // so the kernel can use PMD mappings: a DAX file of aligned extents gets
        // them at fault time, a tmpfs file after `collapse_huge_pages`. A random
        // 4 KiB access then costs no 4 KiB-page TLB miss (on a 1 GiB region,
        // reads ran 1.5x faster). The address comes from a reservation of the
        // length plus 2 MiB that the file mapping replaces (MAP_FIXED) and
        // whose slack is unmapped.
        let hint = Self::aligned_hint(map_len);
        let fixed = if hint.is_null() {
            MapFlags::empty()
        } else {
            MapFlags::FIXED
        };
        // Try MAP_SYNC first: its success is the fs-DAX detection.
        // SAFETY: a fresh shared mapping of a file we hold open; with MAP_FIXED
        // it replaces only the reservation `aligned_hint` made for it, which
        // nothing else uses.
        let synced = unsafe {
            rustix::mm::mmap(
                hint,
                map_len,
                prot,
                MapFlags::SHARED_VALIDATE | MapFlags::SYNC | fixed,
                file,
                0,
            )
        };
        let (raw, dax) = if let Ok(p) = synced {
            (p, true)
        } else {
            // SAFETY: as above, plain MAP_SHARED.
            let p =
                unsafe { rustix::mm::mmap(hint, map_len, prot, MapFlags::SHARED | fixed, file, 0) };
            match p {
                Ok(p) => (p, device_dax),
                Err(e) => {
                    if !hint.is_null() {
                        // SAFETY: the reservation made by `aligned_hint`, unused.
                        let _ = unsafe { rustix::mm::munmap(hint, map_len) };
                    }
                    return Err(io_err(DeviceOp::Read, path, e));
                }
            }
        };
        let ptr = NonNull::new(raw.cast::<u8>())
            .ok_or_else(|| io_err(DeviceOp::Read, path, std::io::Error::other("null mapping")))?;
        // Every `SAFETY:` on an aligned access below relies on this.
        assert!(
            (ptr.as_ptr() as usize).is_multiple_of(PAGE as usize),
            "a mapping that is not page aligned"
        );
        assert!(
            hint.is_null() || ptr.as_ptr().cast::<c_void>() == hint,
            "MAP_FIXED placed the mapping elsewhere"
        );
        Ok((ptr, dax))
    }

    /// A 2 MiB-aligned address with `map_len` bytes reserved there (an
    /// inaccessible anonymous mapping for `open` to map over), or null when the
    /// mapping is shorter than a huge page or no reservation could be made (the
    /// kernel then picks the address).
    fn aligned_hint(map_len: usize) -> *mut c_void {
        let huge = HUGE_PAGE as usize;
        let Some(reserve) = map_len.checked_add(huge).filter(|_| map_len >= huge) else {
            return std::ptr::null_mut();
        };
        // SAFETY: a fresh private anonymous mapping with no access; it replaces
        // nothing (null hint, no MAP_FIXED).
        let Ok(base) = (unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                reserve,
                ProtFlags::empty(),
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }) else {
            return std::ptr::null_mut();
        };
        let start = base as usize;
        let aligned = start.next_multiple_of(huge);
        let head = aligned - start;
        // The reservation is one huge page longer than the mapping, so the
        // aligned start leaves room for all of it.
        strict_assert!(
            head < huge && head + map_len <= reserve,
            "reservation too short"
        );
        let tail = reserve - head - map_len;
        // SAFETY: both ranges lie inside the reservation just made and outside
        // `aligned..aligned + map_len`, which stays reserved for the caller.
        unsafe {
            if head > 0 {
                let _ = rustix::mm::munmap(base, head);
            }
            if tail > 0 {
                let _ = rustix::mm::munmap(base.cast::<u8>().add(head + map_len).cast(), tail);
            }
        }
        aligned as *mut c_void
    }

    /// Asks the kernel to back the mapping with 2 MiB pages (`MADV_COLLAPSE`,
    /// Linux 6.1+), which real persistent memory mapped with DAX gets anyway;
    /// returns what happened, which [`Region::describe`] reports too. DAX
    /// mappings are left to the kernel ([`PageSize::Default`]).
    ///
    /// This is for tmpfs and `/dev/shm` images, which a `huge=never` mount (the
    /// default) backs with 4 KiB pages: every random block access then misses
    /// the TLB. Collapsing works whatever the mount option and the
    /// `shmem_enabled` setting say; it copies each populated 2 MiB range into
    /// a huge page, taking about 0.4 s per GiB on an unfragmented machine (more
    /// when memory must be compacted first, nothing when the pages are huge
    /// already). Ranges with no page in memory are left alone, so the sparse
    /// parts of an image are not filled in. Contents never change.
    pub fn collapse_huge_pages(&mut self) -> PageSize {
        if self.dax {
            return self.pages;
        }
        // Range by range, so ranges with holes (refused) do not hide the
        // count of those that were collapsed. The ranges lie inside our
        // mapping (`self.ptr..+len` rounded inwards to huge-page boundaries).
        let start = (self.ptr.as_ptr() as u64).next_multiple_of(HUGE_PAGE);
        let end = (self.ptr.as_ptr() as u64 + self.len) / HUGE_PAGE * HUGE_PAGE;
        let (mut huge, mut ranges, mut refused) = (0, 0, None);
        let mut at = start;
        while at + HUGE_PAGE <= end {
            match collapse(at, at + HUGE_PAGE) {
                Ok(()) => huge += 1,
                Err(e) => refused = Some(e),
            }
            ranges += 1;
            at += HUGE_PAGE;
        }
        self.pages = PageSize::Collapsed {
            huge,
            ranges,
            refused,
        };
        self.pages
    }

    /// What backs the mapping (see [`MmapRegion::collapse_huge_pages`]).
    pub fn page_size(&self) -> PageSize {
        self.pages
    }

    /// The persistence level chosen at open.
    pub fn persistence(&self) -> Persistence {
        self.persistence
    }

    /// Whether the mapping is DAX (fs-DAX with `MAP_SYNC`, or device-DAX).
    pub fn is_dax(&self) -> bool {
        self.dax
    }

    fn writable(&self) -> Result<(), DeviceError> {
        if self.read_only {
            return Err(DeviceError::ReadOnly {
                op: DeviceOp::Write,
            });
        }
        Ok(())
    }

    fn at(&self, offset: u64) -> *mut u8 {
        strict_assert!(
            offset <= self.len,
            "offset {offset} past a {}-byte mapping",
            self.len
        );
        // SAFETY: callers checked `offset` (plus their length) against `self.len`, so
        // the result stays inside the mapping.
        unsafe { self.ptr.as_ptr().add(offset as usize) }
    }

    /// Copies `data` to `offset` so that it is durable after the next fence: whole
    /// 64-byte lines with non-temporal 16-byte stores (they bypass the cache, so
    /// there is nothing to write back and no read-for-ownership), a partial first
    /// or last line with plain stores and a cache-line write-back. The caller
    /// checked the range.
    #[cfg(target_arch = "x86_64")]
    fn copy_streaming(&self, instr: FlushInstr, offset: u64, data: &[u8]) {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let len = data.len() as u64;
        let end = offset + len;
        strict_assert!(
            end <= self.len,
            "streaming copy to {offset}+{len} past the mapping"
        );
        let first = offset.next_multiple_of(CACHE_LINE).min(end);
        let last = (end - end % CACHE_LINE).max(first);
        strict_assert!(
            offset <= first && first <= last && last <= end,
            "streaming copy lines {first}..{last} outside {offset}..{end}"
        );
        let plain = |from: u64, to: u64| {
            if to > from {
                let src = &data[(from - offset) as usize..(to - offset) as usize];
                // SAFETY: `from..to` is inside the checked range, which is inside the
                // mapping; `src` is a distinct Rust allocation.
                unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.at(from), src.len()) };
                self.flush_lines(instr, from, to - from);
            }
        };
        plain(offset, first);
        let mut at = first;
        if self.wide_stores && last > first {
            strict_assert!(
                (self.at(first) as usize).is_multiple_of(64),
                "64-byte streaming stores to an unaligned line"
            );
            // SAFETY: AVX-512F was detected at open; `first..last` is inside the
            // checked range, 64-aligned, and `data` covers it.
            unsafe {
                stream_lines_avx512(
                    data[(first - offset) as usize..].as_ptr(),
                    self.at(first),
                    ((last - first) / CACHE_LINE) as usize,
                );
            }
            at = last;
        }
        while at < last {
            let src = data[(at - offset) as usize..].as_ptr();
            let dst = self.at(at);
            strict_assert!(
                (dst as usize).is_multiple_of(16) && at.is_multiple_of(CACHE_LINE),
                "non-temporal store to unaligned {at}"
            );
            // SAFETY: `at..at + 64` lies inside the checked range (at < last <= end,
            // 64-aligned), so every load reads `data` and every store writes the
            // mapping; `dst` is 16-byte aligned (the mapping is page aligned and `at`
            // is a multiple of 64). SSE2 is part of x86-64.
            #[allow(clippy::cast_ptr_alignment)]
            unsafe {
                for i in 0..4 {
                    let v = _mm_loadu_si128(src.add(i * 16).cast::<__m128i>());
                    _mm_stream_si128(dst.add(i * 16).cast::<__m128i>(), v);
                }
            }
            at += CACHE_LINE;
        }
        plain(last.max(first), end);
    }

    fn flush_lines(&self, instr: FlushInstr, offset: u64, len: u64) {
        let start = offset - offset % CACHE_LINE;
        let end = offset + len;
        strict_assert!(end <= self.len, "flush of {offset}+{len} past the mapping");
        let mut line = start;
        while line < end {
            let p = self.at(line);
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `p` points into the mapping (line < end <= len); the flush
            // instructions only write back the cache line and never fault on mapped,
            // readable memory. The instruction was detected by CPUID at open.
            unsafe {
                match instr {
                    FlushInstr::Clwb => {
                        std::arch::asm!("clwb [{0}]", in(reg) p, options(nostack, preserves_flags));
                    }
                    FlushInstr::Clflushopt => {
                        std::arch::asm!("clflushopt [{0}]", in(reg) p, options(nostack, preserves_flags));
                    }
                    FlushInstr::Clflush => std::arch::x86_64::_mm_clflush(p),
                }
            }
            #[cfg(not(target_arch = "x86_64"))]
            let _ = (instr, p);
            line += CACHE_LINE;
        }
    }
}

/// Copies `lines` whole cache lines from `src` to the 64-byte aligned `dst`
/// with one 64-byte non-temporal store each: a line leaves the write-combining
/// buffer complete in one go instead of being assembled from four 16-byte
/// stores.
///
/// # Safety
/// The CPU has AVX-512F; `src..src + 64 * lines` is readable, `dst..dst + 64 *
/// lines` is writable, 64-byte aligned, and the two do not overlap.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn stream_lines_avx512(src: *const u8, dst: *mut u8, lines: usize) {
    use std::arch::x86_64::{__m512i, _mm512_loadu_si512, _mm512_stream_si512};
    for i in 0..lines {
        // SAFETY: inside the ranges the caller vouches for; `dst + 64 i` is
        // 64-byte aligned.
        #[allow(clippy::cast_ptr_alignment)]
        unsafe {
            let v = _mm512_loadu_si512(src.add(i * 64).cast::<__m512i>());
            _mm512_stream_si512(dst.add(i * 64).cast::<__m512i>(), v);
        }
    }
}

impl Drop for MmapRegion {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are exactly the mapping created in `open`, and no
        // reference into it outlives `self`.
        let _ =
            unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast::<c_void>(), self.len as usize) };
    }
}

impl Region for MmapRegion {
    fn len(&self) -> u64 {
        self.len
    }

    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), DeviceError> {
        check(DeviceOp::Read, offset, buf.len() as u64, self.len)?;
        // SAFETY: the range is inside the mapping (checked); `buf` is a distinct
        // Rust allocation, so the ranges do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(self.at(offset), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.writable()?;
        check(DeviceOp::Write, offset, data.len() as u64, self.len)?;
        // SAFETY: the range is inside the mapping (checked) and does not overlap `data`.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.at(offset), data.len()) };
        Ok(())
    }

    #[allow(clippy::cast_ptr_alignment)] // alignment checked by `check_word`
    fn load_u64(&self, offset: u64) -> Result<u64, DeviceError> {
        check_word(DeviceOp::Read, offset, self.len)?;
        strict_assert!(
            (self.at(offset) as usize).is_multiple_of(8),
            "atomic load from unaligned address"
        );
        // SAFETY: in range and 8-byte aligned (checked; the mapping is page aligned),
        // and all concurrent access to this word is atomic.
        let word = unsafe { AtomicU64::from_ptr(self.at(offset).cast::<u64>()) };
        Ok(u64::from_le(word.load(Ordering::Acquire)))
    }

    #[allow(clippy::cast_ptr_alignment)] // alignment checked by `check_word`
    fn store_u64(&self, offset: u64, value: u64) -> Result<(), DeviceError> {
        self.writable()?;
        check_word(DeviceOp::Write, offset, self.len)?;
        strict_assert!(
            (self.at(offset) as usize).is_multiple_of(8),
            "atomic store to unaligned address"
        );
        // SAFETY: as in `load_u64`.
        let word = unsafe { AtomicU64::from_ptr(self.at(offset).cast::<u64>()) };
        word.store(value.to_le(), Ordering::Release);
        Ok(())
    }

    fn flush(&self, ranges: &[(u64, u64)]) -> Result<(), DeviceError> {
        if self.read_only {
            return Ok(());
        }
        for &(offset, len) in ranges {
            check(DeviceOp::Flush, offset, len, self.len)?;
        }
        match self.persistence {
            Persistence::None => Ok(()),
            Persistence::CacheLine(instr) => {
                for &(offset, len) in ranges {
                    self.flush_lines(instr, offset, len);
                }
                Ok(())
            }
            Persistence::Msync => {
                // One msync over the span of every range: each call waits for
                // the disk (and a cache flush), while the span costs only the
                // dirty pages in it. So a batch of blocks and their entries
                // persists in one wait, not one per range.
                let span = ranges.iter().filter(|&&(_, len)| len > 0).fold(
                    None,
                    |span: Option<(u64, u64)>, &(offset, len)| {
                        let (start, end) = span.unwrap_or((offset, offset + len));
                        Some((start.min(offset), end.max(offset + len)))
                    },
                );
                let Some((start, end)) = span else {
                    return Ok(());
                };
                let start = start - start % PAGE;
                let end = end.min(self.len);
                strict_assert!(start < end, "msync of an empty span {start}..{end}");
                // SAFETY: page-aligned start inside the mapping, length within it.
                unsafe {
                    rustix::mm::msync(
                        self.at(start).cast::<c_void>(),
                        (end - start) as usize,
                        MsyncFlags::SYNC,
                    )
                }
                .map_err(|e| io_err(DeviceOp::Flush, &self.path, e))
            }
        }
    }

    fn prefetch(&self, offset: u64, len: u64) {
        if check(DeviceOp::Read, offset, len, self.len).is_err() {
            return;
        }
        #[cfg(target_arch = "x86_64")]
        {
            let mut line = offset - offset % CACHE_LINE;
            while line < offset + len {
                // SAFETY: `line` is inside the mapping (checked above); PREFETCHT0
                // (SSE) never faults and changes no memory.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        self.at(line).cast::<i8>(),
                    );
                }
                line += CACHE_LINE;
            }
        }
    }

    fn store_u64_flushed(&self, offset: u64, value: u64) -> Result<(), DeviceError> {
        // A plain store, then the line written back (CLWB keeps it cached). Not
        // MOVNTI: a non-temporal store of 8 bytes leaves a partial
        // write-combining line, which the next fence drains as a slow partial
        // write, and it evicts the map line that the next lookup wants.
        self.store_u64(offset, value)?;
        self.flush(&[(offset, 8)])
    }

    fn write_flushed(&self, offset: u64, data: &[u8]) -> Result<(), DeviceError> {
        self.writable()?;
        #[cfg(target_arch = "x86_64")]
        if let Persistence::CacheLine(instr) = self.persistence {
            check(DeviceOp::Write, offset, data.len() as u64, self.len)?;
            self.copy_streaming(instr, offset, data);
            return Ok(());
        }
        self.write(offset, data)?;
        self.flush(&[(offset, data.len() as u64)])
    }

    fn fence(&self) -> Result<(), DeviceError> {
        #[cfg(target_arch = "x86_64")]
        if let Persistence::CacheLine(_) = self.persistence {
            // SAFETY: SFENCE is part of SSE, which every x86-64 CPU has. It orders
            // the cache-line write-backs and non-temporal stores before it against
            // every later store, which is all persistence needs.
            unsafe {
                std::arch::x86_64::_mm_sfence();
            }
            return Ok(());
        }
        // No flush instructions to order: msync already waited, and with no
        // persistence (eADR) stores reach the persistence domain in the order they
        // become visible, which on x86 (TSO) is program order; elsewhere a real
        // fence gives that order.
        #[cfg(target_arch = "x86_64")]
        std::sync::atomic::compiler_fence(Ordering::SeqCst);
        #[cfg(not(target_arch = "x86_64"))]
        std::sync::atomic::fence(Ordering::SeqCst);
        Ok(())
    }

    fn flush_is_sync(&self) -> bool {
        self.persistence == Persistence::Msync
    }

    fn persists_in_order(&self) -> bool {
        // x86 stores become visible, and on eADR persistent, in program order.
        self.persistence == Persistence::None && cfg!(target_arch = "x86_64")
    }

    fn describe(&self) -> String {
        format!(
            "pmem {} ({} bytes, {}, {}, persistence: {})",
            self.path.display(),
            self.len,
            if self.dax { "DAX" } else { "page cache" },
            self.pages,
            self.persistence
        )
    }
}

#[cfg(test)]
#[path = "pmem_tests.rs"]
mod tests;
