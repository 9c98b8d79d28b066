//! Policy specs: `name` or `name:key=value,key=value`; admission filter specs
//! alike.
//!
//! The pairs become a TOML table merged with `policy = "name"` and deserialised
//! into [`PolicyConfig`] (for filters, `filter = "name"` and
//! [`AdmissionConfig`]), so every knob is reachable with no code per policy. Values are TOML (`0.1`, `5`, `true`, `"text"`); a value that
//! is not valid TOML is taken as a string.

use anyhow::{Context, Result, anyhow, bail};
use cairn_policy::{AdmissionConfig, PolicyConfig, PrefetchConfig};
use serde::Deserialize;

/// Splits a `--policy` argument that names several policies, as
/// libCacheSim's `cachesim` takes them: `lru,arc` is `lru` and `arc`, and in
/// `lru,s3fifo:small_size_ratio=0.2,move_to_main_threshold=1` the
/// parameters after the colon are the last name's. Empty names are dropped.
pub fn split_list(arg: &str) -> Vec<String> {
    let (names, pairs) = match arg.split_once(':') {
        Some((names, pairs)) => (names, Some(pairs)),
        None => (arg, None),
    };
    let mut out: Vec<String> = names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect();
    if let Some(pairs) = pairs {
        match out.last_mut() {
            Some(last) => *last = format!("{last}:{pairs}"),
            None => out.push(format!(":{pairs}")),
        }
    }
    if out.is_empty() {
        out.push(arg.to_owned());
    }
    out
}

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
    // Start from the name's defaults, so presets such as `s4lru` (an `slru`
    // with four equal segments) keep their settings under the overrides.
    let defaults = PolicyConfig::default_for(name)
        .ok_or_else(|| anyhow!("policy `{name}` has no default configuration"))?;
    let toml::Value::Table(mut table) = toml::Value::try_from(defaults)
        .with_context(|| format!("policy `{name}`: encoding its defaults"))?
    else {
        bail!("policy `{name}`: defaults are not a table");
    };
    overlay(
        &mut table,
        pairs,
        &format!("policy spec `{spec}`"),
        &["policy"],
    )?;
    PolicyConfig::deserialize(toml::Value::Table(table))
        .with_context(|| format!("policy spec `{spec}`: invalid parameters for `{name}`"))
}

/// Parses an admission filter spec: `name` or `name:key=value,...`.
pub fn parse_admission(spec: &str) -> Result<AdmissionConfig> {
    let config: AdmissionConfig = parse_tagged(
        spec,
        ("admission", "filter"),
        AdmissionConfig::default_for,
        AdmissionConfig::NAMES,
    )?;
    config
        .validate()
        .with_context(|| format!("admission spec `{spec}`"))?;
    Ok(config)
}

/// Parses a prefetcher spec: `name` or `name:key=value,...` (`obl`,
/// `obl:sequential_confidence_k=2`, `pg:lookahead_range=10`).
pub fn parse_prefetch(spec: &str) -> Result<PrefetchConfig> {
    let config: PrefetchConfig = parse_tagged(
        spec,
        ("prefetch", "prefetcher"),
        PrefetchConfig::default_for,
        PrefetchConfig::NAMES,
    )?;
    config
        .validate()
        .with_context(|| format!("prefetch spec `{spec}`"))?;
    Ok(config)
}

/// `name` or `name:key=value,...` over the defaults of `name`, for a config
/// enum tagged `tag` (`(kind, tag)`: `("admission", "filter")`).
fn parse_tagged<T: serde::Serialize + serde::de::DeserializeOwned>(
    spec: &str,
    (kind, tag): (&str, &str),
    default_for: fn(&str) -> Option<T>,
    names: &[&str],
) -> Result<T> {
    let (name, pairs) = spec.split_once(':').unwrap_or((spec, ""));
    let name = name.trim();
    let defaults = default_for(name).ok_or_else(|| {
        anyhow!(
            "{kind} spec `{spec}`: unknown {tag} `{name}` (known: {})",
            names.join(", ")
        )
    })?;
    let toml::Value::Table(mut table) = toml::Value::try_from(defaults)
        .with_context(|| format!("{tag} `{name}`: encoding its defaults"))?
    else {
        bail!("{tag} `{name}`: defaults are not a table");
    };
    overlay(&mut table, pairs, &format!("{kind} spec `{spec}`"), &[tag])?;
    T::deserialize(toml::Value::Table(table))
        .with_context(|| format!("{kind} spec `{spec}`: invalid parameters for `{name}`"))
}

/// Sets `key=value` pairs (separated by commas outside brackets, so lists such
/// as `costs=[1,3]` work) in `table`. `reserved` keys may not be set.
pub fn overlay(
    table: &mut toml::Table,
    pairs: &str,
    context: &str,
    reserved: &[&str],
) -> Result<()> {
    for pair in split_pairs(pairs) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| anyhow!("{context}: `{pair}` is not key=value"))?;
        let key = key.trim();
        if key.is_empty() || reserved.contains(&key) {
            bail!("{context}: `{pair}` needs a parameter name (not {reserved:?})");
        }
        table.insert(key.to_owned(), parse_value(value.trim()));
    }
    Ok(())
}

/// Splits at commas that are not inside `[...]` or `{...}`.
fn split_pairs(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (at, c) in text.char_indices() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out.into_iter()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect()
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
    fn a_list_splits_as_cachesim_takes_it_and_parameters_are_the_last_names() {
        let split = |arg: &str| split_list(arg);
        assert_eq!(split("lru"), ["lru"]);
        assert_eq!(split("lru,arc, s3fifo"), ["lru", "arc", "s3fifo"]);
        assert_eq!(
            split("lru,s3fifo:small_size_ratio=0.2,move_to_main_threshold=1"),
            [
                "lru",
                "s3fifo:small_size_ratio=0.2,move_to_main_threshold=1"
            ]
        );
        assert_eq!(
            split("s3fifo:small_size_ratio=0.2"),
            ["s3fifo:small_size_ratio=0.2"]
        );
        assert_eq!(split("lru,,arc,"), ["lru", "arc"]);
        // Nothing to split: left for `parse` to refuse with its message.
        assert_eq!(split(","), [","]);
        assert_eq!(split(":x=1"), [":x=1"]);
        assert!(parse(&split(":x=1")[0]).is_err());
    }

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

    #[test]
    fn presets_and_lists_are_reachable() {
        assert_eq!(
            parse("s4lru").unwrap(),
            PolicyConfig::default_for("s4lru").unwrap(),
            "a preset keeps its settings"
        );
        assert_ne!(parse("s4lru").unwrap(), parse("slru").unwrap());
        assert_eq!(
            split_pairs("a=1, costs=[1,3],b={x=1,y=2}"),
            ["a=1", "costs=[1,3]", "b={x=1,y=2}"]
        );
        parse("cost:costs=[1.0,3.0]").unwrap();
        parse("s3fifo:small_size_ratio=0.2").unwrap();
    }

    #[test]
    fn admission_specs_parse_and_errors_name_the_filters() {
        for name in AdmissionConfig::NAMES {
            assert_eq!(
                parse_admission(name).unwrap(),
                AdmissionConfig::default_for(name).unwrap()
            );
        }
        let AdmissionConfig::Nhit(nhit) = parse_admission("nhit:threshold=3,trigger=0").unwrap()
        else {
            panic!("nhit parses as nhit");
        };
        assert_eq!((nhit.threshold, nhit.trigger), (3, 0.0));
        let error = format!("{:#}", parse_admission("lru").unwrap_err());
        assert!(
            error.contains(
                "unknown filter `lru` (known: always, nhit, frequency, bloom, size, probabilistic, size-probabilistic, adaptsize)"
            ),
            "{error}"
        );
        let error = format!("{:#}", parse_admission("always:threshold=2").unwrap_err());
        assert!(error.contains("threshold"), "{error}");
        let error = format!("{:#}", parse_admission("nhit:threshold=0").unwrap_err());
        assert!(error.contains("`threshold` = 0 is out of range"), "{error}");
        let error = format!("{:#}", parse_admission("nhit:filter=always").unwrap_err());
        assert!(error.contains("needs a parameter name"), "{error}");
    }
}
