//! A [`Snapshot`] in Prometheus's text exposition format, version 0.0.4
//! (what `GET /metrics` answers).
//!
//! Names follow Prometheus's conventions: `cairn_` first, base units last
//! (`_bytes`, `_seconds`), counters end in `_total`; every family has one
//! `# HELP` and one `# TYPE` line and its samples follow them together.
//!
//! - The front end's counters, per export: `cairn_requests_total{op}`,
//!   `cairn_bytes_total{op}`, errors, refusals, connections, and the
//!   histograms `cairn_request_duration_seconds{op}` (read, write, other).
//! - Each layer's latency: `cairn_layer_duration_seconds{layer, kind, op}`
//!   (read, write, flush).
//! - Each layer's own metrics, mapped mechanically: `cairn_<kind>_<name>`
//!   with the labels `export` and `layer` (a cost group's add `group`:
//!   `cairn_cache_group_<name>`), `_total` added to counters, and a name in
//!   nanoseconds turned into seconds (`miss_service_ns` →
//!   `cairn_cache_group_miss_service_seconds_total`).
//! - `cairn_dirty_bytes{export, layer}`: the data a layer holds that the
//!   layer below it does not have yet, whatever the layer (a tier's dirty
//!   blocks, a log disk's NV write cache), for one alert over every stack.
//! - A file export's (`cairn serve --files`), `cairn_files_` first, with the
//!   label `export`: `cairn_files_requests_total{method, status}`,
//!   `cairn_files_backend_errors_total{kind}`, its connections, and its
//!   cache's metrics mapped as a layer's (`hits` →
//!   `cairn_files_hits_total`).
//!
//! Histogram buckets are cumulative at the bounds of [`BOUNDS_NS`]. The
//! snapshot's buckets are finer (16 per power of two); one is counted under
//! the first bound at or above its upper end, so `le` never counts a value
//! above its bound, and may leave out values up to 6.25 % below it.

use std::collections::HashMap;
use std::fmt::Write as _;

use cairn_store::stats::histogram::Latency;
use cairn_store::stats::{GroupStats, LayerStats, Metric, MetricKind, Value};

use crate::io::IoCounts;
use crate::snapshot::{ExportSnapshot, FileExportSnapshot, Snapshot};

/// The `Content-Type` of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The `le` bounds of every latency histogram, nanoseconds (then `+Inf`):
/// 250 ns to 10 s, 1-2.5-5 per decade.
pub const BOUNDS_NS: [u64; 24] = [
    250,
    500,
    1_000,
    2_500,
    5_000,
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    10_000_000_000,
];

const _: () = {
    let mut i = 1;
    while i < BOUNDS_NS.len() {
        assert!(BOUNDS_NS[i - 1] < BOUNDS_NS[i]);
        i += 1;
    }
};

/// The layer metrics that are `cairn_dirty_bytes` too: (layer kind, metric).
const DIRTY_BYTES: [(&str, &str); 2] = [("tier", "dirty_bytes"), ("log", "nv_dirty_bytes")];

/// The snapshot as the text format.
pub fn render(snapshot: &Snapshot) -> String {
    let mut families = Families::default();
    process(&mut families, snapshot);
    for export in &snapshot.exports {
        front_end(&mut families, export);
        for layer in &export.layers {
            layer_metrics(&mut families, &export.name, layer);
        }
    }
    for export in &snapshot.files {
        file_export(&mut families, export);
    }
    families.render()
}

fn process(f: &mut Families, snapshot: &Snapshot) {
    f.gauge(
        "cairn_build_info",
        "1, labelled with the version of the cairn serving",
        &[("version", env!("CARGO_PKG_VERSION"))],
        Number::Integer(1),
    );
    f.gauge(
        "cairn_uptime_seconds",
        "seconds since the server started",
        &[],
        Number::Real(snapshot.uptime_seconds),
    );
    f.gauge(
        "cairn_counting",
        "1 when requests are counted and timed (0: cairn serve --no-stats)",
        &[],
        Number::Integer(u64::from(snapshot.counting)),
    );
}

/// The export's requests, as the NBD front end counts them.
fn front_end(f: &mut Families, export: &ExportSnapshot) {
    let name = export.name.as_str();
    let e = [("export", name)];
    f.gauge(
        "cairn_export_size_bytes",
        "the export's size",
        &e,
        Number::Integer(export.size_bytes),
    );
    f.gauge(
        "cairn_export_read_only",
        "1 when the export refuses writes",
        &e,
        Number::Integer(u64::from(export.read_only)),
    );
    let io: &IoCounts = &export.io.io;
    for (op, n) in [
        ("read", io.reads),
        ("write", io.writes),
        ("flush", io.flushes),
        ("trim", io.trims),
        ("write_zeroes", io.write_zeroes),
        ("cache", io.caches),
        ("block_status", io.block_statuses),
    ] {
        f.counter(
            "cairn_requests_total",
            "NBD requests that ran, by command (refused ones: cairn_requests_refused_total)",
            &[("export", name), ("op", op)],
            Number::Integer(n),
        );
    }
    for (op, n) in [
        ("read", io.read_bytes),
        ("write", io.write_bytes),
        ("trim", io.trim_bytes),
        ("write_zeroes", io.write_zeroes_bytes),
    ] {
        f.counter(
            "cairn_bytes_total",
            "bytes of the NBD requests that succeeded, by command",
            &[("export", name), ("op", op)],
            Number::Integer(n),
        );
    }
    f.counter(
        "cairn_request_errors_total",
        "NBD requests that ran and failed (an error reply)",
        &e,
        Number::Integer(io.errors),
    );
    f.counter(
        "cairn_requests_refused_total",
        "NBD requests refused before running (out of range, a write to a read-only export)",
        &e,
        Number::Integer(io.rejected),
    );
    f.gauge(
        "cairn_connections_open",
        "NBD connections open now",
        &e,
        Number::Integer(export.io.connections_open),
    );
    f.counter(
        "cairn_connections_total",
        "NBD connections since the server started",
        &e,
        Number::Integer(export.io.connections_total),
    );
    let l = &export.io.latency;
    for (op, latency) in [("read", &l.read), ("write", &l.write), ("other", &l.other)] {
        f.histogram(
            "cairn_request_duration_seconds",
            "NBD requests' service time, from the start of execution to the reply handed to \
             the socket (write: writes, zeroes and trims; other: flush, cache, block status)",
            &[("export", name), ("op", op)],
            latency,
        );
    }
}

/// A file export's requests, connections and cache.
fn file_export(f: &mut Families, export: &FileExportSnapshot) {
    let name = export.name.as_str();
    let e = [("export", name)];
    f.gauge(
        "cairn_files_policy_info",
        "1, labelled with the file export's cache policy",
        &[("export", name), ("policy", export.policy.as_str())],
        Number::Integer(1),
    );
    f.gauge(
        "cairn_files_block_size_bytes",
        "the file export's cache block",
        &e,
        Number::Integer(export.block_size_bytes),
    );
    for r in &export.requests {
        f.counter(
            "cairn_files_requests_total",
            "HTTP requests answered, by method (get, head, other) and status class",
            &[
                ("export", name),
                ("method", r.method.as_str()),
                ("status", r.status.as_str()),
            ],
            Number::Integer(r.count),
        );
    }
    let errors = &export.backend_errors;
    for (kind, n) in [
        ("not_found", errors.not_found),
        ("timeout", errors.timeout),
        ("other", errors.other),
    ] {
        f.counter(
            "cairn_files_backend_errors_total",
            "backend calls (lookups, block reads) that failed, by kind (not_found: 404, \
             timeout: 504, other: 403 or 502)",
            &[("export", name), ("kind", kind)],
            Number::Integer(n),
        );
    }
    f.gauge(
        "cairn_files_connections_open",
        "HTTP connections open now",
        &e,
        Number::Integer(export.connections_open),
    );
    f.counter(
        "cairn_files_connections_total",
        "HTTP connections served since the server started",
        &e,
        Number::Integer(export.connections_total),
    );
    f.counter(
        "cairn_files_connections_refused_total",
        "HTTP connections refused with 503 (over --connections-max)",
        &e,
        Number::Integer(export.connections_refused),
    );
    for metric in &export.cache {
        f.metric("cairn_files", metric, &e);
    }
    for GroupStats {
        name: member,
        metrics,
    } in &export.backends
    {
        let labels = [("export", name), ("member", member.as_str())];
        for metric in metrics {
            f.metric("cairn_files_union", metric, &labels);
        }
    }
}

/// A layer's latency and its own metrics.
fn layer_metrics(f: &mut Families, export: &str, layer: &LayerStats) {
    let labels = [("export", export), ("layer", layer.name.as_str())];
    let l = &layer.latency;
    for (op, latency) in [("read", &l.read), ("write", &l.write), ("flush", &l.flush)] {
        f.histogram(
            "cairn_layer_duration_seconds",
            "a layer's service time as the layer above it sees it, the layers below included \
             (write: writes, zeroes and discards)",
            &[
                ("export", export),
                ("layer", layer.name.as_str()),
                ("kind", layer.kind.as_str()),
                ("op", op),
            ],
            latency,
        );
    }
    let prefix = format!("cairn_{}", layer.kind);
    for metric in &layer.metrics {
        f.metric(&prefix, metric, &labels);
        if DIRTY_BYTES.contains(&(layer.kind.as_str(), metric.name.as_str())) {
            f.gauge(
                "cairn_dirty_bytes",
                "bytes a layer holds that the layer below it does not have yet \
                 (a tier's dirty blocks, a log disk's NV write cache)",
                &labels,
                Number::from(metric.value),
            );
        }
    }
    for GroupStats { name, metrics } in &layer.groups {
        let labels = [
            ("export", export),
            ("layer", layer.name.as_str()),
            ("group", name.as_str()),
        ];
        for metric in metrics {
            f.metric(&format!("{prefix}_group"), metric, &labels);
        }
    }
}

/// A sample's value.
#[derive(Clone, Copy)]
enum Number {
    Integer(u64),
    Real(f64),
}

impl From<Value> for Number {
    fn from(value: Value) -> Self {
        match value {
            Value::Integer(v) => Number::Integer(v),
            Value::Real(v) => Number::Real(v),
        }
    }
}

impl Number {
    fn scaled(self, by: f64) -> Self {
        match self {
            Number::Integer(v) => Number::Real(v as f64 * by),
            Number::Real(v) => Number::Real(v * by),
        }
    }

    fn write(self, out: &mut String) {
        match self {
            Number::Integer(v) => {
                let _ = write!(out, "{v}");
            }
            Number::Real(v) => write_float(out, v),
        }
    }
}

/// A float as the format spells it (Go's `ParseFloat`): `NaN`, `+Inf`,
/// `-Inf`, else the shortest decimal that reads back as `v`.
fn write_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
    } else {
        let _ = write!(out, "{v}");
    }
}

/// One line of a family: the name's suffix (`_bucket`, `_sum`, `_count` or
/// none), the labels and the value.
struct Sample {
    suffix: &'static str,
    labels: Vec<(&'static str, String)>,
    value: Number,
}

struct Family {
    name: String,
    help: String,
    kind: &'static str,
    samples: Vec<Sample>,
}

/// The families in the order first seen, each with all its samples.
#[derive(Default)]
struct Families {
    list: Vec<Family>,
    index: HashMap<String, usize>,
}

impl Families {
    /// The family `name`, made with `help` and `kind` if new; `None` if it
    /// exists with another type (a sample of it would make the output
    /// invalid: it is left out).
    fn family(&mut self, name: &str, help: &str, kind: &'static str) -> Option<&mut Family> {
        let name = metric_name(name);
        let index = if let Some(&index) = self.index.get(&name) {
            index
        } else {
            self.list.push(Family {
                name: name.clone(),
                help: help.to_owned(),
                kind,
                samples: Vec::new(),
            });
            self.index.insert(name, self.list.len() - 1);
            self.list.len() - 1
        };
        let family = &mut self.list[index];
        if family.kind == kind {
            Some(family)
        } else {
            tracing::debug!(
                "metrics: {} is a {} already; a {kind} sample of it left out",
                family.name,
                family.kind
            );
            None
        }
    }

    fn sample(
        &mut self,
        name: &str,
        help: &str,
        kind: &'static str,
        labels: &[(&'static str, &str)],
        value: Number,
    ) {
        if let Some(family) = self.family(name, help, kind) {
            family.samples.push(Sample {
                suffix: "",
                labels: owned(labels),
                value,
            });
        }
    }

    fn counter(&mut self, name: &str, help: &str, labels: &[(&'static str, &str)], n: Number) {
        self.sample(name, help, "counter", labels, n);
    }

    fn gauge(&mut self, name: &str, help: &str, labels: &[(&'static str, &str)], n: Number) {
        self.sample(name, help, "gauge", labels, n);
    }

    /// A layer's metric: `prefix_name`, a counter with `_total`, and a
    /// time in nanoseconds in seconds.
    fn metric(&mut self, prefix: &str, metric: &Metric, labels: &[(&'static str, &str)]) {
        let (base, value) = in_seconds(&metric.name, Number::from(metric.value));
        let name = format!("{prefix}_{base}");
        match metric.kind {
            MetricKind::Counter => {
                self.counter(&format!("{name}_total"), &metric.help, labels, value);
            }
            MetricKind::Gauge => self.gauge(&name, &metric.help, labels, value),
        }
    }

    /// A histogram: cumulative buckets at [`BOUNDS_NS`] and `+Inf`, `_sum`
    /// in seconds, `_count`.
    fn histogram(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&'static str, &str)],
        latency: &Latency,
    ) {
        let Some(family) = self.family(name, help, "histogram") else {
            return;
        };
        let mut buckets = latency.buckets.iter().peekable();
        let mut cumulative = 0u64;
        for bound in BOUNDS_NS {
            while let Some(b) = buckets.next_if(|b| b.le_ns <= bound) {
                cumulative += b.count;
            }
            let mut le = String::new();
            write_float(&mut le, bound as f64 / 1e9);
            family.samples.push(Sample {
                suffix: "_bucket",
                labels: with_le(labels, le),
                value: Number::Integer(cumulative),
            });
        }
        family.samples.push(Sample {
            suffix: "_bucket",
            labels: with_le(labels, "+Inf".into()),
            value: Number::Integer(latency.count),
        });
        family.samples.push(Sample {
            suffix: "_sum",
            labels: owned(labels),
            value: Number::Real(latency.sum_ns as f64 / 1e9),
        });
        family.samples.push(Sample {
            suffix: "_count",
            labels: owned(labels),
            value: Number::Integer(latency.count),
        });
    }

    fn render(&self) -> String {
        let mut out = String::with_capacity(64 << 10);
        for family in &self.list {
            let _ = writeln!(out, "# HELP {} {}", family.name, escape_help(&family.help));
            let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
            for sample in &family.samples {
                out.push_str(&family.name);
                out.push_str(sample.suffix);
                if !sample.labels.is_empty() {
                    out.push('{');
                    for (i, (label, value)) in sample.labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        let _ = write!(out, "{label}=\"{}\"", escape_label(value));
                    }
                    out.push('}');
                }
                out.push(' ');
                sample.value.write(&mut out);
                out.push('\n');
            }
        }
        out
    }
}

fn owned(labels: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
    labels.iter().map(|&(k, v)| (k, v.to_owned())).collect()
}

fn with_le(labels: &[(&'static str, &str)], le: String) -> Vec<(&'static str, String)> {
    let mut all = owned(labels);
    all.push(("le", le));
    all
}

/// A layer metric's name with a time in nanoseconds in seconds:
/// `miss_service_ns` → `miss_service_seconds`,
/// `miss_service_ns_per_block` → `miss_service_seconds_per_block`.
fn in_seconds(name: &str, value: Number) -> (String, Number) {
    if let Some(base) = name.strip_suffix("_ns") {
        return (format!("{base}_seconds"), value.scaled(1e-9));
    }
    if name.contains("_ns_") {
        return (name.replace("_ns_", "_seconds_"), value.scaled(1e-9));
    }
    (name.to_owned(), value)
}

/// `name` with every character a metric name may not have
/// (`[a-zA-Z_:][a-zA-Z0-9_:]*`) made `_`.
fn metric_name(name: &str) -> String {
    name.char_indices()
        .map(|(i, c)| {
            let ok =
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit());
            if ok { c } else { '_' }
        })
        .collect()
}

/// A label value as the format quotes it: `\`, `"` and newline escaped.
fn escape_label(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// A HELP text: `\` and newline escaped.
fn escape_help(text: &str) -> String {
    text.replace('\\', "\\\\").replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use cairn_store::stats::histogram::Bucket;

    #[test]
    fn label_values_and_help_are_escaped() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
        assert_eq!(escape_help("x\\y\nz \"q\""), "x\\\\y\\nz \"q\"");
        assert_eq!(metric_name("cairn_9a-b.c"), "cairn_9a_b_c");
        assert_eq!(metric_name("9x"), "_x");
    }

    #[test]
    fn times_in_nanoseconds_become_seconds() {
        let (name, value) = in_seconds("miss_service_ns", Number::Integer(2_000_000_000));
        assert_eq!(name, "miss_service_seconds");
        assert!(matches!(value, Number::Real(v) if (v - 2.0).abs() < 1e-12));
        let (name, _) = in_seconds("miss_service_ns_per_block", Number::Real(1.0));
        assert_eq!(name, "miss_service_seconds_per_block");
        assert_eq!(in_seconds("hits", Number::Integer(1)).0, "hits");
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_the_count() {
        let latency = Latency {
            count: 6,
            sum_ns: 3_000_000,
            buckets: vec![
                Bucket {
                    le_ns: 900,
                    count: 2,
                },
                // Its upper end is above 1 µs: counted from 2.5 µs on.
                Bucket {
                    le_ns: 1_023,
                    count: 1,
                },
                Bucket {
                    le_ns: 2_000_000,
                    count: 2,
                },
                Bucket {
                    le_ns: u64::MAX,
                    count: 1,
                },
            ],
            ..Latency::default()
        };
        let mut f = Families::default();
        f.histogram("h_seconds", "help", &[("export", "e")], &latency);
        let text = f.render();
        let line = |le: &str| {
            let prefix = format!("h_seconds_bucket{{export=\"e\",le=\"{le}\"}} ");
            text.lines()
                .find_map(|l| l.strip_prefix(&prefix))
                .unwrap_or_else(|| panic!("no le={le}: {text}"))
                .to_owned()
        };
        assert_eq!(line("0.0000005"), "0");
        assert_eq!(line("0.000001"), "2");
        assert_eq!(line("0.0000025"), "3");
        assert_eq!(line("0.001"), "3");
        assert_eq!(line("0.0025"), "5");
        assert_eq!(line("10"), "5");
        assert_eq!(line("+Inf"), "6");
        assert!(
            text.contains("h_seconds_sum{export=\"e\"} 0.003\n"),
            "{text}"
        );
        assert!(text.contains("h_seconds_count{export=\"e\"} 6\n"), "{text}");
        assert!(text.starts_with("# HELP h_seconds help\n# TYPE h_seconds histogram\n"));
    }

    #[test]
    fn a_family_keeps_one_type() {
        let mut f = Families::default();
        f.counter("x_total", "c", &[("a", "1")], Number::Integer(1));
        f.gauge("x_total", "g", &[("a", "2")], Number::Integer(2));
        f.counter("x_total", "c", &[("a", "3")], Number::Integer(3));
        let text = f.render();
        assert_eq!(
            text,
            "# HELP x_total c\n# TYPE x_total counter\nx_total{a=\"1\"} 1\nx_total{a=\"3\"} 3\n"
        );
    }

    #[test]
    fn floats_are_spelled_as_prometheus_reads_them() {
        let mut s = String::new();
        for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, 0.25, 1e-9] {
            write_float(&mut s, v);
            s.push(' ');
        }
        assert_eq!(s, "NaN +Inf -Inf 0.25 0.000000001 ");
    }
}
