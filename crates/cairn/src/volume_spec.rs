//! Volume specs for the CLI: the embedded default, and TOML files parsed
//! with errors that name the file, the line and the field.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use cairn_store::VolumeSpec;

/// The spec `cairn serve` runs with no `--config`.
pub const DEFAULT_SPEC: &str = include_str!("default_volume.toml");

/// A spec and where its relative `data_dir` is rooted.
pub struct Loaded {
    /// The spec.
    pub spec: VolumeSpec,
    /// The spec file's directory (the current directory for the default).
    pub base: PathBuf,
    /// Where it came from, for messages: the file, or "the default spec".
    pub origin: String,
}

/// Parses `text`; `origin` names it in errors.
pub fn parse(text: &str, origin: &str) -> Result<VolumeSpec> {
    toml::from_str(text).with_context(|| format!("volume spec {origin}"))
}

/// Reads and parses the spec file at `path`.
pub fn load(path: &Path) -> Result<Loaded> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the volume spec {}", path.display()))?;
    let origin = path.display().to_string();
    let spec = parse(&text, &origin)?;
    let base = path.parent().map_or_else(PathBuf::new, Path::to_path_buf);
    Ok(Loaded { spec, base, origin })
}

/// The embedded default.
pub fn default_spec() -> Result<Loaded> {
    Ok(Loaded {
        spec: parse(DEFAULT_SPEC, "(the embedded default)")?,
        base: PathBuf::new(),
        origin: "the default spec (cairn serve --print-default-config)".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_and_every_example_parse_and_validate() {
        let default = default_spec().expect("default");
        default.spec.validate().expect("the default validates");
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/volumes");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).expect("examples/volumes") {
            let path = entry.expect("entry").path();
            if path.extension().is_some_and(|e| e == "toml") {
                let loaded = load(&path).unwrap_or_else(|e| panic!("{e:#}"));
                loaded
                    .spec
                    .validate()
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                seen += 1;
            }
        }
        assert!(seen >= 6, "only {seen} examples in {}", dir.display());
    }

    #[test]
    fn errors_name_the_file_line_and_field() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bad.toml");
        std::fs::write(
            &path,
            "[[export]]\nname = \"x\"\ndevice = \"m\"\n[device.m]\nkind = \"memory\"\nsise = \"1GiB\"\n",
        )
        .expect("write");
        let error = format!("{:#}", load(&path).err().expect("an error"));
        assert!(
            error.contains("bad.toml") && error.contains("line 4") && error.contains("sise"),
            "{error}"
        );
    }

    #[test]
    fn a_tls_table_parses_and_its_unknown_fields_are_errors() {
        let body = "[[export]]\nname = \"x\"\ndevice = \"m\"\n[device.m]\nkind = \"memory\"\nsize = \"1MiB\"\n";
        let spec = parse(
            &format!(
                "[tls]\nmode = \"require\"\ncertificates = \"pki\"\nverify_peer = true\n{body}"
            ),
            "t",
        )
        .expect("parses");
        let tls = spec.tls.expect("a [tls] table");
        assert_eq!(tls.mode, cairn_store::volume::TlsModeSpec::Require);
        assert_eq!(tls.certificates, Some(PathBuf::from("pki")));
        assert!(tls.verify_peer);
        for bad in ["[tls]\nmode = \"yes\"\n", "[tls]\nverify_client = true\n"] {
            let error = format!("{:#}", parse(&format!("{bad}{body}"), "t").expect_err(bad));
            assert!(error.contains("line 2"), "{error}");
        }
    }
}
