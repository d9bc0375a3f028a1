//! A seccompiler JSON profile compiled to BPF programs, in install order, each laid out
//! compactly by [`crate::dispatch`]. brig uses it at run time for `--seccomp FILE` and
//! `--seccomp-log`; build.rs compiles the same file to precompile the built-in profiles.

use crate::dispatch;
use seccompiler::{BpfProgram, TargetArch};
use std::collections::BTreeMap;

/// Compiles every filter of a profile, in install order; the error is one line.
///
/// Installing a filter is itself a system call that the filters already installed must
/// allow. So filters that allow what they do not match (denylists such as `enosys`) go
/// first and allowlists last, each group in name order; an allowlist installed before
/// another one would have to allow `seccomp`.
pub fn compile(text: &str, arch: TargetArch) -> Result<Vec<BpfProgram>, String> {
    let map = seccompiler::compile_from_json(text.as_bytes(), arch)
        .map_err(|err| one_line(&err.to_string()))?;
    if map.is_empty() {
        return Err("it holds no filter".into());
    }
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|err| one_line(&err.to_string()))?;
    let allows_the_rest = |name: &str| {
        let filter = &value[name];
        let mismatch = filter
            .get("mismatch_action")
            .or_else(|| filter.get("default_action"));
        mismatch.and_then(serde_json::Value::as_str) == Some("allow")
    };
    let ordered: BTreeMap<(bool, String), BpfProgram> = map
        .into_iter()
        .map(|(name, program)| ((!allows_the_rest(&name), name), program))
        .collect();
    Ok(ordered
        .into_values()
        .map(|program| dispatch::optimize(&program))
        .collect())
}

pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
