//! Just enough of ELF to follow a program to its shared libraries: the class and machine,
//! PT_INTERP, and DT_NEEDED, DT_RPATH and DT_RUNPATH from the dynamic section. Reads only
//! the headers and the dynamic string table, never the whole file.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Elf {
    pub class64: bool,
    pub little_endian: bool,
    pub machine: u16,
    /// PT_INTERP: the program's dynamic loader.
    pub interp: Option<String>,
    pub needed: Vec<String>,
    pub rpath: Vec<String>,
    pub runpath: Vec<String>,
}

impl Elf {
    /// Whether a library of class and machine `other` can be loaded into this object.
    pub fn compatible(&self, other: &Elf) -> bool {
        self.class64 == other.class64
            && self.little_endian == other.little_endian
            && self.machine == other.machine
    }

    /// The Debian multiarch directory name for this machine, e.g. `x86_64-linux-gnu`.
    pub fn multiarch(&self) -> Option<&'static str> {
        match (self.machine, self.class64) {
            (EM_X86_64, true) => Some("x86_64-linux-gnu"),
            (EM_AARCH64, true) => Some("aarch64-linux-gnu"),
            (EM_386, false) => Some("i386-linux-gnu"),
            (EM_ARM, false) => Some("arm-linux-gnueabihf"),
            (EM_RISCV, true) => Some("riscv64-linux-gnu"),
            _ => None,
        }
    }
}

const EM_386: u16 = 3;
const EM_ARM: u16 = 40;
const EM_X86_64: u16 = 62;
const EM_AARCH64: u16 = 183;
const EM_RISCV: u16 = 243;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;

/// Sanity bounds: headers of real objects are far smaller.
const MAX_PHNUM: u64 = 4096;
const MAX_DYNAMIC: u64 = 1 << 20;
const MAX_STRTAB: u64 = 16 << 20;

/// Parses `path`; Ok(None) when it is not an ELF file.
pub fn read(path: &Path) -> io::Result<Option<Elf>> {
    let file = File::open(path)?;
    let mut ident = [0u8; 64];
    let got = read_up_to(&file, 0, &mut ident)?;
    if got < 52 || ident[..4] != *b"\x7fELF" {
        return Ok(None);
    }
    let bad = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: malformed ELF: {why}", path.display()),
        )
    };
    let class64 = match ident[4] {
        1 => false,
        2 => true,
        _ => return Err(bad("unknown class")),
    };
    let little_endian = match ident[5] {
        1 => true,
        2 => false,
        _ => return Err(bad("unknown byte order")),
    };
    if class64 && got < 64 {
        return Err(bad("short header"));
    }
    let r = Fields { little_endian };
    let machine = r.u16(&ident, 18);
    let (phoff, phentsize, phnum) = if class64 {
        (r.u64(&ident, 32), r.u16(&ident, 54), r.u16(&ident, 56))
    } else {
        (
            u64::from(r.u32(&ident, 28)),
            r.u16(&ident, 42),
            r.u16(&ident, 44),
        )
    };
    let mut elf = Elf {
        class64,
        little_endian,
        machine,
        ..Elf::default()
    };
    let min_entsize = if class64 { 56 } else { 32 };
    if phnum == 0 {
        return Ok(Some(elf));
    }
    if usize::from(phentsize) < min_entsize || u64::from(phnum) > MAX_PHNUM {
        return Err(bad("bad program header table"));
    }
    let table = read_exact_at(&file, phoff, usize::from(phentsize) * usize::from(phnum))
        .map_err(|_| bad("program header table out of the file"))?;
    // (vaddr, offset, filesz) of each PT_LOAD, to turn DT_STRTAB's address into an offset.
    let mut loads = Vec::new();
    let mut dynamic = None;
    for index in 0..usize::from(phnum) {
        let entry = &table[index * usize::from(phentsize)..];
        let p_type = r.u32(entry, 0);
        let (offset, vaddr, filesz) = if class64 {
            (r.u64(entry, 8), r.u64(entry, 16), r.u64(entry, 32))
        } else {
            (
                u64::from(r.u32(entry, 4)),
                u64::from(r.u32(entry, 8)),
                u64::from(r.u32(entry, 16)),
            )
        };
        match p_type {
            PT_LOAD => loads.push((vaddr, offset, filesz)),
            PT_DYNAMIC => dynamic = Some((offset, filesz)),
            PT_INTERP => {
                let bytes = read_exact_at(&file, offset, filesz.min(4096) as usize)
                    .map_err(|_| bad("PT_INTERP out of the file"))?;
                elf.interp = Some(c_string(&bytes));
            }
            _ => {}
        }
    }
    let Some((dyn_offset, dyn_size)) = dynamic else {
        return Ok(Some(elf));
    };
    let dyn_bytes = read_exact_at(&file, dyn_offset, dyn_size.min(MAX_DYNAMIC) as usize)
        .map_err(|_| bad("dynamic section out of the file"))?;
    let entsize = if class64 { 16 } else { 8 };
    let mut strtab = None;
    let mut strsz = None;
    let mut wanted: Vec<(u64, u64)> = Vec::new();
    for entry in dyn_bytes.chunks_exact(entsize) {
        let (tag, value) = if class64 {
            (r.u64(entry, 0), r.u64(entry, 8))
        } else {
            (u64::from(r.u32(entry, 0)), u64::from(r.u32(entry, 4)))
        };
        match tag {
            DT_NULL => break,
            DT_STRTAB => strtab = Some(value),
            DT_STRSZ => strsz = Some(value),
            DT_NEEDED | DT_RPATH | DT_RUNPATH => wanted.push((tag, value)),
            _ => {}
        }
    }
    if wanted.is_empty() {
        return Ok(Some(elf));
    }
    let (Some(strtab), Some(strsz)) = (strtab, strsz) else {
        return Err(bad("dynamic section without a string table"));
    };
    let strtab_offset = loads
        .iter()
        .find(|(vaddr, _, filesz)| strtab >= *vaddr && strtab < vaddr + filesz)
        .map(|(vaddr, offset, _)| strtab - vaddr + offset)
        .ok_or_else(|| bad("string table outside every segment"))?;
    let strings = read_exact_at(&file, strtab_offset, strsz.min(MAX_STRTAB) as usize)
        .map_err(|_| bad("string table out of the file"))?;
    for (tag, value) in wanted {
        let Some(bytes) = strings.get(value as usize..) else {
            return Err(bad("string offset out of the table"));
        };
        let text = c_string(bytes);
        match tag {
            DT_NEEDED => elf.needed.push(text),
            DT_RPATH => elf.rpath.extend(split_path_list(&text)),
            _ => elf.runpath.extend(split_path_list(&text)),
        }
    }
    Ok(Some(elf))
}

/// A `#!` line's interpreter, for scripts.
pub fn shebang(path: &Path) -> io::Result<Option<String>> {
    let file = File::open(path)?;
    let mut head = [0u8; 256];
    let got = read_up_to(&file, 0, &mut head)?;
    let head = &head[..got];
    let Some(rest) = head.strip_prefix(b"#!") else {
        return Ok(None);
    };
    let line = rest.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    Ok(line.split_whitespace().next().map(str::to_string))
}

fn split_path_list(text: &str) -> Vec<String> {
    text.split(':')
        .filter(|dir| !dir.is_empty())
        .map(str::to_string)
        .collect()
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

struct Fields {
    little_endian: bool,
}

impl Fields {
    fn u16(&self, bytes: &[u8], at: usize) -> u16 {
        let raw = [bytes[at], bytes[at + 1]];
        if self.little_endian {
            u16::from_le_bytes(raw)
        } else {
            u16::from_be_bytes(raw)
        }
    }
    fn u32(&self, bytes: &[u8], at: usize) -> u32 {
        let raw: [u8; 4] = bytes[at..at + 4].try_into().expect("4 bytes");
        if self.little_endian {
            u32::from_le_bytes(raw)
        } else {
            u32::from_be_bytes(raw)
        }
    }
    fn u64(&self, bytes: &[u8], at: usize) -> u64 {
        let raw: [u8; 8] = bytes[at..at + 8].try_into().expect("8 bytes");
        if self.little_endian {
            u64::from_le_bytes(raw)
        } else {
            u64::from_be_bytes(raw)
        }
    }
}

fn read_up_to(file: &File, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read_at(&mut buf[got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(got)
}

fn read_exact_at(file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, offset)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_dynamic_program() {
        // /bin/sh is dynamically linked on every glibc distribution brig supports.
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        let elf = read(&sh).unwrap().expect("an ELF file");
        assert!(elf.interp.is_some(), "{elf:?}");
        assert!(
            elf.needed.iter().any(|lib| lib.starts_with("libc.so")),
            "{elf:?}"
        );
    }

    #[test]
    fn text_is_not_elf() {
        let path = std::env::temp_dir().join(format!("bt-elf-test-{}", std::process::id()));
        std::fs::write(&path, "#!/bin/sh -e\necho hi\n").unwrap();
        assert_eq!(read(&path).unwrap(), None);
        assert_eq!(shebang(&path).unwrap().as_deref(), Some("/bin/sh"));
        std::fs::remove_file(&path).unwrap();
    }
}
