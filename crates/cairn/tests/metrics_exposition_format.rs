//! `cairn serve --metrics`: what `GET /metrics` answers is Prometheus's
//! text format 0.0.4 line by line — one HELP and one TYPE per family before
//! its samples, each family's samples together, names and label names of
//! the allowed characters, label values escaped, every value a number —
//! with histograms whose buckets rise with `le` and end at `+Inf` = `_count`;
//! its numbers are the control socket's (`cairn stats --json`); bad HTTP
//! requests get 4xx answers and the server keeps serving; an address other
//! hosts can reach is refused unless asked for; the `--help` example runs
//! as printed. Guards what a scraper would reject (a whole scrape fails on
//! one bad line) and what an operator would misread.
// Counts compared as f64 are whole numbers, exact below 2^53.
#![allow(clippy::unwrap_used, clippy::float_cmp)]

mod common;

use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use cairn_control::io::ExportIo;
use cairn_control::{ExportSnapshot, Snapshot};
use cairn_nbd::proto::{CMD_FLUSH, CMD_READ, CMD_WRITE};
use cairn_store::stats::histogram::{Bucket, Latency};
use cairn_store::stats::{GroupStats, LayerStats, MetricSink};
use common::metrics::{exchange, get, serve};
use common::{cairn, terminate};
use serde_json::Value;

/// A sample's labels, in order: (name, value).
type Labels = Vec<(String, String)>;

/// One sample line.
#[derive(Debug)]
struct Sample {
    name: String,
    labels: Labels,
    value: f64,
}

/// The families' types and every sample of an exposition, after checking
/// every line; panics naming the line that breaks the format, or if it has
/// no histogram (a volume's has several).
fn parse(text: &str) -> (HashMap<String, String>, Vec<Sample>) {
    let (types, samples, histograms) = parse_any(text);
    assert!(histograms > 0, "no histogram series at all");
    (types, samples)
}

/// [`parse`], and how many histogram series it checked (a file export has
/// none).
fn parse_any(text: &str) -> (HashMap<String, String>, Vec<Sample>, usize) {
    assert!(text.ends_with('\n'), "the last line ends with a newline");
    let mut types: HashMap<String, String> = HashMap::new();
    let mut helps = HashSet::new();
    let mut samples = Vec::new();
    let mut finished: HashSet<String> = HashSet::new();
    let mut current: Option<String> = None;
    let mut series = HashSet::new();
    for (number, line) in text.lines().enumerate() {
        let at = format!("line {}: {line:?}", number + 1);
        assert!(!line.is_empty(), "{at}: a blank line");
        let family = if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            check_escapes(help, false, &at);
            assert!(helps.insert(name.to_owned()), "{at}: a second HELP");
            name.to_owned()
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').expect(&at);
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind),
                "{at}: type {kind}"
            );
            assert!(
                types.insert(name.to_owned(), kind.to_owned()).is_none(),
                "{at}: a second TYPE"
            );
            name.to_owned()
        } else {
            assert!(!line.starts_with('#'), "{at}: a comment we never write");
            let sample = sample(line, &at);
            let key = format!("{}{:?}", sample.name, sample.labels);
            assert!(series.insert(key), "{at}: the same series twice");
            let family = family_of(&sample.name, &types);
            let kind = types
                .get(&family)
                .unwrap_or_else(|| panic!("{at}: no TYPE before it"));
            if kind == "counter" {
                assert!(family.ends_with("_total"), "{at}: a counter without _total");
                assert!(sample.value >= 0.0, "{at}: a negative counter");
            }
            samples.push(sample);
            family
        };
        check_name(&family, &at);
        if current.as_ref() != Some(&family) {
            assert!(
                !finished.contains(&family),
                "{at}: family {family} appears again after other families"
            );
            if let Some(done) = current.replace(family) {
                finished.insert(done);
            }
        }
    }
    let histograms = check_histograms(&types, &samples);
    (types, samples, histograms)
}

/// A sample's family: a histogram's `_bucket`, `_sum` and `_count` lines
/// belong to the histogram.
fn family_of(name: &str, types: &HashMap<String, String>) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix)
            && types.get(base).is_some_and(|t| t == "histogram")
        {
            return base.to_owned();
        }
    }
    name.to_owned()
}

fn check_name(name: &str, at: &str) {
    let mut chars = name.chars();
    let first = chars.next().expect(at);
    assert!(
        first.is_ascii_alphabetic() || first == '_' || first == ':',
        "{at}: name {name}"
    );
    assert!(
        chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
        "{at}: name {name}"
    );
}

/// Only `\\`, `\n` (and in label values `\"`) may follow a backslash.
fn check_escapes(text: &str, quotes: bool, at: &str) {
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let next = chars.next();
            assert!(
                matches!(next, Some('\\' | 'n')) || (quotes && next == Some('"')),
                "{at}: escape \\{next:?}"
            );
        }
    }
}

/// `name{label="value",...} value`, parsed.
fn sample(line: &str, at: &str) -> Sample {
    let name_end = line.find(['{', ' ']).expect(at);
    let name = &line[..name_end];
    check_name(name, at);
    let mut rest = &line[name_end..];
    let mut labels = Vec::new();
    if let Some(inner) = rest.strip_prefix('{') {
        rest = inner;
        while !rest.starts_with('}') {
            let (label, after) = rest.split_once("=\"").expect(at);
            assert!(
                !label.is_empty()
                    && !label.starts_with(|c: char| c.is_ascii_digit())
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{at}: label name {label:?}"
            );
            let (value, after) = label_value(after, at);
            labels.push((label.to_owned(), value));
            rest = after.strip_prefix(',').unwrap_or(after);
        }
        rest = &rest[1..];
    }
    let mut fields = rest.strip_prefix(' ').expect(at).split(' ');
    let value = number(fields.next().expect(at), at);
    if let Some(timestamp) = fields.next() {
        timestamp.parse::<i64>().expect(at);
    }
    assert!(
        fields.next().is_none(),
        "{at}: more than value and timestamp"
    );
    Sample {
        name: name.to_owned(),
        labels,
        value,
    }
}

/// A quoted label value's text, unescaped, and what follows its quote.
fn label_value<'a>(text: &'a str, at: &str) -> (String, &'a str) {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (value, &text[i + 1..]),
            '\\' => match chars.next().map(|(_, c)| c) {
                Some('\\') => value.push('\\'),
                Some('"') => value.push('"'),
                Some('n') => value.push('\n'),
                other => panic!("{at}: escape \\{other:?} in a label value"),
            },
            '\n' => panic!("{at}: a raw newline in a label value"),
            c => value.push(c),
        }
    }
    panic!("{at}: an unterminated label value")
}

/// A value as Go's `ParseFloat` reads it.
fn number(text: &str, at: &str) -> f64 {
    match text {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        _ => text
            .parse()
            .unwrap_or_else(|_| panic!("{at}: value {text:?}")),
    }
}

/// Each histogram series: `le` rising, counts never falling, the last
/// `le` `+Inf` and equal to `_count`, a `_sum`; how many there are.
fn check_histograms(types: &HashMap<String, String>, samples: &[Sample]) -> usize {
    let mut checked = 0;
    for (family, _) in types.iter().filter(|(_, t)| *t == "histogram") {
        // Series by their labels without `le`.
        let mut buckets: HashMap<Labels, Vec<(f64, f64)>> = HashMap::new();
        let mut counts = HashMap::new();
        let mut sums = HashMap::new();
        for s in samples {
            let without_le: Vec<_> = s
                .labels
                .iter()
                .filter(|(k, _)| k != "le")
                .cloned()
                .collect();
            if s.name == format!("{family}_bucket") {
                let le = &s.labels.iter().find(|(k, _)| k == "le").expect("le").1;
                let le = number(le, &s.name);
                buckets.entry(without_le).or_default().push((le, s.value));
            } else if s.name == format!("{family}_count") {
                counts.insert(without_le, s.value);
            } else if s.name == format!("{family}_sum") {
                sums.insert(without_le, s.value);
            }
        }
        assert!(!buckets.is_empty(), "{family}: no buckets");
        for (labels, series) in &buckets {
            let at = format!("{family}{labels:?}");
            for pair in series.windows(2) {
                assert!(pair[0].0 < pair[1].0, "{at}: le not rising: {series:?}");
                assert!(pair[0].1 <= pair[1].1, "{at}: counts fall: {series:?}");
            }
            let (le, last) = *series.last().unwrap();
            assert!(le.is_infinite(), "{at}: the last bucket is not +Inf");
            assert_eq!(Some(&last), counts.get(labels), "{at}: +Inf vs _count");
            let sum = sums.get(labels).unwrap_or_else(|| panic!("{at}: no _sum"));
            assert!(sum.is_finite() && *sum >= 0.0, "{at}: _sum {sum}");
            checked += 1;
        }
    }
    checked
}

/// The value of the sample `name` with exactly `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && s.labels.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.iter().any(|(a, b)| a == k && b == v))
        })
        .unwrap_or_else(|| panic!("no {name}{labels:?}"))
        .value
}

/// `cairn stats --json` of the server in `dir`.
fn stats(dir: &std::path::Path) -> Value {
    let out = cairn()
        .current_dir(dir)
        .args(["stats", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_metrics_parse_line_by_line_and_say_what_the_control_socket_says() {
    let nv = common::nv_dir();
    let mut served = serve(&[], Some(&common::metrics::cached_log_spec(nv.path())));
    let mut client = common::connect(&served.socket);
    client.handshake();
    // 32 blocks written, read twice (misses, then hits in the DRAM cache),
    // flushed.
    for block in 0..32u64 {
        client.request(CMD_WRITE, block * 4096, 4096, &[block as u8; 4096]);
    }
    for _ in 0..2 {
        for block in 0..32u64 {
            let data = client.request(CMD_READ, block * 4096, 4096, &[]);
            assert_eq!(data, vec![block as u8; 4096]);
        }
    }
    client.request(CMD_FLUSH, 0, 0, &[]);
    drop(client);
    // Idle (the connection closed on the server too): both reads see the
    // same counts.
    let deadline = Instant::now() + Duration::from_secs(10);
    let snapshot = loop {
        let s = stats(served.dir.path());
        if s["exports"][0]["connections_open"] == 0 {
            break s;
        }
        assert!(Instant::now() < deadline, "the connection never closed");
        std::thread::sleep(Duration::from_millis(50));
    };
    let answer = get(served.address, "/metrics");
    assert_eq!(answer.status, 200);
    assert!(
        answer
            .head
            .contains("content-type: text/plain; version=0.0.4; charset=utf-8"),
        "{}",
        answer.head
    );
    let (types, samples) = parse(&answer.text());

    let export = &snapshot["exports"][0];
    let e = [("export", "cairn")];
    let op = |op| [("export", "cairn"), ("op", op)];
    assert_eq!(value(&samples, "cairn_requests_total", &op("read")), 64.0);
    assert_eq!(export["io"]["reads"], 64);
    assert_eq!(value(&samples, "cairn_requests_total", &op("write")), 32.0);
    assert_eq!(value(&samples, "cairn_requests_total", &op("flush")), 1.0);
    assert_eq!(
        value(&samples, "cairn_bytes_total", &op("read")),
        export["io"]["read_bytes"].as_f64().unwrap()
    );
    assert_eq!(
        value(&samples, "cairn_bytes_total", &op("write")),
        32.0 * 4096.0
    );
    assert_eq!(value(&samples, "cairn_connections_total", &e), 1.0);
    assert_eq!(
        value(
            &samples,
            "cairn_request_duration_seconds_count",
            &op("read")
        ),
        64.0
    );
    let sum_ns = export["latency"]["read"]["sum_ns"].as_f64().unwrap();
    let sum = value(&samples, "cairn_request_duration_seconds_sum", &op("read"));
    assert!((sum - sum_ns / 1e9).abs() < 1e-9, "{sum} vs {sum_ns} ns");

    // The layers: cache over log, each timed, their counters by kind.
    let layers = export["layers"].as_array().unwrap();
    assert_eq!(layers[0]["name"], "cache");
    assert_eq!(layers[1]["kind"], "log");
    let layer = |name: &'static str, kind: &'static str, op: &'static str| {
        [
            ("export", "cairn"),
            ("layer", name),
            ("kind", kind),
            ("op", op),
        ]
    };
    assert_eq!(
        value(
            &samples,
            "cairn_layer_duration_seconds_count",
            &layer("cache", "cache", "read")
        ),
        64.0
    );
    assert_eq!(layers[0]["latency"]["read"]["count"], 64);
    assert_eq!(
        value(
            &samples,
            "cairn_layer_duration_seconds_count",
            &layer("log", "log", "write")
        ),
        layers[1]["latency"]["write"]["count"].as_f64().unwrap()
    );
    let cache = [("export", "cairn"), ("layer", "cache")];
    let hits = value(&samples, "cairn_cache_hits_total", &cache);
    assert!(hits >= 32.0, "the second pass hit: {hits}");
    let metric = |layer: usize, name: &str| {
        layers[layer]["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .unwrap()["value"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(hits, metric(0, "hits"));
    let log = [("export", "cairn"), ("layer", "log")];
    let dirty = value(&samples, "cairn_dirty_bytes", &log);
    assert_eq!(dirty, value(&samples, "cairn_log_nv_dirty_bytes", &log));
    assert_eq!(dirty, metric(1, "nv_dirty_bytes"));
    assert!(dirty > 0.0, "the writes wait in the NV cache");
    assert_eq!(types["cairn_cache_group_cost"], "gauge");
    assert_eq!(types["cairn_log_cleaner_segment_writes_total"], "counter");
    assert_eq!(
        types["cairn_cache_group_miss_service_seconds_total"],
        "counter"
    );
    terminate(served.server.take());
}

#[test]
fn label_values_are_escaped_and_slow_requests_count_in_inf_only() {
    let awkward = "a \"quoted\" \\ back\nslash, {brace}=";
    let mut layer = LayerStats::new(awkward, "cache");
    let mut sink = MetricSink(&mut layer.metrics);
    sink.counter("hits", 7, "help with a \\ and a\nnewline");
    sink.real("hit_ratio", Some(f64::NAN), "not a number yet");
    let mut group = Vec::new();
    MetricSink(&mut group).real("cost", Some(f64::INFINITY), "no reads yet");
    layer.groups.push(GroupStats {
        name: "device0-\"random\"".into(),
        metrics: group,
    });
    // Reads of 0.9 µs, 20 s and over 137 s (the histogram's last bucket):
    // two of them only in `+Inf`.
    let mut io = ExportIo::default();
    io.latency.read = Latency {
        count: 4,
        sum_ns: 200_000_000_000,
        max_ns: 150_000_000_000,
        buckets: vec![
            Bucket {
                le_ns: 900,
                count: 2,
            },
            Bucket {
                le_ns: 20_000_000_000,
                count: 1,
            },
            Bucket {
                le_ns: u64::MAX,
                count: 1,
            },
        ],
        ..Latency::default()
    };
    let snapshot = Snapshot {
        pid: 1,
        uptime_seconds: 1.5,
        counting: true,
        exports: vec![ExportSnapshot {
            name: awkward.into(),
            size_bytes: 4096,
            read_only: false,
            io,
            layers: vec![layer],
        }],
        files: Vec::new(),
    };
    let text = cairn_control::prometheus::render(&snapshot);
    let (_, samples) = parse(&text);
    let labels = [("export", awkward), ("layer", awkward)];
    assert_eq!(value(&samples, "cairn_cache_hits_total", &labels), 7.0);
    assert!(value(&samples, "cairn_cache_hit_ratio", &labels).is_nan());
    let group = [
        ("export", awkward),
        ("layer", awkward),
        ("group", "device0-\"random\""),
    ];
    assert!(value(&samples, "cairn_cache_group_cost", &group).is_infinite());
    let read = |le| [("export", awkward), ("op", "read"), ("le", le)];
    let bucket = "cairn_request_duration_seconds_bucket";
    assert_eq!(value(&samples, bucket, &read("0.000001")), 2.0);
    assert_eq!(value(&samples, bucket, &read("10")), 2.0);
    assert_eq!(value(&samples, bucket, &read("+Inf")), 4.0);
    assert!(
        text.contains("# HELP cairn_cache_hits_total help with a \\\\ and a\\nnewline\n"),
        "{text}"
    );
}

#[test]
fn bad_requests_get_clear_answers_and_the_server_keeps_serving() {
    let mut served = serve(&["--memory", "16MiB"], None);
    let address = served.address;
    let answer = get(address, "/nope");
    assert_eq!(answer.status, 404);
    assert!(answer.text().contains("/metrics"), "{}", answer.text());
    let answer = exchange(
        address,
        b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello",
    );
    assert_eq!(answer.status, 405);
    assert!(answer.head.contains("allow: get, head"), "{}", answer.head);
    // Not HTTP: a TLS client hello, an HTTP/2 preface, a line of garbage.
    for garbage in [
        &b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03\r\n\r\n"[..],
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"hello\r\n\r\n",
    ] {
        let answer = exchange(address, garbage);
        assert_eq!(answer.status, 400, "{garbage:?}: {}", answer.text());
    }
    // A head over 8 KiB: refused before its end.
    let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
    for i in 0..400 {
        huge.extend_from_slice(format!("X-Filler-{i}: {}\r\n", "y".repeat(40)).as_bytes());
    }
    huge.extend_from_slice(b"\r\n");
    let answer = exchange(address, &huge);
    assert_eq!(answer.status, 400);
    assert!(
        answer.text().contains("over 8192 bytes"),
        "{}",
        answer.text()
    );
    // HEAD: the head only.
    let answer = exchange(address, b"HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(answer.status, 200);
    assert!(answer.body.is_empty() && answer.head.contains("content-length: "));
    // Eight clients that send half a request hold every slot: a ninth is
    // told to retry; when they leave, the listener serves again. (A slot
    // frees when its client's thread ends, a moment after the answer: an
    // idle client the listener refused is replaced.)
    let mut idle: Vec<TcpStream> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while idle.len() < 8 {
        assert!(Instant::now() < deadline, "never 8 clients at once");
        let mut stream = TcpStream::connect(address).unwrap();
        stream.write_all(b"GET /metrics HTTP/1.1\r\n").unwrap();
        idle.push(stream);
        std::thread::sleep(Duration::from_millis(100));
        idle.retain(|s| {
            s.set_nonblocking(true).unwrap();
            let mut byte = [0u8];
            let waiting = matches!(s.peek(&mut byte), Err(e) if e.kind() == ErrorKind::WouldBlock);
            s.set_nonblocking(false).unwrap();
            waiting
        });
    }
    let answer = get(address, "/metrics");
    assert_eq!(answer.status, 503, "{}", answer.text());
    drop(idle);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = get(address, "/metrics");
        if answer.status == 200 {
            assert!(answer.text().contains("cairn_requests_total"));
            break;
        }
        assert!(Instant::now() < deadline, "the slots never came back");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The page and its parts, from the binary, loading nothing elsewhere.
    let page = get(address, "/");
    assert_eq!(page.status, 200);
    assert!(
        page.head
            .contains("content-security-policy: default-src 'none'")
    );
    let html = page.text();
    assert!(
        html.contains("/dashboard.js") && !html.contains("http"),
        "{html}"
    );
    assert_eq!(get(address, "/dashboard.js").status, 200);
    assert_eq!(get(address, "/dashboard.css").status, 200);
    let json: Value = serde_json::from_slice(&get(address, "/stats.json").body).unwrap();
    assert_eq!(json["exports"][0]["name"], "cairn");
    // NBD still serves.
    let mut client = common::connect(&served.socket);
    assert_eq!(client.handshake(), 16 << 20);
    drop(client);
    terminate(served.server.take());
}

#[test]
fn an_address_other_hosts_reach_is_refused_unless_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = cairn()
            .current_dir(dir.path())
            .args(["serve", "--memory", "1MiB", "--no-control"])
            .args(args)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(if args.contains(&"--metrics") { 1 } else { 2 })
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let stderr = run(&["--metrics", "tcp:0.0.0.0:0"]);
    assert!(
        stderr.contains("tcp:0.0.0.0:0") || stderr.contains("0.0.0.0:0"),
        "{stderr}"
    );
    assert!(
        stderr.contains("is not a loopback address") && stderr.contains("--metrics-public"),
        "{stderr}"
    );
    let stderr = run(&["--metrics", "unix:/tmp/metrics.sock"]);
    assert!(stderr.contains("TCP only"), "{stderr}");
    let stderr = run(&["--metrics", "tcp:127.0.0.1:notaport"]);
    assert!(stderr.contains("tcp:HOST:PORT"), "{stderr}");
    let stderr = run(&["--metrics-public"]);
    assert!(stderr.contains("--metrics"), "{stderr}");
}

/// The lines of `cairn serve --help` that are its metrics example.
fn metrics_example() -> Vec<String> {
    let help = cairn().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let lines: Vec<&str> = help.lines().map(str::trim).collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("cairn serve") && l.contains("--metrics"))
        .expect("an example with --metrics");
    vec![lines[at].to_owned(), lines[at + 1].to_owned()]
}

#[test]
fn the_help_example_runs_as_printed() {
    let [serve_line, curl_line]: [String; 2] = metrics_example().try_into().unwrap();
    assert!(curl_line.starts_with("curl "), "{curl_line}");
    let Some(curl) = common::metrics::required_tool("curl", "curl") else {
        return;
    };
    let port = serve_line.rsplit(':').next().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let Some(mut server) = common::examples::serve_example(&serve_line, dir.path(), &[port]) else {
        return;
    };
    let out = Command::new(curl)
        .args(curl_line.split_whitespace().skip(1))
        .output()
        .unwrap();
    assert!(out.status.success(), "{curl_line}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("cairn_requests_total{export=\"cairn\",op=\"read\"} 0"),
        "{text}"
    );
    terminate(server.take());
}

/// `GET path` from the file gateway at `address` on a connection of its
/// own.
fn gateway_get(address: std::net::SocketAddr, method: &str, path: &str) -> u16 {
    let request = format!("{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    exchange(address, request.as_bytes()).status
}

/// The file export's metrics once its request counters show `requests`
/// (a request is counted after its answer is sent: the client may read
/// the answer a moment earlier).
fn files_metrics(address: std::net::SocketAddr, requests: f64) -> Vec<Sample> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = get(address, "/metrics");
        assert_eq!(answer.status, 200);
        let (types, samples, _) = parse_any(&answer.text());
        assert_eq!(types["cairn_files_requests_total"], "counter");
        assert_eq!(types["cairn_files_resident_bytes"], "gauge");
        let answered: f64 = samples
            .iter()
            .filter(|s| s.name == "cairn_files_requests_total")
            .map(|s| s.value)
            .sum();
        if answered == requests {
            return samples;
        }
        assert!(
            Instant::now() < deadline,
            "{answered} requests counted, not {requests}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_file_exports_metrics_parse_and_move_with_its_gets() {
    // 300 000 bytes: a whole 256 KiB block and a 37 856-byte tail.
    let movie: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let served = common::metrics::serve_files(
        &[
            "--block-size",
            "256KiB",
            "--cache-size",
            "4MiB",
            "--policy",
            "dual",
        ],
        |dir| std::fs::write(dir.join("movie.mp4"), &movie).unwrap(),
    );
    let e = [("export", "media")];
    let samples = files_metrics(served.address, 0.0);
    assert_eq!(value(&samples, "cairn_files_hits_total", &e), 0.0);
    assert_eq!(
        value(&samples, "cairn_files_capacity_bytes", &e),
        4.0 * 1024.0 * 1024.0
    );
    assert_eq!(
        value(&samples, "cairn_files_block_size_bytes", &e),
        262_144.0
    );
    let policy = [("export", "media"), ("policy", "dual")];
    assert_eq!(value(&samples, "cairn_files_policy_info", &policy), 1.0);

    // The first GET misses both blocks, the second hits them.
    assert_eq!(gateway_get(served.gateway, "GET", "/media/movie.mp4"), 200);
    let samples = files_metrics(served.address, 1.0);
    assert_eq!(value(&samples, "cairn_files_misses_total", &e), 2.0);
    assert_eq!(value(&samples, "cairn_files_hits_total", &e), 0.0);
    assert_eq!(
        value(&samples, "cairn_files_backend_read_bytes_total", &e),
        300_000.0
    );
    assert_eq!(value(&samples, "cairn_files_cache_bytes_total", &e), 0.0);
    assert_eq!(value(&samples, "cairn_files_resident_blocks", &e), 2.0);
    assert_eq!(value(&samples, "cairn_files_resident_bytes", &e), 300_000.0);
    assert_eq!(gateway_get(served.gateway, "GET", "/media/movie.mp4"), 200);
    let samples = files_metrics(served.address, 2.0);
    assert_eq!(value(&samples, "cairn_files_misses_total", &e), 2.0);
    assert_eq!(value(&samples, "cairn_files_hits_total", &e), 2.0);
    assert_eq!(
        value(&samples, "cairn_files_cache_bytes_total", &e),
        300_000.0
    );
    assert_eq!(
        value(&samples, "cairn_files_backend_read_bytes_total", &e),
        300_000.0
    );
    // dual: one active file; its preface at least the minimum.
    assert_eq!(value(&samples, "cairn_files_dual_active_files", &e), 1.0);
    assert!(value(&samples, "cairn_files_dual_preface_blocks", &e) >= 1.0);

    // A missing key, a HEAD, a PUT: by method and status class.
    assert_eq!(gateway_get(served.gateway, "GET", "/media/none"), 404);
    assert_eq!(gateway_get(served.gateway, "HEAD", "/media/movie.mp4"), 200);
    assert_eq!(gateway_get(served.gateway, "PUT", "/media/movie.mp4"), 405);
    let samples = files_metrics(served.address, 5.0);
    let requests = |method, status| {
        let labels = [("export", "media"), ("method", method), ("status", status)];
        value(&samples, "cairn_files_requests_total", &labels)
    };
    assert_eq!(requests("get", "2xx"), 2.0);
    assert_eq!(requests("get", "4xx"), 1.0);
    assert_eq!(requests("head", "2xx"), 1.0);
    assert_eq!(requests("other", "4xx"), 1.0);
    assert_eq!(requests("get", "5xx"), 0.0);
    let errors = |kind| {
        let labels = [("export", "media"), ("kind", kind)];
        value(&samples, "cairn_files_backend_errors_total", &labels)
    };
    assert_eq!(
        (errors("not_found"), errors("timeout"), errors("other")),
        (1.0, 0.0, 0.0)
    );
    assert_eq!(value(&samples, "cairn_files_connections_total", &e), 5.0);
    assert_eq!(
        value(&samples, "cairn_files_connections_refused_total", &e),
        0.0
    );
    assert_eq!(
        value(&samples, "cairn_files_hits_total", &e),
        2.0,
        "a HEAD reads no block"
    );

    // The control socket says the same.
    let out = cairn()
        .args(["stats", "--json", "--socket"])
        .arg(&served.control)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let export = &json["files"][0];
    assert_eq!(export["name"], "media");
    assert_eq!(export["backend_errors"]["not_found"], 1);
    let hits = export["cache"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == "hits")
        .unwrap();
    assert_eq!(hits["value"], 2);
    let table = cairn()
        .args(["stats", "--socket"])
        .arg(&served.control)
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.contains("file export \"media\": policy dual"),
        "{table}"
    );
    assert!(
        table.contains("2 GET 2xx, 1 GET 4xx, 1 HEAD 2xx, 1 OTHER 4xx"),
        "{table}"
    );
    let mut served = served;
    terminate(served.server.take());
}
