//! What brig-rootfs needs of ELF to follow a program to its shared libraries: the class,
//! byte order and machine, PT_INTERP, and DT_NEEDED, DT_RPATH and DT_RUNPATH from the
//! dynamic segment. Parsed with the `object` crate through a read cache, so only the
//! headers, the dynamic segment and the strings asked for are read, never the whole file.

use object::elf::{
    DT_NEEDED, DT_NULL, DT_RPATH, DT_RUNPATH, DT_STRSZ, DT_STRTAB, ELFMAG, EM_386, EM_AARCH64,
    EM_ARM, EM_RISCV, EM_X86_64, FileHeader32, FileHeader64, Machine, PT_LOAD,
};
use object::read::elf::{Dyn, FileHeader, ProgramHeader};
use object::{Endianness, FileKind, ReadCache, ReadRef, StringTable};
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Elf {
    pub class64: bool,
    pub little_endian: bool,
    pub machine: Machine,
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

/// Parses `path`; Ok(None) when it is not an ELF file.
pub fn read(path: &Path) -> io::Result<Option<Elf>> {
    let mut file = File::open(path)?;
    let mut magic = [0u8; 4];
    match file.read_exact(&mut magic) {
        Ok(()) => {}
        Err(err) if err.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(err) => return Err(err),
    }
    if magic != ELFMAG {
        return Ok(None);
    }
    let data = ReadCache::new(file);
    let parsed = match FileKind::parse(&data) {
        Ok(FileKind::Elf32) => parse::<FileHeader32<Endianness>, _>(&data),
        Ok(FileKind::Elf64) => parse::<FileHeader64<Endianness>, _>(&data),
        Ok(_) => Err("unknown class".into()),
        Err(err) => Err(err.into()),
    };
    parsed.map(Some).map_err(|err| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: malformed ELF: {err}", path.display()),
        )
    })
}

/// The error: object's, or what this reader found missing.
type Malformed = Box<dyn std::error::Error>;

fn parse<'data, H, R>(data: R) -> Result<Elf, Malformed>
where
    H: FileHeader<Endian = Endianness>,
    R: ReadRef<'data>,
{
    let header = H::parse(data)?;
    let endian = header.endian()?;
    let mut elf = Elf {
        class64: header.is_class_64(),
        little_endian: header.is_little_endian(),
        machine: header.e_machine(endian),
        ..Elf::default()
    };
    let segments = header.program_headers(endian, data)?;
    let mut dynamic = None;
    for segment in segments {
        if let Some(interp) = segment.interpreter(endian, data)? {
            elf.interp = Some(String::from_utf8_lossy(interp).into_owned());
        }
        if let Some(entries) = segment.dynamic(endian, data)? {
            dynamic = Some(entries);
        }
    }
    let Some(dynamic) = dynamic else {
        return Ok(elf);
    };
    let mut strtab = None;
    let mut strsz = None;
    let mut wanted = Vec::new();
    for entry in dynamic {
        let tag = entry.tag(endian);
        if tag == DT_NULL {
            break;
        }
        let value: u64 = entry.d_val(endian).into();
        match tag {
            DT_STRTAB => strtab = Some(value),
            DT_STRSZ => strsz = Some(value),
            DT_NEEDED | DT_RPATH | DT_RUNPATH => wanted.push((tag, value)),
            _ => {}
        }
    }
    if wanted.is_empty() {
        return Ok(elf);
    }
    let (Some(strtab), Some(strsz)) = (strtab, strsz) else {
        return Err("dynamic segment without a string table".into());
    };
    // DT_STRTAB is an address: the PT_LOAD segment holding it gives its file offset.
    let offset = segments
        .iter()
        .filter(|segment| segment.p_type(endian) == PT_LOAD)
        .find_map(|segment| {
            let vaddr: u64 = segment.p_vaddr(endian).into();
            let (offset, filesz) = segment.file_range(endian);
            (strtab >= vaddr && strtab - vaddr < filesz).then(|| strtab - vaddr + offset)
        })
        .ok_or("string table outside every segment")?;
    let strings = StringTable::new(data, offset, offset.saturating_add(strsz));
    for (tag, value) in wanted {
        let text = u32::try_from(value)
            .ok()
            .and_then(|value| strings.get(value).ok())
            .ok_or("string offset out of the table")?;
        let text = String::from_utf8_lossy(text);
        match tag {
            DT_NEEDED => elf.needed.push(text.into_owned()),
            DT_RPATH => elf.rpath.extend(split_path_list(&text)),
            _ => elf.runpath.extend(split_path_list(&text)),
        }
    }
    Ok(elf)
}

/// A `#!` line's interpreter, for scripts.
pub fn shebang(path: &Path) -> io::Result<Option<String>> {
    let mut head = Vec::with_capacity(256);
    File::open(path)?.take(256).read_to_end(&mut head)?;
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

    #[test]
    fn bad_headers_are_malformed_and_short_files_are_not_elf() {
        let path = std::env::temp_dir().join(format!("bt-elf-bad-{}", std::process::id()));
        let mut bytes = b"\x7fELF\x03\x01\x01".to_vec();
        bytes.resize(64, 0);
        std::fs::write(&path, &bytes).unwrap();
        let err = read(&path).unwrap_err();
        assert!(err.to_string().contains("malformed ELF"), "{err}");
        std::fs::write(&path, b"\x7fEL").unwrap();
        assert_eq!(read(&path).unwrap(), None);
        std::fs::remove_file(&path).unwrap();
    }
}
