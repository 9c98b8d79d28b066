//! boto3 (path-style, dummy credentials) reads every byte right through the
//! gateway: whole objects, ranges, HEAD, S3 errors, and listings that show
//! the root's objects and nothing outside it (`s3_clients_boto3.py`).

mod common;

use std::process::Command;

use cairn_files::DirBackend;
use common::{objects, required_tool, start};

#[test]
fn boto3_gets_heads_and_lists_objects() {
    let Some(python) = required_tool("python3", "apt-get install python3") else {
        return;
    };
    let has_boto3 = Command::new(&python)
        .args(["-c", "import boto3"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_boto3 {
        assert!(
            std::env::var_os("CAIRN_REQUIRE_SYSTEM_TOOLS").is_none(),
            "boto3 is missing and CAIRN_REQUIRE_SYSTEM_TOOLS is set: python3 -m pip install boto3 (test.sh does)"
        );
        eprintln!("SKIPPED: boto3 is not installed (python3 -m pip install boto3; test.sh does)");
        return;
    }
    let (dir, root) = objects();
    let server = start(DirBackend::open(&root).expect("open"), |_| {});
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/s3_clients_boto3.py");
    let output = Command::new(&python)
        .args([script, &format!("http://{}", server.addr)])
        .arg(&root)
        .env("AWS_CONFIG_FILE", dir.path().join("none"))
        .env("AWS_SHARED_CREDENTIALS_FILE", dir.path().join("none"))
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("boto3: 23 checks passed"), "{stdout}");
    println!("{}", stdout.trim());
    let stats = server.cache.stats();
    assert!(stats.hits > 0 && stats.misses > 0, "{stats:?}");
}
