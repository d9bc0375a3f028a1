//! Path patterns for manifests, matched with `globset`: absolute, `*` and `?` within one
//! path component, `**` for any number of components (including none, also at the end).
//! Every other character is literal: globset's `[...]`, `{...}` and `\` are not manifest
//! syntax.

use globset::{GlobBuilder, GlobMatcher};
use std::path::Path;

#[derive(Clone, Debug)]
pub struct Glob {
    /// The pattern, and for one ending in `/**` the directory itself too.
    matchers: Vec<GlobMatcher>,
    wildcards: bool,
}

impl Glob {
    pub fn new(pattern: &str) -> Result<Glob, String> {
        if !pattern.starts_with('/') {
            return Err(format!(
                "'{pattern}' is relative; patterns are absolute paths in the root, e.g. /usr/**/__pycache__"
            ));
        }
        let parts: Vec<&str> = pattern
            .split('/')
            .filter(|part| !part.is_empty() && *part != ".")
            .collect();
        let mut texts = vec![format!("/{}", parts.join("/"))];
        if let Some((&"**", parent)) = parts.split_last()
            && !parent.is_empty()
        {
            texts.push(format!("/{}", parent.join("/")));
        }
        let matchers = texts
            .iter()
            .map(|text| compile(text, pattern))
            .collect::<Result<_, _>>()?;
        Ok(Glob {
            matchers,
            wildcards: pattern.contains(['*', '?']),
        })
    }

    pub fn has_wildcards(&self) -> bool {
        self.wildcards
    }

    pub fn matches(&self, path: &Path) -> bool {
        self.matchers.iter().any(|matcher| matcher.is_match(path))
    }
}

/// A pattern for one path component (a name in a directory), e.g. `python3.*`.
pub fn component(pattern: &str) -> Result<GlobMatcher, String> {
    compile(pattern, pattern)
}

/// `text` as a globset matcher in which only `*`, `?` and `**` are special.
fn compile(text: &str, pattern: &str) -> Result<GlobMatcher, String> {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            // A class of one character is globset's way to make a metacharacter literal.
            '[' | ']' | '{' | '}' => escaped.extend(['[', c, ']']),
            _ => escaped.push(c),
        }
    }
    GlobBuilder::new(&escaped)
        .literal_separator(true)
        .backslash_escape(false)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|err| format!("'{pattern}': {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns() {
        let glob = |p: &str| Glob::new(p).unwrap();
        assert!(glob("/usr/lib/python3.*/test").matches(Path::new("/usr/lib/python3.11/test")));
        assert!(!glob("/usr/lib/python3.*/test").matches(Path::new("/usr/lib/python3.11/tests")));
        assert!(glob("/usr/**/__pycache__").matches(Path::new("/usr/lib/a/b/__pycache__")));
        assert!(glob("/usr/**/__pycache__").matches(Path::new("/usr/__pycache__")));
        assert!(glob("/**/_test*.so").matches(Path::new("/x/_testcapi.so")));
        assert!(!glob("/a/?").matches(Path::new("/a/bc")));
        assert!(Glob::new("relative/x").is_err());
    }

    #[test]
    fn double_star_at_the_end_takes_the_directory_too() {
        let glob = Glob::new("/opt/mail/mime/**").unwrap();
        assert!(glob.matches(Path::new("/opt/mail/mime")));
        assert!(glob.matches(Path::new("/opt/mail/mime/a/b")));
        assert!(!glob.matches(Path::new("/opt/mail/mimes")));
        assert!(!glob.matches(Path::new("/opt/mail")));
    }

    #[test]
    fn wildcards_stay_in_their_component() {
        let glob = Glob::new("/usr/*/x").unwrap();
        assert!(glob.matches(Path::new("/usr/lib/x")));
        assert!(!glob.matches(Path::new("/usr/lib/a/x")));
        assert!(!Glob::new("/a?b").unwrap().matches(Path::new("/a/b")));
        // `**` inside a component is a `*`.
        let glob = Glob::new("/usr/lib**/x").unwrap();
        assert!(glob.matches(Path::new("/usr/lib64/x")));
        assert!(!glob.matches(Path::new("/usr/lib/a/x")));
    }

    #[test]
    fn empty_and_dot_components_are_ignored() {
        assert!(
            Glob::new("/opt//mail/./_*.py")
                .unwrap()
                .matches(Path::new("/opt/mail/_a.py"))
        );
    }

    #[test]
    fn brackets_braces_and_backslashes_are_literal() {
        for name in ["a[1]", "a{b,c}", "a\\b", "[", "}", "a[!x]", "[[:alpha:]]"] {
            let glob = Glob::new(&format!("/d/{name}*")).unwrap();
            assert!(
                glob.matches(&Path::new("/d").join(format!("{name}.txt"))),
                "{name}"
            );
            assert!(!glob.matches(Path::new("/d/ab")), "{name}");
            let one = component(name).unwrap();
            assert!(one.is_match(name), "{name}");
        }
        assert!(!component("a{b,c}").unwrap().is_match("ab"));
        assert!(!component("a[bc]").unwrap().is_match("ab"));
    }

    #[test]
    fn names_need_not_be_text() {
        use std::os::unix::ffi::OsStrExt;
        let name = std::ffi::OsStr::from_bytes(b"lib\xff.so");
        assert!(component("lib*.so").unwrap().is_match(name));
        assert!(component("lib?.so").unwrap().is_match(name));
    }
}
