//! Turning the configured path into the list of files to read.

use std::fs::{self, File};
use std::io::{self, BufRead, Read};
use std::path::{Path, PathBuf};

use super::FileFormat;
use super::FileSourceOptions;
use super::checkpoint::{Head, Identity};
use super::compression::{Compression, gzip_head_problem, open_stream};
use super::detect::{Detected, HEAD_BYTES, detect, detect_compression};
use super::json_documents::FirstLine;
use super::watermark::{self, Below, Slot};
use crate::sources::SourceError;

/// One file to read, as found when the source was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListedFile {
    /// The path to open.
    pub(crate) path: PathBuf,
    /// The path as shown to users: relative to the base directory when the configured path
    /// was relative.
    pub(crate) display: String,
    /// The size at listing time.
    pub(crate) size: u64,
    /// The format to read it as.
    pub(crate) format: FileFormat,
    /// How it is compressed.
    pub(crate) compression: Compression,
    /// Its identity at listing time.
    pub(crate) head: Head,
    /// How it compares with what a checkpoint says was read of it.
    pub(crate) identity: Identity,
}

/// The files found: those to read, and those skipped as read already and unchanged.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// The files to read, sorted by path.
    pub(crate) files: Vec<ListedFile>,
    /// The shown paths of files found unchanged since they were read to their end (with an
    /// entry in the checkpoint, or below its watermark).
    pub(crate) unchanged: Vec<String>,
    /// Every file found but those skipped, sorted by path.
    pub(crate) slots: Vec<Slot>,
    /// Whether every file the path names was seen: false when a glob met a directory it
    /// could not read.
    pub(crate) complete: bool,
}

/// How the configured path was given, which decides what to do with unknown formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// Named directly: an unknown format is an error.
    Literal,
    /// Found in a directory or by a glob: an unknown format is skipped with a warning.
    Found,
}

/// List the files `options.path` names, sorted by path, with their formats.
#[cfg(test)]
pub(crate) fn list_files(options: &FileSourceOptions) -> Result<Vec<ListedFile>, SourceError> {
    let hooks = Hooks {
        settle: &|_| false,
        below: &|_, _| Below::No,
        compare: &|_, _, _| Identity::New,
    };
    Ok(list_files_since(options, &hooks)?.files)
}

/// What a listing asks of the checkpoint it lists against.
pub(crate) struct Hooks<'a> {
    /// Given the paths found, before any is looked at: whether to find them again (having
    /// waited for files just written to settle). Asked once.
    pub(crate) settle: &'a dyn Fn(&[PathBuf]) -> bool,
    /// What the watermark says of a file, from its shown path and when it last changed (a file
    /// [`Below::Read`] is not opened).
    pub(crate) below: &'a dyn Fn(&str, i64) -> Below,
    /// How a file compares with the checkpoint's entries, from its shown path, size and first
    /// bytes (at least its first [`IDENTITY_BYTES`](super::checkpoint::IDENTITY_BYTES), or all
    /// of it); a file [`Identity::Unchanged`] is not looked at further.
    pub(crate) compare: &'a dyn Fn(&str, u64, &[u8]) -> Identity,
}

/// List the files `options.path` names, sorted by path, with their formats, as `hooks` say.
pub(crate) fn list_files_since(
    options: &FileSourceOptions,
    hooks: &Hooks<'_>,
) -> Result<Listing, SourceError> {
    let (mut candidates, mut origin, mut complete) = find(options)?;
    if (hooks.settle)(&candidates) {
        (candidates, origin, complete) = find(options)?;
    }
    let display = shown_by(options);
    let mut listing = Listing {
        files: Vec::with_capacity(candidates.len()),
        unchanged: Vec::new(),
        slots: Vec::with_capacity(candidates.len()),
        complete,
    };
    for path in candidates {
        let shown = display(&path);
        let how = How {
            format: options.format,
            origin,
            max_record_bytes: options.max_record_bytes,
        };
        match describe(&path, shown, how, hooks.below, hooks.compare)? {
            Described::Read(file, changed_ms) => {
                listing.slots.push(Slot {
                    display: file.display.clone(),
                    size: file.size,
                    changed_ms,
                    read: Some(listing.files.len()),
                });
                listing.files.push(file);
            }
            Described::Unchanged(slot) => {
                listing.unchanged.push(slot.display.clone());
                listing.slots.push(slot);
            }
            Described::Skipped => {}
        }
    }
    if listing.files.is_empty() && listing.unchanged.is_empty() {
        return Err(SourceError::NoFiles {
            pattern: options.path.clone(),
        });
    }
    Ok(listing)
}

/// How a found path is shown: relative to the base directory when the configured path is.
fn shown_by(options: &FileSourceOptions) -> impl Fn(&Path) -> String + '_ {
    let relative = Path::new(&options.path).is_relative();
    move |found: &Path| -> String {
        let shown = if relative {
            found.strip_prefix(&options.base_dir).unwrap_or(found)
        } else {
            found
        };
        shown.display().to_string()
    }
}

/// The paths `options.path` names, sorted, how they were found, and whether every directory
/// a glob met could be read.
fn find(options: &FileSourceOptions) -> Result<(Vec<PathBuf>, Origin, bool), SourceError> {
    let configured = options.path.as_str();
    if configured.is_empty() {
        return Err(SourceError::EmptyPath);
    }
    let relative = Path::new(configured).is_relative();
    let resolved = if relative {
        options.base_dir.join(configured)
    } else {
        PathBuf::from(configured)
    };
    let display = shown_by(options);
    let excluded = Excluded::new(options);
    let mut complete = true;
    // The exclusion that took what the path names, when it took something (a directory or
    // file named directly, or glob matches): said in the error when nothing else is left.
    let mut took: Option<&str> = None;
    let (mut candidates, origin) = match fs::metadata(&resolved) {
        Ok(meta) if meta.is_dir() => {
            let mut found = Vec::new();
            let real = excluded.real(&resolved);
            took = excluded.covering(real.as_deref());
            if took.is_none() {
                walk_dir(&resolved, real.as_deref(), &excluded, &mut found, &display)?;
            }
            (found, Origin::Found)
        }
        Ok(_) => {
            let real = excluded.real(&resolved);
            took = excluded.covering(real.as_deref());
            let found = if took.is_some() {
                Vec::new()
            } else {
                vec![resolved.clone()]
            };
            (found, Origin::Literal)
        }
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            if !has_glob_chars(configured) {
                return Err(SourceError::NotFound {
                    path: configured.to_owned(),
                });
            }
            let (mut found, saw_all) = expand_glob(options, relative)?;
            complete = saw_all;
            found.retain(
                |path| match excluded.covering(excluded.real(path).as_deref()) {
                    Some(shown) => {
                        took = took.or(Some(shown));
                        false
                    }
                    None => true,
                },
            );
            (found, Origin::Found)
        }
        Err(source) => {
            return Err(SourceError::Io {
                path: configured.to_owned(),
                source,
            });
        }
    };
    if let (true, Some(took)) = (candidates.is_empty(), took) {
        return Err(SourceError::Excluded {
            pattern: configured.to_owned(),
            excluded: took.to_owned(),
        });
    }
    candidates.sort();
    candidates.dedup();
    Ok((candidates, origin, complete))
}

/// What listing made of one file.
enum Described {
    /// A file to read, and when it last changed.
    Read(ListedFile, i64),
    /// A file read to its end and unchanged since.
    Unchanged(Slot),
    /// A file of unknown format, skipped.
    Skipped,
}

/// Whether `path` contains glob metacharacters.
pub(crate) fn has_glob_chars(path: &str) -> bool {
    path.contains(['*', '?', '['])
}

/// Whether a file or directory name marks it hidden.
fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b".")
}

/// The paths never to read, in comparable form (see [`comparable`]).
struct Excluded(Vec<(PathBuf, String)>);

impl Excluded {
    /// The exclusions of `options`, resolved against its base directory (each with its
    /// name as configured, for messages).
    fn new(options: &FileSourceOptions) -> Excluded {
        let paths = options
            .exclude
            .iter()
            .filter(|path| !path.as_os_str().is_empty())
            .map(|path| {
                (
                    comparable(&options.base_dir.join(path)),
                    path.display().to_string(),
                )
            })
            .collect();
        Excluded(paths)
    }

    /// The exclusion (as configured) at or above the comparable path `real`, if any.
    fn covering(&self, real: Option<&Path>) -> Option<&str> {
        let real = real?;
        self.0
            .iter()
            .find(|(excluded, _)| real.starts_with(excluded))
            .map(|(_, shown)| shown.as_str())
    }

    /// `path` in comparable form, or `None` when nothing is excluded (sparing the work).
    fn real(&self, path: &Path) -> Option<PathBuf> {
        (!self.0.is_empty()).then(|| comparable(path))
    }

    /// Whether the comparable path `real` is at or below an exclusion.
    fn covers(&self, real: Option<&Path>) -> bool {
        self.covering(real).is_some()
    }
}

/// `path` made absolute and comparable with other paths: with symbolic links resolved when
/// it exists; when it does not, with `.` and `..` folded lexically and its longest existing
/// ancestor resolved.
fn comparable(path: &Path) -> PathBuf {
    if let Ok(real) = fs::canonicalize(path) {
        return real;
    }
    let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut folded = PathBuf::new();
    for component in absolute.components() {
        match component {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                folded.pop();
            }
            other => folded.push(other),
        }
    }
    let mut missing = Vec::new();
    let mut existing = folded.as_path();
    while let Some(parent) = existing.parent() {
        if let Some(name) = existing.file_name() {
            missing.push(name.to_owned());
        }
        existing = parent;
        if let Ok(mut real) = fs::canonicalize(existing) {
            real.extend(missing.iter().rev());
            return real;
        }
    }
    folded
}

/// All regular, non-hidden files below `dir`, recursively, except what `excluded` covers.
/// Symbolic links to files are followed; links to directories are not (no cycles). `real` is
/// `dir` in comparable form when there are exclusions.
fn walk_dir(
    dir: &Path,
    real: Option<&Path>,
    excluded: &Excluded,
    found: &mut Vec<PathBuf>,
    display: &dyn Fn(&Path) -> String,
) -> Result<(), SourceError> {
    let io_error = |source| SourceError::Io {
        path: display(dir),
        source,
    };
    for entry in fs::read_dir(dir).map_err(io_error)? {
        let entry = entry.map_err(io_error)?;
        let name = entry.file_name();
        if is_hidden(&name) {
            continue;
        }
        let path = entry.path();
        let kind = entry.file_type().map_err(io_error)?;
        // Below a resolved directory, a directory or a regular file needs no resolving of its
        // own; a link to a file does.
        let real_entry = match real {
            Some(_) if kind.is_symlink() => excluded.real(&path),
            Some(real) => Some(real.join(&name)),
            None => None,
        };
        if excluded.covers(real_entry.as_deref()) {
            continue;
        }
        if kind.is_dir() {
            walk_dir(&path, real_entry.as_deref(), excluded, found, display)?;
        } else if kind.is_file() || (kind.is_symlink() && path.is_file()) {
            found.push(path);
        } else {
            warn_not_a_file(&path, display);
        }
    }
    Ok(())
}

/// Warn that a path found in a directory or by a glob is skipped because it is no file to
/// read: a symbolic link to nothing, or to a directory (links to directories are not followed
/// in a directory), a FIFO, a socket or a device (reading one could block for ever).
fn warn_not_a_file(path: &Path, shown_as: &dyn Fn(&Path) -> String) {
    let why = match fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => "a symbolic link to nothing",
        Err(_) => "it cannot be looked at",
        Ok(meta) if meta.is_dir() => "a symbolic link to a directory (not followed)",
        Ok(_) => "not a regular file (a FIFO, socket or device)",
    };
    let shown = shown_as(path);
    tracing::warn!(path = %shown, "skipping `{shown}`: {why}");
}

/// The regular files a glob matches, and whether it could read every directory it met. `*`,
/// `?` and `**` do not match hidden names.
fn expand_glob(
    options: &FileSourceOptions,
    relative: bool,
) -> Result<(Vec<PathBuf>, bool), SourceError> {
    let configured = options.path.as_str();
    let bad_pattern = |message: String| SourceError::BadPattern {
        pattern: configured.to_owned(),
        message,
    };
    // Check the pattern on its own first, so positions in messages are the user's.
    glob::Pattern::new(configured)
        .map_err(|error| bad_pattern(format!("{} at position {}", error.msg, error.pos)))?;
    let pattern = if relative {
        let base = options.base_dir.to_string_lossy();
        let base = glob::Pattern::escape(&base);
        format!("{}/{configured}", base.trim_end_matches('/'))
    } else {
        configured.to_owned()
    };
    let match_options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: true,
    };
    let paths = glob::glob_with(&pattern, match_options)
        .map_err(|error| bad_pattern(error.msg.to_owned()))?;
    let mut found = Vec::new();
    let mut complete = true;
    for entry in paths {
        match entry {
            Ok(path) => {
                if path.is_file() {
                    found.push(path);
                } else if !path.is_dir() {
                    warn_not_a_file(&path, &shown_by(options));
                }
            }
            Err(error) => {
                complete = false;
                tracing::warn!(
                    path = %error.path().display(),
                    error = %crate::sources::error::describe_io(error.error()),
                    "skipping a path the glob could not read"
                );
            }
        }
    }
    Ok((found, complete))
}

/// How the files of a listing are described.
#[derive(Debug, Clone, Copy)]
struct How {
    format: Option<FileFormat>,
    origin: Origin,
    max_record_bytes: usize,
}

/// Size, format, compression and identity of `path`; nothing more for a file `below` or
/// `compare` finds unchanged, or a found file of unknown format.
fn describe(
    path: &Path,
    display: String,
    how: How,
    below: &dyn Fn(&str, i64) -> Below,
    compare: &dyn Fn(&str, u64, &[u8]) -> Identity,
) -> Result<Described, SourceError> {
    let How {
        format,
        origin,
        max_record_bytes,
    } = how;
    let io_error = |source: io::Error, display: &str| SourceError::Io {
        path: display.to_owned(),
        source,
    };
    let (listed_size, changed_ms) = watermark::stat(path).map_err(|e| io_error(e, &display))?;
    let unchanged = |display: String, size: u64| {
        Described::Unchanged(Slot {
            display,
            size,
            changed_ms,
            read: None,
        })
    };
    let below = below(&display, changed_ms);
    if below == Below::Read {
        return Ok(unchanged(display, listed_size));
    }
    let mut file = File::open(path).map_err(|e| io_error(e, &display))?;
    let size = file.metadata().map_err(|e| io_error(e, &display))?.len();
    let mut head = Vec::with_capacity(HEAD_BYTES);
    (&mut file)
        .take(HEAD_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|e| io_error(e, &display))?;
    let late = match below {
        Below::ReadUnlessSkippedBy(then) => {
            if detect(path, &head, then).is_some() {
                return Ok(unchanged(display, size));
            }
            true
        }
        Below::Late => true,
        Below::No | Below::Read => false,
    };
    let identity = match compare(&display, size, &head) {
        Identity::New if late => Identity::Late,
        identity => identity,
    };
    if identity == Identity::Unchanged {
        return Ok(unchanged(display, size));
    }

    let detected = detect(path, &head, format);
    if detected.is_none() && format == Some(FileFormat::Json) {
        // Content that is not JSON although the configuration says it is.
        if origin == Origin::Literal {
            return Err(SourceError::NotJson { path: display });
        }
        let shown = display.as_str();
        tracing::warn!(
            file = shown,
            "skipping a file that is not JSON (`format: json`)"
        );
        return Ok(Described::Skipped);
    }
    let detected = detected.map(|(detected, compression)| match detected {
        Detected::Format(format) => (format, compression),
        Detected::JsonObjects => {
            let format = json_objects_format(path, &display, compression, max_record_bytes);
            (format, compression)
        }
    });
    let Some((format, compression)) = detected else {
        // A gzip stream that cannot be decoded is why nothing could be sniffed: say so.
        let whole = size <= head.len() as u64;
        let corrupt = (detect_compression(&head) == Compression::Gzip)
            .then(|| gzip_head_problem(&head, whole))
            .flatten();
        let shown = display.as_str();
        return match (corrupt, origin) {
            (Some(message), Origin::Literal) => Err(SourceError::CorruptGzip {
                path: display,
                message,
            }),
            (Some(message), Origin::Found) => {
                tracing::warn!(file = shown, %message, "skipping a file with a corrupt gzip stream");
                Ok(Described::Skipped)
            }
            (None, Origin::Literal) => Err(SourceError::UnknownFormat { path: display }),
            (None, Origin::Found) => {
                tracing::warn!(file = shown, "skipping a file of unknown format");
                Ok(Described::Skipped)
            }
        };
    };
    if format == FileFormat::Parquet && compression == Compression::Gzip {
        return Err(SourceError::UnsupportedCompression {
            path: display,
            format: "Parquet",
        });
    }
    Ok(Described::Read(
        ListedFile {
            path: path.to_path_buf(),
            display,
            size,
            format,
            compression,
            head: Head::of(size, &head),
            identity,
        },
        changed_ms,
    ))
}

/// JSON lines or JSON documents for the stream of JSON objects in `path`, told by its first
/// line (see [`FirstLine`]), read from the start of the decompressed stream. A first line
/// longer than `max_record_bytes`, or one that cannot be read, means JSON lines: reading
/// then reports the problem as it would for any file.
fn json_objects_format(
    path: &Path,
    display: &str,
    compression: Compression,
    max_record_bytes: usize,
) -> FileFormat {
    let lines_or_documents = |lines: bool| {
        if lines {
            FileFormat::Jsonl
        } else {
            FileFormat::JsonDocuments
        }
    };
    let Ok(mut stream) = open_stream(path, display, compression) else {
        return FileFormat::Jsonl;
    };
    let mut sniff = FirstLine::default();
    let mut seen = 0usize;
    while seen <= max_record_bytes {
        let chunk = match stream.reader.fill_buf() {
            Ok([]) => break,
            Ok(chunk) => chunk,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if let Some(lines) = sniff.feed(chunk) {
            return lines_or_documents(lines);
        }
        let taken = chunk.len();
        seen += taken;
        stream.reader.consume(taken);
    }
    lines_or_documents(sniff.finish())
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{FileSource, FileSourceOptions};
    use super::*;

    fn listed(options: &FileSourceOptions) -> Vec<String> {
        list_files(options)
            .unwrap()
            .into_iter()
            .map(|f| f.display)
            .collect()
    }

    #[test]
    fn a_glob_lists_matches_sorted_and_skips_hidden_files() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "data/c.jsonl",
            "data/a.jsonl",
            "data/b.jsonl",
            "data/.hidden.jsonl",
            "data/x.csv",
        ] {
            write(dir.path(), name, b"{}\n");
        }
        assert_eq!(
            listed(&options(dir.path(), "data/*.jsonl")),
            vec!["data/a.jsonl", "data/b.jsonl", "data/c.jsonl"]
        );
    }

    #[test]
    fn a_double_star_glob_descends_but_not_into_hidden_directories() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["d/b/2.jsonl", "d/a/1.jsonl", "d/.git/3.jsonl", "d/0.jsonl"] {
            write(dir.path(), name, b"{}\n");
        }
        assert_eq!(
            listed(&options(dir.path(), "d/**/*.jsonl")),
            vec!["d/0.jsonl", "d/a/1.jsonl", "d/b/2.jsonl"]
        );
    }

    #[test]
    fn a_directory_is_read_recursively_without_hidden_or_unknown_files() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "in/z.jsonl",
            "in/sub/deeper/a.csv",
            "in/sub/b.json",
            "in/.cache/c.jsonl",
            "in/.d.jsonl",
        ] {
            write(dir.path(), name, b"{}\n");
        }
        write(dir.path(), "in/README.md", b"# notes");
        assert_eq!(
            listed(&options(dir.path(), "in")),
            vec!["in/sub/b.json", "in/sub/deeper/a.csv", "in/z.jsonl"]
        );
    }

    #[test]
    fn an_absolute_path_stays_absolute_in_positions() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "a.jsonl", b"{\"a\":1}\n");
        let absolute = path.display().to_string();
        let (records, _) = read_all(FileSourceOptions {
            path: absolute.clone(),
            base_dir: "/nonexistent".into(),
            ..FileSourceOptions::default()
        })
        .unwrap();
        assert_eq!(*records[0].position.uri, *absolute);
    }

    #[test]
    fn files_lists_the_paths_to_open_in_order() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "b.jsonl", b"{}\n");
        write(dir.path(), "a.jsonl", b"{}\n");
        let source = FileSource::open(options(dir.path(), "*.jsonl")).unwrap();
        assert_eq!(
            source.files(),
            &[dir.path().join("a.jsonl"), dir.path().join("b.jsonl")]
        );
    }

    #[test]
    fn a_missing_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let error = FileSource::open(options(dir.path(), "data/x.jsonl")).unwrap_err();
        assert!(matches!(error, SourceError::NotFound { ref path } if path == "data/x.jsonl"));
        assert_eq!(
            error.to_string(),
            "no such file or directory `data/x.jsonl`"
        );
    }

    #[test]
    fn a_glob_without_matches_is_an_error_naming_the_pattern() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "data/a.csv", b"a\n1\n");
        let error = FileSource::open(options(dir.path(), "data/*.jsonl")).unwrap_err();
        assert_eq!(error.to_string(), "no files match `data/*.jsonl`");
        let empty = tempfile::tempdir().unwrap();
        std::fs::create_dir(empty.path().join("nothing")).unwrap();
        let error = FileSource::open(options(empty.path(), "nothing")).unwrap_err();
        assert_eq!(error.to_string(), "no files match `nothing`");
    }

    #[test]
    fn a_bad_glob_pattern_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let error = FileSource::open(options(dir.path(), "data/[*.jsonl")).unwrap_err();
        assert!(matches!(error, SourceError::BadPattern { .. }), "{error}");
        assert!(
            error
                .to_string()
                .starts_with("bad glob pattern `data/[*.jsonl`: "),
            "{error}"
        );
    }

    #[test]
    fn a_named_file_of_unknown_format_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "notes.txt", b"hello");
        let error = FileSource::open(options(dir.path(), "notes.txt")).unwrap_err();
        assert!(matches!(error, SourceError::UnknownFormat { ref path } if path == "notes.txt"));
        assert!(error.to_string().contains("`notes.txt`"));
        // Content sniffing rescues a JSON file with an odd name.
        write(dir.path(), "export.dat", b"{\"a\":1}\n");
        let (records, _) = read_all(options(dir.path(), "export.dat")).unwrap();
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn base_dir_with_glob_characters_is_taken_literally() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("odd[dir]");
        write(&base, "a.jsonl", b"{}\n");
        assert_eq!(listed(&options(&base, "*.jsonl")), vec!["a.jsonl"]);
    }

    #[test]
    fn dot_paths_are_shown_relative_to_the_base_directory() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "data/a.jsonl", b"{}\n");
        assert_eq!(listed(&options(dir.path(), ".")), vec!["data/a.jsonl"]);
        assert_eq!(
            listed(&options(dir.path(), "./data/*.jsonl")),
            vec!["data/a.jsonl"]
        );
        assert_eq!(
            listed(&options(&dir.path().join("data"), "../data/a.jsonl")),
            vec!["../data/a.jsonl"]
        );
    }

    /// A project directory holding input next to a pipeline's data directory.
    fn project_with_a_data_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "in/a.jsonl", b"{\"a\":1}\n");
        write(dir.path(), "b.json", b"{\"b\":2}\n");
        write(
            dir.path(),
            "data/default_p/schema.json",
            b"{\"fields\":[]}\n",
        );
        write(dir.path(), "data/default_p/wal/0001.jsonl", b"{\"w\":1}\n");
        write(dir.path(), "database/c.jsonl", b"{\"c\":3}\n");
        dir
    }

    fn excluding(dir: &Path, path: &str, exclude: &[&str]) -> FileSourceOptions {
        FileSourceOptions {
            exclude: exclude.iter().map(PathBuf::from).collect(),
            ..options(dir, path)
        }
    }

    #[test]
    fn a_directory_walk_never_lists_files_under_an_excluded_directory() {
        let dir = project_with_a_data_dir();
        let expected = vec!["b.json", "database/c.jsonl", "in/a.jsonl"];
        assert_eq!(listed(&excluding(dir.path(), ".", &["data"])), expected);
        // However the excluded directory is spelled: absolute, with `.` and `..`, a trailing
        // slash.
        let absolute = dir.path().join("data").display().to_string();
        assert_eq!(listed(&excluding(dir.path(), ".", &[&absolute])), expected);
        assert_eq!(
            listed(&excluding(dir.path(), ".", &["./in/../data/"])),
            expected
        );
        // Without an exclusion the data directory is read like any other.
        assert!(listed(&options(dir.path(), ".")).contains(&"data/default_p/schema.json".into()));
    }

    #[test]
    fn a_glob_drops_matches_under_an_excluded_directory() {
        let dir = project_with_a_data_dir();
        assert_eq!(
            listed(&excluding(dir.path(), "**/*.json*", &["data/default_p"])),
            vec!["b.json", "database/c.jsonl", "in/a.jsonl"]
        );
    }

    #[test]
    fn an_excluded_file_is_never_read_and_excluding_everything_leaves_no_files() {
        let dir = project_with_a_data_dir();
        assert_eq!(
            listed(&excluding(dir.path(), "**/*.jsonl", &["in/a.jsonl"])),
            vec!["data/default_p/wal/0001.jsonl", "database/c.jsonl"]
        );
        for (path, exclude) in [
            ("in/a.jsonl", "in/a.jsonl"),
            ("in", "."),
            ("*.json", "b.json"),
        ] {
            // Said as excluded, naming the exclusion, not as "no files".
            let error = list_files(&excluding(dir.path(), path, &[exclude])).unwrap_err();
            assert!(
                matches!(error, SourceError::Excluded { ref pattern, ref excluded }
                    if pattern == path && excluded == exclude),
                "{path}: {error}"
            );
        }
    }

    #[test]
    fn exclusions_compare_real_paths_through_symbolic_links() {
        let dir = project_with_a_data_dir();
        // The project reached through a link: the exclusion names the real directory.
        let link = dir.path().join("project-link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        let real_data = dir.path().join("data").display().to_string();
        assert_eq!(
            listed(&excluding(&link, ".", &[&real_data])),
            vec!["b.json", "database/c.jsonl", "in/a.jsonl"]
        );
    }

    #[test]
    fn an_exclusion_that_does_not_exist_yet_excludes_nothing_else() {
        let dir = project_with_a_data_dir();
        assert_eq!(
            listed(&excluding(
                dir.path(),
                "in",
                &["data/new_p", "in/../nope", ""]
            )),
            vec!["in/a.jsonl"]
        );
    }

    #[test]
    fn an_empty_path_is_refused_with_a_message_saying_so() {
        let error = FileSource::open(FileSourceOptions::default()).unwrap_err();
        assert!(matches!(error, SourceError::EmptyPath), "{error}");
        assert_eq!(error.to_string(), "the File source `path` is empty");
        assert!(!error.is_retryable());
    }

    #[test]
    fn a_corrupt_gzip_file_with_an_unknown_extension_is_reported_as_corrupt_gzip() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = gzip(&b"{\"a\":1}\n".repeat(100));
        for byte in &mut bytes[10..] {
            *byte = 0xff;
        }
        write(dir.path(), "export.bin", &bytes);
        let error = FileSource::open(options(dir.path(), "export.bin")).unwrap_err();
        assert!(
            matches!(error, SourceError::CorruptGzip { ref path, .. } if path == "export.bin"),
            "{error}"
        );
        assert!(
            error
                .to_string()
                .starts_with("corrupt gzip stream in `export.bin`: "),
            "{error}"
        );
        // Found in a directory, it is skipped with a warning like a file of unknown format.
        write(dir.path(), "ok.jsonl", b"{\"a\":1}\n");
        assert_eq!(listed(&options(dir.path(), ".")), vec!["ok.jsonl"]);
        // A truncated gzip file is corrupt too.
        let text = b"hello world, this is not JSON at all";
        let mut cut = gzip(text);
        cut.truncate(cut.len() - 6);
        write(dir.path(), "notes.bin", &cut);
        let error = FileSource::open(options(dir.path(), "notes.bin")).unwrap_err();
        assert!(matches!(error, SourceError::CorruptGzip { .. }), "{error}");
        // A sound gzip file of unknown content is of unknown format.
        write(dir.path(), "notes.bin", &gzip(text));
        let error = FileSource::open(options(dir.path(), "notes.bin")).unwrap_err();
        assert!(
            matches!(error, SourceError::UnknownFormat { .. }),
            "{error}"
        );
    }
}
