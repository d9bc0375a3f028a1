//! brig's exit status: the one place that knows the numbers. `brig --help`, the man page
//! (generated from it) and the README's table come from `ExitStatus::TABLE`; a test holds
//! the README to it.
//!
//! A server's refusal to retry later (`ErrorKind::Busy`) has no status of its own: every
//! number from 0 to 255 is one a program can exit with, so a caller that retried on, say,
//! 75 (sysexits' EX_TEMPFAIL) would run again a program that had run and exited 75. It
//! ends as 125 like brig's other failures; the error frame's `kind`, and the clients'
//! `retryable`, tell it apart without that ambiguity.

/// How `brig run` ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExitStatus {
    /// The program exited with this status.
    Exited(i32),
    /// The program was killed by this signal: 128 + N.
    Signaled(i32),
    /// brig killed the jail at a limit it enforces itself (`--time-limit`, `--output-limit`).
    LimitReached,
    /// brig itself failed: bad input, or a setup step the kernel refused.
    BrigFailed,
    /// The program could not be executed.
    CannotExecute,
    /// The program was not found.
    NotFound,
}

impl ExitStatus {
    pub const LIMIT_REACHED: i32 = 124;
    pub const BRIG_FAILED: i32 = 125;
    pub const CANNOT_EXECUTE: i32 = 126;
    pub const NOT_FOUND: i32 = 127;

    /// The number brig exits with.
    pub fn code(self) -> i32 {
        match self {
            ExitStatus::Exited(code) => code,
            ExitStatus::Signaled(signal) => 128 + signal,
            ExitStatus::LimitReached => Self::LIMIT_REACHED,
            ExitStatus::BrigFailed => Self::BRIG_FAILED,
            ExitStatus::CannotExecute => Self::CANNOT_EXECUTE,
            ExitStatus::NotFound => Self::NOT_FOUND,
        }
    }

    /// Each status and what it means, as `--help`, the man page and the README show it.
    pub const TABLE: &'static [(&'static str, &'static str)] = &[
        ("N", "the program exited with status N"),
        (
            "128+N",
            "the program was killed by signal N (159 = SIGSYS: its seccomp profile killed it)",
        ),
        (
            "124",
            "brig killed the jail at --time-limit or --output-limit",
        ),
        (
            "125",
            "brig itself failed (bad option or config, setup failure), or a server refused the run for now (kind busy: retry later); one line on stderr says why",
        ),
        ("126", "the program could not be executed"),
        ("127", "the program was not found"),
    ];

    /// The table as `--help` prints it.
    pub fn help_text() -> String {
        let mut text = String::from("Exit status of `brig run`:");
        for (status, meaning) in Self::TABLE {
            text.push_str(&format!("\n  {status:<8} {meaning}"));
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_every_fixed_code() {
        for status in [
            ExitStatus::LimitReached,
            ExitStatus::BrigFailed,
            ExitStatus::CannotExecute,
            ExitStatus::NotFound,
        ] {
            let code = status.code().to_string();
            assert!(
                ExitStatus::TABLE.iter().any(|(row, _)| *row == code),
                "{code}"
            );
        }
        assert_eq!(ExitStatus::Signaled(9).code(), 137);
    }

    /// README's "Exit status" table says what the code does, row for row.
    #[test]
    fn readme_table_matches() {
        let readme = include_str!("../README.md");
        for (status, meaning) in ExitStatus::TABLE {
            let first_words: String = meaning
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ");
            let row = readme
                .lines()
                .find(|line| line.starts_with(&format!("| {status} |")))
                .unwrap_or_else(|| panic!("README has no exit status row for {status}"));
            assert!(
                row.contains(&first_words),
                "README's row for {status} ({row}) does not say: {meaning}"
            );
        }
    }
}
