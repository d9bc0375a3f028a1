//! What the secrets tests share: a value no test prints by accident, and a probe that
//! shows everything a jail can see of itself, for the tests to search for that value.

/// Everything a jail can see of itself: its environment, every process's environ, and
/// every file under /etc, /tmp and its home (the CA bundle: its certificates only).
pub const SELF_PROBE: &str = "env && cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' && \
     find /etc /tmp \"$HOME\" -type f -exec cat {} + 2>/dev/null; echo files-done";

/// A value no test prints by accident: `sk-KIND-`, the pid and the time.
pub fn real_value(kind: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("sk-{kind}-{}-{nanos}", std::process::id())
}
