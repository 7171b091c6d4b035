//! Test fixtures shared by the pipeline's tests.

use std::collections::BTreeMap;

use crate::config::validate::ValidatedConfig;
use crate::config::{load_file, validate};

/// A project of six records read in batches of two, with no destination (the WAL is the
/// dataset) and its state under `data/` in the project.
pub(crate) fn six_records_project() -> (tempfile::TempDir, ValidatedConfig) {
    let dir = tempfile::tempdir().unwrap();
    let records: String = (0..6).map(|i| format!("{{\"id\":{i}}}\n")).collect();
    std::fs::write(dir.path().join("events.jsonl"), records).unwrap();
    std::fs::write(
        dir.path().join("skippr.yml"),
        "pipelines:\n  p:\n    data_source: data_sources.s\n\
         data_sources:\n  s:\n    File:\n      path: events.jsonl\n      batch_size: 2\n",
    )
    .unwrap();
    let env: BTreeMap<String, String> = [(
        "DATA_DIR".to_owned(),
        dir.path().join("data").display().to_string(),
    )]
    .into();
    let loaded = load_file(&dir.path().join("skippr.yml"), env).unwrap();
    let config = validate(&loaded, None).unwrap();
    (dir, config)
}
