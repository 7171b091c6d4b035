//! Turning the configured path into the list of files to read.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use super::FileFormat;
use super::FileSourceOptions;
use super::compression::Compression;
use super::detect::{HEAD_BYTES, detect_compression, detect_format};
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
pub(crate) fn list_files(options: &FileSourceOptions) -> Result<Vec<ListedFile>, SourceError> {
    let configured = options.path.as_str();
    if configured.is_empty() {
        return Err(SourceError::NotFound {
            path: String::new(),
        });
    }
    let relative = Path::new(configured).is_relative();
    let resolved = if relative {
        options.base_dir.join(configured)
    } else {
        PathBuf::from(configured)
    };
    let display = |found: &Path| -> String {
        let shown = if relative {
            found.strip_prefix(&options.base_dir).unwrap_or(found)
        } else {
            found
        };
        shown.display().to_string()
    };

    let (mut candidates, origin) = match fs::metadata(&resolved) {
        Ok(meta) if meta.is_dir() => {
            let mut found = Vec::new();
            walk_dir(&resolved, &mut found, &display)?;
            (found, Origin::Found)
        }
        Ok(_) => (vec![resolved.clone()], Origin::Literal),
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            if !has_glob_chars(configured) {
                return Err(SourceError::NotFound {
                    path: configured.to_owned(),
                });
            }
            (expand_glob(options, relative)?, Origin::Found)
        }
        Err(source) => {
            return Err(SourceError::Io {
                path: configured.to_owned(),
                source,
            });
        }
    };
    candidates.sort();
    candidates.dedup();

    let mut files = Vec::with_capacity(candidates.len());
    for path in candidates {
        let shown = display(&path);
        if let Some(file) = describe(&path, shown, options.format, origin)? {
            files.push(file);
        }
    }
    if files.is_empty() {
        return Err(SourceError::NoFiles {
            pattern: configured.to_owned(),
        });
    }
    Ok(files)
}

/// Whether `path` contains glob metacharacters.
fn has_glob_chars(path: &str) -> bool {
    path.contains(['*', '?', '['])
}

/// Whether a file or directory name marks it hidden.
fn is_hidden(name: &std::ffi::OsStr) -> bool {
    name.as_encoded_bytes().starts_with(b".")
}

/// All regular, non-hidden files below `dir`, recursively. Symbolic links to files are
/// followed; links to directories are not (no cycles).
fn walk_dir(
    dir: &Path,
    found: &mut Vec<PathBuf>,
    display: &dyn Fn(&Path) -> String,
) -> Result<(), SourceError> {
    let io_error = |source| SourceError::Io {
        path: display(dir),
        source,
    };
    for entry in fs::read_dir(dir).map_err(io_error)? {
        let entry = entry.map_err(io_error)?;
        if is_hidden(&entry.file_name()) {
            continue;
        }
        let path = entry.path();
        let kind = entry.file_type().map_err(io_error)?;
        if kind.is_dir() {
            walk_dir(&path, found, display)?;
        } else if kind.is_file() || (kind.is_symlink() && path.is_file()) {
            found.push(path);
        }
    }
    Ok(())
}

/// The regular files a glob matches. `*`, `?` and `**` do not match hidden names.
fn expand_glob(options: &FileSourceOptions, relative: bool) -> Result<Vec<PathBuf>, SourceError> {
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
    for entry in paths {
        match entry {
            Ok(path) => {
                if path.is_file() {
                    found.push(path);
                }
            }
            Err(error) => {
                tracing::warn!(
                    path = %error.path().display(),
                    error = %crate::sources::error::describe_io(error.error()),
                    "skipping a path the glob could not read"
                );
            }
        }
    }
    Ok(found)
}

/// Size, format and compression of `path`; `None` for a found file of unknown format.
fn describe(
    path: &Path,
    display: String,
    format: Option<FileFormat>,
    origin: Origin,
) -> Result<Option<ListedFile>, SourceError> {
    let io_error = |source: io::Error, display: &str| SourceError::Io {
        path: display.to_owned(),
        source,
    };
    let mut file = File::open(path).map_err(|e| io_error(e, &display))?;
    let size = file.metadata().map_err(|e| io_error(e, &display))?.len();
    let mut head = Vec::with_capacity(HEAD_BYTES);
    (&mut file)
        .take(HEAD_BYTES as u64)
        .read_to_end(&mut head)
        .map_err(|e| io_error(e, &display))?;

    let detected = match format {
        Some(format) => Some((format, detect_compression(&head))),
        None => detect_format(path, &head),
    };
    let Some((format, compression)) = detected else {
        if origin == Origin::Literal {
            return Err(SourceError::UnknownFormat { path: display });
        }
        let shown = display.as_str();
        tracing::warn!(file = shown, "skipping a file of unknown format");
        return Ok(None);
    };
    if format == FileFormat::Parquet && compression == Compression::Gzip {
        return Err(SourceError::UnsupportedCompression {
            path: display,
            format: "Parquet",
        });
    }
    Ok(Some(ListedFile {
        path: path.to_path_buf(),
        display,
        size,
        format,
        compression,
    }))
}
