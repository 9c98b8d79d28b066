//! Replies: one owned [`Reply`] per request, and the [`Sender`] that writes
//! them. A thread never waits to send: when another thread is sending, the
//! reply joins the queue and that sender writes it too.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use cairn_store::DeviceError;
use cairn_store::cache::BlockSlice;

use super::lock::lock;
use crate::codec::transmission::{self, OFFSET_DATA_HEADER_LEN};
use crate::proto::Errno;

/// Longest reply header kept inline (an `OFFSET_DATA` chunk header).
const HEAD_MAX: usize = OFFSET_DATA_HEADER_LEN;

/// One reply, owned, so it can wait in the queue.
pub(super) struct Reply {
    head: [u8; HEAD_MAX],
    head_len: usize,
    pub(super) body: Body,
    /// Budget bytes (and one request) to release once the reply is out.
    pub(super) budget: u64,
}

pub(super) enum Body {
    Empty,
    /// A pooled buffer (READ data).
    Buffer(Vec<u8>),
    /// Buffers lent by the device (zero-copy READ).
    Lent(Vec<BlockSlice>),
    /// An error chunk or block status (allocated, not pooled).
    Owned(Vec<u8>),
}

impl Reply {
    pub(super) fn new(head: &[u8], body: Body, budget: u64) -> Self {
        let mut bytes = [0u8; HEAD_MAX];
        bytes[..head.len()].copy_from_slice(head);
        Self {
            head: bytes,
            head_len: head.len(),
            body,
            budget,
        }
    }

    /// An error reply: a structured error chunk when negotiated (it carries
    /// the message, and a READ must not get a simple reply then), else a
    /// simple reply.
    pub(super) fn error(
        structured: bool,
        cookie: u64,
        errno: Errno,
        message: &str,
        budget: u64,
    ) -> Self {
        if structured {
            let mut out = Vec::with_capacity(32 + message.len());
            transmission::error_chunk(&mut out, cookie, errno, message);
            Self::new(&[], Body::Owned(out), budget)
        } else {
            Self::new(
                &transmission::simple_reply(cookie, errno.code()),
                Body::Empty,
                budget,
            )
        }
    }

    /// The reply's bytes, in order.
    fn parts(&self) -> impl Iterator<Item = &[u8]> {
        let (single, lent): (&[u8], &[BlockSlice]) = match &self.body {
            Body::Empty => (&[], &[]),
            Body::Buffer(bytes) | Body::Owned(bytes) => (bytes, &[]),
            Body::Lent(slices) => (&[], slices),
        };
        std::iter::once(&self.head[..self.head_len])
            .chain(std::iter::once(single))
            .chain(lent.iter().map(|s| &**s))
            .filter(|part| !part.is_empty())
    }
}

/// Replies waiting for the thread that is sending.
struct Output {
    /// A thread is writing replies to the socket; others queue theirs.
    sending: bool,
    /// Bounded by the in-flight budget: a queued reply still holds its
    /// request's budget, and the reader waits for budget.
    queue: VecDeque<Reply>,
    /// The sender's batch between turns (kept for its capacity).
    spare: VecDeque<Reply>,
}

/// The connection's write side: the socket and the replies queued for it.
pub(super) struct Sender<W> {
    output: Mutex<Output>,
    /// Held only by the sending thread.
    writer: Mutex<W>,
}

impl<W: Write> Sender<W> {
    pub(super) fn new(writer: W) -> Self {
        Self {
            output: Mutex::new(Output {
                sending: false,
                queue: VecDeque::new(),
                spare: VecDeque::new(),
            }),
            writer: Mutex::new(writer),
        }
    }

    /// Send `replies` (leaving the vector empty), or queue them when another
    /// thread is sending. The thread
    /// that sends also sends every reply queued meanwhile, all that waited
    /// at once (`writev`, 64 parts per call), so exactly one thread at a time
    /// can be blocked on the socket and the others keep reading requests.
    /// Each reply, sent or not, goes to `finish`; once a write fails,
    /// `broken` is set and nothing more is written.
    pub(super) fn deliver(
        &self,
        replies: &mut Vec<Reply>,
        broken: &AtomicBool,
        peer: &str,
        mut finish: impl FnMut(Reply),
    ) {
        let mut batch = {
            let mut output = lock(&self.output);
            if output.sending {
                output.queue.extend(replies.drain(..));
                return;
            }
            output.sending = true;
            std::mem::take(&mut output.spare)
        };
        batch.extend(replies.drain(..));
        let mut writer = lock(&self.writer);
        loop {
            if !broken.load(Ordering::Relaxed)
                && let Err(e) = write_all_iter(&mut *writer, batch.iter().flat_map(Reply::parts))
                    .and_then(|()| writer.flush())
                && !broken.swap(true, Ordering::Relaxed)
            {
                tracing::debug!(peer, error = %e, "reply not delivered, client gone");
            }
            for reply in batch.drain(..) {
                finish(reply);
            }
            let mut output = lock(&self.output);
            if output.queue.is_empty() {
                output.sending = false;
                output.spare = batch;
                return;
            }
            std::mem::swap(&mut output.queue, &mut batch);
        }
    }
}

/// The protocol errno for a device error.
pub(super) fn errno_for(error: &DeviceError) -> Errno {
    match error {
        DeviceError::OutOfRange { op, .. } => match op {
            cairn_store::DeviceOp::Write => Errno::NoSpc,
            _ => Errno::Inval,
        },
        DeviceError::ReadOnly { .. } => Errno::Perm,
        DeviceError::Unaligned { .. } => Errno::Inval,
        // ENOSPC, EDQUOT, EFBIG → NBD_ENOSPC (spec).
        DeviceError::Io { source, .. } if matches!(source.raw_os_error(), Some(28 | 122 | 27)) => {
            Errno::NoSpc
        }
        _ => Errno::Io,
    }
}

/// `write_all` for several slices with as few syscalls as the kernel allows.
/// Slices one `write_vectored` call takes at most.
const IOV_CHUNK: usize = 64;

/// Writes every part, in order, up to [`IOV_CHUNK`] parts per system call.
fn write_all_iter<'a, W: Write + ?Sized>(
    writer: &mut W,
    parts: impl Iterator<Item = &'a [u8]>,
) -> io::Result<()> {
    let mut parts = parts.peekable();
    while parts.peek().is_some() {
        let mut slices = [IoSlice::new(&[]); IOV_CHUNK];
        let mut count = 0;
        for (slot, part) in slices.iter_mut().zip(parts.by_ref()) {
            *slot = IoSlice::new(part);
            count += 1;
        }
        let mut slices = &mut slices[..count];
        IoSlice::advance_slices(&mut slices, 0);
        while !slices.is_empty() {
            match writer.write_vectored(slices) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => IoSlice::advance_slices(&mut slices, n),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}
