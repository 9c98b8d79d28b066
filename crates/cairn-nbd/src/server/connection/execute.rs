//! Executing a validated command on the device: one function per
//! [`Command`], each returning the reply to send (`None` when there is none,
//! its budget then released here).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

use cairn_store::{Device, DeviceError};

use super::budget::Budget;
use super::buffers::Buffers;
use super::reply::{Body, Reply, errno_for};
use crate::codec::handshake::BASE_ALLOCATION_ID;
use crate::codec::transmission::{self, Command};
use crate::limits::ZERO_CHUNK_BYTES;
use crate::proto::Errno;

/// At most this many extents in one `BLOCK_STATUS` reply (8 bytes each); the
/// client asks again from where the reply stopped.
const BLOCK_STATUS_MAX_EXTENTS: usize = 16 << 10;

/// No data, reads as zeroes.
const STATE_HOLE_ZERO: u32 = crate::proto::STATE_HOLE | crate::proto::STATE_ZERO;

/// Zeroes for `WRITE_ZEROES`, shared by every connection.
static ZEROES: [u8; ZERO_CHUNK_BYTES] = [0u8; ZERO_CHUNK_BYTES];

/// What a command needs of its connection, borrowed for one request.
pub(super) struct Executor<'c> {
    pub(super) device: &'c dyn Device,
    /// Structured replies were negotiated.
    pub(super) structured: bool,
    pub(super) buffers: &'c Buffers,
    pub(super) budget: &'c Budget,
    /// A reply could not be sent: the client is gone.
    pub(super) broken: &'c AtomicBool,
    /// The export's name, its device stack ([`Device::describe`]) and the
    /// client, for the log line of a failed request.
    pub(super) export: &'c str,
    pub(super) stack: &'c str,
    pub(super) peer: &'c str,
    /// Set when the request got an error reply (for its counters).
    pub(super) failed: Cell<bool>,
}

impl Executor<'_> {
    /// Execute one command; its reply (`None` when there is none to send,
    /// its budget then released here).
    pub(super) fn execute(
        &self,
        cookie: u64,
        command: Command,
        payload: Vec<u8>,
        budget: u64,
    ) -> Option<Reply> {
        let device = self.device;
        let reply = match command {
            Command::Read { offset, length } => {
                self.buffers.recycle(payload);
                return self.read(cookie, offset, length, budget);
            }
            Command::Write { offset, fua, .. } => self.write(cookie, payload, offset, fua, budget),
            Command::Disconnect => {
                // Handled by the reader; never executed.
                self.budget.release(budget);
                return None;
            }
            Command::Flush => self.done(cookie, device.flush(), budget),
            Command::Trim {
                offset,
                length,
                fua,
            } => self.trim(cookie, offset, length, fua, budget),
            // A hint: the block cache loads the range; other devices ignore it.
            Command::Cache { offset, length } => {
                self.done(cookie, device.prefetch(offset, u64::from(length)), budget)
            }
            Command::WriteZeroes {
                offset,
                length,
                fua,
                fast_zero,
                no_hole,
            } => match self.zero(offset, u64::from(length), fast_zero, no_hole) {
                Some(zeroed) => self.done(cookie, zeroed.and_then(|()| self.flush_if(fua)), budget),
                None => self.error(
                    cookie,
                    Errno::NotSup,
                    "zeroing is not faster than writing",
                    budget,
                ),
            },
            Command::BlockStatus {
                offset,
                length,
                req_one,
            } => self.block_status(cookie, offset, length, req_one, budget),
        };
        Some(reply)
    }

    fn read(&self, cookie: u64, offset: u64, length: u32, budget: u64) -> Option<Reply> {
        if self.broken.load(Ordering::Relaxed) {
            self.budget.release(budget);
            return None;
        }
        let structured = self.structured;
        // Zero-copy where the device lends its buffers (the block cache):
        // the reply is written from them.
        let mut lent = self.buffers.take_lent();
        match self.device.read_lent(offset, u64::from(length), &mut lent) {
            Ok(true) if length == 0 && structured => {
                self.buffers.recycle_lent(lent);
                return Some(Reply::new(
                    &transmission::none_chunk(cookie),
                    Body::Empty,
                    budget,
                ));
            }
            Ok(true) => {
                let body = Body::Lent(lent);
                return Some(if structured {
                    let header = transmission::offset_data_header(cookie, offset, length, true);
                    Reply::new(&header, body, budget)
                } else {
                    Reply::new(&transmission::simple_reply(cookie, 0), body, budget)
                });
            }
            Ok(false) => self.buffers.recycle_lent(lent),
            Err(e) => {
                self.buffers.recycle_lent(lent);
                self.log_failure("read", cookie, &e);
                return Some(self.error(cookie, errno_for(&e), &e.to_string(), budget));
            }
        }
        let mut buffer = self.buffers.take(length as usize);
        Some(match self.device.read_at(&mut buffer, offset) {
            Ok(()) if !structured => Reply::new(
                &transmission::simple_reply(cookie, 0),
                Body::Buffer(buffer),
                budget,
            ),
            Ok(()) if length == 0 => {
                self.buffers.recycle(buffer);
                Reply::new(&transmission::none_chunk(cookie), Body::Empty, budget)
            }
            Ok(()) => {
                let header = transmission::offset_data_header(cookie, offset, length, true);
                Reply::new(&header, Body::Buffer(buffer), budget)
            }
            Err(e) => {
                self.buffers.recycle(buffer);
                self.log_failure("read", cookie, &e);
                self.error(cookie, errno_for(&e), &e.to_string(), budget)
            }
        })
    }

    fn write(&self, cookie: u64, payload: Vec<u8>, offset: u64, fua: bool, budget: u64) -> Reply {
        // The device may keep the payload's buffer (a memory volume takes a
        // whole stripe so) and hand back another to pool.
        let mut payload = payload;
        let written = self.device.write_swap(&mut payload, offset);
        self.buffers.recycle(payload);
        self.done(cookie, written.and_then(|()| self.flush_if(fua)), budget)
    }

    fn trim(&self, cookie: u64, offset: u64, length: u32, fua: bool, budget: u64) -> Reply {
        let result = if length == 0 {
            Ok(())
        } else {
            self.device
                .discard(offset, u64::from(length))
                .and_then(|()| self.flush_if(fua))
        };
        self.done(cookie, result, budget)
    }

    /// Zero `length` bytes at `offset`: in place where the device can
    /// (punching holes unless `no_hole`), else by writing zeroes. `None`
    /// when `fast_zero` asked to fail rather than write.
    fn zero(
        &self,
        offset: u64,
        length: u64,
        fast_zero: bool,
        no_hole: bool,
    ) -> Option<Result<(), DeviceError>> {
        let device = self.device;
        // A fast zero may punch holes, which NO_HOLE forbids.
        match if no_hole {
            Ok(false)
        } else {
            device.zero_fast(offset, length)
        } {
            Ok(true) => Some(Ok(())),
            // Zeroing would be a write of zeroes, no faster than WRITE: the
            // spec says fail fast and let the client write.
            Ok(false) if fast_zero => None,
            Ok(false) => Some(write_zeroes(device, offset, length)),
            Err(e) => Some(Err(e)),
        }
    }

    fn block_status(
        &self,
        cookie: u64,
        offset: u64,
        length: u32,
        req_one: bool,
        budget: u64,
    ) -> Reply {
        if length == 0 {
            return self.error(cookie, Errno::Inval, "zero-length block status", budget);
        }
        match block_status(self.device, offset, length, req_one) {
            Ok(extents) => {
                let mut out = Vec::with_capacity(32 + 8 * extents.len());
                transmission::block_status_chunk(&mut out, cookie, BASE_ALLOCATION_ID, &extents);
                Reply::new(&[], Body::Owned(out), budget)
            }
            Err(e) => {
                self.log_failure("block status", cookie, &e);
                self.error(cookie, errno_for(&e), &e.to_string(), budget)
            }
        }
    }

    /// The reply to a command that returns no data: success, or its error.
    fn done(&self, cookie: u64, result: Result<(), DeviceError>, budget: u64) -> Reply {
        match result {
            Ok(()) => Reply::new(&transmission::simple_reply(cookie, 0), Body::Empty, budget),
            Err(e) => {
                self.log_failure("request", cookie, &e);
                self.error(cookie, errno_for(&e), &e.to_string(), budget)
            }
        }
    }

    /// A failed request, as a warning with what an operator needs to find
    /// it: the export, the layer that failed (the device an I/O error names,
    /// else the export's whole stack), the client and the request's cookie.
    fn log_failure(&self, what: &str, cookie: u64, error: &DeviceError) {
        let layer = match error {
            DeviceError::Io { device, .. } => device.as_str(),
            _ => self.stack,
        };
        tracing::warn!(
            export = self.export,
            layer,
            peer = self.peer,
            cookie = format!("{cookie:#x}"),
            error = %error,
            "{what} failed"
        );
    }

    fn error(&self, cookie: u64, errno: Errno, message: &str, budget: u64) -> Reply {
        self.failed.set(true);
        Reply::error(self.structured, cookie, errno, message, budget)
    }

    fn flush_if(&self, fua: bool) -> Result<(), DeviceError> {
        if fua { self.device.flush() } else { Ok(()) }
    }
}

/// The `base:allocation` extents of `offset..offset + length` as (length,
/// flags): from the device where it knows (the log disk: blocks never
/// written or trimmed are holes), else one allocated extent. With `req_one`
/// only the first; never more than [`BLOCK_STATUS_MAX_EXTENTS`] (the spec
/// lets a reply cover less than was asked).
fn block_status(
    device: &dyn Device,
    offset: u64,
    length: u32,
    req_one: bool,
) -> Result<Vec<(u32, u32)>, DeviceError> {
    let mut runs = Vec::new();
    if !device.allocation(offset, u64::from(length), &mut runs)? || runs.is_empty() {
        return Ok(vec![(length, 0)]);
    }
    let keep = if req_one { 1 } else { BLOCK_STATUS_MAX_EXTENTS };
    Ok(runs
        .iter()
        .take(keep)
        .map(|r| {
            // Runs lie within `length`, a u32.
            let len = u32::try_from(r.len).unwrap_or(u32::MAX);
            (len, if r.hole { STATE_HOLE_ZERO } else { 0 })
        })
        .collect())
}

fn write_zeroes(device: &dyn Device, mut offset: u64, length: u64) -> Result<(), DeviceError> {
    let end = offset + length;
    while offset < end {
        let n = (end - offset).min(ZERO_CHUNK_BYTES as u64) as usize;
        device.write_at(&ZEROES[..n], offset)?;
        offset += n as u64;
    }
    Ok(())
}
