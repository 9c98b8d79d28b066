//! Test certificates made with `openssl`: shared by the cairn-nbd tests and
//! the `cairn` binary's tests (included there with `#[path]`).

use std::path::PathBuf;
use std::process::Command;

/// A CA, a server certificate for `localhost` and a client certificate
/// signed by it, in the nbdkit/libnbd layout (`ca-cert.pem`,
/// `server-cert.pem`, `server-key.pem`, `client-cert.pem`, `client-key.pem`)
/// under `dir`, made with `openssl`; `None` after printing why the test
/// skips when `openssl` is missing.
pub fn certificates(dir: &std::path::Path) -> Option<PathBuf> {
    std::fs::create_dir_all(dir).expect("the certificates directory");
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl").args(args).current_dir(dir).output();
        match output {
            Ok(output) if output.status.success() => Some(()),
            Ok(output) => panic!(
                "openssl {args:?}: {}",
                String::from_utf8_lossy(&output.stderr)
            ),
            Err(_) => None,
        }
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-nodes",
    ];
    let made = openssl(
        &[
            &["req", "-x509"][..],
            &ec,
            &[
                "-keyout",
                "ca-key.pem",
                "-out",
                "ca-cert.pem",
                "-days",
                "2",
                "-subj",
                "/CN=Cairn test CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ],
        ]
        .concat(),
    );
    if made.is_none() {
        eprintln!("SKIPPED: openssl is not installed (test.sh installs it)");
        return None;
    }
    // `{name}-key.pem` and `{name}-cert.pem` for `subject`, signed by the CA,
    // with the X.509 extensions `ext`.
    let issue = |name: &str, subject: &str, ext: &str| {
        let (key, csr, extfile, cert) = (
            format!("{name}-key.pem"),
            format!("{name}.csr"),
            format!("{name}.ext"),
            format!("{name}-cert.pem"),
        );
        openssl(
            &[
                &["req"][..],
                &ec,
                &["-keyout", &key, "-out", &csr, "-subj", subject],
            ]
            .concat(),
        )?;
        std::fs::write(dir.join(&extfile), ext).expect("the extensions file");
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca-cert.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-out",
            &cert,
            "-days",
            "2",
            "-extfile",
            &extfile,
        ])
    };
    issue(
        "server",
        "/CN=localhost",
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n\
         basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=serverAuth\n",
    )?;
    // A client certificate from the same CA, where libnbd and qemu look for
    // one (sent only when the server asks: with peer verification).
    issue(
        "client",
        "/CN=cairn-test-client",
        "basicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature,keyEncipherment\n\
         extendedKeyUsage=clientAuth\n",
    )?;
    Some(dir.to_path_buf())
}
