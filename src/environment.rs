//! The program's environment: a clean one (`PATH`, `HOME`, `LANG`, `TERM`), plus what
//! `--env` sets and `--env-pass` passes from brig's own; nothing else from the host.

use crate::error::{Error, Result};
use crate::identity::Identity;
use crate::options::JailOptions;

pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

pub fn resolve(options: &JailOptions, identity: &Identity) -> Result<Vec<String>> {
    let mut env: Vec<(String, String)> = vec![
        ("PATH".into(), DEFAULT_PATH.into()),
        ("HOME".into(), identity.home.display().to_string()),
        ("LANG".into(), "C.UTF-8".into()),
    ];
    if let Ok(term) = std::env::var("TERM") {
        env.push(("TERM".into(), term));
    }
    let mut set = |name: &str, value: String| match env.iter_mut().find(|(n, _)| n == name) {
        Some(slot) => slot.1 = value,
        None => env.push((name.into(), value)),
    };
    for name in &options.env_pass {
        check_env_name("--env-pass", name)?;
        if let Ok(value) = std::env::var(name) {
            set(name, value);
        }
    }
    for assignment in &options.env {
        let (name, value) = assignment.split_once('=').ok_or_else(|| {
            Error::input(format!(
                "--env {assignment}: expected NAME=VALUE; to pass a host variable use --env-pass {assignment}"
            ))
        })?;
        check_env_name("--env", name)?;
        set(name, value.into());
    }
    Ok(env
        .into_iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect())
}

fn check_env_name(field: &str, name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(Error::input(format!(
            "{field} {name}: not a variable name; use letters, digits and _"
        )));
    }
    Ok(())
}
