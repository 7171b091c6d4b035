//! Telling a file's format and compression from its name and first bytes.

use std::borrow::Cow;
use std::path::Path;

use super::FileFormat;
use super::compression::{Compression, GZIP_MAGIC, gunzip_head};
use super::json_documents::FirstLine;

/// How many leading bytes of a file [`detect_format`] wants to see.
pub(crate) const HEAD_BYTES: usize = 8 * 1024;

/// How many decompressed bytes of a gzip head are sniffed.
const SNIFF_BYTES: usize = 64 * 1024;

/// The first bytes of a Parquet file.
const PARQUET_MAGIC: &[u8] = b"PAR1";

/// The UTF-8 byte-order mark, skipped when sniffing.
pub(crate) const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// What a file's name and first bytes say about its format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detected {
    /// This format.
    Format(FileFormat),
    /// JSON objects, as JSON lines or as documents: [`FirstLine`] tells which from the start
    /// of the stream.
    ///
    /// [`FirstLine`]: super::json_documents::FirstLine
    JsonObjects,
}

/// Tell the format and compression of the file at `path` from its name and `head`, its first
/// bytes (a few KiB are plenty; fewer if the file is shorter).
///
/// Content beats the name: gzip is recognised by its magic bytes `1f 8b` and Parquet by `PAR1`
/// whatever the extension says. Otherwise the extension (after any `.gz`/`.gzip`) decides:
/// `.jsonl`/`.ndjson` are JSON lines, `.csv` is CSV, `.parquet`/`.pq` Parquet, and `.json` is a
/// JSON array when its first non-whitespace byte is `[`. With an unknown extension the content
/// is sniffed the same way. Content starting with `{` (in a `.json` file or a sniffed one) is
/// JSON lines when its first line holds a complete JSON value and nothing else, JSON
/// documents otherwise; a first line longer than `head` counts as complete (the
/// [`FileSource`](super::FileSource) reads on to be sure). Other `.json` content is JSON lines.
/// `None` when nothing fits.
pub fn detect_format(path: &Path, head: &[u8]) -> Option<(FileFormat, Compression)> {
    detect_in_head(path, head, None)
}

/// [`detect_format`] with `format` the configured format (`None` to detect, as there;
/// [`FileFormat::Json`] to detect only the JSON shape): JSON objects are told to be lines or
/// documents from `head` alone. `None` when nothing fits.
pub(crate) fn detect_in_head(
    path: &Path,
    head: &[u8],
    format: Option<FileFormat>,
) -> Option<(FileFormat, Compression)> {
    let (detected, compression) = detect(path, head, format)?;
    let format = match detected {
        Detected::Format(format) => format,
        Detected::JsonObjects => {
            let content = decompressed(head, compression);
            let mut sniff = FirstLine::default();
            if sniff.feed(&content).unwrap_or_else(|| sniff.finish()) {
                FileFormat::Jsonl
            } else {
                FileFormat::JsonDocuments
            }
        }
    };
    Some((format, compression))
}

/// What the name and `head` of the file at `path` say, when `format` is the configured format
/// (`None` to detect). `None` when nothing fits: an unknown format, or content that is not JSON
/// with `format` [`FileFormat::Json`].
pub(crate) fn detect(
    path: &Path,
    head: &[u8],
    format: Option<FileFormat>,
) -> Option<(Detected, Compression)> {
    let compression = detect_compression(head);
    let sniff_json = |content: &[u8]| match first_significant_byte(content) {
        Some(b'[') => Some(Detected::Format(FileFormat::JsonArray)),
        Some(b'{') => Some(Detected::JsonObjects),
        _ => None,
    };
    let detected = match format {
        Some(FileFormat::Json) => {
            let content = decompressed(head, compression);
            match first_significant_byte(&content) {
                // Nothing but whitespace: nothing to read, in any JSON shape.
                None => Detected::Format(FileFormat::Jsonl),
                Some(_) => sniff_json(&content)?,
            }
        }
        Some(format) => Detected::Format(format),
        None => {
            if compression == Compression::None && head.starts_with(PARQUET_MAGIC) {
                return Some((Detected::Format(FileFormat::Parquet), compression));
            }
            let content = decompressed(head, compression);
            match inner_extension(path).as_deref() {
                Some("jsonl" | "ndjson") => Detected::Format(FileFormat::Jsonl),
                Some("json") => sniff_json(&content).unwrap_or(Detected::Format(FileFormat::Jsonl)),
                Some("csv") => Detected::Format(FileFormat::Csv),
                Some("parquet" | "pq") => Detected::Format(FileFormat::Parquet),
                _ => sniff_json(&content)?,
            }
        }
    };
    Some((detected, compression))
}

/// `head` decompressed (as far as it goes) when gzipped, else as is.
fn decompressed(head: &[u8], compression: Compression) -> Cow<'_, [u8]> {
    match compression {
        Compression::Gzip => Cow::Owned(gunzip_head(head, SNIFF_BYTES)),
        Compression::None => Cow::Borrowed(head),
    }
}

/// Gzip when `head` starts with the gzip magic bytes.
pub(crate) fn detect_compression(head: &[u8]) -> Compression {
    if head.starts_with(&GZIP_MAGIC) {
        Compression::Gzip
    } else {
        Compression::None
    }
}

/// The lower-cased extension of `path` once a trailing `.gz`/`.gzip` is set aside.
fn inner_extension(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?.to_ascii_lowercase();
    let name = name
        .strip_suffix(".gz")
        .or_else(|| name.strip_suffix(".gzip"))
        .unwrap_or(&name);
    let (stem, extension) = name.rsplit_once('.')?;
    if stem.is_empty() {
        return None;
    }
    Some(extension.to_owned())
}

/// The first byte that is not whitespace, after any byte-order mark.
pub(crate) fn first_significant_byte(content: &[u8]) -> Option<u8> {
    let content = content.strip_prefix(UTF8_BOM).unwrap_or(content);
    content.iter().copied().find(|b| !b.is_ascii_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;
    use flate2::write::GzEncoder;
    use std::io::Write;

    fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(bytes).unwrap();
        encoder.finish().unwrap()
    }

    fn detect(name: &str, head: &[u8]) -> Option<(FileFormat, Compression)> {
        detect_format(Path::new(name), head)
    }

    #[test]
    fn extensions_name_the_format_with_optional_gzip() {
        let none = Compression::None;
        let gz = Compression::Gzip;
        assert_eq!(detect("a.jsonl", b"{}"), Some((FileFormat::Jsonl, none)));
        assert_eq!(detect("a.NDJSON", b"{}"), Some((FileFormat::Jsonl, none)));
        assert_eq!(detect("a.csv", b"a,b"), Some((FileFormat::Csv, none)));
        assert_eq!(detect("a.pq", b""), Some((FileFormat::Parquet, none)));
        assert_eq!(detect("a.parquet", b""), Some((FileFormat::Parquet, none)));
        assert_eq!(
            detect("a.csv.gz", &gzip(b"a,b\n")),
            Some((FileFormat::Csv, gz))
        );
        assert_eq!(
            detect("a.jsonl.gzip", &gzip(b"{}\n")),
            Some((FileFormat::Jsonl, gz))
        );
    }

    #[test]
    fn json_files_are_sniffed_for_an_array() {
        assert_eq!(
            detect("a.json", b" \n [{}]"),
            Some((FileFormat::JsonArray, Compression::None))
        );
        assert_eq!(
            detect("a.json", b"{}\n{}"),
            Some((FileFormat::Jsonl, Compression::None))
        );
        assert_eq!(
            detect("a.json.gz", &gzip(b"\xEF\xBB\xBF[1]")),
            Some((FileFormat::JsonArray, Compression::Gzip))
        );
    }

    #[test]
    fn json_objects_are_lines_when_the_first_line_is_complete_else_documents() {
        let none = Compression::None;
        assert_eq!(
            detect("a.json", b"{\n  \"a\": 1\n}\n"),
            Some((FileFormat::JsonDocuments, none))
        );
        assert_eq!(
            detect("a.json", b"{\"a\":1}{\"a\":2}"),
            Some((FileFormat::JsonDocuments, none))
        );
        assert_eq!(
            detect("a.json", b"{\"a\":1}\r\n{\"a\":2}"),
            Some((FileFormat::Jsonl, none))
        );
        assert_eq!(
            detect("export.dat", &gzip(b"{\n}")),
            Some((FileFormat::JsonDocuments, Compression::Gzip))
        );
        // A name saying JSON lines is believed.
        assert_eq!(detect("a.jsonl", b"{\n}"), Some((FileFormat::Jsonl, none)));
    }

    #[test]
    fn magic_bytes_beat_a_misleading_extension() {
        assert_eq!(
            detect("a.csv", b"PAR1\x15\x04"),
            Some((FileFormat::Parquet, Compression::None))
        );
        assert_eq!(
            detect("a.txt", &gzip(b"{\"a\":1}\n")),
            Some((FileFormat::Jsonl, Compression::Gzip))
        );
        assert_eq!(
            detect("a.csv", &gzip(b"a,b\n1,2\n")),
            Some((FileFormat::Csv, Compression::Gzip))
        );
    }

    #[test]
    fn unknown_extensions_are_sniffed_or_refused() {
        assert_eq!(
            detect("data", b"  {\"a\":1}"),
            Some((FileFormat::Jsonl, Compression::None))
        );
        assert_eq!(
            detect("data.txt", b"[1]"),
            Some((FileFormat::JsonArray, Compression::None))
        );
        assert_eq!(detect("notes.txt", b"hello"), None);
        assert_eq!(detect(".jsonl", b"hello"), None);
        assert_eq!(detect("empty.bin", b""), None);
    }
}
