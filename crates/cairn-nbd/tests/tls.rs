//! TLS (`NBD_OPT_STARTTLS`): real clients (nbdinfo, nbdcopy, qemu-io) read
//! and write over TLS with X.509 certificates made by `openssl`; `require`
//! mode refuses plaintext clients with `NBD_REP_ERR_TLS_REQD` and keeps
//! serving; a failed TLS handshake ends only its own connection; and the TLS
//! transport never makes the request reader wait for a reply send that is
//! blocked on a full socket (the deadlock a single locked TLS stream would
//! have). Tests skip, saying so, only when `openssl` or a client is missing.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::Duration;

use cairn_nbd::codec::handshake::{InfoRequest, OptionHeader, OptionReply, decode_option_replies};
use cairn_nbd::codec::transmission::RequestHeader;
use cairn_nbd::proto::*;
use cairn_nbd::{TlsConfig, TlsError, TlsMode};
use cairn_store::{Device, MemoryDevice};
use common::{TestServer, certificates, export, pattern};

/// A server with one memory export "disk" in `mode`, and its certificates.
struct Setup {
    server: TestServer,
    device: Arc<MemoryDevice>,
    pki: PathBuf,
    _dir: tempfile::TempDir,
}

fn setup(mode: TlsMode, size: u64) -> Option<Setup> {
    let dir = tempfile::tempdir().unwrap();
    let pki = certificates(dir.path())?;
    let device = Arc::new(MemoryDevice::new(size));
    let tls = TlsConfig::new(mode, Some(&pki)).unwrap();
    let server = TestServer::start_with_tls(vec![export("disk", device.clone())], tls);
    Some(Setup {
        server,
        device,
        pki,
        _dir: dir,
    })
}

impl Setup {
    fn tls_uri(&self) -> String {
        format!(
            "nbds+unix:///disk?socket={}&tls-certificates={}",
            self.server.path.display(),
            self.pki.display()
        )
    }
}

/// qemu-io on export "disk" at `socket` over TLS with the credentials in
/// `pki` (its client certificate too, when there is one), running `commands`.
fn qemu_io_tls(pki: &Path, socket: &Path, commands: &[&str]) -> Option<Output> {
    let creds = format!(
        "tls-creds-x509,id=tls0,dir={},endpoint=client",
        pki.display()
    );
    let image = format!(
        "driver=nbd,server.type=unix,server.path={},export=disk,tls-creds=tls0,tls-hostname=localhost",
        socket.display()
    );
    let args = [&["--object", &creds, "--image-opts", &image][..], commands].concat();
    run("qemu-io", &args)
}

/// Run a client tool; `None` after printing why the test skips.
fn run(program: &str, args: &[&str]) -> Option<Output> {
    let output = Command::new(program).args(args).output().ok();
    if output.is_none() {
        eprintln!("SKIPPED: {program} is not installed (test.sh installs it)");
    }
    output
}

fn ok(output: &Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{}\nstdout: {stdout}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn nbdinfo_and_nbdcopy_read_size_and_data_over_tls() {
    let Some(setup) = setup(TlsMode::On, 8 << 20) else {
        return;
    };
    let data = pattern(7, 8 << 20);
    setup.device.write_at(&data, 0).unwrap();
    let uri = setup.tls_uri();
    let Some(output) = run("nbdinfo", &["--json", &uri]) else {
        return;
    };
    let json = ok(&output);
    assert!(json.contains("\"TLS\": true"), "{json}");
    assert!(json.contains("\"export-size\": 8388608"), "{json}");
    let Some(output) = run("nbdcopy", &[&uri, "-"]) else {
        return;
    };
    ok(&output);
    assert!(output.stdout == data, "nbdcopy read other data over TLS");
    // `on` serves plaintext clients too.
    let plain = format!("nbd+unix:///disk?socket={}", setup.server.path.display());
    let json = ok(&run("nbdinfo", &["--json", &plain]).unwrap());
    assert!(json.contains("\"TLS\": false"), "{json}");
}

#[test]
fn qemu_io_writes_and_verifies_over_tls() {
    let Some(setup) = setup(TlsMode::Require, 16 << 20) else {
        return;
    };
    let Some(output) = qemu_io_tls(
        &setup.pki,
        &setup.server.path,
        &[
            "-c",
            "write -P 0xab 0 4M",
            "-c",
            "write -z 1M 64k",
            "-c",
            "flush",
            "-c",
            "read -P 0xab 0 1M",
            "-c",
            "read -P 0 1M 64k",
            "-c",
            "read -P 0xab 1088k 2944k",
        ],
    ) else {
        return;
    };
    let text = ok(&output);
    assert!(!text.contains("Pattern verification failed"), "{text}");
    let mut back = vec![0u8; 64 << 10];
    setup.device.read_at(&mut back, 2 << 20).unwrap();
    assert!(
        back.iter().all(|&b| b == 0xab),
        "qemu-io's write reached the device"
    );
}

#[test]
fn require_refuses_plaintext_clients_clearly_and_keeps_serving() {
    let Some(setup) = setup(TlsMode::Require, 1 << 20) else {
        return;
    };
    let plain = format!("nbd+unix:///disk?socket={}", setup.server.path.display());
    let Some(output) = run("nbdinfo", &[&plain]) else {
        return;
    };
    assert!(!output.status.success(), "plaintext nbdinfo was served");
    if let Some(output) = run("qemu-io", &["-f", "raw", "-c", "read 0 4k", &plain]) {
        assert!(!output.status.success());
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("TLS") && stderr.contains("this server requires TLS"),
            "{stderr}"
        );
    }
    // Byte by byte: every option but STARTTLS/ABORT is TLS_REQD, and
    // EXPORT_NAME (which cannot fail politely) ends the connection.
    let mut client = setup.server.client();
    client.greet();
    let go = InfoRequest {
        name: "disk".into(),
        items: vec![],
    };
    for (option, data) in [
        (OPT_LIST, Vec::new()),
        (OPT_STRUCTURED_REPLY, Vec::new()),
        (OPT_GO, go.encode()),
    ] {
        let replies = client.option(option, &data);
        assert_eq!(replies[0].reply_type, REP_ERR_TLS_REQD, "option {option}");
        assert!(String::from_utf8_lossy(&replies[0].data).contains("requires TLS"));
    }
    let header = OptionHeader {
        option: OPT_EXPORT_NAME,
        length: 4,
    };
    client.stream.write_all(&header.encode()).unwrap();
    client.stream.write_all(b"disk").unwrap();
    let mut byte = [0u8; 1];
    assert_eq!(
        client.stream.read(&mut byte).unwrap(),
        0,
        "EXPORT_NAME closes"
    );
    // The server goes on serving TLS clients.
    let json = ok(&run("nbdinfo", &["--json", &setup.tls_uri()]).unwrap());
    assert!(json.contains("\"export-size\": 1048576"), "{json}");
}

#[test]
fn a_failed_tls_handshake_ends_only_that_connection() {
    let Some(setup) = setup(TlsMode::Require, 1 << 20) else {
        return;
    };
    let mut client = setup.server.client();
    client.greet();
    // STARTTLS with data is invalid and leaves the connection in plaintext.
    let replies = client.option(OPT_STARTTLS, b"x");
    assert_eq!(replies[0].reply_type, REP_ERR_INVALID);
    let replies = client.option(OPT_STARTTLS, &[]);
    assert_eq!(replies[0].reply_type, REP_ACK);
    // Not a ClientHello: the server sends an alert (or nothing) and closes.
    client.stream.write_all(&[0x42; 64]).unwrap();
    let mut rest = Vec::new();
    let _ = client.stream.read_to_end(&mut rest);
    assert!(rest.len() < 64, "the server answered garbage with {rest:?}");
    // The rustls client below completes the handshake on a new connection.
    let mut tls = TlsClient::connect(&setup);
    assert_eq!(tls.size, 1 << 20);
    tls.request(CMD_WRITE, 0, 4096, &[9u8; 4096]);
    assert_eq!(tls.reply().1, 0);
}

#[test]
fn bad_credentials_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let error = TlsConfig::new(TlsMode::On, Some(dir.path())).unwrap_err();
    assert!(matches!(error, TlsError::File { .. }), "{error}");
    assert!(error.to_string().contains("server-cert.pem"), "{error}");
    assert!(matches!(
        TlsConfig::new(TlsMode::Require, None),
        Err(TlsError::NoCertificates(TlsMode::Require))
    ));
    assert_eq!(
        TlsConfig::new(TlsMode::Off, None).unwrap().mode(),
        TlsMode::Off
    );
    let Some(pki) = certificates(dir.path()) else {
        return;
    };
    // A key that is not the certificate's.
    std::fs::copy(pki.join("ca-key.pem"), pki.join("server-key.pem")).unwrap();
    let error = TlsConfig::new(TlsMode::On, Some(&pki)).unwrap_err();
    assert!(matches!(error, TlsError::Credentials { .. }), "{error}");
    std::fs::write(pki.join("server-key.pem"), "not a key").unwrap();
    let error = TlsConfig::new(TlsMode::On, Some(&pki)).unwrap_err();
    assert!(error.to_string().contains("server-key.pem"), "{error}");
}

/// Peer verification (nbdkit's `--tls-verify-peer`): nbdinfo and qemu-io
/// with the CA's client certificate in their directory get in; nbdinfo with
/// only the CA certificate (no client certificate), and one whose client
/// certificate comes from another CA, are refused at the TLS handshake; the
/// server keeps serving. A directory without `ca-cert.pem` is a clear error.
#[test]
fn verify_peer_admits_only_clients_with_a_certificate_from_the_ca() {
    let dir = tempfile::tempdir().unwrap();
    let Some(pki) = certificates(&dir.path().join("pki")) else {
        return;
    };
    let device = Arc::new(MemoryDevice::new(1 << 20));
    device.write_at(&pattern(3, 1 << 20), 0).unwrap();
    let tls = TlsConfig::with_peer_verification(TlsMode::Require, Some(&pki), true).unwrap();
    assert!(tls.verifies_peers());
    let server = TestServer::start_with_tls(vec![export("disk", device.clone())], tls);
    let uri = |certs: &Path| {
        format!(
            "nbds+unix:///disk?socket={}&tls-certificates={}",
            server.path.display(),
            certs.display()
        )
    };
    let Some(output) = run("nbdinfo", &["--json", &uri(&pki)]) else {
        return;
    };
    let json = ok(&output);
    assert!(json.contains("\"TLS\": true"), "{json}");
    // The CA certificate alone: the server's certificate checks out, but the
    // client has none to show.
    let anonymous = dir.path().join("anonymous");
    std::fs::create_dir(&anonymous).unwrap();
    std::fs::copy(pki.join("ca-cert.pem"), anonymous.join("ca-cert.pem")).unwrap();
    let output = run("nbdinfo", &["--json", &uri(&anonymous)]).unwrap();
    assert!(
        !output.status.success(),
        "a client without a certificate got in"
    );
    // A client certificate from another CA.
    let stranger = certificates(&dir.path().join("stranger")).unwrap();
    std::fs::copy(pki.join("ca-cert.pem"), stranger.join("ca-cert.pem")).unwrap();
    let output = run("nbdinfo", &["--json", &uri(&stranger)]).unwrap();
    assert!(
        !output.status.success(),
        "a certificate from another CA got in"
    );
    // Still serving, and qemu-io presents its client certificate too.
    ok(&run("nbdinfo", &["--json", &uri(&pki)]).unwrap());
    if let Some(output) = qemu_io_tls(&pki, &server.path, &["-c", "write -P 0x5a 0 64k"]) {
        ok(&output);
        let mut back = vec![0u8; 65536];
        device.read_at(&mut back, 0).unwrap();
        assert!(back.iter().all(|&b| b == 0x5a));
    }
    server.stop().unwrap();
    // Verification needs the CA certificate.
    std::fs::remove_file(pki.join("ca-cert.pem")).unwrap();
    let error = TlsConfig::with_peer_verification(TlsMode::On, Some(&pki), true).unwrap_err();
    assert!(error.to_string().contains("ca-cert.pem"), "{error}");
    assert!(
        TlsConfig::new(TlsMode::On, Some(&pki)).is_ok(),
        "not needed without it"
    );
}

/// The reader must keep reading requests while every worker's reply send is
/// blocked: the client pipelines 4 MiB READs (whose replies fill the socket)
/// and then 4 MiB WRITEs (whose payloads fill the other direction) before
/// reading a single reply. A transport that held the TLS lock across a
/// blocked send would stop the reader, the client's writes would block, and
/// both sides would wait forever (the socket timeouts turn that into a
/// failure).
#[test]
fn tls_reader_keeps_reading_while_reply_sends_are_blocked() {
    let Some(setup) = setup(TlsMode::Require, 64 << 20) else {
        return;
    };
    let chunk = 4usize << 20;
    let old = pattern(1, 32 << 20);
    setup.device.write_at(&old, 0).unwrap();
    let new = pattern(2, 32 << 20);
    let mut client = TlsClient::connect(&setup);
    let started = std::time::Instant::now();
    for index in 0..8u64 {
        client.request(CMD_READ, index * chunk as u64, chunk as u32, &[]);
    }
    for (index, part) in new.chunks(chunk).enumerate() {
        client.request(
            CMD_WRITE,
            (32 << 20) + (index * chunk) as u64,
            chunk as u32,
            part,
        );
    }
    let mut reads = 0;
    for _ in 0..16 {
        let (cookie, error, data) = client.reply_with_data(chunk);
        assert_eq!(error, 0, "request {cookie}");
        if cookie < 8 {
            let offset = cookie as usize * chunk;
            assert!(data == old[offset..offset + chunk], "read {cookie} data");
            reads += 1;
        }
    }
    assert_eq!(reads, 8);
    let mut back = vec![0u8; 32 << 20];
    setup.device.read_at(&mut back, 32 << 20).unwrap();
    assert!(back == new, "the pipelined writes landed");
    eprintln!("64 MiB each way over TLS in {:?}", started.elapsed());
}

/// `Server::reload_tls` (what `cairn serve` does on SIGHUP): a connection
/// already under TLS keeps its session and goes on working; new connections
/// get the new certificate, so a client trusting only the old CA fails its
/// handshake and one trusting the new CA gets in; a reload that would change
/// the mode is refused and changes nothing.
#[test]
fn reloaded_certificates_serve_new_connections_and_existing_ones_keep_theirs() {
    let Some(setup) = setup(TlsMode::Require, 1 << 20) else {
        return;
    };
    let other = tempfile::tempdir().unwrap();
    let Some(new_pki) = certificates(other.path()) else {
        return;
    };
    let mut before = TlsClient::connect(&setup);
    before.request(CMD_WRITE, 0, 4096, &[1u8; 4096]);
    assert_eq!(before.reply().1, 0);

    let error = setup
        .server
        .server
        .reload_tls(TlsConfig::new(TlsMode::On, Some(&new_pki)).unwrap())
        .unwrap_err();
    assert!(
        error.to_string().contains("cannot change the mode"),
        "{error}"
    );
    assert!(TlsClient::try_connect(&setup.server.path, &setup.pki).is_ok());

    setup
        .server
        .server
        .reload_tls(TlsConfig::new(TlsMode::Require, Some(&new_pki)).unwrap())
        .unwrap();
    let refused = TlsClient::try_connect(&setup.server.path, &setup.pki);
    assert!(refused.is_err(), "a client trusting only the old CA got in");
    let mut after = TlsClient::try_connect(&setup.server.path, &new_pki).unwrap();
    after.request(CMD_WRITE, 4096, 4096, &[2u8; 4096]);
    assert_eq!(after.reply().1, 0);
    // The connection from before the reload still works, on its old session.
    before.request(CMD_READ, 4096, 4096, &[]);
    let (_, error, data) = before.reply_with_data(4096);
    assert_eq!((error, data), (0, vec![2u8; 4096]));
}

/// A minimal NBD client over rustls: STARTTLS, then GO with simple replies.
struct TlsClient {
    stream: rustls::StreamOwned<rustls::ClientConnection, UnixStream>,
    size: u64,
    next_cookie: u64,
}

impl TlsClient {
    fn connect(setup: &Setup) -> Self {
        Self::try_connect(&setup.server.path, &setup.pki).unwrap()
    }

    /// Connects trusting `pki`'s CA; `Err` when the TLS handshake fails.
    fn try_connect(path: &Path, pki: &Path) -> Result<Self, String> {
        let mut socket = UnixStream::connect(path).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        socket
            .set_write_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        let mut greeting = [0u8; 18];
        socket.read_exact(&mut greeting).unwrap();
        socket
            .write_all(&(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES).to_be_bytes())
            .unwrap();
        let replies = option(&mut socket, OPT_STARTTLS, &[]);
        assert_eq!(replies[0].reply_type, REP_ACK);
        let mut stream = rustls::StreamOwned::new(tls_connection(pki), socket);
        stream
            .conn
            .complete_io(&mut stream.sock)
            .map_err(|e| format!("TLS handshake: {e}"))?;
        let go = InfoRequest {
            name: "disk".into(),
            items: vec![],
        };
        let replies = option(&mut stream, OPT_GO, &go.encode());
        assert_eq!(replies.last().unwrap().reply_type, REP_ACK, "{replies:?}");
        let size = u64::from_be_bytes(replies[0].data[2..10].try_into().unwrap());
        Ok(Self {
            stream,
            size,
            next_cookie: 0,
        })
    }

    fn request(&mut self, command: u16, offset: u64, length: u32, payload: &[u8]) {
        let header = RequestHeader {
            flags: 0,
            command,
            cookie: self.next_cookie,
            offset,
            length,
        };
        self.next_cookie += 1;
        self.stream.write_all(&header.encode()).unwrap();
        self.stream.write_all(payload).unwrap();
    }

    /// (cookie, error) of the next simple reply to a non-READ.
    fn reply(&mut self) -> (u64, u32) {
        let (cookie, error, _) = self.reply_with_data(0);
        (cookie, error)
    }

    /// The next simple reply; cookies below 8 are READs of `read_len` bytes.
    fn reply_with_data(&mut self, read_len: usize) -> (u64, u32, Vec<u8>) {
        let mut head = [0u8; 16];
        self.stream.read_exact(&mut head).unwrap();
        assert_eq!(head[..4], SIMPLE_REPLY_MAGIC.to_be_bytes());
        let error = u32::from_be_bytes(head[4..8].try_into().unwrap());
        let cookie = u64::from_be_bytes(head[8..16].try_into().unwrap());
        let mut data = Vec::new();
        if read_len > 0 && cookie < 8 && error == 0 {
            data.resize(read_len, 0);
            self.stream.read_exact(&mut data).unwrap();
        }
        (cookie, error, data)
    }
}

fn tls_connection(pki: &Path) -> rustls::ClientConnection {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(pki.join("ca-cert.pem")).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    rustls::ClientConnection::new(Arc::new(config), "localhost".try_into().unwrap()).unwrap()
}

/// Send an option and read replies up to the final one.
fn option<S: Read + Write>(stream: &mut S, option: u32, data: &[u8]) -> Vec<OptionReply> {
    let header = OptionHeader {
        option,
        length: data.len() as u32,
    };
    stream.write_all(&header.encode()).unwrap();
    stream.write_all(data).unwrap();
    stream.flush().unwrap();
    let mut replies = Vec::new();
    loop {
        let mut head = [0u8; 20];
        stream.read_exact(&mut head).unwrap();
        let len = u32::from_be_bytes(head[16..20].try_into().unwrap()) as usize;
        let mut bytes = head.to_vec();
        bytes.resize(20 + len, 0);
        stream.read_exact(&mut bytes[20..]).unwrap();
        let reply = decode_option_replies(&bytes).unwrap().remove(0);
        let last = reply.reply_type == REP_ACK || reply.reply_type & REP_FLAG_ERROR != 0;
        replies.push(reply);
        if last {
            return replies;
        }
    }
}
