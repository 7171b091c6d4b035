//! What a run left on disk, for tests that look at files directly.

use std::path::{Path, PathBuf};

/// Every file under `dir`, at any depth, whose extension is `ext` (a WAL segment is `seg`); a
/// directory that cannot be read (or does not exist) adds none.
pub fn files_with_extension(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for path in entries.flatten().map(|entry| entry.path()) {
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == ext) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}
