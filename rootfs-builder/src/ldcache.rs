//! The host's /etc/ld.so.cache (the `glibc-ld.so.cache1.1` format written by glibc 2.32
//! and later): library name to path, as the dynamic loader finds them.

use std::path::{Path, PathBuf};

const MAGIC: &[u8] = b"glibc-ld.so.cache1.1";
const HEADER: usize = 48;
const ENTRY: usize = 24;

/// (soname, path) in the cache's order, which is the loader's order of preference.
pub fn read(path: &Path) -> Vec<(String, PathBuf)> {
    std::fs::read(path)
        .ok()
        .map(|bytes| parse(&bytes))
        .unwrap_or_default()
}

pub fn parse(bytes: &[u8]) -> Vec<(String, PathBuf)> {
    if !bytes.starts_with(MAGIC) || bytes.len() < HEADER {
        return Vec::new();
    }
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_ne_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
    };
    let Some(count) = u32_at(20) else {
        return Vec::new();
    };
    let string = |offset: u32| -> Option<String> {
        let tail = bytes.get(offset as usize..)?;
        let end = tail.iter().position(|&b| b == 0)?;
        Some(String::from_utf8_lossy(&tail[..end]).into_owned())
    };
    (0..count as usize)
        .filter_map(|index| {
            let at = HEADER + index * ENTRY;
            let key = string(u32_at(at + 4)?)?;
            let value = string(u32_at(at + 8)?)?;
            Some((key, PathBuf::from(value)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_cache_names_libc() {
        let entries = super::read(std::path::Path::new("/etc/ld.so.cache"));
        if entries.is_empty() {
            eprintln!("no glibc-ld.so.cache1.1 here; the builder falls back to standard dirs");
            return;
        }
        assert!(
            entries
                .iter()
                .any(|(name, path)| name == "libc.so.6" && path.is_absolute()),
            "{entries:?}"
        );
    }
}
