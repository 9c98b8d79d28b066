//! aws-cli and rclone, the two command-line S3 clients users reach for, read
//! through the gateway anonymously with path-style requests: they list
//! exactly the root's objects (not the `escape` symlink to a file outside
//! it), copy every one byte for byte, and read a range.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use cairn_files::DirBackend;
use common::{BUCKET, objects, required_tool, start};

/// The keys `common::objects` serves.
const KEYS: [&str; 5] = ["big.bin", "dir/a b.bin", "dir/é.txt", "empty", "small.txt"];

/// Runs `command`, failing the test with its output unless it succeeds.
fn run(command: &mut Command) -> Output {
    let output = command.output().expect("the client runs");
    assert!(
        output.status.success(),
        "{command:?}: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// Every file below `dir`, relative, sorted.
fn files_below(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let relative = path.strip_prefix(dir).expect("below");
                found.push(relative.to_string_lossy().into_owned());
            }
        }
    }
    found.sort();
    found
}

/// `copied` holds the root's objects, byte for byte, and nothing else.
fn same_objects(root: &Path, copied: &Path) {
    assert_eq!(
        files_below(copied),
        KEYS,
        "copied into {}",
        copied.display()
    );
    for key in KEYS {
        assert_eq!(
            std::fs::read(copied.join(key)).expect("copied"),
            std::fs::read(root.join(key)).expect("original"),
            "{key}"
        );
    }
}

#[test]
fn aws_cli_lists_copies_and_reads_a_range() {
    let Some(aws) = required_tool("aws", "python3 -m pip install awscli") else {
        return;
    };
    let (dir, root) = objects();
    let server = start(DirBackend::open(&root).expect("open"), |_| {});
    let endpoint = format!("http://{}", server.addr);
    let aws = |args: &[&str]| {
        let mut command = Command::new(&aws);
        command
            .args([
                "--endpoint-url",
                &endpoint,
                "--no-sign-request",
                "--region",
                "us-east-1",
            ])
            .args(args)
            // No profile, no keys, no CA bundle of the machine's: only the
            // flags above.
            .env("AWS_CONFIG_FILE", dir.path().join("none"))
            .env("AWS_SHARED_CREDENTIALS_FILE", dir.path().join("none"))
            .env_remove("AWS_CA_BUNDLE")
            .env_remove("AWS_PROFILE");
        run(&mut command)
    };
    let listing = aws(&["s3", "ls", "--recursive", &format!("s3://{BUCKET}/")]);
    // `DATE TIME SIZE KEY`, the key possibly with spaces.
    let mut keys: Vec<String> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .map(|line| {
            let mut rest = line.trim_start();
            for _ in 0..3 {
                rest = rest
                    .split_once(char::is_whitespace)
                    .expect("date, time, size, key")
                    .1
                    .trim_start();
            }
            rest.to_owned()
        })
        .collect();
    keys.sort();
    assert_eq!(keys, KEYS, "{}", String::from_utf8_lossy(&listing.stdout));
    let copied: PathBuf = dir.path().join("aws");
    aws(&[
        "s3",
        "cp",
        "--recursive",
        &format!("s3://{BUCKET}/"),
        &copied.to_string_lossy(),
    ]);
    same_objects(&root, &copied);
    let part = dir.path().join("part.bin");
    aws(&[
        "s3api",
        "get-object",
        "--bucket",
        BUCKET,
        "--key",
        "big.bin",
        "--range",
        "bytes=1000000-1999999",
        &part.to_string_lossy(),
    ]);
    let big = std::fs::read(root.join("big.bin")).expect("big.bin");
    assert_eq!(
        std::fs::read(&part).expect("part"),
        &big[1_000_000..2_000_000]
    );
}

#[test]
fn rclone_lists_copies_and_reads_a_range() {
    let Some(rclone) = required_tool("rclone", "apt-get install rclone") else {
        return;
    };
    let (dir, root) = objects();
    let server = start(DirBackend::open(&root).expect("open"), |_| {});
    // A remote `gw` from the environment alone: S3, anonymous, path-style.
    let rclone = |args: &[&str]| {
        let mut command = Command::new(&rclone);
        command
            .args(args)
            .env("RCLONE_CONFIG", dir.path().join("none.conf"))
            .env("RCLONE_CONFIG_GW_TYPE", "s3")
            .env("RCLONE_CONFIG_GW_PROVIDER", "Other")
            .env(
                "RCLONE_CONFIG_GW_ENDPOINT",
                format!("http://{}", server.addr),
            )
            .env("RCLONE_CONFIG_GW_ENV_AUTH", "false")
            .env("RCLONE_CONFIG_GW_FORCE_PATH_STYLE", "true")
            .env_remove("AWS_CA_BUNDLE");
        run(&mut command)
    };
    let listing = rclone(&["lsf", "-R", "--files-only", &format!("gw:{BUCKET}")]);
    let mut listed: Vec<String> = String::from_utf8_lossy(&listing.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    listed.sort();
    assert_eq!(listed, KEYS);
    let copied = dir.path().join("rclone");
    rclone(&["copy", &format!("gw:{BUCKET}"), &copied.to_string_lossy()]);
    same_objects(&root, &copied);
    let range = rclone(&[
        "cat",
        "--offset",
        "1000000",
        "--count",
        "1000000",
        &format!("gw:{BUCKET}/big.bin"),
    ]);
    let big = std::fs::read(root.join("big.bin")).expect("big.bin");
    assert_eq!(range.stdout, &big[1_000_000..2_000_000]);
}
