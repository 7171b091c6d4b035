//! Compressed and plain input streams, with a count of the bytes taken from disk.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use flate2::read::MultiGzDecoder;

use crate::sources::SourceError;

/// The size of the read buffer over each file.
pub(crate) const READ_BUFFER_BYTES: usize = 1024 * 1024;

/// The first bytes of every gzip member.
pub(crate) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// How a file's bytes are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Compression {
    /// Plain bytes.
    None,
    /// One or more concatenated gzip members.
    Gzip,
}

/// A reader that counts the bytes it hands out, in a counter others can watch.
#[derive(Debug)]
pub(crate) struct CountingReader<R> {
    inner: R,
    count: Arc<AtomicU64>,
}

impl<R: Read> CountingReader<R> {
    /// Wrap `inner`; the returned counter follows the bytes read through the wrapper.
    pub(crate) fn new(inner: R) -> (Self, Arc<AtomicU64>) {
        let count = Arc::new(AtomicU64::new(0));
        let reader = CountingReader {
            inner,
            count: Arc::clone(&count),
        };
        (reader, count)
    }
}

impl<R: Read> Read for CountingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.count.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Opens a second stream of an input from its beginning (a CSV reader wants one to read its
/// header again on resume, and to step over a record too long to hold).
pub(crate) type Reopen = Box<dyn Fn() -> Result<InputStream, SourceError> + Send>;

/// A file's decompressed byte stream, buffered.
pub(crate) struct InputStream {
    /// The decompressed bytes.
    pub(crate) reader: BufReader<Box<dyn Read + Send>>,
    /// Bytes read from disk so far (compressed bytes for gzip).
    pub(crate) disk_bytes: Arc<AtomicU64>,
    /// How the file is compressed.
    pub(crate) compression: Compression,
}

impl InputStream {
    /// Stream `input` (raw bytes as stored: compressed ones for gzip), counting the raw bytes
    /// taken from it and decompressing when `compression` says so.
    pub(crate) fn new(input: Box<dyn Read + Send>, compression: Compression) -> InputStream {
        let (counting, disk_bytes) = CountingReader::new(input);
        let inner: Box<dyn Read + Send> = match compression {
            Compression::None => Box::new(counting),
            Compression::Gzip => Box::new(MultiGzDecoder::new(BufReader::with_capacity(
                64 * 1024,
                counting,
            ))),
        };
        InputStream {
            reader: BufReader::with_capacity(READ_BUFFER_BYTES, inner),
            disk_bytes,
            compression,
        }
    }

    /// Drop the next `skip` bytes of the (decompressed) stream and read the byte after them,
    /// which a resumed reader wants to see. `None` when the stream ends first. `display` names
    /// the input in errors.
    pub(crate) fn skip_to(
        mut self,
        skip: u64,
        display: &str,
    ) -> Result<Option<(InputStream, u8)>, SourceError> {
        let compression = self.compression;
        let io_error = |source: io::Error| stream_error(display, compression, source);
        let dropped =
            io::copy(&mut (&mut self.reader).take(skip), &mut io::sink()).map_err(io_error)?;
        if dropped < skip {
            return Ok(None);
        }
        let mut last = [0u8; 1];
        loop {
            match self.reader.read(&mut last) {
                Ok(0) => return Ok(None),
                Ok(_) => return Ok(Some((self, last[0]))),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(io_error(error)),
            }
        }
    }
}

/// Open `path` (shown to users as `display`) for streaming.
pub(crate) fn open_stream(
    path: &Path,
    display: &str,
    compression: Compression,
) -> Result<InputStream, SourceError> {
    let file = open_listed_file(path, display)?;
    Ok(InputStream::new(Box::new(file), compression))
}

/// Open `path` (shown to users as `display`) for streaming from byte `offset` of its
/// decompressed stream, with the byte just before it. `None` when the stream is shorter than
/// `offset`: the file is not the one the offset was taken in. A plain file is seeked; a
/// gzipped one is decompressed from its start and the first `offset` bytes dropped.
pub(crate) fn open_stream_at(
    path: &Path,
    display: &str,
    compression: Compression,
    offset: u64,
) -> Result<Option<(InputStream, u8)>, SourceError> {
    let Some(before) = offset.checked_sub(1) else {
        return Ok(None);
    };
    let io_error = |source: io::Error| stream_error(display, compression, source);
    match compression {
        Compression::None => {
            let mut file = open_listed_file(path, display)?;
            let size = file.metadata().map_err(io_error)?.len();
            if size < offset {
                return Ok(None);
            }
            file.seek(SeekFrom::Start(before)).map_err(io_error)?;
            InputStream::new(Box::new(file), compression).skip_to(0, display)
        }
        Compression::Gzip => open_stream(path, display, compression)?.skip_to(before, display),
    }
}

/// Open a file that was listed earlier: a missing file has vanished since.
pub(crate) fn open_listed_file(path: &Path, display: &str) -> Result<File, SourceError> {
    File::open(path).map_err(|source| {
        if source.kind() == io::ErrorKind::NotFound {
            SourceError::Vanished {
                path: display.to_owned(),
            }
        } else {
            SourceError::Io {
                path: display.to_owned(),
                source,
            }
        }
    })
}

/// Turn an I/O error met while reading a stream into a [`SourceError`]: bad data in a gzip
/// stream is corruption, everything else is I/O.
pub(crate) fn stream_error(
    display: &str,
    compression: Compression,
    source: io::Error,
) -> SourceError {
    let corrupt = matches!(
        source.kind(),
        io::ErrorKind::InvalidData | io::ErrorKind::InvalidInput | io::ErrorKind::UnexpectedEof
    );
    if compression == Compression::Gzip && corrupt {
        SourceError::CorruptGzip {
            path: display.to_owned(),
            message: crate::sources::error::describe_io(&source),
        }
    } else {
        SourceError::Io {
            path: display.to_owned(),
            source,
        }
    }
}

/// Decompress as much of a gzip `head` (the first bytes of a file) as it holds, up to `limit`
/// bytes, for sniffing. A truncated or corrupt head gives what decoded before the problem.
pub(crate) fn gunzip_head(head: &[u8], limit: usize) -> Vec<u8> {
    let mut decoder = MultiGzDecoder::new(head);
    let mut out = vec![0; limit];
    let mut filled = 0;
    while filled < limit {
        match decoder.read(&mut out[filled..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => filled += n,
        }
    }
    out.truncate(filled);
    out
}

/// Why the gzip stream starting with `head` cannot be decoded, if it cannot: corrupt data, or
/// a stream that ends early when `whole` says `head` is the entire file. A `head` that is
/// merely a prefix of a longer file is not faulted for ending mid-stream.
pub(crate) fn gzip_head_problem(head: &[u8], whole: bool) -> Option<String> {
    let mut decoder = MultiGzDecoder::new(head);
    match io::copy(&mut decoder, &mut io::sink()) {
        Ok(_) => None,
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof && !whole => None,
        Err(error) => Some(crate::sources::error::describe_io(&error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::Compression as Level;
    use flate2::write::GzEncoder;
    use std::io::Write;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Level::default());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    #[test]
    fn gunzip_head_decodes_a_prefix_of_a_truncated_stream() {
        let text = "{\"a\":1}\n".repeat(10_000);
        let compressed = gzip(text.as_bytes());
        let head = &compressed[..compressed.len() / 2];
        let decoded = gunzip_head(head, 4096);
        assert!(!decoded.is_empty());
        assert!(text.as_bytes().starts_with(&decoded));
    }

    #[test]
    fn counting_reader_counts_every_byte_read() {
        let (mut reader, count) = CountingReader::new(&b"hello world"[..]);
        let mut out = Vec::new();
        reader.read_to_end(&mut out).unwrap();
        assert_eq!(count.load(Ordering::Relaxed), 11);
    }

    #[test]
    fn a_listed_file_that_is_gone_has_vanished() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("gone.jsonl");
        let error = open_stream(&missing, "gone.jsonl", Compression::None)
            .err()
            .unwrap();
        assert!(matches!(error, SourceError::Vanished { ref path } if path == "gone.jsonl"));
        assert_eq!(
            error.to_string(),
            "file `gone.jsonl` vanished before it could be read"
        );
    }
}
