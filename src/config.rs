//! Where options come from: built-in profiles (compiled in from `configs/`), a YAML
//! `--config` file, and the command line, layered in that order.

use crate::error::{Error, Result};
use crate::options::JailOptions;
use std::path::Path;

/// The shipped profiles, name and YAML text.
pub const PROFILES: &[(&str, &str)] = &[
    ("python", include_str!("../configs/python.yaml")),
    ("node", include_str!("../configs/node.yaml")),
    ("shell", include_str!("../configs/shell.yaml")),
];

/// Layers profile < config file < command line into one set of options.
pub fn resolve(config_file: Option<&Path>, cli: JailOptions) -> Result<JailOptions> {
    let file = match config_file {
        Some(path) => load_file(path)?,
        None => JailOptions::default(),
    };
    let profile_name = cli.profile.clone().or_else(|| file.profile.clone());
    let profile = match profile_name {
        Some(name) => load_profile(&name)?,
        None => JailOptions::default(),
    };
    Ok(profile.overlay(file).overlay(cli))
}

/// Where each option [`resolve`] gives came from, when not from the command line: option
/// name (`time-limit`) to `profile NAME` or `config FILE`. A server names it in a refusal.
pub fn origins(
    config_file: Option<&Path>,
    cli: &JailOptions,
) -> Result<std::collections::BTreeMap<String, String>> {
    let keys = |options: &JailOptions| -> Vec<String> {
        serde_json::to_value(options)
            .ok()
            .and_then(|value| {
                value
                    .as_object()
                    .map(|object| object.keys().cloned().collect())
            })
            .unwrap_or_default()
    };
    let file = match config_file {
        Some(path) => load_file(path)?,
        None => JailOptions::default(),
    };
    let profile_name = cli.profile.clone().or_else(|| file.profile.clone());
    let mut origins = std::collections::BTreeMap::new();
    if let Some(name) = &profile_name {
        for key in keys(&load_profile(name)?) {
            origins.insert(key, format!("profile {name}"));
        }
    }
    if let Some(path) = config_file {
        for key in keys(&file) {
            origins.insert(key, format!("config {}", path.display()));
        }
    }
    for key in keys(cli) {
        origins.remove(&key);
    }
    origins.remove("profile");
    Ok(origins)
}

pub fn load_profile(name: &str) -> Result<JailOptions> {
    let (_, text) = PROFILES
        .iter()
        .find(|(known, _)| *known == name)
        .ok_or_else(|| {
            let names: Vec<&str> = PROFILES.iter().map(|(known, _)| *known).collect();
            Error::input(format!(
                "--profile: unknown profile '{name}'; choose one of {}",
                names.join(", ")
            ))
        })?;
    let options = parse(text, &format!("profile {name}"))?;
    if options.profile.is_some() {
        return Err(Error::input(format!(
            "profile {name}: profiles cannot name a profile"
        )));
    }
    Ok(options)
}

fn load_file(path: &Path) -> Result<JailOptions> {
    let text = std::fs::read_to_string(path).map_err(|err| {
        Error::input(format!(
            "--config {}: cannot read it: {err}; give the path of a readable YAML file",
            path.display()
        ))
    })?;
    parse(&text, &path.display().to_string())
}

/// Parses YAML options; an error becomes one line: `origin:line:column: message (at `text`)`.
pub fn parse(text: &str, origin: &str) -> Result<JailOptions> {
    if text.trim().is_empty() {
        return Ok(JailOptions::default());
    }
    serde_saphyr::from_str::<JailOptions>(text)
        .map_err(|err| Error::input(brig_rootfs::yaml_error_line(&err, text, origin)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shipped_profile_parses() {
        for (name, _) in PROFILES {
            let options = load_profile(name).unwrap();
            assert!(!options.command.is_empty(), "profile {name} has no command");
        }
    }

    #[test]
    fn unknown_key_names_key_and_line() {
        let err = parse("uid: 5\nbogus: 1\n", "c.yaml").unwrap_err();
        let text = err.message();
        assert!(
            text.starts_with("c.yaml:2:1: unknown field `bogus`"),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
    }

    #[test]
    fn wrong_type_names_line_and_key() {
        let err = parse("net: none\nuid: alice\n", "c.yaml").unwrap_err();
        let text = err.message();
        assert!(text.starts_with("c.yaml:2:"), "{text}");
        assert!(text.contains("`uid: alice`"), "{text}");
    }

    #[test]
    fn bad_duration_is_explained() {
        let err = parse("time-limit: 5x\n", "c.yaml").unwrap_err();
        assert!(
            err.message().contains("not a duration"),
            "{}",
            err.message()
        );
    }

    #[test]
    fn cli_overrides_file_and_lists_append() {
        let file = parse("uid: 5\nenv: [A=1]\ncommand: [sh]\n", "f").unwrap();
        let cli = parse("uid: 7\nenv: [B=2]\n", "cli").unwrap();
        let merged = file.overlay(cli);
        assert_eq!(merged.uid, Some(7));
        assert_eq!(merged.env, vec!["A=1", "B=2"]);
        assert_eq!(merged.command, vec!["sh"]);
    }

    #[test]
    fn no_network_above_drops_the_filtered_one_below() {
        let server = parse(
            "allow-net: [a.test]
add-host: [\"a.test:10.0.0.1\"]
",
            "f",
        )
        .unwrap();
        let none = server.clone().overlay(
            parse(
                "net: none
",
                "cli",
            )
            .unwrap(),
        );
        assert!(none.allow_net.is_empty() && none.add_host.is_empty());
        let more = server.overlay(
            parse(
                "allow-net: [b.test]
",
                "cli",
            )
            .unwrap(),
        );
        assert_eq!(more.allow_net, ["a.test", "b.test"]);
        assert_eq!(more.add_host.len(), 1);
    }
}
