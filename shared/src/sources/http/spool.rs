//! A page's body as it arrives: in memory up to a threshold, then in an anonymous temporary
//! file, so a page of any size (up to [`super::HttpSourceOptions::max_page_bytes`]) takes a
//! bounded amount of memory. A spooled body is read back by position (`pread`), so several
//! readers of one body never share a file offset.

use std::fs::File;
use std::io::{self, BufRead, Read, Write};
use std::os::unix::fs::FileExt as _;
use std::sync::Arc;

/// A whole response body.
pub(super) enum Body {
    /// A body no larger than the spool threshold.
    Memory(Vec<u8>),
    /// A larger one, in an unlinked temporary file of `len` bytes.
    File {
        /// The file (already deleted from its directory).
        file: File,
        /// Its length.
        len: u64,
    },
}

impl Body {
    /// The body's length in bytes.
    pub(super) fn len(&self) -> u64 {
        match self {
            Body::Memory(bytes) => bytes.len() as u64,
            Body::File { len, .. } => *len,
        }
    }

    /// Up to `n` bytes from the start (for messages and format sniffing).
    pub(super) fn head(&self, n: usize) -> Vec<u8> {
        let mut out = vec![0; n.min(usize::try_from(self.len()).unwrap_or(usize::MAX))];
        let read = self.read_at(0, &mut out).unwrap_or(0);
        out.truncate(read);
        out
    }

    /// Bytes `[from, to)`, read whole.
    pub(super) fn range(&self, from: u64, to: u64) -> io::Result<Vec<u8>> {
        let size = usize::try_from(to.saturating_sub(from))
            .map_err(|_| io::Error::other("range too large"))?;
        let mut out = vec![0; size];
        let mut done = 0;
        while done < size {
            let n = self.read_at(from + done as u64, &mut out[done..])?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            done += n;
        }
        Ok(out)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Body::Memory(bytes) => {
                let start = usize::try_from(offset)
                    .unwrap_or(usize::MAX)
                    .min(bytes.len());
                let n = buf.len().min(bytes.len() - start);
                buf[..n].copy_from_slice(&bytes[start..start + n]);
                Ok(n)
            }
            Body::File { file, len } => {
                if offset >= *len {
                    return Ok(0);
                }
                let room = usize::try_from(*len - offset).unwrap_or(usize::MAX);
                let n = buf.len().min(room);
                file.read_at(&mut buf[..n], offset)
            }
        }
    }
}

/// A buffered reader of a shared body from an offset.
pub(super) struct BodyReader {
    body: Arc<Body>,
    pos: u64,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl BodyReader {
    /// Read `body` from `offset`.
    pub(super) fn new(body: Arc<Body>, offset: u64) -> BodyReader {
        BodyReader {
            body,
            pos: offset,
            buf: vec![0; 64 * 1024].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// The offset of the next byte [`Read`] or [`BufRead`] would give.
    pub(super) fn offset(&self) -> u64 {
        self.pos - (self.end - self.start) as u64
    }
}

impl Read for BodyReader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let available = self.fill_buf()?;
        let n = available.len().min(out.len());
        out[..n].copy_from_slice(&available[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for BodyReader {
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        if self.start == self.end {
            let n = self.body.read_at(self.pos, &mut self.buf)?;
            self.pos += n as u64;
            self.start = 0;
            self.end = n;
        }
        Ok(&self.buf[self.start..self.end])
    }

    fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
    }
}

/// Collects a body: in memory up to `threshold` bytes, then in a temporary file.
pub(super) struct Spool {
    threshold: usize,
    memory: Vec<u8>,
    file: Option<io::BufWriter<File>>,
    len: u64,
}

impl Spool {
    /// An empty spool that moves to a file past `threshold` bytes.
    pub(super) fn new(threshold: usize) -> Spool {
        Spool {
            threshold,
            memory: Vec::new(),
            file: None,
            len: 0,
        }
    }

    /// Room for a body the server announced as `length` bytes (its `Content-Length`), up to
    /// the threshold: the body is then copied once, not grown by doubling.
    pub(super) fn expecting(mut self, length: Option<u64>) -> Spool {
        if let Some(length) = length {
            let room = usize::try_from(length).map_or(self.threshold, |l| l.min(self.threshold));
            self.memory.reserve_exact(room);
        }
        self
    }

    /// Bytes written so far.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// Append `chunk`.
    pub(super) fn write(&mut self, chunk: &[u8]) -> io::Result<()> {
        self.len += chunk.len() as u64;
        if self.file.is_none() && self.memory.len() + chunk.len() <= self.threshold {
            self.memory.extend_from_slice(chunk);
            return Ok(());
        }
        if self.file.is_none() {
            let mut file = io::BufWriter::with_capacity(256 * 1024, tempfile::tempfile()?);
            file.write_all(&std::mem::take(&mut self.memory))?;
            self.file = Some(file);
        }
        match self.file.as_mut() {
            Some(file) => file.write_all(chunk),
            None => Err(io::Error::other("spool file missing")),
        }
    }

    /// The body written.
    pub(super) fn finish(self) -> io::Result<Body> {
        match self.file {
            None => Ok(Body::Memory(self.memory)),
            Some(file) => {
                let file = file.into_inner().map_err(|e| e.into_error())?;
                Ok(Body::File {
                    file,
                    len: self.len,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_past_the_threshold_moves_to_a_file_and_reads_back_the_same() {
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        for threshold in [usize::MAX, 0, 1000] {
            let mut spool = Spool::new(threshold);
            for chunk in data.chunks(7777) {
                spool.write(chunk).unwrap();
            }
            assert_eq!(spool.len(), data.len() as u64);
            let body = Arc::new(spool.finish().unwrap());
            assert_eq!(
                matches!(*body, Body::File { .. }),
                threshold < data.len(),
                "threshold {threshold}"
            );
            let mut back = Vec::new();
            BodyReader::new(Arc::clone(&body), 0)
                .read_to_end(&mut back)
                .unwrap();
            assert_eq!(back, data);
            assert_eq!(body.range(10, 20).unwrap(), data[10..20]);
            assert_eq!(body.head(5), data[..5]);
            let mut reader = BodyReader::new(Arc::clone(&body), 199_990);
            let mut tail = Vec::new();
            reader.read_to_end(&mut tail).unwrap();
            assert_eq!(tail, data[199_990..]);
            assert_eq!(reader.offset(), data.len() as u64);
        }
    }
}
