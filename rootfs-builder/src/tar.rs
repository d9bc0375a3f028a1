//! A minimal, deterministic tar writer: POSIX ustar headers, with a pax extended header
//! for names and link targets that do not fit. Owners are 0:0 (`root`), times fixed.

use std::io::{self, Write};

const BLOCK: usize = 512;

pub enum Kind<'a> {
    Dir,
    File { size: u64 },
    Symlink { target: &'a [u8] },
}

pub struct Writer<W: Write> {
    out: W,
    mtime: u64,
}

impl<W: Write> Writer<W> {
    pub fn new(out: W, mtime: u64) -> Writer<W> {
        Writer { out, mtime }
    }

    /// Writes one entry's header; for a file, the caller then writes exactly `size` bytes
    /// with `write_data` and ends it with `end_data`.
    pub fn header(&mut self, path: &[u8], mode: u32, kind: Kind) -> io::Result<()> {
        let mut name = path.to_vec();
        if matches!(kind, Kind::Dir) {
            name.push(b'/');
        }
        let (typeflag, size, link) = match kind {
            Kind::Dir => (b'5', 0, &[][..]),
            Kind::File { size } => (b'0', size, &[][..]),
            Kind::Symlink { target } => (b'2', 0, target),
        };
        let (short_name, long_name) = split_name(&name);
        let mut records = Vec::new();
        if long_name {
            records.extend(pax_record("path", &name));
        }
        if link.len() > 100 {
            records.extend(pax_record("linkpath", link));
        }
        if !records.is_empty() {
            let pax_name = b"PaxHeaders/entry";
            let header = ustar(
                pax_name,
                &[],
                0o644,
                records.len() as u64,
                self.mtime,
                b'x',
                &[],
            );
            self.out.write_all(&header)?;
            self.out.write_all(&records)?;
            self.pad(records.len() as u64)?;
        }
        let (name_field, prefix) = short_name;
        let link_field = if link.len() > 100 { &link[..100] } else { link };
        let header = ustar(
            &name_field,
            &prefix,
            mode,
            size,
            self.mtime,
            typeflag,
            link_field,
        );
        self.out.write_all(&header)
    }

    pub fn write_data(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write_all(bytes)
    }

    pub fn end_data(&mut self, size: u64) -> io::Result<()> {
        self.pad(size)
    }

    fn pad(&mut self, size: u64) -> io::Result<()> {
        let rest = (BLOCK - (size as usize % BLOCK)) % BLOCK;
        self.out.write_all(&vec![0u8; rest])
    }

    /// Two zero blocks end the archive.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.write_all(&[0u8; BLOCK * 2])?;
        self.out.flush()?;
        Ok(self.out)
    }
}

/// (name, prefix) for the ustar fields, and whether the name needs a pax record.
fn split_name(name: &[u8]) -> ((Vec<u8>, Vec<u8>), bool) {
    if name.len() <= 100 {
        return ((name.to_vec(), Vec::new()), false);
    }
    // ustar: prefix (<= 155) + '/' + name (<= 100). Use pax anyway when it does not fit.
    let body = name.strip_suffix(b"/").unwrap_or(name);
    for (index, &byte) in body.iter().enumerate() {
        if byte == b'/' && index <= 155 && name.len() - index - 1 <= 100 {
            return ((name[index + 1..].to_vec(), name[..index].to_vec()), false);
        }
    }
    let cut = name.len().min(100);
    ((name[name.len() - cut..].to_vec(), Vec::new()), true)
}

/// A pax record: "LEN KEY=VALUE\n", LEN counting itself.
fn pax_record(key: &str, value: &[u8]) -> Vec<u8> {
    let body = key.len() + value.len() + 3; // ' ', '=', '\n'
    let mut len = body + 1;
    while len != body + len.to_string().len() {
        len = body + len.to_string().len();
    }
    let mut record = format!("{len} {key}=").into_bytes();
    record.extend_from_slice(value);
    record.push(b'\n');
    record
}

fn ustar(
    name: &[u8],
    prefix: &[u8],
    mode: u32,
    size: u64,
    mtime: u64,
    typeflag: u8,
    link: &[u8],
) -> [u8; BLOCK] {
    let mut header = [0u8; BLOCK];
    put(&mut header[0..100], name);
    octal(&mut header[100..108], u64::from(mode));
    octal(&mut header[108..116], 0);
    octal(&mut header[116..124], 0);
    octal(&mut header[124..136], size);
    octal(&mut header[136..148], mtime);
    header[156] = typeflag;
    put(&mut header[157..257], link);
    header[257..263].copy_from_slice(b"ustar\0");
    header[263..265].copy_from_slice(b"00");
    put(&mut header[265..297], b"root");
    put(&mut header[297..329], b"root");
    octal(&mut header[329..337], 0);
    octal(&mut header[337..345], 0);
    put(&mut header[345..500], prefix);
    // The checksum is computed with its own field as spaces.
    header[148..156].copy_from_slice(b"        ");
    let sum: u32 = header.iter().map(|&b| u32::from(b)).sum();
    let text = format!("{sum:06o}\0 ");
    header[148..156].copy_from_slice(text.as_bytes());
    header
}

fn put(field: &mut [u8], value: &[u8]) {
    let len = value.len().min(field.len());
    field[..len].copy_from_slice(&value[..len]);
}

/// Zero-padded octal with a NUL terminator; numbers too large for ustar (8 GiB files)
/// use the base-256 form GNU and POSIX readers accept.
fn octal(field: &mut [u8], value: u64) {
    let digits = field.len() - 1;
    let text = format!("{value:0digits$o}");
    if text.len() > digits {
        field.fill(0);
        field[0] = 0x80;
        let bytes = value.to_be_bytes();
        let start = field.len() - bytes.len();
        field[start..].copy_from_slice(&bytes);
        return;
    }
    field[..digits].copy_from_slice(text.as_bytes());
    field[digits] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pax_lengths_count_themselves() {
        let record = pax_record("path", &[b'a'; 95]);
        let text = String::from_utf8(record.clone()).unwrap();
        let (len, _) = text.split_once(' ').unwrap();
        assert_eq!(len.parse::<usize>().unwrap(), record.len());
    }

    #[test]
    fn header_checksum_and_layout() {
        let mut out = Vec::new();
        let mut writer = Writer::new(&mut out, 0);
        writer
            .header(b"usr/bin/x", 0o755, Kind::File { size: 3 })
            .unwrap();
        writer.write_data(b"abc").unwrap();
        writer.end_data(3).unwrap();
        writer.finish().unwrap();
        assert_eq!(out.len(), 512 * 4);
        assert_eq!(&out[257..263], b"ustar\0");
        let stored = u32::from_str_radix(std::str::from_utf8(&out[148..154]).unwrap(), 8).unwrap();
        let mut copy = out[..512].to_vec();
        copy[148..156].copy_from_slice(b"        ");
        assert_eq!(stored, copy.iter().map(|&b| u32::from(b)).sum::<u32>());
    }
}
