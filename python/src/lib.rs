//! `cairn`, the Python module: Cairn's policies, trace readers and simulator
//! with an API a libCacheSim user recognises (`Cache.get`/`find`,
//! `process_trace`, `TraceReader`, `PluginCache` hooks), `sim`, which runs
//! many configurations in Rust on every core, `mrc`, and `analyze`, the trace
//! analyzer of `cairn trace analyze`.
//!
//! Nothing here simulates: policies are `cairn-policy`'s, traces are read by
//! `cairn-trace`, and `sim` calls `cairn_sim::replay`, so a miss ratio from
//! Python is the one `cairn sim` prints.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use cairn_policy::{Access, AdmissionConfig, Capacity, Op, Policy, PolicyConfig, PrefetchConfig};
use cairn_sim::mrc::MrcTracker;
use cairn_sim::{
    AccessSource, CacheSize, CapacityUnit, Configuration, Expiring, FromIter, Metrics, NoProgress,
    ReplayOptions, Stamp, Ttl, WorkingSet,
};
use cairn_trace::read::{self, Format};
use cairn_trace::{Splitter, TraceError, Unit};
use hashbrown::HashMap;
use pyo3::exceptions::{PyIOError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

fn value_error(message: impl std::fmt::Display) -> PyErr {
    PyValueError::new_err(message.to_string())
}

fn capacity_unit(unit: &str) -> PyResult<CapacityUnit> {
    match unit {
        "objects" => Ok(CapacityUnit::Objects),
        "bytes" => Ok(CapacityUnit::Bytes),
        other => Err(value_error(format!(
            "unit `{other}`: expected \"objects\" (count units, libCacheSim's ignore_obj_size) or \"bytes\""
        ))),
    }
}

fn capacity(unit: CapacityUnit, limit: u64) -> Capacity {
    match unit {
        CapacityUnit::Objects => Capacity::Objects(limit),
        CapacityUnit::Bytes => Capacity::Bytes(limit),
    }
}

/// A Python value as JSON, for a policy parameter.
fn to_json(value: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    if let Ok(b) = value.extract::<bool>() {
        return Ok(serde_json::Value::Bool(b));
    }
    if let Ok(i) = value.extract::<i64>() {
        return Ok(i.into());
    }
    if let Ok(f) = value.extract::<f64>() {
        return serde_json::Number::from_f64(f)
            .map(serde_json::Value::Number)
            .ok_or_else(|| value_error(format!("{f} is not a finite number")));
    }
    if let Ok(s) = value.extract::<String>() {
        return Ok(serde_json::Value::String(s));
    }
    if let Ok(list) = value.cast::<PyList>() {
        return list.iter().map(|item| to_json(&item)).collect();
    }
    Err(PyTypeError::new_err(format!(
        "policy parameter {value}: expected a bool, number, string or list"
    )))
}

/// The policy `name` with its defaults overridden by `params`.
fn policy_config(name: &str, params: Option<&Bound<'_, PyDict>>) -> PyResult<PolicyConfig> {
    named_config(
        ("policy", "policy"),
        name,
        params,
        PolicyConfig::default_for,
        PolicyConfig::NAMES,
    )
}

/// A config enum tagged `tag` (`(kind, tag)`: `("prefetcher",
/// "prefetcher")`) from a name and optional parameters over its defaults.
fn named_config<T: serde::Serialize + serde::de::DeserializeOwned>(
    (kind, tag): (&str, &str),
    name: &str,
    params: Option<&Bound<'_, PyDict>>,
    default_for: fn(&str) -> Option<T>,
    names: &[&str],
) -> PyResult<T> {
    let defaults = default_for(name).ok_or_else(|| {
        value_error(format!(
            "unknown {kind} `{name}` (known: {})",
            names.join(", ")
        ))
    })?;
    let mut value = serde_json::to_value(defaults).map_err(value_error)?;
    if let Some(params) = params {
        for (key, item) in params.iter() {
            let key: String = key.extract()?;
            if key == tag {
                return Err(value_error(format!("`{tag}` is the name, not a parameter")));
            }
            value[key] = to_json(&item)?;
        }
    }
    serde_json::from_value(value)
        .map_err(|e| value_error(format!("{kind} `{name}`: invalid parameters: {e}")))
}

/// An optional `name` or `(name, {param: value})` argument as a config.
fn optional_config<'py, T: serde::Serialize + serde::de::DeserializeOwned>(
    spec: Option<&Bound<'py, PyAny>>,
    (kind, tag): (&str, &str),
    default_for: fn(&str) -> Option<T>,
    names: &[&str],
) -> PyResult<Option<T>> {
    let Some(spec) = spec else {
        return Ok(None);
    };
    let (name, params) = if let Ok(name) = spec.extract::<String>() {
        (name, None)
    } else if let Ok((name, params)) = spec.extract::<(String, Bound<'py, PyDict>)>() {
        (name, Some(params))
    } else {
        return Err(PyTypeError::new_err(format!(
            "{kind} {spec}: expected a name or a (name, params) pair"
        )));
    };
    named_config((kind, tag), &name, params.as_ref(), default_for, names).map(Some)
}

/// One request, as libCacheSim's `Request`: `obj_id`, `obj_size`, `op`
/// (`"read"` or `"write"`), `time` (microseconds in the trace, or the
/// logical time of a request passed to a plugin hook) and `ttl` (its own
/// time to live in seconds, as libCacheSim's; 0: none).
#[pyclass(module = "cairn", get_all, set_all)]
#[derive(Clone, Debug)]
struct Request {
    obj_id: u64,
    obj_size: u32,
    op: String,
    time: u64,
    ttl: u32,
}

#[pymethods]
impl Request {
    #[new]
    #[pyo3(signature = (obj_id, obj_size = 1, op = "read", time = 0, ttl = 0))]
    fn new(obj_id: u64, obj_size: u32, op: &str, time: u64, ttl: u32) -> PyResult<Self> {
        parse_op(op)?;
        Ok(Self {
            obj_id,
            obj_size,
            op: op.to_owned(),
            time,
            ttl,
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Request(obj_id={}, obj_size={}, op={:?}, time={}, ttl={})",
            self.obj_id, self.obj_size, self.op, self.time, self.ttl
        )
    }
}

/// A default TTL in seconds (an int or a float, at least 0) in µs.
fn ttl_us(seconds: Option<f64>) -> PyResult<Option<u64>> {
    match seconds {
        None => Ok(None),
        Some(s) if s.is_finite() && (0.0..1.8e13).contains(&s) => {
            Ok(Some((s * 1e6).round() as u64))
        }
        Some(s) => Err(value_error(format!(
            "a TTL of {s} s: give seconds, at least 0 (e.g. 30 or 0.5)"
        ))),
    }
}

fn parse_op(op: &str) -> PyResult<Op> {
    match op {
        "read" => Ok(Op::Read),
        "write" => Ok(Op::Write),
        other => Err(value_error(format!(
            "op `{other}`: expected \"read\" or \"write\""
        ))),
    }
}

fn op_name(op: Op) -> &'static str {
    match op {
        Op::Read => "read",
        Op::Write => "write",
    }
}

/// `Cache.get(x)` takes a `Request` or an object id (with `obj_size`);
/// returns the access and, for a `Request`, the request as the trace reader
/// would give it (its time and TTL, for expiry).
fn access_of(
    request: &Bound<'_, PyAny>,
    obj_size: u32,
    time: u64,
) -> PyResult<(Access, Option<cairn_trace::Request>)> {
    if let Ok(request) = request.extract::<Request>() {
        let mut access = Access::read(request.obj_id, request.obj_size, time);
        access.op = parse_op(&request.op)?;
        access.object = request.obj_id;
        let timed = cairn_trace::Request {
            time_us: request.time,
            object: request.obj_id,
            offset: 0,
            size: request.obj_size,
            op: access.op,
            ttl: request.ttl,
            next: cairn_trace::NEVER,
        };
        return Ok((access, Some(timed)));
    }
    let key: u64 = request.extract().map_err(|_| {
        PyTypeError::new_err("expected a cairn.Request or an object id (a non-negative int)")
    })?;
    let mut access = Access::read(key, obj_size, time);
    access.object = key;
    Ok((access, None))
}

fn trace_format(path: &Path, format: Option<&str>) -> PyResult<Format> {
    match format {
        Some(name) => name.parse::<Format>().map_err(value_error),
        None => Format::detect(path).map_err(|e| PyIOError::new_err(e.to_string())),
    }
}

fn open_trace(path: &Path, format: Option<&str>) -> PyResult<cairn_trace::read::Reader> {
    let format = trace_format(path, format)?;
    read::open(path, &format).map_err(|e| PyIOError::new_err(e.to_string()))
}

/// A trace's accesses, and with TTL one [`Stamp`] per access (else none).
struct Loaded {
    accesses: Vec<Access>,
    stamps: Vec<Stamp>,
}

/// The TTL rules of a run: a default TTL (µs) and whether the trace's own
/// TTLs count (they do when its format carries them, unless ignored), as
/// `cairn sim --ttl/--ignore-trace-ttl` decide; `None` when nothing expires.
fn ttl_rules(format: &Format, default_us: Option<u64>, ignore_trace_ttl: bool) -> Option<Ttl> {
    let from_trace = !ignore_trace_ttl && format.carries_ttl();
    (default_us.is_some() || from_trace).then_some(Ttl {
        default_us,
        from_trace,
    })
}

/// Every access of a trace, one per request, with next-access times filled
/// in, and stamped by `ttl` when given. Keyed as `cairn sim --unit auto`
/// keys them, and as libCacheSim reads each format: block traces (VSCSI,
/// CloudPhysics, MSR) by disk and start sector, the others by object id.
fn load_accesses(path: &Path, parsed: &Format, ttl: Option<Ttl>) -> PyResult<Loaded> {
    let unit = if parsed.is_block() {
        Unit::StartSector
    } else {
        Unit::Object
    };
    let mut splitter = Splitter::new(unit);
    let mut accesses = Vec::new();
    let mut stamps = Vec::new();
    let reader = read::open(path, parsed).map_err(|e| PyIOError::new_err(e.to_string()))?;
    for request in reader {
        let request = request.map_err(|e| PyIOError::new_err(e.to_string()))?;
        splitter.split(&request, &mut accesses);
        if let Some(ttl) = ttl {
            stamps.resize(accesses.len(), ttl.stamp(&request));
        }
    }
    if accesses.is_empty() {
        return Err(value_error(format!(
            "{}: the trace holds no requests",
            path.display()
        )));
    }
    let keys = accesses.iter().map(|a| a.key).collect();
    for (access, next) in accesses.iter_mut().zip(cairn_sim::next_access_times(keys)) {
        access.next = next;
    }
    Ok(Loaded { accesses, stamps })
}

/// A loaded trace as the replay reads it: its accesses and, with TTL, their
/// stamps.
struct Replayed<'a> {
    loaded: &'a Loaded,
    ttl: Option<Ttl>,
    at: usize,
}

impl AccessSource for Replayed<'_> {
    fn fill(&mut self, out: &mut Vec<Access>, max: usize) -> Result<usize, TraceError> {
        let all = &self.loaded.accesses;
        let end = all.len().min(self.at + max.max(1));
        out.extend_from_slice(&all[self.at..end]);
        let appended = end - self.at;
        self.at = end;
        Ok(appended)
    }

    fn stamped(&self) -> bool {
        self.ttl.is_some()
    }

    fn ttl(&self) -> Option<Ttl> {
        self.ttl
    }

    fn fill_stamped(
        &mut self,
        out: &mut Vec<Access>,
        stamps: &mut Vec<Stamp>,
        max: usize,
    ) -> Result<usize, TraceError> {
        let first = self.at;
        let appended = self.fill(out, max)?;
        stamps.extend_from_slice(&self.loaded.stamps[first..first + appended]);
        Ok(appended)
    }
}

/// The working set as `cairn sim` and libCacheSim count it (the first pass).
fn working_set(accesses: &[Access]) -> PyResult<WorkingSet> {
    cairn_sim::prepass(
        FromIter(accesses.iter().copied().map(Ok)),
        false,
        1,
        &NoProgress,
    )
    .map(|first| first.working_set)
    .map_err(|e| PyIOError::new_err(e.to_string()))
}

/// A float in (0, 1] is a fraction of the working set; an int is absolute.
fn cache_size(size: &Bound<'_, PyAny>) -> PyResult<CacheSize> {
    if let Ok(n) = size.extract::<u64>() {
        if n == 0 {
            return Err(value_error("a cache size of 0 holds nothing"));
        }
        return Ok(CacheSize::Absolute(n));
    }
    let f: f64 = size.extract().map_err(|_| {
        PyTypeError::new_err(
            "a size is an int (objects or bytes) or a float in (0, 1] (a fraction of the working set)",
        )
    })?;
    if !(f > 0.0 && f <= 1.0) {
        return Err(value_error(format!(
            "size {f}: a fraction must be in (0, 1]"
        )));
    }
    Ok(CacheSize::Fraction(f))
}

/// A cache: one policy at one capacity.
///
/// ``Cache("s3fifo", 1000)`` counts objects; ``unit="bytes"`` sums sizes.
/// Keyword arguments set the policy's parameters, as in `docs/policies.md`:
/// ``Cache("s3fifo", 1000, small_size_ratio=0.2)``.
#[pyclass(module = "cairn", subclass)]
struct Cache {
    inner: Mutex<CacheInner>,
}

struct CacheInner {
    policy: Box<dyn Policy>,
    victims: Vec<u64>,
    time: u64,
    /// A plugin's first hook error, raised by the call that met it.
    error: Option<Arc<Mutex<Option<PyErr>>>>,
    /// The default TTL (`default_ttl`), µs; requests' own TTLs always count.
    default_ttl_us: Option<u64>,
    /// The expiries of the resident objects that expire.
    expiring: Expiring,
}

impl CacheInner {
    fn new(policy: Box<dyn Policy>, default_ttl_us: Option<u64>) -> Self {
        Self {
            policy,
            victims: Vec::new(),
            time: 0,
            error: None,
            default_ttl_us,
            expiring: Expiring::new(),
        }
    }

    /// The TTL rules of this cache: its default, and the requests' own TTLs.
    fn ttl(&self) -> Ttl {
        Ttl {
            default_us: self.default_ttl_us,
            from_trace: true,
        }
    }

    /// Serves `access` at `stamp` (`Stamp::NONE` without a clock), recording
    /// it in `metrics`; returns whether it hit.
    fn access(&mut self, access: &Access, stamp: Stamp, metrics: &mut Metrics) -> PyResult<bool> {
        let hit = if stamp.expires_us == cairn_policy::NEVER && self.expiring.is_empty() {
            self.victims.clear();
            let hit = self.policy.access(access, &mut self.victims);
            metrics.record(access, hit, self.victims.len());
            hit
        } else {
            self.expiring
                .access(&mut *self.policy, access, stamp, &mut self.victims, metrics)
        };
        self.time += 1;
        self.raise()?;
        Ok(hit)
    }

    fn raise(&self) -> PyResult<()> {
        if let Some(error) = &self.error
            && let Some(e) = error.lock().unwrap_or_else(PoisonError::into_inner).take()
        {
            return Err(e);
        }
        Ok(())
    }
}

impl Cache {
    fn lock(&self) -> std::sync::MutexGuard<'_, CacheInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[pymethods]
impl Cache {
    #[new]
    #[pyo3(signature = (policy, capacity, unit = "objects", default_ttl = None, **params))]
    fn new(
        policy: &str,
        capacity: u64,
        unit: &str,
        default_ttl: Option<f64>,
        params: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let config = policy_config(policy, params)?;
        let built = config
            .build(self::capacity(capacity_unit(unit)?, capacity))
            .map_err(value_error)?;
        Ok(Self {
            inner: Mutex::new(CacheInner::new(built, ttl_us(default_ttl)?)),
        })
    }

    /// Looks the request up and admits it on a miss; returns whether it hit.
    /// With TTL (``default_ttl``, or a ``Request`` with a ``ttl``) the
    /// request's ``time`` (µs) is the clock: an object whose expiry is below
    /// it is removed and the request misses, as in libCacheSim.
    #[pyo3(signature = (request, obj_size = 1))]
    fn get(&self, request: &Bound<'_, PyAny>, obj_size: u32) -> PyResult<bool> {
        let mut inner = self.lock();
        let (access, timed) = access_of(request, obj_size, inner.time)?;
        let stamp = match timed {
            Some(timed) => inner.ttl().stamp(&timed),
            None if inner.default_ttl_us.is_some() || !inner.expiring.is_empty() => {
                return Err(PyTypeError::new_err(
                    "this cache expires objects, which needs the time: pass a \
                     cairn.Request(obj_id, obj_size, time=...) rather than an object id",
                ));
            }
            None => Stamp::NONE,
        };
        inner.access(&access, stamp, &mut Metrics::default())
    }

    /// Whether `obj_id` is resident (an expired object stays until a request
    /// finds it); changes nothing.
    fn find(&self, obj_id: u64) -> bool {
        self.lock().policy.contains(obj_id)
    }

    /// Removes `obj_id`; returns whether it was resident.
    fn remove(&self, obj_id: u64) -> bool {
        self.lock().policy.remove(obj_id)
    }

    fn __len__(&self) -> usize {
        self.lock().policy.len()
    }

    /// Occupancy, in objects or bytes.
    #[getter]
    fn used(&self) -> u64 {
        self.lock().policy.used()
    }

    /// The capacity, in objects or bytes.
    #[getter]
    fn capacity(&self) -> u64 {
        self.lock().policy.capacity().limit()
    }

    /// The policy's table name (`lru`, `s3fifo`).
    #[getter]
    fn name(&self) -> &'static str {
        self.lock().policy.name()
    }

    /// Replays a trace file through this cache (its state carries on);
    /// returns `(miss_ratio, byte_miss_ratio)` of that replay, as
    /// libCacheSim's `process_trace`. Objects expire by the trace's TTLs
    /// (oracleSysTwrNS, a CSV with a TTL column) and ``default_ttl``.
    #[pyo3(signature = (trace, format = None))]
    fn process_trace(
        &self,
        py: Python<'_>,
        trace: PathBuf,
        format: Option<&str>,
    ) -> PyResult<(f64, f64)> {
        let parsed = trace_format(&trace, format)?;
        let mut inner = self.lock();
        let ttl = ttl_rules(&parsed, inner.default_ttl_us, false);
        let loaded = load_accesses(&trace, &parsed, ttl)?;
        let plugin = inner.error.is_some();
        let mut metrics = Metrics::default();
        let mut run = |inner: &mut CacheInner| -> PyResult<()> {
            for (at, access) in loaded.accesses.iter().enumerate() {
                let stamp = loaded.stamps.get(at).copied().unwrap_or(Stamp::NONE);
                inner.access(access, stamp, &mut metrics)?;
            }
            Ok(())
        };
        let inner: &mut CacheInner = &mut inner;
        if plugin {
            run(inner)?;
        } else {
            py.detach(|| run(inner))?;
        }
        Ok((metrics.miss_ratio(), metrics.byte_miss_ratio()))
    }

    fn __repr__(&self) -> String {
        let inner = self.lock();
        format!(
            "Cache({:?}, {:?}, {} of {})",
            inner.policy.name(),
            inner.policy.capacity(),
            inner.policy.used(),
            inner.policy.capacity().limit()
        )
    }
}

/// The hooks of a policy written in Python, with libCacheSim's names.
struct Hooks {
    name: String,
    init: Py<PyAny>,
    hit: Py<PyAny>,
    miss: Py<PyAny>,
    eviction: Py<PyAny>,
    remove: Option<Py<PyAny>>,
}

/// A [`Policy`] whose decisions are Python calls. Cairn keeps the resident
/// set and its sizes; the hooks keep whatever state they like in `data`.
struct PythonPolicy {
    hooks: Arc<Hooks>,
    data: Py<PyAny>,
    resident: HashMap<u64, u32>,
    used: u64,
    capacity: Capacity,
    /// The first error a hook raised; after it every access misses and no
    /// hook runs, and the caller raises it.
    error: Arc<Mutex<Option<PyErr>>>,
}

impl PythonPolicy {
    fn new(hooks: Arc<Hooks>, capacity: Capacity) -> PyResult<Self> {
        let data = Python::attach(|py| hooks.init.call1(py, (capacity.limit(),)))?;
        Ok(Self {
            hooks,
            data,
            resident: HashMap::new(),
            used: 0,
            capacity,
            error: Arc::new(Mutex::new(None)),
        })
    }

    fn failed(&self) -> bool {
        self.error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_some()
    }

    fn fail(&self, error: PyErr) {
        let mut slot = self.error.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(error);
        }
    }

    fn request(access: &Access) -> Request {
        Request {
            obj_id: access.key,
            obj_size: access.size,
            op: op_name(access.op).to_owned(),
            time: access.time,
            ttl: 0,
        }
    }
}

impl Policy for PythonPolicy {
    fn name(&self) -> &'static str {
        "python"
    }

    fn lookup(&mut self, access: &Access) -> bool {
        if self.failed() || !self.resident.contains_key(&access.key) {
            return false;
        }
        let result = Python::attach(|py| {
            self.hooks
                .hit
                .call1(py, (self.data.clone_ref(py), Self::request(access)))
        });
        if let Err(e) = result {
            self.fail(e);
        }
        true
    }

    fn admit(&mut self, access: &Access, victims: &mut Vec<u64>) -> bool {
        let charge = self.capacity.charge(access.size);
        if self.failed() || charge > self.capacity.limit() {
            return false;
        }
        let outcome = Python::attach(|py| -> PyResult<()> {
            while self.used + charge > self.capacity.limit() {
                let victim: u64 = self
                    .hooks
                    .eviction
                    .call1(py, (self.data.clone_ref(py), Self::request(access)))?
                    .extract(py)
                    .map_err(|_| {
                        PyTypeError::new_err(format!(
                            "{}: cache_eviction_hook must return the obj_id to evict",
                            self.hooks.name
                        ))
                    })?;
                let Some(size) = self.resident.remove(&victim) else {
                    return Err(PyRuntimeError::new_err(format!(
                        "{}: cache_eviction_hook returned {victim}, which is not in the cache",
                        self.hooks.name
                    )));
                };
                self.used -= self.capacity.charge(size);
                victims.push(victim);
            }
            self.resident.insert(access.key, access.size);
            self.used += charge;
            self.hooks
                .miss
                .call1(py, (self.data.clone_ref(py), Self::request(access)))?;
            Ok(())
        });
        match outcome {
            Ok(()) => true,
            Err(e) => {
                self.fail(e);
                self.resident.contains_key(&access.key)
            }
        }
    }

    fn remove(&mut self, key: u64) -> bool {
        let Some(size) = self.resident.remove(&key) else {
            return false;
        };
        self.used -= self.capacity.charge(size);
        if let Some(hook) = &self.hooks.remove {
            let result = Python::attach(|py| hook.call1(py, (self.data.clone_ref(py), key)));
            if let Err(e) = result {
                self.fail(e);
            }
        }
        true
    }

    fn contains(&self, key: u64) -> bool {
        self.resident.contains_key(&key)
    }

    fn len(&self) -> usize {
        self.resident.len()
    }

    fn used(&self) -> u64 {
        self.used
    }

    fn capacity(&self) -> Capacity {
        self.capacity
    }
}

/// A cache whose policy is written in Python, with libCacheSim's hooks:
///
/// - ``cache_init_hook(capacity) -> data``: any object, passed to the others;
/// - ``cache_hit_hook(data, request)``: a resident object was requested;
/// - ``cache_miss_hook(data, request)``: the object was admitted (it is
///   resident when the hook runs);
/// - ``cache_eviction_hook(data, request) -> obj_id``: room is needed for
///   ``request``; return a resident object to evict (called until it fits);
/// - ``cache_remove_hook(data, obj_id)``: optional, ``remove`` was called.
///
/// Cairn keeps the resident set and the sizes, so a hook that returns an
/// object that is not resident is an error, not a corrupt cache. A
/// `PluginCache` is also a policy for `cairn.sim`, replayed at each size
/// there (its capacity here is then ignored).
#[pyclass(module = "cairn", extends = Cache)]
struct PluginCache {
    hooks: Arc<Hooks>,
}

#[pymethods]
impl PluginCache {
    #[new]
    #[pyo3(signature = (cache_size, cache_init_hook, cache_hit_hook, cache_miss_hook,
                        cache_eviction_hook, cache_remove_hook = None,
                        cache_name = "python", unit = "objects", default_ttl = None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        cache_size: u64,
        cache_init_hook: Py<PyAny>,
        cache_hit_hook: Py<PyAny>,
        cache_miss_hook: Py<PyAny>,
        cache_eviction_hook: Py<PyAny>,
        cache_remove_hook: Option<Py<PyAny>>,
        cache_name: &str,
        unit: &str,
        default_ttl: Option<f64>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let default_ttl_us = ttl_us(default_ttl)?;
        let hooks = Arc::new(Hooks {
            name: cache_name.to_owned(),
            init: cache_init_hook,
            hit: cache_hit_hook,
            miss: cache_miss_hook,
            eviction: cache_eviction_hook,
            remove: cache_remove_hook,
        });
        let policy = PythonPolicy::new(
            Arc::clone(&hooks),
            capacity(capacity_unit(unit)?, cache_size),
        )?;
        let error = Arc::clone(&policy.error);
        let mut inner = CacheInner::new(Box::new(policy), default_ttl_us);
        inner.error = Some(error);
        let cache = Cache {
            inner: Mutex::new(inner),
        };
        Ok(PyClassInitializer::from(cache).add_subclass(Self { hooks }))
    }

    /// The name given as `cache_name`.
    #[getter]
    fn cache_name(&self) -> String {
        self.hooks.name.clone()
    }
}

/// Reads a trace file request by request: ``for req in TraceReader(path)``.
/// The format is detected from the file (oracleGeneral, VSCSI, CloudPhysics,
/// MSR, text, CSV; zstd-compressed or not) unless `format` names it.
#[pyclass(module = "cairn")]
struct TraceReader {
    reader: Mutex<cairn_trace::read::Reader>,
}

#[pymethods]
impl TraceReader {
    #[new]
    #[pyo3(signature = (trace, format = None))]
    fn new(trace: PathBuf, format: Option<&str>) -> PyResult<Self> {
        Ok(Self {
            reader: Mutex::new(open_trace(&trace, format)?),
        })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self) -> PyResult<Option<Request>> {
        let mut reader = self.reader.lock().unwrap_or_else(PoisonError::into_inner);
        match reader.next() {
            None => Ok(None),
            Some(Err(e)) => Err(PyIOError::new_err(e.to_string())),
            Some(Ok(request)) => Ok(Some(Request {
                obj_id: request.object,
                obj_size: request.size,
                op: op_name(request.op).to_owned(),
                time: request.time_us,
                ttl: request.ttl,
            })),
        }
    }
}

/// One result row of `sim`, as a dict.
fn row<'py>(
    py: Python<'py>,
    policy: &str,
    size: &str,
    capacity: Capacity,
    metrics: &Metrics,
) -> PyResult<Bound<'py, PyDict>> {
    let row = PyDict::new(py);
    row.set_item("policy", policy)?;
    row.set_item("size", size)?;
    row.set_item("capacity", capacity.limit())?;
    row.set_item(
        "unit",
        match capacity {
            Capacity::Objects(_) => "objects",
            Capacity::Bytes(_) => "bytes",
        },
    )?;
    row.set_item("miss_ratio", metrics.miss_ratio())?;
    row.set_item("byte_miss_ratio", metrics.byte_miss_ratio())?;
    row.set_item("requests", metrics.requests)?;
    row.set_item("hits", metrics.hits)?;
    row.set_item("misses", metrics.misses)?;
    row.set_item("evictions", metrics.evictions)?;
    row.set_item("prefetched", metrics.prefetched)?;
    row.set_item("prefetch_hits", metrics.prefetch_hits)?;
    row.set_item("expired", metrics.expired)?;
    Ok(row)
}

/// Simulates every policy at every size over a trace; returns one dict per
/// (policy, size) with ``policy``, ``size``, ``capacity``, ``unit``,
/// ``miss_ratio``, ``byte_miss_ratio``, ``requests``, ``hits``, ``misses``,
/// ``evictions``, ``prefetched``, ``prefetch_hits``, ``expired``.
///
/// A policy is a name (``"lru"``), a ``(name, {param: value})`` pair, or a
/// `PluginCache`. A size is an int (objects, or bytes with
/// ``unit="bytes"``) or a float in (0, 1], a fraction of the working set
/// computed as libCacheSim does. Cairn's policies run in Rust on ``threads``
/// threads (0: every core) without the GIL; Python policies run after them,
/// in this thread. ``admission`` (an admission filter: ``"bloom"``, or
/// ``("nhit", {"threshold": 3})``) and ``prefetch`` (a prefetcher: ``"obl"``,
/// ``("pg", {"lookahead_range": 10})``, ``"mithril"``) go beside every Cairn policy, as
/// ``cairn sim --admission/--prefetch`` put them; Python policies run
/// without them. The first ``warmup`` accesses warm every cache and are not
/// counted.
///
/// Time to live, as ``cairn sim --ttl/--ignore-trace-ttl``: objects expire
/// by the TTLs the trace's requests carry (oracleSysTwrNS, a CSV with a TTL
/// column) unless ``ignore_trace_ttl``, and those without one after ``ttl``
/// seconds (default: never); an object found expired is removed and the
/// request misses (``expired`` counts them). Prefetched objects take ``ttl``.
#[pyfunction]
#[pyo3(signature = (trace, policies, sizes, unit = "objects", format = None, threads = 0,
                    admission = None, prefetch = None, warmup = 0, ttl = None,
                    ignore_trace_ttl = false))]
#[allow(clippy::too_many_arguments)]
fn sim<'py>(
    py: Python<'py>,
    trace: PathBuf,
    policies: Vec<Bound<'py, PyAny>>,
    sizes: Vec<Bound<'py, PyAny>>,
    unit: &str,
    format: Option<&str>,
    threads: usize,
    admission: Option<Bound<'py, PyAny>>,
    prefetch: Option<Bound<'py, PyAny>>,
    warmup: u64,
    ttl: Option<f64>,
    ignore_trace_ttl: bool,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    if policies.is_empty() || sizes.is_empty() {
        return Err(value_error("sim needs at least one policy and one size"));
    }
    let admission = optional_config(
        admission.as_ref(),
        ("admission filter", "filter"),
        AdmissionConfig::default_for,
        AdmissionConfig::NAMES,
    )?
    .unwrap_or_default();
    let prefetch = optional_config(
        prefetch.as_ref(),
        ("prefetcher", "prefetcher"),
        PrefetchConfig::default_for,
        PrefetchConfig::NAMES,
    )?;
    admission.validate().map_err(value_error)?;
    if let Some(prefetch) = &prefetch {
        prefetch.validate().map_err(value_error)?;
    }
    let unit = capacity_unit(unit)?;
    let sizes = sizes.iter().map(cache_size).collect::<PyResult<Vec<_>>>()?;
    let parsed = trace_format(&trace, format)?;
    let ttl = ttl_rules(&parsed, ttl_us(ttl)?, ignore_trace_ttl);
    let loaded = load_accesses(&trace, &parsed, ttl)?;
    let accesses = &loaded.accesses;
    let working_set = working_set(accesses)?;
    enum Entry {
        Native(String, PolicyConfig),
        Plugin(Arc<Hooks>),
    }
    let mut entries = Vec::new();
    for policy in &policies {
        if let Ok(plugin) = policy.cast::<PluginCache>() {
            entries.push(Entry::Plugin(Arc::clone(&plugin.borrow().hooks)));
        } else if let Ok(name) = policy.extract::<String>() {
            let config = policy_config(&name, None)?;
            entries.push(Entry::Native(name, config));
        } else if let Ok((name, params)) = policy.extract::<(String, Bound<'py, PyDict>)>() {
            let config = policy_config(&name, Some(&params))?;
            entries.push(Entry::Native(name, config));
        } else {
            return Err(PyTypeError::new_err(format!(
                "policy {policy}: expected a name, a (name, params) pair or a PluginCache"
            )));
        }
    }
    let resolve = |size: CacheSize| -> PyResult<Capacity> {
        let capacity = size.resolve(unit, working_set);
        if capacity.limit() == 0 {
            return Err(value_error(format!(
                "size {size} of a working set of {} resolves to 0; give a larger size",
                working_set.in_unit(unit)
            )));
        }
        Ok(capacity)
    };
    let mut configurations = Vec::new();
    for entry in &entries {
        if let Entry::Native(label, config) = entry {
            for &size in &sizes {
                configurations.push(Configuration {
                    label: label.clone(),
                    policy: config.clone(),
                    admission: admission.clone(),
                    prefetch: prefetch.clone(),
                    size: size.to_string(),
                    capacity: resolve(size)?,
                    l2: None,
                });
            }
        }
    }
    let mut rows = Vec::new();
    if !configurations.is_empty() {
        let options = ReplayOptions {
            threads,
            warmup_accesses: warmup,
            ..ReplayOptions::default()
        };
        let reports = py
            .detach(|| {
                cairn_sim::replay(
                    &configurations,
                    Replayed {
                        loaded: &loaded,
                        ttl,
                        at: 0,
                    },
                    &options,
                    &NoProgress,
                )
            })
            .map_err(value_error)?;
        for report in &reports {
            let capacity = capacity(capacity_unit(&report.capacity_unit)?, report.capacity);
            rows.push(row(
                py,
                &report.label,
                &report.size,
                capacity,
                &report.metrics,
            )?);
        }
    }
    for entry in &entries {
        if let Entry::Plugin(hooks) = entry {
            for &size in &sizes {
                let capacity = resolve(size)?;
                let mut policy = PythonPolicy::new(Arc::clone(hooks), capacity)?;
                let mut metrics = Metrics::default();
                let mut victims = Vec::new();
                let mut expiring = Expiring::new();
                for (at, access) in accesses.iter().enumerate() {
                    if at as u64 == warmup {
                        metrics = Metrics::default();
                    }
                    if let Some(&stamp) = loaded.stamps.get(at) {
                        expiring.access(&mut policy, access, stamp, &mut victims, &mut metrics);
                    } else {
                        victims.clear();
                        let hit = policy.access(access, &mut victims);
                        metrics.record(access, hit, victims.len());
                    }
                }
                if let Some(e) = policy
                    .error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take()
                {
                    return Err(e);
                }
                rows.push(row(py, &hooks.name, &size.to_string(), capacity, &metrics)?);
            }
        }
    }
    Ok(rows)
}

/// The exact LRU miss-ratio curve of a trace (Mattson's stack algorithm):
/// a list of ``(size, miss_ratio)`` at ``points`` sizes evenly spread up to
/// the working set, in objects or bytes. A trace whose requests carry TTLs
/// is refused unless ``ignore_trace_ttl``, as by ``cairn mrc``: with TTL,
/// LRU is not a stack algorithm, so it has no one-pass curve (``sim`` with
/// ``ttl`` simulates it at given sizes).
#[pyfunction]
#[pyo3(signature = (trace, unit = "objects", points = 20, format = None, ignore_trace_ttl = false))]
fn mrc(
    py: Python<'_>,
    trace: PathBuf,
    unit: &str,
    points: usize,
    format: Option<&str>,
    ignore_trace_ttl: bool,
) -> PyResult<Vec<(u64, f64)>> {
    let unit = capacity_unit(unit)?;
    if points == 0 {
        return Err(value_error("points must be at least 1"));
    }
    let parsed = trace_format(&trace, format)?;
    if parsed.carries_ttl() && !ignore_trace_ttl {
        return Err(value_error(format!(
            "{} carries TTLs ({}): with TTL, LRU is not a stack algorithm (a larger cache \
             keeps an older copy, which expires first, so it can miss where a smaller one \
             hits), so it has no one-pass curve; pass ignore_trace_ttl=True for the curve \
             without expiry, or use sim(..., ttl=...) at the sizes you need",
            trace.display(),
            parsed.name()
        )));
    }
    let accesses = load_accesses(&trace, &parsed, None)?.accesses;
    let working_set = working_set(&accesses)?;
    Ok(py.detach(|| {
        let mut tracker = MrcTracker::exact(unit);
        for access in &accesses {
            tracker.observe(access);
        }
        let histogram = tracker.finish();
        let sizes = cairn_sim::mrc::even_sizes(working_set.in_unit(unit), points);
        let ratios = histogram.miss_ratios(&sizes);
        sizes.into_iter().zip(ratios).collect()
    }))
}

/// The unit `analyze` keys a trace in `format` by: `auto`, `object`,
/// `start-sector` or `block:SIZE`, as `cairn trace analyze --unit`.
fn analysis_unit(unit: &str, format: &Format) -> PyResult<Unit> {
    match unit {
        "auto" if format.is_block() => Ok(Unit::StartSector),
        "auto" | "object" => Ok(Unit::Object),
        "start-sector" => Ok(Unit::StartSector),
        other => {
            let size = other.strip_prefix("block:").ok_or_else(|| {
                value_error(format!(
                    "unit `{other}`: expected \"auto\", \"object\", \"start-sector\" or \"block:SIZE\""
                ))
            })?;
            let bytes = cairn_sim::parse_bytes(size).map_err(value_error)?;
            match u32::try_from(bytes) {
                Ok(block_size) if block_size > 0 => Ok(Unit::Block { block_size }),
                _ => Err(value_error(format!(
                    "unit `{other}`: the block size must be 1 B to 4 GiB - 1"
                ))),
            }
        }
    }
}

/// An analysis error as Python's: unreadable traces are `OSError`, the rest
/// (an empty trace, a window too short) `ValueError`.
fn analysis_error(error: cairn_sim::SimError) -> PyErr {
    match error {
        cairn_sim::SimError::Trace(e) => PyIOError::new_err(e.to_string()),
        other => value_error(other),
    }
}

/// Analyzes a trace in one pass, as ``cairn trace analyze --json``: a dict
/// with the counts (``requests``, ``reads``, ``writes``, ``bytes_read``,
/// ``bytes_written``, ``accesses``, ``keys``), the ``reuse_distance`` and
/// ``stack_distance`` histograms (``counts`` in powers of two, ``total``,
/// ``mean``, ``max``), ``frequencies`` (rank-frequency table), ``zipf``
/// (``alpha``, ``intercept``, ``r2``, ``ranks``), ``one_hit_keys`` and
/// ``one_hit_fraction``, ``request_sizes`` and ``object_sizes`` (log2
/// buckets), and ``windows`` (one dict per window of ``window`` seconds;
/// default: a round length giving at most about 100). Keys are made as
/// ``cairn sim --unit`` makes them (``unit="auto"``: start sectors for block
/// traces, objects otherwise).
#[pyfunction]
#[pyo3(signature = (trace, format = None, unit = "auto", window = None))]
fn analyze<'py>(
    py: Python<'py>,
    trace: PathBuf,
    format: Option<&str>,
    unit: &str,
    window: Option<f64>,
) -> PyResult<Bound<'py, PyAny>> {
    use cairn_sim::analyze::{analyze, default_window_us, time_span};
    let parsed = trace_format(&trace, format)?;
    let unit = analysis_unit(unit, &parsed)?;
    let window_us = match window {
        None => None,
        Some(s) if s.is_finite() && s > 0.0 && (s * 1e6).round() >= 1.0 => {
            Some((s * 1e6).round() as u64)
        }
        Some(s) => {
            return Err(value_error(format!(
                "window {s}: a length in seconds, at least 0.000001 (1 µs)"
            )));
        }
    };
    let open = || read::open(&trace, &parsed).map_err(cairn_sim::SimError::from);
    let analysis = py
        .detach(|| {
            let window_us = match window_us {
                Some(w) => w,
                None => default_window_us(time_span(open()?)?),
            };
            analyze(open()?, unit, window_us)
        })
        .map_err(analysis_error)?;
    let mut value = serde_json::to_value(&analysis).map_err(value_error)?;
    if let serde_json::Value::Object(map) = &mut value {
        map.insert("trace".into(), trace.display().to_string().into());
        map.insert("format".into(), parsed.name().into());
        let unit = match unit {
            Unit::Object => "object".to_owned(),
            Unit::StartSector => "start-sector".to_owned(),
            Unit::Block { block_size } => format!("block:{block_size}"),
        };
        map.insert("unit".into(), unit.into());
    }
    py.import("json")?
        .call_method1("loads", (value.to_string(),))
}

/// Cairn's cache policies, trace readers and simulator.
#[pymodule]
fn cairn(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<Request>()?;
    module.add_class::<Cache>()?;
    module.add_class::<PluginCache>()?;
    module.add_class::<TraceReader>()?;
    module.add_function(wrap_pyfunction!(sim, module)?)?;
    module.add_function(wrap_pyfunction!(mrc, module)?)?;
    module.add_function(wrap_pyfunction!(analyze, module)?)?;
    module.add("POLICIES", PolicyConfig::NAMES.to_vec())?;
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
