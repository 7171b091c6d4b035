//! Durable local file writes: once a call returns, what it wrote survives a crash or a power
//! loss.
//!
//! A file is durable when its bytes are fsynced; its name is durable when the directory that
//! holds it is fsynced too (the directory records the entry). Three writes need this:
//!
//! - [`sync_dir`]: fsync a directory, after creating, renaming or deleting entries in it;
//! - [`create_dir_durable`]: create a directory and its missing parents, fsyncing each parent
//!   that gained an entry;
//! - [`write_atomic`]: replace a whole file so that a reader sees the old content or the new,
//!   never a mix: a temporary file in the same directory is written and fsynced, renamed over
//!   the file, and the directory fsynced.
//!
//! The saved schema, the WAL on disk, the Iceberg storage and catalog on local disk and the
//! `File` deadletter sink all write through these. A failure is a [`DurableError`]: what was
//! being done, to which path, and the operating system's error.

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

/// A durable write that failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot {op} `{}`: {source}", path.display())]
pub struct DurableError {
    /// What was being done: `create directory`, `sync directory`, `create`, `write`, `sync`
    /// or `rename into place`.
    pub op: &'static str,
    /// The file or directory it was done to.
    pub path: PathBuf,
    /// The operating system's error.
    #[source]
    pub source: io::Error,
}

impl DurableError {
    fn new(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> DurableError + use<> {
        let path = path.to_path_buf();
        move |source| DurableError { op, path, source }
    }

    /// Whether trying the same write again may succeed (see [`is_transient`]).
    pub fn is_retryable(&self) -> bool {
        is_transient(self.source.kind())
    }
}

/// Whether an I/O error of this kind may go away when the same call is made again later:
/// an interrupted, timed-out, would-block or busy call, or a full disk (a failed durable
/// write leaves nothing behind, so it can be redone once space is freed). A missing file,
/// a refused permission or corrupt data do not go away by themselves.
pub fn is_transient(kind: io::ErrorKind) -> bool {
    matches!(
        kind,
        io::ErrorKind::Interrupted
            | io::ErrorKind::TimedOut
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::ResourceBusy
            | io::ErrorKind::StorageFull
    )
}

/// `dir`, with the empty path (the parent of a bare file name) read as the working directory.
fn or_current(dir: &Path) -> &Path {
    if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    }
}

/// fsync the directory `dir`, so the entries created, renamed or deleted in it are durable.
/// Does nothing where directories cannot be opened (not Unix).
pub fn sync_dir(dir: &Path) -> Result<(), DurableError> {
    #[cfg(unix)]
    {
        let dir = or_current(dir);
        fs::File::open(dir)
            .and_then(|file| file.sync_all())
            .map_err(DurableError::new("sync directory", dir))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Create `dir` and any missing parents, fsyncing each parent that gained an entry. A
/// directory that exists already (or is created meanwhile by another process) is fine.
pub fn create_dir_durable(dir: &Path) -> Result<(), DurableError> {
    if dir.as_os_str().is_empty() || dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_durable(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => return Ok(()),
        Err(e) => return Err(DurableError::new("create directory", dir)(e)),
    }
    match dir.parent() {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

/// Write `bytes` as the whole file `path`, atomically and durably: a temporary file in the
/// same directory (`.{name}.{unique}.tmp`, removed again when a step fails) is written,
/// fsynced and renamed over `path`, then the directory is fsynced. Missing parent directories
/// are created durably.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), DurableError> {
    let dir = or_current(path.parent().unwrap_or(Path::new("")));
    create_dir_durable(dir)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let written = (|| {
        let mut file = fs::File::create(&tmp).map_err(DurableError::new("create", &tmp))?;
        file.write_all(bytes)
            .map_err(DurableError::new("write", &tmp))?;
        file.sync_all().map_err(DurableError::new("sync", &tmp))?;
        fs::rename(&tmp, path).map_err(DurableError::new("rename into place", path))
    })();
    if written.is_err() {
        // Best effort: the first error is the one worth reporting.
        let _ = fs::remove_file(&tmp);
    }
    written?;
    sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn write_atomic_creates_the_parents_replaces_the_file_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/file.json");
        write_atomic(&path, b"one").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"one");
        write_atomic(&path, b"two").unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(names(&dir.path().join("a/b")), ["file.json"]);
    }

    #[test]
    fn create_dir_durable_creates_every_missing_parent_and_accepts_an_existing_one() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("x/y/z");
        create_dir_durable(&deep).unwrap();
        assert!(deep.is_dir());
        create_dir_durable(&deep).unwrap();
        create_dir_durable(Path::new("")).unwrap();
        sync_dir(&deep).unwrap();
    }

    #[test]
    fn a_failed_write_names_the_step_and_the_path_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        // A file where a directory is needed.
        fs::write(dir.path().join("f"), b"").unwrap();
        let error = write_atomic(&dir.path().join("f/g/h.json"), b"x").unwrap_err();
        // The file in the way is named.
        assert_eq!(error.op, "create directory");
        assert_eq!(error.path, dir.path().join("f"));
        assert!(
            error.to_string().starts_with(&format!(
                "cannot create directory `{}`: ",
                dir.path().join("f").display()
            )),
            "{error}"
        );
        assert!(!error.is_retryable(), "{error}");

        // Renaming a file over a directory fails after the temporary was written.
        fs::create_dir(dir.path().join("d")).unwrap();
        fs::write(dir.path().join("d/inner"), b"").unwrap();
        let error = write_atomic(&dir.path().join("d"), b"x").unwrap_err();
        assert_eq!(error.op, "rename into place");
        assert_eq!(error.path, dir.path().join("d"));
        assert_eq!(names(dir.path()), ["d", "f"]);
    }

    #[test]
    fn sync_dir_of_a_missing_directory_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let error = sync_dir(&missing).unwrap_err();
        assert_eq!(
            (error.op, error.path.as_path()),
            ("sync directory", &*missing)
        );
        assert_eq!(error.source.kind(), io::ErrorKind::NotFound);
    }

    #[test]
    fn only_passing_conditions_are_transient() {
        for kind in [
            io::ErrorKind::Interrupted,
            io::ErrorKind::TimedOut,
            io::ErrorKind::StorageFull,
        ] {
            assert!(is_transient(kind), "{kind:?}");
        }
        for kind in [
            io::ErrorKind::NotFound,
            io::ErrorKind::PermissionDenied,
            io::ErrorKind::InvalidData,
        ] {
            assert!(!is_transient(kind), "{kind:?}");
        }
    }
}
