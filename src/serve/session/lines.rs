//! What an interpreter writes on its control descriptor, cut into lines within a bound.
//!
//! The bytes are untrusted (a cell can write to descriptor 3): a line longer than the
//! bound is not kept whole. Its beginning is dropped as it comes (so the buffer never
//! holds more than the bound and one read), and what is left of it up to its newline is
//! handed on as a line, which no reply parses as (the interpreter is then replaced: a
//! broken protocol). Each byte is looked at once for a newline, however the line arrives.

/// Lines as they arrive, at most `limit` bytes of an unfinished one held.
pub struct LineBuffer {
    bytes: Vec<u8>,
    /// How many of `bytes` are known to hold no newline.
    scanned: usize,
    limit: usize,
}

impl LineBuffer {
    pub fn new(limit: usize) -> LineBuffer {
        LineBuffer {
            bytes: Vec::new(),
            scanned: 0,
            limit,
        }
    }

    /// Takes what was read: an unfinished line past the limit loses what it holds.
    pub fn push(&mut self, read: &[u8]) {
        self.bytes.extend_from_slice(read);
        if self.bytes.len() > self.limit && self.newline().is_none() {
            self.bytes.clear();
            self.scanned = 0;
        }
    }

    /// The next whole line, its newline included.
    pub fn next_line(&mut self) -> Option<Vec<u8>> {
        let end = self.newline()?;
        self.scanned = 0;
        Some(self.bytes.drain(..=end).collect())
    }

    /// Whether nothing arrived beyond the lines taken.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    fn newline(&mut self) -> Option<usize> {
        let found = self.bytes[self.scanned..]
            .iter()
            .position(|byte| *byte == b'\n')
            .map(|at| self.scanned + at);
        if found.is_none() {
            self.scanned = self.bytes.len();
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_whole_however_they_arrive() {
        let mut lines = LineBuffer::new(64);
        lines.push(b"{\"rea");
        assert_eq!(lines.next_line(), None);
        lines.push(b"dy\": true}\n{\"id\"");
        assert_eq!(
            lines.next_line().as_deref(),
            Some(&b"{\"ready\": true}\n"[..])
        );
        assert_eq!(lines.next_line(), None);
        assert!(!lines.is_empty());
        lines.push(b": 1}\n\n");
        assert_eq!(lines.next_line().as_deref(), Some(&b"{\"id\": 1}\n"[..]));
        assert_eq!(lines.next_line().as_deref(), Some(&b"\n"[..]));
        assert!(lines.is_empty());
    }

    /// A runaway line is never held past the bound (and one read): what is left of it
    /// comes as a line no reply parses as; the lines after it are whole again.
    #[test]
    fn a_line_past_the_limit_is_dropped_and_its_tail_is_no_reply() {
        let mut lines = LineBuffer::new(16);
        for _ in 0..100 {
            lines.push(&[b'x'; 10]);
            assert!(lines.bytes.len() <= 16 + 10);
            assert_eq!(lines.next_line(), None);
        }
        lines.push(b"xx\"}\n{\"id\": 2}\n");
        let tail = lines.next_line().unwrap();
        assert!(tail.len() <= 16 + 10 && tail.ends_with(b"xx\"}\n"));
        assert!(serde_json::from_slice::<serde_json::Value>(&tail).is_err());
        assert_eq!(lines.next_line().as_deref(), Some(&b"{\"id\": 2}\n"[..]));
        // A whole line that ends in the read which passes the limit is kept.
        let mut lines = LineBuffer::new(16);
        lines.push(&[b'y'; 12]);
        lines.push(b"yyy\nzzzzzz");
        assert_eq!(lines.next_line().map(|line| line.len()), Some(16));
        assert_eq!(lines.next_line(), None);
    }
}
