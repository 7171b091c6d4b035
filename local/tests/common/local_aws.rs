//! The local AWS of the tests (the moto server `tests/run` starts) and the reader venv, for
//! the test binaries of both crates (`local/tests/*.rs`, `functions/tests/runtime.rs`, included
//! with `#[path]`). Each helper fails with the fix when its set-up is missing.
#![allow(
    dead_code,
    clippy::unwrap_used,
    clippy::panic,
    reason = "test support: not every test binary uses every item; a failed set-up should fail the test"
)]

use std::path::PathBuf;

/// The moto server's URL (`SKIPPR_TEST_AWS_ENDPOINT`), checked to be where `AWS_ENDPOINT_URL`
/// points too.
pub fn endpoint() -> String {
    let endpoint = std::env::var("SKIPPR_TEST_AWS_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| {
            panic!(
                "SKIPPR_TEST_AWS_ENDPOINT is not set: run `bash tests/run`, which starts a moto server and exports it with AWS_ENDPOINT_URL, AWS_REGION and dummy credentials (or start `moto_server` yourself and export the same variables)"
            )
        });
    assert_eq!(
        std::env::var("AWS_ENDPOINT_URL").ok().as_deref(),
        Some(endpoint.as_str()),
        "AWS_ENDPOINT_URL must point at the test server too (see tests/run)"
    );
    endpoint
}

/// An AWS handle on the moto server (region `us-east-1`).
pub fn aws() -> skipprd::aws::Aws {
    endpoint();
    skipprd::aws::Aws::load(Some("us-east-1")).unwrap()
}

/// A name no other test of this moto server uses: `{stem}{pid}x{n}` (digits only after the
/// stem, so it is a valid bucket, table or Glue database name when the stem is).
pub fn unique(stem: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    format!(
        "{stem}{}x{}",
        std::process::id(),
        h.finish() % 1_000_000_000
    )
}

/// A new bucket named after `stem`.
pub fn new_bucket(aws: &skipprd::aws::Aws, stem: &str) -> String {
    let name = unique(stem);
    let client = aws.s3(None);
    aws.block_on(async { client.create_bucket().bucket(&name).send().await })
        .unwrap();
    name
}

/// The Python of the reader venv (PyIceberg with Glue support, DuckDB): `SKIPPR_TEST_PYTHON`,
/// else the venv `tests/run` builds.
pub fn reader_python() -> PathBuf {
    let python = std::env::var_os("SKIPPR_TEST_PYTHON")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            let venv = std::env::var_os("SKIPPR_TEST_VENV")
                .map(PathBuf::from)
                .or_else(|| {
                    std::env::var_os("HOME")
                        .map(|h| PathBuf::from(h).join(".cache/skipprd-test-venv"))
                });
            venv.map(|v| v.join("bin/python"))
        });
    match python {
        Some(python) if python.exists() => python,
        _ => panic!(
            "the reader venv is missing: run `bash tests/run` (it builds it with pyiceberg[pyarrow,glue]==0.12.0 and sets SKIPPR_TEST_PYTHON)"
        ),
    }
}
