//! Running the examples a `--help` prints, as a user pastes them into a shell.

use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::{Server, cairn};

/// `bash -c script` in `dir` with `HOME=dir` and the built `cairn` first on
/// PATH, as a user's shell would run a line pasted from `--help`; to be
/// spawned or run.
pub fn shell(script: &str, dir: &Path) -> Command {
    let bin = Path::new(env!("CARGO_BIN_EXE_cairn")).parent().unwrap();
    let path = std::env::join_paths(
        std::iter::once(bin.to_path_buf())
            .chain(std::env::split_paths(&std::env::var_os("PATH").unwrap())),
    )
    .unwrap();
    let mut command = Command::new("bash");
    command
        .args(["-c", script])
        .current_dir(dir)
        .env("HOME", dir)
        .env("PATH", path);
    command
}

/// [`shell`] run to its end.
pub fn bash(script: &str, dir: &Path) -> Output {
    shell(script, dir).output().unwrap()
}

/// Waits until 127.0.0.1:`port` accepts, at most until `deadline`; `what`
/// names the server in the failure.
pub fn wait_for_port(port: &str, deadline: Instant, what: &str) {
    while TcpStream::connect(format!("127.0.0.1:{port}")).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what}: never listened on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Bytes as text, lossily.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The command lines of a `--help`'s examples: the lines after `Examples:`
/// indented two spaces (their descriptions are indented six).
pub fn examples(args: &[&str]) -> Vec<String> {
    let help = text(&cairn().args(args).output().unwrap().stdout);
    let (_, examples) = help
        .split_once("Examples:\n")
        .unwrap_or_else(|| panic!("no examples in `cairn {}`", args.join(" ")));
    examples
        .lines()
        .filter(|line| line.starts_with("  ") && !line.starts_with("   "))
        .map(|line| line.trim().to_owned())
        .collect()
}

/// In `cairn ARGS`'s help, the first example command matching `wanted`
/// that spans two lines (`\`-continued): the command joined into one line,
/// and the example line after it.
pub fn continued_example(args: &[&str], wanted: impl Fn(&str) -> bool) -> (String, String) {
    let help = text(&cairn().args(args).output().unwrap().stdout);
    let lines: Vec<&str> = help.lines().map(str::trim).collect();
    let at = lines
        .iter()
        .position(|l| wanted(l))
        .unwrap_or_else(|| panic!("no such example in {help}"));
    let command = format!(
        "{} {}",
        lines[at].strip_suffix('\\').expect("continued"),
        lines[at + 1]
    );
    (command, lines[at + 2].to_owned())
}

/// Starts an example's `cairn …` server line as printed, in `dir`, and waits
/// (20 s at most) until 127.0.0.1 accepts on each of `ports`. `None`, after
/// saying so, when one of them is already taken here (the example names
/// fixed ports).
pub fn serve_example(line: &str, dir: &Path, ports: &[&str]) -> Option<Server> {
    for port in ports {
        if std::net::TcpListener::bind(format!("127.0.0.1:{port}")).is_err() {
            eprintln!("SKIPPED: port {port} of the example is in use here");
            return None;
        }
    }
    let args: Vec<&str> = line.split_whitespace().skip(1).collect();
    let child = cairn()
        .current_dir(dir)
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let server = Server(Some(child));
    let deadline = Instant::now() + Duration::from_secs(20);
    for port in ports {
        wait_for_port(port, deadline, line);
    }
    Some(server)
}
