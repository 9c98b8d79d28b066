//! Helpers the volume tests share: a spec from TOML text, the error a bad
//! one gives, and opening a volume with the default options.

use std::path::Path;

use cairn_store::volume::{OpenOptions, Volume, VolumeSpec};

pub fn parse(text: &str) -> VolumeSpec {
    toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

pub fn parse_error(text: &str) -> String {
    toml::from_str::<VolumeSpec>(text)
        .expect_err("the spec parses")
        .to_string()
}

pub fn open(spec: &VolumeSpec, base: &Path) -> Result<Volume, String> {
    Volume::open(spec, base, &OpenOptions::default()).map_err(|e| e.to_string())
}
