//! [`RadosStore`]: a Ceph pool spoken to natively, through librados's C API.
//!
//! **Loaded, not linked.** `librados.so.2` is opened (`libloading`) when the
//! first store is made, once per process, and never closed (librados keeps
//! process-wide state). Cairn builds and runs where Ceph is absent; only a
//! RADOS store fails, saying what to install. The functions used are declared
//! here, the subset of `rados/librados.h` the trait needs, with its
//! prototypes (unchanged from Ceph 10 to 19).
//!
//! **One key, one object** in the pool (and namespace):
//! - `put`: `rados_write_full` (the object replaced atomically);
//! - `create`: one write op of an exclusive create and a full write, atomic
//!   on the OSD: of two creates of one key exactly one succeeds, the other
//!   gets `-EEXIST`;
//! - `read_at`: `rados_read`; `get`: `rados_stat`, then reads;
//! - `head`: `rados_stat`; `delete`: `rados_remove`;
//! - `list`: the namespace's whole listing, filtered by prefix here (RADOS
//!   has no prefix listing), then a `rados_stat` of each match for its size
//!   (up to [`LIST_STATS`] at once), sorted. A listing therefore walks every
//!   object of the namespace: give Cairn a pool or a namespace of its own
//!   where others keep many objects.
//!
//! A request moves at most [`MAX_IO`] bytes (librados's `UINT_MAX/2`); the
//! OSDs refuse objects over `osd_max_object_size` (128 MiB by default) and
//! writes over `osd_max_write_size` (90 MiB), far above Cairn's segments.
//!
//! **Errors.** `-ENOENT` → `NotFound` (`head`: `None`; `delete`: success);
//! `-EEXIST` on a create → `Exists`; timeouts, `-EAGAIN`, `-EBUSY`,
//! `-EINTR` and the connection errnos → retryable; anything else → not
//! retryable, with its `strerror` text. `-ESHUTDOWN` is Ceph's
//! `EBLOCKLISTED`: the cluster fenced this client, and no retry on this
//! handle can succeed, so it is not retryable.
//!
//! **Timeouts.** `op_timeout` becomes `rados_osd_op_timeout`,
//! `rados_mon_op_timeout` and `client_mount_timeout` (librados waits
//! forever by default): in an outage a request fails with `-ETIMEDOUT`
//! (retryable) instead of hanging.
//!
//! **Threads.** A cluster handle and an I/O context may be used by many
//! threads at once for I/O (librados serialises internally; only changing
//! an I/O context's settings — snapshot, locator, namespace — is not
//! thread-safe). The namespace is set once, before the store is shared.

#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::ptr;
use std::sync::OnceLock;
use std::time::Duration;

use crate::{ObjectError, ObjectInfo, ObjectStore, Op};

/// The library's file name (the soname of Debian's `librados2`).
pub const LIBRARY: &str = "librados.so.2";

/// Bytes one request moves at most: `rados_write_full` takes up to
/// `UINT_MAX/2`, and `rados_read` answers with an `int`.
pub const MAX_IO: usize = (u32::MAX / 2) as usize;

/// Objects whose sizes a listing asks for at once.
pub const LIST_STATS: usize = 8;

/// `LIBRADOS_CREATE_EXCLUSIVE`: the create fails with `-EEXIST` if the object
/// exists.
const CREATE_EXCLUSIVE: c_int = 1;

/// `LIBRADOS_OPERATION_NOFLAG`.
const OPERATION_NOFLAG: c_int = 0;

/// `rados_t`, `rados_ioctx_t`, `rados_list_ctx_t`, `rados_write_op_t`: opaque
/// pointers.
type Cluster = *mut c_void;
type Ioctx = *mut c_void;
type ListCtx = *mut c_void;
type WriteOp = *mut c_void;

/// Where the cluster is, who we are to it, and where the objects go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RadosConfig {
    /// The Ceph configuration (`mon host`, and `keyring` where cephx is on):
    /// `/etc/ceph/ceph.conf`.
    pub conf: PathBuf,
    /// The pool; it must exist.
    pub pool: String,
    /// The client's id, `admin` for `client.admin` (`client.admin` is taken
    /// as well).
    pub client: String,
    /// A namespace of the pool for the objects, or the default one.
    pub namespace: Option<String>,
    /// Limit on one request (and on connecting).
    pub op_timeout: Duration,
}

impl RadosConfig {
    /// `pool` of the cluster `conf` names, as `client.admin`, the default
    /// namespace, 30 s per request.
    pub fn new(conf: impl Into<PathBuf>, pool: impl Into<String>) -> Self {
        Self {
            conf: conf.into(),
            pool: pool.into(),
            client: "admin".into(),
            namespace: None,
            op_timeout: Duration::from_secs(30),
        }
    }

    /// The client's id without `client.`.
    fn id(&self) -> &str {
        self.client.strip_prefix("client.").unwrap_or(&self.client)
    }
}

/// The functions of librados this file calls, with the prototypes of
/// `rados/librados.h`.
struct Api {
    create: unsafe extern "C" fn(*mut Cluster, *const c_char) -> c_int,
    conf_read_file: unsafe extern "C" fn(Cluster, *const c_char) -> c_int,
    conf_set: unsafe extern "C" fn(Cluster, *const c_char, *const c_char) -> c_int,
    connect: unsafe extern "C" fn(Cluster) -> c_int,
    shutdown: unsafe extern "C" fn(Cluster),
    ioctx_create: unsafe extern "C" fn(Cluster, *const c_char, *mut Ioctx) -> c_int,
    ioctx_destroy: unsafe extern "C" fn(Ioctx),
    ioctx_set_namespace: unsafe extern "C" fn(Ioctx, *const c_char),
    write_full: unsafe extern "C" fn(Ioctx, *const c_char, *const c_char, usize) -> c_int,
    read: unsafe extern "C" fn(Ioctx, *const c_char, *mut c_char, usize, u64) -> c_int,
    stat: unsafe extern "C" fn(Ioctx, *const c_char, *mut u64, *mut libc::time_t) -> c_int,
    remove: unsafe extern "C" fn(Ioctx, *const c_char) -> c_int,
    create_write_op: unsafe extern "C" fn() -> WriteOp,
    release_write_op: unsafe extern "C" fn(WriteOp),
    write_op_create: unsafe extern "C" fn(WriteOp, c_int, *const c_char),
    write_op_write_full: unsafe extern "C" fn(WriteOp, *const c_char, usize),
    write_op_operate:
        unsafe extern "C" fn(WriteOp, Ioctx, *const c_char, *mut libc::time_t, c_int) -> c_int,
    list_open: unsafe extern "C" fn(Ioctx, *mut ListCtx) -> c_int,
    list_next: unsafe extern "C" fn(
        ListCtx,
        *mut *const c_char,
        *mut *const c_char,
        *mut *const c_char,
    ) -> c_int,
    list_close: unsafe extern "C" fn(ListCtx),
    /// Keeps the functions above mapped: an `Api` lives in a static and is
    /// never dropped.
    _library: libloading::Library,
}

impl Api {
    /// Opens the library `name` and finds every function.
    fn load(name: &str) -> Result<Self, String> {
        // SAFETY: opening librados runs its initialisers (C++ static
        // constructors), which ask nothing of the caller; it is opened once
        // per process (the static in `api`) and never closed.
        let library = unsafe { libloading::Library::new(name) }.map_err(|e| {
            let e = e.to_string();
            if e.contains("No such file") {
                format!(
                    "{name} not found: install librados2 (Debian: apt-get install librados2) ({e})"
                )
            } else {
                format!("loading {name}: {e}")
            }
        })?;
        macro_rules! function {
            ($symbol:literal) => {{
                // SAFETY: the type asked for (the field's) is the function's
                // prototype in rados/librados.h; the pointer is used only
                // while `library` is loaded (it is stored beside it).
                let f = unsafe { library.get(concat!($symbol, "\0").as_bytes()) }
                    .map_err(|e| format!("{name} has no {}: {e}", $symbol))?;
                *f
            }};
        }
        Ok(Self {
            create: function!("rados_create"),
            conf_read_file: function!("rados_conf_read_file"),
            conf_set: function!("rados_conf_set"),
            connect: function!("rados_connect"),
            shutdown: function!("rados_shutdown"),
            ioctx_create: function!("rados_ioctx_create"),
            ioctx_destroy: function!("rados_ioctx_destroy"),
            ioctx_set_namespace: function!("rados_ioctx_set_namespace"),
            write_full: function!("rados_write_full"),
            read: function!("rados_read"),
            stat: function!("rados_stat"),
            remove: function!("rados_remove"),
            create_write_op: function!("rados_create_write_op"),
            release_write_op: function!("rados_release_write_op"),
            write_op_create: function!("rados_write_op_create"),
            write_op_write_full: function!("rados_write_op_write_full"),
            write_op_operate: function!("rados_write_op_operate"),
            list_open: function!("rados_nobjects_list_open"),
            list_next: function!("rados_nobjects_list_next"),
            list_close: function!("rados_nobjects_list_close"),
            _library: library,
        })
    }
}

/// librados, loaded on first use (or why it cannot be).
fn api() -> Result<&'static Api, String> {
    static API: OnceLock<Result<Api, String>> = OnceLock::new();
    API.get_or_init(|| Api::load(LIBRARY))
        .as_ref()
        .map_err(Clone::clone)
}

/// Whether librados can be loaded on this machine (`Err`: why not).
pub fn available() -> Result<(), String> {
    api().map(drop)
}

/// The text of errno `e`: `Connection timed out (os error 110)`.
fn strerror(e: c_int) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

/// Whether librados's `-e` may go away by itself.
fn retryable(e: c_int) -> bool {
    matches!(
        e,
        libc::ETIMEDOUT
            | libc::EAGAIN
            | libc::EBUSY
            | libc::EINTR
            | libc::ENOTCONN
            | libc::ECONNREFUSED
            | libc::ECONNRESET
            | libc::ECONNABORTED
            | libc::EHOSTUNREACH
            | libc::ENETUNREACH
            | libc::ENETDOWN
            | libc::EPIPE
    )
}

/// What librados's return value `r` (negative: `-errno`) of `call` means.
fn error(op: Op, key: &str, call: &str, r: c_int) -> ObjectError {
    let e = r.saturating_neg();
    match e {
        libc::ENOENT => ObjectError::NotFound {
            key: key.to_owned(),
        },
        libc::EEXIST if op == Op::Create => ObjectError::Exists {
            key: key.to_owned(),
        },
        libc::ESHUTDOWN => ObjectError::failed(
            op,
            key,
            format!("{call}: the cluster blocklisted this client (EBLOCKLISTED)"),
            false,
        ),
        _ => ObjectError::failed(op, key, format!("{call}: {}", strerror(e)), retryable(e)),
    }
}

/// `Ok` if `r` says success.
fn check(op: Op, key: &str, call: &str, r: c_int) -> Result<(), ObjectError> {
    if r < 0 {
        Err(error(op, key, call, r))
    } else {
        Ok(())
    }
}

/// A Ceph pool (or a namespace of one), through librados.
pub struct RadosStore {
    api: &'static Api,
    cluster: Cluster,
    /// Null until made (only while `new` runs).
    ioctx: Ioctx,
    describe: String,
}

// SAFETY: librados's cluster handle and I/O context may be used from any
// thread, and by several at once for the I/O calls made here (librados
// locks internally; its documentation excepts only changes of an I/O
// context's settings, which `new` makes before the store can be shared).
// The handles are owned by the store and released once, in `drop`.
unsafe impl Send for RadosStore {}
// SAFETY: as for `Send`: every `&self` method makes only thread-safe I/O
// calls on the handles.
unsafe impl Sync for RadosStore {}

impl std::fmt::Debug for RadosStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RadosStore")
            .field("store", &self.describe)
            .finish_non_exhaustive()
    }
}

impl Drop for RadosStore {
    fn drop(&mut self) {
        if !self.ioctx.is_null() {
            // SAFETY: the I/O context was made by `rados_ioctx_create`, is
            // destroyed once, and no call is using it (we hold `&mut self`).
            unsafe { (self.api.ioctx_destroy)(self.ioctx) };
        }
        // SAFETY: the handle was made by `rados_create`, nothing uses it any
        // more, and it is shut down once (librados frees a handle that never
        // connected as well).
        unsafe { (self.api.shutdown)(self.cluster) };
    }
}

impl RadosStore {
    /// Loads librados (once per process), reads `config.conf`, connects as
    /// `client.<client>`, and opens the pool. Fails at once if librados is
    /// not installed, the configuration cannot be read, or the pool does
    /// not exist; a cluster that does not answer fails (retryable) after
    /// `op_timeout`.
    pub fn new(config: &RadosConfig) -> Result<Self, ObjectError> {
        let pool = config.pool.as_str();
        let fail = |detail: String, retryable: bool| {
            ObjectError::failed(Op::Connect, pool, detail, retryable)
        };
        let api = api().map_err(|e| fail(e, false))?;
        let text = |what: &str, s: &[u8]| {
            CString::new(s).map_err(|_| fail(format!("the {what} holds a NUL byte"), false))
        };
        let id = text("client id", config.id().as_bytes())?;
        let conf = text("configuration path", config.conf.as_os_str().as_bytes())?;
        let pool_c = text("pool name", pool.as_bytes())?;
        let namespace = match config.namespace.as_deref().filter(|n| !n.is_empty()) {
            Some(n) => Some(text("namespace", n.as_bytes())?),
            None => None,
        };
        let who = format!(
            "the cluster of {} as client.{}",
            config.conf.display(),
            config.id()
        );

        let mut cluster: Cluster = ptr::null_mut();
        // SAFETY: `cluster` is an out-pointer to a local; `id` is a C string
        // that outlives the call.
        let r = unsafe { (api.create)(&raw mut cluster, id.as_ptr()) };
        if r < 0 || cluster.is_null() {
            return Err(fail(
                format!("rados_create for {who}: {}", strerror(r.saturating_neg())),
                false,
            ));
        }
        let mut store = Self {
            api,
            cluster,
            ioctx: ptr::null_mut(),
            describe: match &config.namespace {
                Some(n) if !n.is_empty() => format!(
                    "rados pool {pool} namespace {n} ({}, client.{})",
                    config.conf.display(),
                    config.id()
                ),
                _ => format!(
                    "rados pool {pool} ({}, client.{})",
                    config.conf.display(),
                    config.id()
                ),
            },
        };
        // From here on, dropping `store` releases what was made.

        // SAFETY: a handle from `rados_create`, not yet connected; `conf` is
        // a C string that outlives the call.
        let r = unsafe { (api.conf_read_file)(store.cluster, conf.as_ptr()) };
        if r < 0 {
            return Err(fail(
                format!(
                    "reading the Ceph configuration {}: {}",
                    config.conf.display(),
                    strerror(r.saturating_neg())
                ),
                false,
            ));
        }
        let seconds = config.op_timeout.as_secs_f64().ceil().max(1.0) as u64;
        let seconds = CString::new(seconds.to_string()).unwrap_or_default();
        for option in [
            c"rados_osd_op_timeout",
            c"rados_mon_op_timeout",
            c"client_mount_timeout",
        ] {
            // SAFETY: a handle not yet connected (the options are read at
            // connect); both strings are C strings that outlive the call.
            let r = unsafe { (api.conf_set)(store.cluster, option.as_ptr(), seconds.as_ptr()) };
            if r < 0 {
                return Err(fail(
                    format!(
                        "setting {} for {who}: {}",
                        option.to_string_lossy(),
                        strerror(r.saturating_neg())
                    ),
                    false,
                ));
            }
        }
        // SAFETY: a configured handle, connected once.
        let r = unsafe { (api.connect)(store.cluster) };
        if r < 0 {
            let e = r.saturating_neg();
            let hint = match e {
                libc::ENOENT => " (does the configuration name the monitors, `mon host`?)",
                libc::EACCES | libc::EPERM => {
                    " (is the client's key in the keyring the configuration names?)"
                }
                _ => "",
            };
            return Err(fail(
                format!("connecting to {who}: {}{hint}", strerror(e)),
                retryable(e),
            ));
        }
        let mut ioctx: Ioctx = ptr::null_mut();
        // SAFETY: a connected handle; `pool_c` outlives the call; `ioctx` is
        // an out-pointer to a local.
        let r = unsafe { (api.ioctx_create)(store.cluster, pool_c.as_ptr(), &raw mut ioctx) };
        if r < 0 || ioctx.is_null() {
            let e = r.saturating_neg();
            return Err(if e == libc::ENOENT {
                fail(
                    format!("{who}: no pool {pool} (ceph osd pool create {pool})"),
                    false,
                )
            } else {
                fail(
                    format!("opening pool {pool} of {who}: {}", strerror(e)),
                    retryable(e),
                )
            });
        }
        store.ioctx = ioctx;
        if let Some(n) = &namespace {
            // SAFETY: a fresh I/O context no other thread can see yet (the
            // one time its settings change); `n` outlives the call (librados
            // copies it).
            unsafe { (api.ioctx_set_namespace)(store.ioctx, n.as_ptr()) };
        }
        Ok(store)
    }

    /// `key` as an object name.
    fn oid(op: Op, key: &str) -> Result<CString, ObjectError> {
        CString::new(key).map_err(|_| {
            ObjectError::failed(
                op,
                key,
                "a key with a NUL byte names no RADOS object",
                false,
            )
        })
    }

    /// The size of `key`'s object, or `None`.
    fn stat(&self, op: Op, key: &str) -> Result<Option<u64>, ObjectError> {
        let oid = Self::oid(op, key)?;
        let mut size = 0u64;
        let mut mtime: libc::time_t = 0;
        // SAFETY: a live I/O context (thread-safe for I/O); `oid` outlives
        // the call; both out-pointers point to locals.
        let r = unsafe { (self.api.stat)(self.ioctx, oid.as_ptr(), &raw mut size, &raw mut mtime) };
        match r {
            0.. => Ok(Some(size)),
            r if r == -libc::ENOENT => Ok(None),
            r => Err(error(op, key, "rados_stat", r)),
        }
    }

    /// The keys of the namespace that start with `prefix`, in key order.
    fn keys(&self, prefix: &str) -> Result<Vec<String>, ObjectError> {
        let mut ctx: ListCtx = ptr::null_mut();
        // SAFETY: a live I/O context; `ctx` is an out-pointer to a local.
        let r = unsafe { (self.api.list_open)(self.ioctx, &raw mut ctx) };
        check(Op::List, prefix, "rados_nobjects_list_open", r)?;
        if ctx.is_null() {
            return Err(ObjectError::failed(
                Op::List,
                prefix,
                "rados_nobjects_list_open gave no listing",
                false,
            ));
        }
        let mut keys = Vec::new();
        let result = loop {
            let mut entry: *const c_char = ptr::null();
            // SAFETY: a listing opened above and not yet closed, used by
            // this thread alone; `entry` is an out-pointer to a local; the
            // locator and namespace are not asked for (null, as the header
            // allows).
            let r = unsafe {
                (self.api.list_next)(ctx, &raw mut entry, ptr::null_mut(), ptr::null_mut())
            };
            if r == -libc::ENOENT {
                break Ok(());
            }
            if r < 0 {
                break Err(error(Op::List, prefix, "rados_nobjects_list_next", r));
            }
            if entry.is_null() {
                continue;
            }
            // SAFETY: librados gives a NUL-terminated name, valid until the
            // next call on the listing; it is copied before that.
            let name = unsafe { CStr::from_ptr(entry) };
            if name.to_bytes().starts_with(prefix.as_bytes()) {
                // A name that is not UTF-8 is no key of ours.
                if let Ok(key) = name.to_str() {
                    keys.push(key.to_owned());
                }
            }
        };
        // SAFETY: the listing opened above, closed once.
        unsafe { (self.api.list_close)(ctx) };
        result?;
        keys.sort_unstable();
        keys.dedup();
        Ok(keys)
    }
}

impl ObjectStore for RadosStore {
    fn put(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        let oid = Self::oid(Op::Put, key)?;
        if body.len() > MAX_IO {
            return Err(too_large(Op::Put, key, body.len() as u64));
        }
        // SAFETY: a live I/O context (thread-safe for I/O); `oid` and `body`
        // outlive the call, which reads `body.len()` bytes of it.
        let r = unsafe {
            (self.api.write_full)(self.ioctx, oid.as_ptr(), body.as_ptr().cast(), body.len())
        };
        check(Op::Put, key, "rados_write_full", r)
    }

    fn create(&self, key: &str, body: &[u8]) -> Result<(), ObjectError> {
        let oid = Self::oid(Op::Create, key)?;
        if body.len() > MAX_IO {
            return Err(too_large(Op::Create, key, body.len() as u64));
        }
        // SAFETY: no arguments; a null answer is checked below.
        let op = unsafe { (self.api.create_write_op)() };
        if op.is_null() {
            return Err(ObjectError::failed(
                Op::Create,
                key,
                "rados_create_write_op: out of memory",
                true,
            ));
        }
        // SAFETY: `op` is a fresh write op used by this thread alone, and
        // released once, after it was performed; `body` and `oid` outlive
        // the calls (librados copies `body` into the op); the category is
        // null (deprecated, ignored) and the mtime null (now); the I/O
        // context is live and thread-safe for I/O.
        let r = unsafe {
            (self.api.write_op_create)(op, CREATE_EXCLUSIVE, ptr::null());
            (self.api.write_op_write_full)(op, body.as_ptr().cast(), body.len());
            let r = (self.api.write_op_operate)(
                op,
                self.ioctx,
                oid.as_ptr(),
                ptr::null_mut(),
                OPERATION_NOFLAG,
            );
            (self.api.release_write_op)(op);
            r
        };
        check(Op::Create, key, "rados_write_op_operate", r)
    }

    fn read_at(&self, key: &str, offset: u64, buf: &mut [u8]) -> Result<usize, ObjectError> {
        if buf.is_empty() {
            return Ok(0);
        }
        let oid = Self::oid(Op::Get, key)?;
        let mut n = 0;
        while n < buf.len() {
            let Some(at) = offset.checked_add(n as u64) else {
                break;
            };
            let want = (buf.len() - n).min(MAX_IO);
            let into = &mut buf[n..n + want];
            // SAFETY: a live I/O context (thread-safe for I/O); `oid`
            // outlives the call; librados writes at most `want` bytes into
            // `into`, which is exactly that long and ours alone.
            let r = unsafe {
                (self.api.read)(self.ioctx, oid.as_ptr(), into.as_mut_ptr().cast(), want, at)
            };
            if r < 0 {
                return Err(error(Op::Get, key, "rados_read", r));
            }
            // librados never answers more than asked; if it did, trust
            // only what fits.
            let got = (r as usize).min(want);
            n += got;
            if got < want {
                break;
            }
        }
        Ok(n)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>, ObjectError> {
        let size = self
            .stat(Op::Get, key)?
            .ok_or_else(|| ObjectError::NotFound {
                key: key.to_owned(),
            })?;
        let len = usize::try_from(size)
            .ok()
            .filter(|&l| l <= MAX_IO)
            .ok_or_else(|| too_large(Op::Get, key, size))?;
        let mut body = vec![0u8; len];
        let n = self.read_at(key, 0, &mut body)?;
        body.truncate(n);
        Ok(body)
    }

    fn head(&self, key: &str) -> Result<Option<u64>, ObjectError> {
        self.stat(Op::Head, key)
    }

    fn delete(&self, key: &str) -> Result<(), ObjectError> {
        let oid = Self::oid(Op::Delete, key)?;
        // SAFETY: a live I/O context (thread-safe for I/O); `oid` outlives
        // the call.
        let r = unsafe { (self.api.remove)(self.ioctx, oid.as_ptr()) };
        match check(Op::Delete, key, "rados_remove", r) {
            Ok(()) | Err(ObjectError::NotFound { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn list(&self, prefix: &str) -> Result<Vec<ObjectInfo>, ObjectError> {
        let keys = self.keys(prefix)?;
        // The sizes: a stat each, several threads at once for long listings.
        let chunk = keys.len().div_ceil(LIST_STATS).max(64);
        let sizes: Vec<Result<Vec<Option<u64>>, ObjectError>> = if keys.len() <= chunk {
            vec![keys.iter().map(|k| self.stat(Op::List, k)).collect()]
        } else {
            std::thread::scope(|s| {
                let workers: Vec<_> = keys
                    .chunks(chunk)
                    .map(|part| {
                        s.spawn(move || part.iter().map(|k| self.stat(Op::List, k)).collect())
                    })
                    .collect();
                workers
                    .into_iter()
                    .map(|w| {
                        w.join().unwrap_or_else(|_| {
                            Err(ObjectError::failed(
                                Op::List,
                                prefix,
                                "a stat thread panicked",
                                false,
                            ))
                        })
                    })
                    .collect()
            })
        };
        let mut out = Vec::with_capacity(keys.len());
        let mut keys = keys.into_iter();
        for part in sizes {
            for size in part? {
                let key = keys.next().unwrap_or_default();
                // None: deleted since the listing.
                if let Some(size) = size {
                    out.push(ObjectInfo { key, size });
                }
            }
        }
        Ok(out)
    }

    fn describe(&self) -> String {
        self.describe.clone()
    }
}

/// A body or object larger than one request can move.
fn too_large(op: Op, key: &str, len: u64) -> ObjectError {
    ObjectError::failed(
        op,
        key,
        format!("{len} bytes: more than one RADOS request moves ({MAX_IO})"),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_says_what_to_install() {
        let err = Api::load("librados-not-here.so.2")
            .err()
            .expect("no such library");
        assert!(
            err.starts_with(
                "librados-not-here.so.2 not found: install librados2 (Debian: apt-get install librados2)"
            ),
            "{err}"
        );
    }

    #[test]
    fn errnos_map_to_the_trait_errors() {
        let e = |op, errno: c_int| error(op, "k", "rados_x", -errno);
        assert!(matches!(
            e(Op::Get, libc::ENOENT),
            ObjectError::NotFound { .. }
        ));
        assert!(matches!(
            e(Op::Create, libc::EEXIST),
            ObjectError::Exists { .. }
        ));
        // Only a create's EEXIST means "taken".
        assert!(matches!(
            e(Op::Put, libc::EEXIST),
            ObjectError::Failed {
                retryable: false,
                ..
            }
        ));
        for errno in [
            libc::ETIMEDOUT,
            libc::EAGAIN,
            libc::EBUSY,
            libc::ENOTCONN,
            libc::ECONNREFUSED,
        ] {
            assert!(e(Op::Put, errno).is_retryable(), "{errno}");
        }
        for errno in [libc::EIO, libc::EINVAL, libc::ENOSPC, libc::E2BIG] {
            assert!(!e(Op::Put, errno).is_retryable(), "{errno}");
        }
        let blocklisted = e(Op::Put, libc::ESHUTDOWN);
        assert!(!blocklisted.is_retryable());
        assert!(
            blocklisted.to_string().contains("blocklisted"),
            "{blocklisted}"
        );
        let timeout = e(Op::Get, libc::ETIMEDOUT).to_string();
        assert!(
            timeout.contains("rados_x") && timeout.contains("timed out"),
            "{timeout}"
        );
    }
}
