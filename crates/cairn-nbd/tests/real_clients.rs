//! Real NBD clients against an in-process server: qemu-io, qemu-img, nbdinfo,
//! nbdcopy and fio's nbd engine. `test.sh` installs them (qemu-utils,
//! libnbd-bin, fio); a test skips, saying so, only when its tool is missing.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{TestServer, pattern};

/// The tool's path, or `None` after printing why the test skips.
fn tool(name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    });
    if found.is_none() {
        eprintln!("SKIPPED: {name} is not installed (test.sh installs it)");
    }
    found
}

fn run(program: &Path, args: &[&str]) -> Output {
    let output = Command::new(program).args(args).output().unwrap();
    assert!(
        output.status.success(),
        "{} {args:?} failed: {}\nstdout: {}\nstderr: {}",
        program.display(),
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn qemu_io_writes_and_verifies_patterns() {
    let Some(qemu_io) = tool("qemu-io") else {
        return;
    };
    let (server, device) = TestServer::memory(16 << 20);
    let uri = server.uri();
    let output = run(
        &qemu_io,
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0xab 0 1M",
            "-c",
            "write -P 0xcd 1M 3M",
            "-c",
            "write -z 2M 64k",
            "-c",
            "write -z -u 4M 1M",
            "-c",
            "discard 6M 1M",
            "-c",
            "write -f -P 0x11 7M 4k",
            "-c",
            "flush",
            "-c",
            "read -P 0xab 0 1M",
            "-c",
            "read -P 0xcd 1M 1M",
            "-c",
            "read -P 0 2M 64k",
            "-c",
            "read -P 0xcd 2176k 1856k",
            "-c",
            "read -P 0 4M 1M",
            "-c",
            "read -P 0x11 7M 4k",
            "-c",
            "aio_write -P 0x22 8M 1M",
            "-c",
            "aio_write -P 0x33 9M 1M",
            "-c",
            "aio_flush",
            "-c",
            "read -P 0x22 8M 1M",
            "-c",
            "read -P 0x33 9M 1M",
            &uri,
        ],
    );
    let text = stdout(&output);
    assert!(!text.contains("Pattern verification failed"), "{text}");
    let mut byte = [0u8];
    cairn_store::Device::read_at(device.as_ref(), &mut byte, 9 << 20).unwrap();
    assert_eq!(byte, [0x33]);
}

#[test]
fn qemu_img_converts_in_and_out_and_compares_identical() {
    let Some(qemu_img) = tool("qemu-img") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source.img");
    let back = dir.path().join("back.img");
    let size = 8usize << 20;
    let mut data = pattern(7, size);
    data[1 << 20..2 << 20].fill(0); // a zero run qemu-img may write as zeroes
    std::fs::write(&source, &data).unwrap();
    let (server, _) = TestServer::memory(size as u64);
    let uri = server.uri();
    let source = source.to_str().unwrap();
    run(
        &qemu_img,
        &["convert", "-n", "-f", "raw", "-O", "raw", source, &uri],
    );
    run(
        &qemu_img,
        &["compare", "-f", "raw", "-F", "raw", source, &uri],
    );
    run(
        &qemu_img,
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &uri,
            back.to_str().unwrap(),
        ],
    );
    assert_eq!(std::fs::read(&back).unwrap(), data);
    let info = stdout(&run(
        &qemu_img,
        &["info", "--output=json", "-f", "raw", &uri],
    ));
    assert!(
        info.contains(&format!("\"virtual-size\": {size}")),
        "{info}"
    );
}

#[test]
fn nbdinfo_lists_maps_and_sees_multi_conn() {
    let Some(nbdinfo) = tool("nbdinfo") else {
        return;
    };
    let (server, _) = TestServer::memory(32 << 20);
    let uri = server.uri();
    let json = stdout(&run(&nbdinfo, &["--json", &uri]));
    for expected in [
        "\"export-size\": 33554432",
        "\"can_multi_conn\": true",
        "\"can_fua\": true",
        "\"can_zero\": true",
        "\"can_fast_zero\": true",
        "\"can_trim\": true",
        "\"can_cache\": true",
        "\"can_df\": true",
        "\"block_size_maximum\": 67108864",
        "base:allocation",
    ] {
        assert!(json.contains(expected), "{expected} missing from {json}");
    }
    let list = stdout(&run(
        &nbdinfo,
        &[
            "--list",
            &format!("nbd+unix:///?socket={}", server.path.display()),
        ],
    ));
    assert!(list.contains("export=\"disk\""), "{list}");
    run(&nbdinfo, &["--can", "multi-conn", &uri]);
    run(&nbdinfo, &["--can", "fua", &uri]);
    let map = stdout(&run(&nbdinfo, &["--map", &uri]));
    assert!(map.contains("33554432") && map.contains("data"), "{map}");
}

#[test]
fn nbdcopy_with_several_connections_copies_in_and_out() {
    let Some(nbdcopy) = tool("nbdcopy") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source.img");
    let back = dir.path().join("back.img");
    let size = 24usize << 20;
    let data = pattern(3, size);
    std::fs::write(&source, &data).unwrap();
    let (server, _) = TestServer::memory(size as u64);
    let uri = server.uri();
    let source = source.to_str().unwrap();
    let back_path = back.to_str().unwrap();
    run(
        &nbdcopy,
        &["--connections=4", "--requests=16", "--flush", source, &uri],
    );
    run(&nbdcopy, &["--connections=4", &uri, back_path]);
    assert_eq!(std::fs::read(&back).unwrap(), data);
}

#[test]
fn fio_nbd_engine_random_writes_verify_with_crc32c() {
    let Some(fio) = tool("fio") else {
        return;
    };
    let engines = Command::new(&fio).arg("--enghelp=nbd").output().unwrap();
    if !String::from_utf8_lossy(&engines.stdout).contains("uri") {
        eprintln!("SKIPPED: this fio was built without the nbd engine");
        return;
    }
    let (server, _) = TestServer::memory(32 << 20);
    let uri = server.uri();
    let output = run(
        &fio,
        &[
            "--name=verify",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randwrite",
            "--bs=4k",
            "--size=16m",
            "--iodepth=16",
            "--verify=crc32c",
            "--do_verify=1",
            "--verify_fatal=1",
            "--output-format=terse",
        ],
    );
    let text = stdout(&output);
    assert!(!text.contains("verify failed"), "{text}");
}
