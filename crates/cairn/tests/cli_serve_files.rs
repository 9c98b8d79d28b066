//! `cairn serve --files DIR` serves a directory over HTTP as printed: the
//! address it prints answers GETs and ranges with the files' bytes, SIGTERM
//! stops it with exit 0 and a summary of what the cache did, bad flags
//! are clear errors before anything listens, and the `--help` example with
//! `--metrics` runs as printed.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::Duration;

use cairn_objects::ObjectStore as _;
use common::{Server, cairn, terminate};

fn get(address: &str, path: &str, extra: &str) -> Vec<u8> {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    answer
}

fn split(answer: &[u8]) -> (String, &[u8]) {
    let at = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    (
        String::from_utf8_lossy(&answer[..at]).into_owned(),
        &answer[at + 4..],
    )
}

#[test]
fn serve_files_answers_at_the_printed_address_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let videos = dir.path().join("videos");
    std::fs::create_dir_all(&videos).unwrap();
    let movie: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(videos.join("movie.mp4"), &movie).unwrap();
    let (server, address, stderr) = spawn_files(
        videos.as_os_str(),
        &[
            "--export",
            "media",
            "--block-size",
            "256KiB",
            "--cache-size",
            "4MiB",
            "--policy",
            "lru",
        ],
    );

    let whole = get(&address, "/media/movie.mp4", "");
    let (head, body) = split(&whole);
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(body == movie, "the whole body differs");
    let answer = get(&address, "/media/movie.mp4", "Range: bytes=0-1023\r\n");
    let (head, body) = split(&answer);
    assert!(head.starts_with("HTTP/1.1 206"), "{head}");
    assert!(
        head.contains("Content-Range: bytes 0-1023/3000000"),
        "{head}"
    );
    assert_eq!(body, &movie[..1024]);
    let missing = get(&address, "/media/missing", "");
    let (head, _) = split(&missing);
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");

    let mut server = server;
    terminate(server.take());
    let mut log = String::new();
    BufReader::new(stderr).read_to_string(&mut log).unwrap();
    assert!(log.contains("policy lru"), "{log}");
    assert!(log.contains("as bucket \"media\""), "{log}");
    // 12 blocks of 256 KiB read once; the range was a hit.
    assert!(log.contains("blocks: 1 hits, 12 misses"), "{log}");
}

#[test]
fn serve_files_reads_objects_striped_over_throttled_directories_through_dual() {
    let dir = tempfile::tempdir().unwrap();
    let movie: Vec<u8> = (0..2_700_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let servers: Vec<_> = (0..4).map(|i| dir.path().join(format!("s{i}"))).collect();
    let unit = 256 << 10;
    for server in &servers {
        std::fs::create_dir_all(server).unwrap();
    }
    for (stripe, chunk) in movie.chunks(unit).enumerate() {
        let path = servers[stripe % 4].join("movie.mp4");
        let mut part = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        part.write_all(chunk).unwrap();
    }
    let list: Vec<String> = servers.iter().map(|s| s.display().to_string()).collect();
    let (server, address, stderr) = spawn_files(
        list.join(",").as_ref(),
        &[
            "--export",
            "media",
            "--block-size",
            "256KiB",
            "--cache-size",
            "4MiB",
            "--policy",
            "dual:alpha=20",
            "--throttle",
            "1ms,200MB/s",
        ],
    );
    let whole = get(&address, "/media/movie.mp4", "");
    let (head, body) = split(&whole);
    assert!(head.contains("Content-Length: 2700000"), "{head}");
    assert!(body == movie, "the striped body differs");
    let answer = get(
        &address,
        "/media/movie.mp4",
        "Range: bytes=500000-1500000\r\n",
    );
    let (head, body) = split(&answer);
    assert!(head.starts_with("HTTP/1.1 206"), "{head}");
    assert_eq!(body, &movie[500_000..=1_500_000]);
    let mut server = server;
    terminate(server.take());
    let mut log = String::new();
    BufReader::new(stderr).read_to_string(&mut log).unwrap();
    assert!(log.contains("policy dual"), "{log}");
    // 11 blocks read once; the range's 5 blocks were hits.
    assert!(log.contains("blocks: 5 hits, 11 misses"), "{log}");
}

#[test]
fn serve_files_refuses_bad_flags_before_listening() {
    let dir = tempfile::tempdir().unwrap();
    for (args, expected) in [
        (
            vec!["--block-size", "3MiB"],
            "block size 3145728 bytes is not a power of two",
        ),
        (vec!["--block-size", "128KiB"], "between 262144 and 4194304"),
        (
            vec!["--policy", "opt"],
            "needs knowledge a server does not have",
        ),
        (vec!["--policy", "nosuch"], "nosuch"),
        (vec!["--export", "Bad_Name"], "bucket name \"Bad_Name\""),
        (vec!["--listen", "unix:/tmp/x.sock"], "TCP only"),
        (vec!["--connections-max", "0"], "connections_max 0"),
        (vec!["--throttle", "fast"], "OP,BANDWIDTH"),
        (vec!["--throttle", "100us,0MB/s"], "the bandwidth > 0"),
        (
            vec!["--throttle", "none", "--throttle", "2ms,1MB/s"],
            "--throttle given 2 times for 1 --files",
        ),
        (
            vec!["--files", "http://127.0.0.1:9/b", "--throttle", "2ms,1MB/s"],
            "not an origin URL",
        ),
        (
            vec!["--revalidate", "soon"],
            "--revalidate `soon`: unknown unit",
        ),
    ] {
        let output = cairn()
            .args(["serve", "--files"])
            .arg(dir.path())
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?} started");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    let output = cairn()
        .args(["serve", "--files"])
        .arg(dir.path().join("missing"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("missing"));
    let output = cairn()
        .args(["serve", "--files", ".", "--memory", "1GiB"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("cannot be used with"));
    // An https origin or store whose CAs cannot be read: said before listening.
    let not_pem = dir.path().join("not-a-ca.pem");
    std::fs::write(&not_pem, "not a certificate").unwrap();
    for (files, variable, file, expected) in [
        (
            "https://127.0.0.1:1/b",
            "SSL_CERT_FILE",
            dir.path().join("none.pem"),
            "none.pem: ",
        ),
        (
            "https://127.0.0.1:1/b",
            "SSL_CERT_FILE",
            not_pem.clone(),
            "holds no certificate",
        ),
        (
            "s3://b",
            "AWS_CA_BUNDLE",
            not_pem.clone(),
            "holds no certificate",
        ),
    ] {
        let output = cairn()
            .env("SSL_CERT_FILE", "/nonexistent.pem")
            .env(variable, &file)
            .env("AWS_ENDPOINT_URL", "https://127.0.0.1:1")
            .env("AWS_ACCESS_KEY_ID", "k")
            .env("AWS_SECRET_ACCESS_KEY", "s")
            .args(["serve", "--files", files, "--listen", "tcp:127.0.0.1:0"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{files} started");
        assert!(
            stderr.contains(expected) && stderr.contains("CA file"),
            "{files}: {stderr}"
        );
    }
}

/// Starts `cairn serve --files FILES --listen tcp:127.0.0.1:0 EXTRA…`;
/// returns the server, its address and its stderr.
fn spawn_files(
    files: &std::ffi::OsStr,
    extra: &[&str],
) -> (Server, String, std::process::ChildStderr) {
    spawn_files_env(files, extra, &[])
}

/// [`spawn_files`] with these environment variables set.
fn spawn_files_env(
    files: &std::ffi::OsStr,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Server, String, std::process::ChildStderr) {
    let mut child = cairn()
        .envs(env.iter().copied())
        .args(["serve", "--files"])
        .arg(files)
        .args(["--listen", "tcp:127.0.0.1:0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let stderr = child.stderr.take().unwrap();
    let server = Server(Some(child));
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let address = line
        .split(" at http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    assert!(line.contains(", path-style)"), "{line}");
    (server, address, stderr)
}

#[test]
fn serve_files_over_an_http_origin_serves_the_origins_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let movie: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_246_822_519) >> 23) as u8)
        .collect();
    std::fs::create_dir_all(dir.path().join("v")).unwrap();
    std::fs::write(dir.path().join("v/movie.mp4"), &movie).unwrap();
    let (_origin, origin, _) = spawn_files(dir.path().as_os_str(), &["--export", "origin"]);
    let url = format!("http://{origin}/origin");
    let (front, address, stderr) = spawn_files(
        url.as_ref(),
        &["--export", "media", "--block-size", "256KiB"],
    );
    let whole = get(&address, "/media/v/movie.mp4", "");
    let (head, body) = split(&whole);
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert!(body == movie, "the whole body differs");
    let answer = get(&address, "/media/v/movie.mp4", "Range: bytes=-1000\r\n");
    let (head, body) = split(&answer);
    assert!(head.starts_with("HTTP/1.1 206"), "{head}");
    assert_eq!(body, &movie[movie.len() - 1000..]);
    let (head, _) = split(&get(&address, "/media/v/missing", ""));
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    let listing = get(&address, "/media?list-type=2&prefix=v/", "");
    let (head, body) = split(&listing);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let body = String::from_utf8_lossy(body);
    assert!(
        body.contains("<Key>v/movie.mp4</Key>") && body.contains("<Size>3000000</Size>"),
        "{body}"
    );
    let mut front = front;
    terminate(front.take());
    let mut log = String::new();
    BufReader::new(stderr).read_to_string(&mut log).unwrap();
    // 12 blocks of 256 KiB from the origin once; the suffix range was a hit.
    assert!(log.contains("blocks: 1 hits, 12 misses"), "{log}");

    let output = cairn()
        .args(["serve", "--files", "ftp://127.0.0.1:1/b"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success());
    assert!(
        stderr.contains("an origin URL is http://HOST:PORT/BUCKET or https://"),
        "{stderr}"
    );
}

#[test]
fn serve_files_over_an_s3_bucket_signs_with_the_aws_variables() {
    // What is wrong is said before anything is sent.
    for (env, expected) in [
        (vec![], "set AWS_ENDPOINT_URL"),
        (
            vec![("AWS_ENDPOINT_URL", "http://127.0.0.1:1")],
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
        ),
    ] {
        let output = cairn()
            .env_remove("AWS_ENDPOINT_URL")
            .env_remove("AWS_ENDPOINT_URL_S3")
            .env_remove("AWS_ACCESS_KEY_ID")
            .env_remove("AWS_SECRET_ACCESS_KEY")
            .envs(env.iter().copied())
            .args(["serve", "--files", "s3://bucket"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{env:?} started");
        assert!(stderr.contains(expected), "{env:?}: {stderr}");
    }
    let output = cairn()
        .args(["serve", "--files", "s3://bucket/videos"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&output.stderr).contains("name one bucket"));

    let Some(config) = cairn_objects::testing::s3_config(
        "serve_files_over_an_s3_bucket_signs_with_the_aws_variables",
    ) else {
        return;
    };
    let store = cairn_objects::S3Store::new(&config).unwrap();
    let prefix = format!("cli-files-s3-{}/", std::process::id());
    let movie: Vec<u8> = (0..1_500_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 21) as u8)
        .collect();
    let key = format!("{prefix}movie.mp4");
    store.put(&key, &movie).unwrap();
    let url = format!("s3://{}", config.bucket);
    let (server, address, stderr) = spawn_files_env(
        url.as_ref(),
        &["--export", "media", "--block-size", "256KiB"],
        &[
            ("AWS_ENDPOINT_URL", config.endpoint.as_str()),
            ("AWS_ACCESS_KEY_ID", config.access_key.as_str()),
            ("AWS_SECRET_ACCESS_KEY", config.secret_key.as_str()),
            ("AWS_REGION", config.region.as_str()),
        ],
    );
    let whole = get(&address, &format!("/media/{key}"), "");
    let (head, body) = split(&whole);
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    let whole_matches = body == movie;
    let range = get(
        &address,
        &format!("/media/{key}"),
        "Range: bytes=300000-700000\r\n",
    );
    let (head, body) = split(&range);
    assert!(head.starts_with("HTTP/1.1 206"), "{head}");
    let range_matches = body == &movie[300_000..=700_000];
    let listing = get(&address, &format!("/media?list-type=2&prefix={prefix}"), "");
    let listing = String::from_utf8_lossy(split(&listing).1).into_owned();
    let mut server = server;
    terminate(server.take());
    let _ = store.delete(&key);
    assert!(whole_matches, "the whole body differs");
    assert!(range_matches, "the range differs");
    assert!(
        listing.contains(&format!("<Key>{key}</Key>")) && listing.contains("<Size>1500000</Size>"),
        "{listing}"
    );
    let mut log = String::new();
    BufReader::new(stderr).read_to_string(&mut log).unwrap();
    // 6 blocks of 256 KiB read once; the range's 2 blocks were hits.
    assert!(log.contains("blocks: 2 hits, 6 misses"), "{log}");
}

#[test]
fn the_files_metrics_help_example_runs_as_printed() {
    let examples = common::examples::examples(&["serve", "--help"]);
    let at = examples
        .iter()
        .position(|l| l.starts_with("cairn serve --files") && l.contains("--metrics"))
        .expect("an example of --files with --metrics");
    let (serve_line, curl_line) = (&examples[at], &examples[at + 1]);
    assert!(curl_line.starts_with("curl "), "{curl_line}");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("videos")).unwrap();
    std::fs::write(dir.path().join("videos/movie.mp4"), [7u8; 5000]).unwrap();
    // The gateway's default port and the example's metrics port.
    let port = serve_line.rsplit(':').next().unwrap();
    let Some(mut server) = common::examples::serve_example(serve_line, dir.path(), &["8080", port])
    else {
        return;
    };
    let answer = get("127.0.0.1:8080", "/media/movie.mp4", "");
    let (head, body) = split(&answer);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body.len(), 5000);
    let out = common::examples::bash(curl_line, dir.path());
    let text = common::examples::text(&out.stdout);
    assert!(out.status.success(), "{curl_line}: {text}");
    assert!(
        text.contains("\ncairn_files_hits_total{export=\"media\"} 0\n"),
        "one GET, one miss, no hit: {text}"
    );
    terminate(server.take());
}

#[test]
fn the_union_help_example_runs_as_printed_and_learns_the_slow_backends_cost() {
    let (serve_line, curl_line) = common::examples::continued_example(&["serve", "--help"], |l| {
        l.starts_with("cairn serve --files") && l.matches("--files").count() > 1
    });
    let (serve_line, curl_line) = (&serve_line, curl_line.as_str());
    assert!(curl_line.starts_with("curl "), "{curl_line}");
    let metrics_port = serve_line.rsplit(':').next().unwrap();
    for port in ["8081", metrics_port] {
        if std::net::TcpListener::bind(format!("127.0.0.1:{port}")).is_err() {
            eprintln!("SKIPPED: port {port} of the example is in use here");
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    for sub in ["local", "remote"] {
        std::fs::create_dir(dir.path().join(sub)).unwrap();
    }
    std::fs::write(dir.path().join("local/both.bin"), [1u8; 5000]).unwrap();
    std::fs::write(dir.path().join("remote/both.bin"), [2u8; 7000]).unwrap();
    std::fs::write(dir.path().join("remote/far.bin"), vec![3u8; 300_000]).unwrap();
    std::fs::write(dir.path().join("local/near.bin"), vec![4u8; 300_000]).unwrap();
    let args: Vec<&str> = serve_line.split_whitespace().skip(1).collect();
    let child = cairn()
        .current_dir(dir.path())
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Server(Some(child));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while TcpStream::connect("127.0.0.1:8081").is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "{serve_line}: never listened"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let gateway = "127.0.0.1:8081";
    // The first --files shadows the second.
    let answer = get(gateway, "/media/both.bin", "");
    let (head, body) = split(&answer);
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(body, [1u8; 5000]);
    for (key, byte) in [("far.bin", 3u8), ("near.bin", 4u8)] {
        let answer = get(gateway, &format!("/media/{key}"), "");
        let (head, body) = split(&answer);
        assert!(head.starts_with("HTTP/1.1 200"), "{key}: {head}");
        assert!(
            body.len() == 300_000 && body.iter().all(|&b| b == byte),
            "{key}"
        );
    }
    let (head, _) = split(&get(gateway, "/media/nowhere.bin", ""));
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    let listing = get(gateway, "/media?list-type=2", "");
    let listing = String::from_utf8_lossy(split(&listing).1).into_owned();
    for key in ["both.bin", "far.bin", "near.bin"] {
        assert_eq!(
            listing.matches(&format!("<Key>{key}</Key>")).count(),
            1,
            "{listing}"
        );
    }
    assert!(
        listing.contains("<Size>5000</Size>"),
        "local's both.bin: {listing}"
    );
    let out = common::examples::bash(curl_line, dir.path());
    let text = common::examples::text(&out.stdout);
    assert!(out.status.success(), "{curl_line}: {text}");
    terminate(server.take());
    let cost = |backend: &str| -> f64 {
        let line = format!("cairn_files_union_cost{{export=\"media\",member=\"{backend}\"}} ");
        text.lines()
            .find_map(|l| l.strip_prefix(line.as_str()))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {line}in {text}"))
    };
    let (local, remote) = (cost("0"), cost("1"));
    eprintln!("learned costs: local {local}, remote {remote}");
    // ./remote: 20 ms a read at 10 MiB/s, ./local a page-cached file.
    assert!(
        (local - 1.0).abs() < 1e-9 && remote > 5.0,
        "local {local}, remote {remote}: {text}"
    );
}
