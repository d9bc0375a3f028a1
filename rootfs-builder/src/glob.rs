//! Path patterns for manifests: absolute, matched component by component; `*` and `?`
//! within one component, `**` for any number of components (including none).

use std::path::Path;

#[derive(Clone, Debug)]
pub struct Glob {
    parts: Vec<String>,
}

impl Glob {
    pub fn new(pattern: &str) -> Result<Glob, String> {
        if !pattern.starts_with('/') {
            return Err(format!(
                "'{pattern}' is relative; patterns are absolute paths in the root, e.g. /usr/**/__pycache__"
            ));
        }
        Ok(Glob {
            parts: components(pattern),
        })
    }

    pub fn has_wildcards(&self) -> bool {
        self.parts.iter().any(|part| part.contains(['*', '?']))
    }

    pub fn matches(&self, path: &Path) -> bool {
        let text = path.to_string_lossy();
        let parts = components(&text);
        let pattern: Vec<&str> = self.parts.iter().map(String::as_str).collect();
        let path: Vec<&str> = parts.iter().map(String::as_str).collect();
        match_parts(&pattern, &path)
    }
}

fn components(text: &str) -> Vec<String> {
    text.split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .map(str::to_string)
        .collect()
}

fn match_parts(pattern: &[&str], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((&"**", rest)) => (0..=path.len()).any(|skip| match_parts(rest, &path[skip..])),
        Some((first, rest)) => match path.split_first() {
            Some((name, path_rest)) => {
                match_component(first.as_bytes(), name.as_bytes()) && match_parts(rest, path_rest)
            }
            None => false,
        },
    }
}

/// `*` (any run of bytes) and `?` (one byte) within one path component.
pub fn match_component(pattern: &[u8], name: &[u8]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some((b'*', rest)) => (0..=name.len()).any(|skip| match_component(rest, &name[skip..])),
        Some((b'?', rest)) => !name.is_empty() && match_component(rest, &name[1..]),
        Some((byte, rest)) => name.first() == Some(byte) && match_component(rest, &name[1..]),
    }
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
}
