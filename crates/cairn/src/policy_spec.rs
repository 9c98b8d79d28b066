//! Policy specs: `name` or `name:key=value,key=value`.
//!
//! The pairs become a TOML table merged with `policy = "name"` and deserialised
//! into [`PolicyConfig`], so every knob of every policy is reachable with no
//! code per policy. Values are TOML (`0.1`, `5`, `true`, `"text"`); a value that
//! is not valid TOML is taken as a string.

use anyhow::{Context, Result, anyhow, bail};
use cairn_policy::PolicyConfig;
use serde::Deserialize;

/// Parses one spec.
pub fn parse(spec: &str) -> Result<PolicyConfig> {
    let (name, pairs) = spec.split_once(':').unwrap_or((spec, ""));
    let name = name.trim();
    if name.is_empty() {
        bail!(
            "policy spec `{spec}`: missing policy name (known: {})",
            known()
        );
    }
    if !PolicyConfig::NAMES.contains(&name) {
        bail!(
            "policy spec `{spec}`: unknown policy `{name}` (known: {})",
            known()
        );
    }
    let mut table = toml::Table::new();
    table.insert("policy".into(), toml::Value::String(name.to_owned()));
    for pair in pairs.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| anyhow!("policy spec `{spec}`: `{pair}` is not key=value"))?;
        let key = key.trim();
        if key.is_empty() || key == "policy" {
            bail!("policy spec `{spec}`: `{pair}` needs a parameter name other than `policy`");
        }
        table.insert(key.to_owned(), parse_value(value.trim()));
    }
    PolicyConfig::deserialize(toml::Value::Table(table))
        .with_context(|| format!("policy spec `{spec}`: invalid parameters for `{name}`"))
}

fn parse_value(text: &str) -> toml::Value {
    format!("v = {text}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(text.to_owned()))
}

fn known() -> String {
    PolicyConfig::NAMES.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_unknowns_are_named() {
        assert_eq!(
            parse("lru").unwrap(),
            PolicyConfig::default_for("lru").unwrap()
        );
        let error = format!("{:#}", parse("nosuch").unwrap_err());
        assert!(error.contains("unknown policy `nosuch`"), "{error}");
        let error = format!("{:#}", parse("lru:bogus=1").unwrap_err());
        assert!(error.contains("bogus"), "{error}");
        let error = format!("{:#}", parse("lru:oops").unwrap_err());
        assert!(error.contains("not key=value"), "{error}");
    }

    #[test]
    fn values_are_toml_or_strings() {
        assert_eq!(parse_value("0.5"), toml::Value::Float(0.5));
        assert_eq!(parse_value("7"), toml::Value::Integer(7));
        assert_eq!(parse_value("true"), toml::Value::Boolean(true));
        assert_eq!(parse_value("abc"), toml::Value::String("abc".into()));
    }
}
