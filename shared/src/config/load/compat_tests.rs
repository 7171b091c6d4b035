//! The compatibility suite: every documented example config in `tests/fixtures/compat/`
//! loads and validates, or stops with the outcome its header declares (see the README
//! there). A new fixture is a new case; a fixture without an `# expect:` header fails.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::error::ConfigError;
use crate::config::load::load_file;
use crate::config::validate::validate;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/compat")
}

/// What a fixture's header declares.
struct Header {
    expect: String,
    env: BTreeMap<String, String>,
}

fn header(text: &str, file: &Path) -> Header {
    let mut expect = None;
    let mut env = BTreeMap::new();
    for line in text.lines().take_while(|l| l.starts_with('#')) {
        if let Some(rest) = line.strip_prefix("# expect:") {
            expect = Some(rest.trim().to_owned());
        }
        if let Some(rest) = line.strip_prefix("# env:") {
            let (k, v) = rest
                .trim()
                .split_once('=')
                .unwrap_or_else(|| panic!("{}: `# env:` needs NAME=value", file.display()));
            env.insert(k.to_owned(), v.to_owned());
        }
    }
    Header {
        expect: expect.unwrap_or_else(|| panic!("{}: no `# expect:` header", file.display())),
        env,
    }
}

#[test]
fn every_documented_example_config_loads_as_its_header_says() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "the fixtures: {files:?}");
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        let h = header(&text, file);
        // Each fixture in a directory of its own: relative paths resolve there.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("skippr.yml");
        std::fs::write(&path, &text).unwrap();
        let outcome = load_file(&path, h.env.clone()).and_then(|loaded| validate(&loaded, None));
        match (h.expect.as_str(), outcome) {
            ("ok", Ok(config)) => assert!(
                !config.pipelines.is_empty(),
                "{}: no pipelines",
                file.display()
            ),
            (expect, Err(ConfigError::Unsupported { connector, .. }))
                if expect.strip_prefix("unsupported ") == Some(connector) => {}
            (expect, Err(ConfigError::UnknownConnector { key, location, .. }))
                if expect.strip_prefix("unknown ") == Some(key.as_str()) =>
            {
                // Named with where it is, so the user sees which entry to change.
                assert!(location.line.is_some(), "{}: {location:?}", file.display());
            }
            (expect, outcome) => panic!(
                "{}: expected {expect}, got {:?}",
                file.display(),
                outcome.map(|c| c.pipelines.keys().cloned().collect::<Vec<_>>())
            ),
        }
    }
}
