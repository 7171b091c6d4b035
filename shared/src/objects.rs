//! Whole objects by name, in a local directory or under a prefix of an S3 bucket.
//!
//! An [`ObjectTarget`] writes, lists, reads and moves whole objects by `/`-separated relative
//! names. The deadletter sinks write one object per WAL batch into one
//! (`crate::sinks::deadletter`), and `skipprd deadletters replay` reads them back through the
//! same names as a source (`crate::sources::replay`); this module sits below both.
//!
//! - [`DirTarget`]: files in a directory, each written under a temporary name and renamed into
//!   place ([`crate::durable::write_atomic`]);
//! - [`S3Target`]: objects under a key prefix of a bucket, each written by one PUT.
//!
//! Either way an object appears whole or not at all, and a second write of a name replaces the
//! first. A failure is an [`ObjectError`] naming the file or object, retryable when the
//! operating system's or the AWS SDK's error says a later attempt may succeed.

use std::io;
use std::path::{Path, PathBuf};

use crate::aws::{Bucket, SdkFailure};
use crate::durable::{DurableError, is_transient, write_atomic};

/// Why an object could not be written, listed, read or moved.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    /// A file or directory of a [`DirTarget`] could not be written, listed, read or moved.
    #[error("cannot {op} `{}`: {source}", path.display())]
    Io {
        /// What was being done: `create`, `write`, `sync`, `rename into place`, `list`,
        /// `read`, `create directory`, `sync directory` or `move`.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A request on an object (or a prefix) of an [`S3Target`] failed, after the SDK's
    /// retries.
    #[error("cannot {op} `{uri}`: {failure}")]
    S3 {
        /// What was being done: `write`, `read`, `list` or `delete`.
        op: &'static str,
        /// The object (or prefix), `s3://bucket/key`.
        uri: String,
        /// The SDK's error, classified (retryable on throttling, 5xx and transport errors).
        failure: Box<SdkFailure>,
    },
}

impl ObjectError {
    /// Whether trying again later may succeed: the AWS error's own flag for S3, a transient
    /// I/O error ([`crate::durable::is_transient`]) for a directory.
    pub fn is_retryable(&self) -> bool {
        match self {
            ObjectError::Io { source, .. } => is_transient(source.kind()),
            ObjectError::S3 { failure, .. } => failure.retryable,
        }
    }

    /// The file, directory, object or prefix the error is about: a path or an `s3://` URI.
    pub fn location(&self) -> String {
        match self {
            ObjectError::Io { path, .. } => path.display().to_string(),
            ObjectError::S3 { uri, .. } => uri.clone(),
        }
    }

    fn io(op: &'static str, path: &Path) -> impl FnOnce(io::Error) -> ObjectError + use<> {
        let path = path.to_path_buf();
        move |source| ObjectError::Io { op, path, source }
    }
}

impl From<DurableError> for ObjectError {
    fn from(e: DurableError) -> Self {
        ObjectError::Io {
            op: e.op,
            path: e.path,
            source: e.source,
        }
    }
}

/// Where whole objects are kept by name, a second write of a name replacing the first in one
/// step (a reader sees the old object or the new, never a mix). The deadletter sinks write
/// through one; `skipprd deadletters replay` lists, reads and moves them aside through the
/// same names.
pub trait ObjectTarget: Send + Sync + std::fmt::Debug {
    /// Write `bytes` as the whole object `name` (a `/`-separated relative name).
    fn put_whole(&self, name: &str, bytes: Vec<u8>) -> Result<(), ObjectError>;
    /// The names of the objects directly in `dir` (not in its subdirectories), each as
    /// `{dir}/{file}`, in name order; none when `dir` does not exist.
    fn list(&self, dir: &str) -> Result<Vec<String>, ObjectError>;
    /// The names of every object below `dir`, at any depth, each as `{dir}/{path}`, in name
    /// order; none when `dir` does not exist.
    fn list_below(&self, dir: &str) -> Result<Vec<String>, ObjectError>;
    /// The bytes of the object `name`, or `None` when there is none.
    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, ObjectError>;
    /// Move the object `from` to `to`. A crash part-way never loses it: a file is renamed in
    /// one step; an object is written under `to` before `from` is deleted, so a crash between
    /// the two leaves both. Moving an object that is gone does nothing (a move redone after a
    /// crash).
    fn move_to(&self, from: &str, to: &str) -> Result<(), ObjectError>;
    /// Where the object `name` is, for messages: a path or an `s3://` URI.
    fn location_of(&self, name: &str) -> String;
    /// The directory the objects are files in, for a target on local disk.
    fn local_dir(&self) -> Option<&Path> {
        None
    }
}

/// Files in a directory, each written under a temporary name and renamed into place.
#[derive(Debug, Clone)]
pub struct DirTarget {
    dir: PathBuf,
}

impl DirTarget {
    /// The target writing into `dir` (created when missing).
    pub fn new(dir: PathBuf) -> Self {
        DirTarget { dir }
    }
}

impl ObjectTarget for DirTarget {
    fn put_whole(&self, name: &str, bytes: Vec<u8>) -> Result<(), ObjectError> {
        Ok(write_atomic(&self.dir.join(name), &bytes)?)
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, ObjectError> {
        let path = self.dir.join(dir);
        let entries = match std::fs::read_dir(&path) {
            Ok(entries) => entries,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(ObjectError::io("list", &path)(e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(ObjectError::io("list", &path))?;
            if entry
                .file_type()
                .map_err(ObjectError::io("list", &path))?
                .is_file()
            {
                names.push(format!("{dir}/{}", entry.file_name().to_string_lossy()));
            }
        }
        names.sort();
        Ok(names)
    }

    fn list_below(&self, dir: &str) -> Result<Vec<String>, ObjectError> {
        let mut names = Vec::new();
        let mut pending = vec![dir.to_owned()];
        while let Some(dir) = pending.pop() {
            let path = self.dir.join(&dir);
            let entries = match std::fs::read_dir(&path) {
                Ok(entries) => entries,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(ObjectError::io("list", &path)(e)),
            };
            for entry in entries {
                let entry = entry.map_err(ObjectError::io("list", &path))?;
                let kind = entry.file_type().map_err(ObjectError::io("list", &path))?;
                let name = format!("{dir}/{}", entry.file_name().to_string_lossy());
                if kind.is_dir() {
                    pending.push(name);
                } else if kind.is_file() {
                    names.push(name);
                }
            }
        }
        names.sort();
        Ok(names)
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, ObjectError> {
        let path = self.dir.join(name);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ObjectError::io("read", &path)(e)),
        }
    }

    fn move_to(&self, from: &str, to: &str) -> Result<(), ObjectError> {
        let (from, to) = (self.dir.join(from), self.dir.join(to));
        if let Some(parent) = to.parent() {
            std::fs::create_dir_all(parent).map_err(ObjectError::io("create directory", parent))?;
        }
        match std::fs::rename(&from, &to) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && !from.exists() => Ok(()),
            moved => moved.map_err(ObjectError::io("move", &from)),
        }
    }

    fn location_of(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn local_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }
}

/// Objects under a key prefix of an S3 bucket, each written by one PUT.
#[derive(Debug, Clone)]
pub struct S3Target {
    bucket: Bucket,
    /// Empty, or ends with `/`.
    prefix: String,
}

impl S3Target {
    /// The target writing under `prefix` (leading and trailing `/` are ignored; empty: the
    /// bucket root) in `bucket`.
    pub fn new(bucket: Bucket, prefix: &str) -> Self {
        let prefix = prefix.trim_matches('/');
        let prefix = if prefix.is_empty() {
            String::new()
        } else {
            format!("{prefix}/")
        };
        S3Target { bucket, prefix }
    }

    /// The key of the object `name`.
    pub fn key_of(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    fn failed(&self, op: &'static str, key: &str, failure: SdkFailure) -> ObjectError {
        ObjectError::S3 {
            op,
            uri: self.bucket.uri(key),
            failure: Box::new(failure),
        }
    }
}

impl ObjectTarget for S3Target {
    fn put_whole(&self, name: &str, bytes: Vec<u8>) -> Result<(), ObjectError> {
        let key = self.key_of(name);
        let content_type = if name.ends_with(".parquet") {
            "application/vnd.apache.parquet"
        } else {
            "application/x-ndjson"
        };
        self.bucket
            .put(&key, bytes, content_type)
            .map_err(|failure| self.failed("write", &key, failure))
    }

    fn list(&self, dir: &str) -> Result<Vec<String>, ObjectError> {
        let mut names = self.list_below(dir)?;
        names.retain(|name| !name[dir.len() + 1..].contains('/'));
        Ok(names)
    }

    fn list_below(&self, dir: &str) -> Result<Vec<String>, ObjectError> {
        let prefix = self.key_of(&format!("{dir}/"));
        // S3 lists in UTF-8 byte order, which is `String`'s order: already sorted.
        Ok(self
            .bucket
            .list(&prefix)
            .map_err(|failure| self.failed("list", &prefix, failure))?
            .iter()
            .filter_map(|key| key.strip_prefix(&prefix))
            .filter(|path| !path.is_empty() && !path.ends_with('/'))
            .map(|path| format!("{dir}/{path}"))
            .collect())
    }

    fn get(&self, name: &str) -> Result<Option<Vec<u8>>, ObjectError> {
        let key = self.key_of(name);
        self.bucket
            .get(&key)
            .map_err(|failure| self.failed("read", &key, failure))
    }

    fn move_to(&self, from: &str, to: &str) -> Result<(), ObjectError> {
        let Some(bytes) = self.get(from)? else {
            return Ok(());
        };
        // Written under the new name first: a crash before the delete leaves both.
        self.put_whole(to, bytes)?;
        let key = self.key_of(from);
        self.bucket
            .delete(&key)
            .map_err(|failure| self.failed("delete", &key, failure))
    }

    fn location_of(&self, name: &str) -> String {
        self.bucket.uri(&self.key_of(name))
    }
}

/// The last `/`-separated part of an object's name or location: the file name that replay
/// bookkeeping (`replayed#{file}`, the `_replayed` part) records.
pub fn file_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aws::testing::{bucket, moto};

    #[test]
    fn file_name_is_the_last_part_of_a_name_a_path_or_a_uri() {
        assert_eq!(file_name("p/b01.jsonl"), "b01.jsonl");
        assert_eq!(file_name("s3://bucket/r/p/b01.jsonl"), "b01.jsonl");
        assert_eq!(file_name("b01.jsonl"), "b01.jsonl");
    }

    /// `list_below` on any target: every object below the directory at any depth, in name
    /// order, and nothing of a sibling whose name starts the same.
    fn lists_below(target: &dyn ObjectTarget) {
        assert_eq!(target.list_below("t").unwrap(), Vec::<String>::new());
        for name in [
            "t/k=2/c/d.parquet",
            "t/a.parquet",
            "t/k=1/b.parquet",
            "tt/x.parquet",
        ] {
            target.put_whole(name, b"x".to_vec()).unwrap();
        }
        assert_eq!(
            target.list_below("t").unwrap(),
            ["t/a.parquet", "t/k=1/b.parquet", "t/k=2/c/d.parquet"]
        );
        assert_eq!(target.list("t").unwrap(), ["t/a.parquet"]);
        assert_eq!(target.list_below("t/k=2").unwrap(), ["t/k=2/c/d.parquet"]);
    }

    #[test]
    fn both_targets_list_every_object_below_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        lists_below(&DirTarget::new(dir.path().join("out")));
        let aws = moto();
        let name = bucket(&aws, "below");
        lists_below(&S3Target::new(Bucket::new(&aws, &name, None), "r"));
    }

    #[test]
    fn a_dir_target_writes_whole_files_and_names_the_path_when_it_cannot() {
        let dir = tempfile::tempdir().unwrap();
        let target = DirTarget::new(dir.path().join("out"));
        assert_eq!(target.list("p").unwrap(), Vec::<String>::new());
        target.put_whole("p/a.jsonl", b"one\n".to_vec()).unwrap();
        target.put_whole("p/a.jsonl", b"two\n".to_vec()).unwrap();
        assert_eq!(target.list("p").unwrap(), ["p/a.jsonl"]);
        assert_eq!(
            target.get("p/a.jsonl").unwrap().as_deref(),
            Some(&b"two\n"[..])
        );
        assert_eq!(target.local_dir(), Some(dir.path().join("out").as_path()));

        // A file where the pipeline's directory should be.
        std::fs::write(dir.path().join("out/q"), b"").unwrap();
        let error = target.put_whole("q/a.jsonl", Vec::new()).unwrap_err();
        assert!(
            matches!(
                &error,
                ObjectError::Io {
                    op: "create directory",
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(
            error.location(),
            dir.path().join("out/q").display().to_string()
        );
        assert!(!error.is_retryable(), "{error}");
        let error = target.list("q").unwrap_err();
        assert!(
            matches!(&error, ObjectError::Io { op: "list", .. }),
            "{error:?}"
        );
    }

    #[test]
    fn an_s3_target_names_the_prefix_when_listing_fails() {
        let aws = moto();
        let target = S3Target::new(Bucket::new(&aws, "no-such-bucket-skipprd", None), "r");
        let error = target.list("p").unwrap_err();
        assert!(
            matches!(error, ObjectError::S3 { op: "list", .. }),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .contains("s3://no-such-bucket-skipprd/r/p/"),
            "{error}"
        );
        assert_eq!(error.location(), "s3://no-such-bucket-skipprd/r/p/");
        assert!(!error.is_retryable(), "{error}");
    }

    #[test]
    fn an_s3_target_keeps_its_objects_under_the_prefix() {
        let aws = moto();
        let name = bucket(&aws, "objects");
        let s3 = Bucket::new(&aws, &name, None);
        let target = S3Target::new(s3.clone(), "/x/y/");
        assert_eq!(target.key_of("p/a.jsonl"), "x/y/p/a.jsonl");
        assert_eq!(
            target.location_of("p/a.jsonl"),
            format!("s3://{name}/x/y/p/a.jsonl")
        );
        target.put_whole("p/a.jsonl", b"one\n".to_vec()).unwrap();
        target.move_to("p/a.jsonl", "p/done/a.jsonl").unwrap();
        // Moving an object that is gone does nothing.
        target.move_to("p/a.jsonl", "p/done/a.jsonl").unwrap();
        assert_eq!(s3.list("").unwrap(), ["x/y/p/done/a.jsonl"]);
        assert_eq!(target.list("p").unwrap(), Vec::<String>::new());
        assert_eq!(target.list("p/done").unwrap(), ["p/done/a.jsonl"]);
        assert_eq!(target.get("p/a.jsonl").unwrap(), None);
    }
}
