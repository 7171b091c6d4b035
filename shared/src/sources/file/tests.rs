use super::testing::*;
use super::*;
use crate::deadletter::FailureCode;
use crate::sources::Source;
use proptest::prelude::*;

#[test]
fn defaults_are_the_documented_ones() {
    let options = FileSourceOptions::default();
    assert_eq!(options.batch_rows, 10_000);
    // 10 MB, the product's buffer threshold default, not 10 MiB.
    assert_eq!(options.batch_bytes, 10_000_000);
    // 16 MiB of text, and 128 MiB once parsed (issue 13: a record must fit a small Lambda).
    assert_eq!(options.max_record_bytes, 16 * 1024 * 1024);
    assert_eq!(options.max_record_memory, 128 * 1024 * 1024);
    assert_eq!(options.base_dir, PathBuf::from("."));
    assert_eq!(options.path, "");
    assert!(options.exclude.is_empty());
}

#[test]
fn file_format_serializes_in_snake_case() {
    assert_eq!(
        serde_json::to_string(&FileFormat::JsonArray).unwrap(),
        "\"json_array\""
    );
    let parsed: FileFormat = serde_json::from_str("\"jsonl\"").unwrap();
    assert_eq!(parsed, FileFormat::Jsonl);
    assert_eq!(FileFormat::Csv.as_str(), "csv");
}

#[test]
fn batches_hold_at_most_batch_rows_records() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..25).map(|i| format!("{{\"i\":{i}}}\n")).collect();
    write(dir.path(), "a.jsonl", text.as_bytes());
    let batches = batches(FileSourceOptions {
        batch_rows: 10,
        ..options(dir.path(), "a.jsonl")
    })
    .unwrap();
    let sizes: Vec<usize> = batches.iter().map(|b| b.records.len()).collect();
    assert_eq!(sizes, vec![10, 10, 5]);
    let total: u64 = batches.iter().map(|b| b.bytes_read).sum();
    assert_eq!(total, text.len() as u64);
}

#[test]
fn batches_close_once_batch_bytes_were_consumed() {
    let dir = tempfile::tempdir().unwrap();
    // 20 lines of 10 bytes each.
    let text: String = (0..20).map(|i| format!("{{\"i\":{i:03}}}\n")).collect();
    let text = text.replace(":0", ":1");
    assert_eq!(text.len(), 200);
    write(dir.path(), "a.jsonl", text.as_bytes());
    let batches = batches(FileSourceOptions {
        batch_bytes: 35,
        ..options(dir.path(), "a.jsonl")
    })
    .unwrap();
    // Each batch closes at the first record that takes it to 35 bytes or more.
    let sizes: Vec<usize> = batches.iter().map(|b| b.records.len()).collect();
    assert_eq!(sizes, vec![4, 4, 4, 4, 4]);
    assert!(batches.iter().all(|b| b.bytes_read == 40));
}

#[test]
fn a_batch_spans_files_and_progress_reaches_the_total() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.jsonl", b"{\"f\":\"a\"}\n{\"f\":\"a\"}\n");
    write(dir.path(), "d/b.csv", b"f\nb\nb\n");
    write(dir.path(), "d/c.jsonl.gz", &gzip(b"{\"f\":\"c\"}\n"));
    let mut source = FileSource::open(options(dir.path(), "d")).unwrap();
    let total = source.progress().bytes_total.unwrap();
    assert_eq!(source.progress().files_total, Some(3));
    let batch = source.next_batch().unwrap().unwrap();
    assert_eq!(batch.records.len(), 5);
    let uris: Vec<&str> = batch.records.iter().map(|r| &*r.position.uri).collect();
    assert_eq!(
        uris,
        vec![
            "d/a.jsonl",
            "d/a.jsonl",
            "d/b.csv",
            "d/b.csv",
            "d/c.jsonl.gz"
        ]
    );
    assert_eq!(batch.bytes_read, total);
    assert!(source.next_batch().unwrap().is_none());
    let progress = source.progress();
    assert_eq!(progress.bytes_done, total);
    assert_eq!(progress.files_done, 3);
}

#[test]
fn an_explicit_format_overrides_detection() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "data.txt", b"a,b\n1,x\n");
    let (records, _) = read_all(FileSourceOptions {
        format: Some(FileFormat::Csv),
        ..options(dir.path(), "data.txt")
    })
    .unwrap();
    assert_eq!(values(&records), vec![r#"{"a":1,"b":"x"}"#]);
}

#[test]
fn an_explicit_json_format_reads_any_json_shape_whatever_the_name() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.csv", b"[{\"a\":1}]");
    write(dir.path(), "d/b.csv", b"{\n  \"a\": 2\n}\n");
    write(dir.path(), "d/c.txt", b"{\"a\":3}\n{\"a\":4}\n");
    write(dir.path(), "d/d.parquet", &gzip(b"\n{\"a\":5}\n"));
    write(dir.path(), "d/e.csv", b"  \n");
    let json = FileSourceOptions {
        format: Some(FileFormat::Json),
        ..options(dir.path(), "d")
    };
    let source = FileSource::open(json.clone()).unwrap();
    let formats: Vec<(FileFormat, Compression)> = source.formats().collect();
    assert_eq!(
        formats,
        vec![
            (FileFormat::JsonArray, Compression::None),
            (FileFormat::JsonDocuments, Compression::None),
            (FileFormat::Jsonl, Compression::None),
            (FileFormat::Jsonl, Compression::Gzip),
            (FileFormat::Jsonl, Compression::None),
        ]
    );
    let (records, dead) = read_all(json).unwrap();
    assert!(dead.is_empty(), "{dead:?}");
    let got: Vec<i64> = records
        .iter()
        .map(|r| r.value["a"].as_i64().unwrap())
        .collect();
    assert_eq!(got, vec![1, 2, 3, 4, 5]);
}

#[test]
fn an_explicit_json_format_refuses_a_named_file_that_is_not_json_and_skips_found_ones() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/data.csv", b"a,b\n1,2\n");
    write(dir.path(), "d/ok.json", b"{\"a\":1}\n");
    let json = |path: &str| FileSourceOptions {
        format: Some(FileFormat::Json),
        ..options(dir.path(), path)
    };
    let error = FileSource::open(json("d/data.csv")).unwrap_err();
    assert!(
        matches!(error, SourceError::NotJson { ref path } if path == "d/data.csv"),
        "{error}"
    );
    assert_eq!(
        error.to_string(),
        "cannot read `d/data.csv` as JSON (`format: json`): it does not start with `{` or `[`"
    );
    assert!(!error.is_retryable());
    let source = FileSource::open(json("d")).unwrap();
    assert_eq!(source.files(), &[dir.path().join("d/ok.json")]);
}

#[test]
fn the_json_formats_have_their_configuration_names() {
    assert_eq!(FileFormat::Json.as_str(), "json");
    assert_eq!(FileFormat::JsonDocuments.as_str(), "json_documents");
    let parsed: FileFormat = serde_json::from_str("\"json\"").unwrap();
    assert_eq!(parsed, FileFormat::Json);
}

#[test]
fn a_file_removed_after_opening_has_vanished() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "a.jsonl", b"{}\n");
    let mut source = FileSource::open(options(dir.path(), "a.jsonl")).unwrap();
    std::fs::remove_file(path).unwrap();
    let error = source.next_batch().unwrap_err();
    assert!(matches!(error, SourceError::Vanished { ref path } if path == "a.jsonl"));
    assert!(!error.is_retryable());
}

#[test]
fn records_read_before_an_error_are_returned_before_it() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "d/a.jsonl", b"{\"a\":1}\n");
    let mut corrupt = gzip(b"{\"b\":2}\n{\"b\":3}\n");
    let middle = corrupt.len() / 2;
    corrupt[middle] ^= 0xff;
    corrupt.truncate(corrupt.len() - 4);
    write(dir.path(), "d/b.jsonl.gz", &corrupt);
    write(dir.path(), "d/c.jsonl", b"{\"c\":4}\n");
    let mut source = FileSource::open(options(dir.path(), "d")).unwrap();
    let first = source.next_batch().unwrap().unwrap();
    assert_eq!(values(&first.records)[0], r#"{"a":1}"#);
    let error = source.next_batch().unwrap_err();
    assert!(
        matches!(error, SourceError::CorruptGzip { ref path, .. } if path == "d/b.jsonl.gz"),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .starts_with("corrupt gzip stream in `d/b.jsonl.gz`")
    );
    // The source moves on to the next file.
    let last = source.next_batch().unwrap().unwrap();
    assert_eq!(values(&last.records), vec![r#"{"c":4}"#]);
    assert!(source.next_batch().unwrap().is_none());
    assert_eq!(source.progress().files_done, 3);
}

#[test]
fn a_large_jsonl_file_is_read_in_batches_of_at_most_batch_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.jsonl");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let padding = "x".repeat(80);
    let mut lines = 0u64;
    let mut written = 0u64;
    while written < 50 * 1024 * 1024 {
        let line = format!("{{\"n\":{lines},\"pad\":\"{padding}\"}}\n");
        std::io::Write::write_all(&mut file, line.as_bytes()).unwrap();
        written += line.len() as u64;
        lines += 1;
    }
    drop(file);
    let mut source = FileSource::open(FileSourceOptions {
        batch_rows: 1000,
        ..options(dir.path(), "big.jsonl")
    })
    .unwrap();
    let mut seen = 0u64;
    let mut bytes = 0u64;
    while let Some(batch) = source.next_batch().unwrap() {
        assert!(batch.records.len() <= 1000);
        assert!(batch.deadletters.is_empty());
        seen += batch.records.len() as u64;
        bytes += batch.bytes_read;
    }
    assert_eq!(seen, lines);
    assert_eq!(bytes, written);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn random_bytes_never_panic_in_any_text_format(
        bytes in proptest::collection::vec(any::<u8>(), 0..512),
        seed in proptest::collection::vec(
            prop_oneof![
                Just(b'{'), Just(b'}'), Just(b'['), Just(b']'), Just(b'"'),
                Just(b'\\'), Just(b','), Just(b'\n'), Just(b':'), Just(b'1'),
            ],
            0..256,
        ),
    ) {
        let dir = tempfile::tempdir().unwrap();
        for (name, content) in [
            ("a.jsonl", &bytes), ("b.json", &bytes), ("c.csv", &bytes),
            ("d.jsonl", &seed), ("e.json", &seed), ("f.csv", &seed),
        ] {
            write(dir.path(), name, content);
            let options = FileSourceOptions {
                max_record_bytes: 64,
                batch_rows: 3,
                ..options(dir.path(), name)
            };
            // Errors are fine (an unknown format, say); panics are not.
            if let Ok(mut source) = FileSource::open(options) {
                let mut guard = 0;
                while let Ok(Some(_)) = source.next_batch() {
                    guard += 1;
                    prop_assert!(guard < 10_000);
                }
            }
            let mut json_array = FileSourceOptions {
                format: Some(FileFormat::JsonArray),
                max_record_bytes: 16,
                ..super::testing::options(dir.path(), name)
            };
            json_array.batch_rows = 2;
            if let Ok(mut source) = FileSource::open(json_array) {
                while let Ok(Some(_)) = source.next_batch() {}
            }
            for format in [FileFormat::JsonDocuments, FileFormat::Json] {
                let options = FileSourceOptions {
                    format: Some(format),
                    max_record_bytes: 16,
                    batch_rows: 2,
                    ..super::testing::options(dir.path(), name)
                };
                if let Ok(mut source) = FileSource::open(options) {
                    while let Ok(Some(_)) = source.next_batch() {}
                }
            }
        }
    }
}

#[test]
fn deadletters_count_toward_batch_rows() {
    let (_, dead) = read_bytes("a.jsonl", b"1\n2\n3\n");
    assert_eq!(dead.len(), 3);
    assert!(dead.iter().all(|d| d.code == FailureCode::NotAnObject));
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.jsonl", b"1\n2\n3\n");
    let batches = batches(FileSourceOptions {
        batch_rows: 2,
        ..options(dir.path(), "a.jsonl")
    })
    .unwrap();
    let sizes: Vec<usize> = batches.iter().map(|b| b.deadletters.len()).collect();
    assert_eq!(sizes, vec![2, 1]);
}
