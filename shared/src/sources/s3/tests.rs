//! The S3 source against the moto server `bash tests/run` starts (see
//! [`crate::aws::testing::moto`]: without it these tests fail, saying so).

use std::sync::Arc;

use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use arrow::record_batch::RecordBatch;
use aws_sdk_s3::primitives::ByteStream;

use super::*;
use crate::aws::testing::{bucket, moto};
use crate::sources::file::testing::gzip;
use crate::sources::{Position, SourceRecord};

/// Write `bytes` at `key`.
fn put(aws: &Aws, bucket: &str, key: &str, bytes: &[u8]) {
    let client = aws.s3(None);
    let body = ByteStream::from(bytes.to_vec());
    aws.block_on(async {
        client
            .put_object()
            .bucket(bucket)
            .key(key)
            .body(body)
            .send()
            .await
    })
    .unwrap();
}

/// S3 requests sent so far.
fn s3_requests(aws: &Aws) -> u64 {
    aws.requests().get("s3").copied().unwrap_or(0)
}

/// Everything a source opened at `checkpoint` yields, and its checkpoint after.
fn read_from(options: &S3SourceOptions, checkpoint: Option<&[u8]>) -> (Vec<SourceRecord>, Vec<u8>) {
    let mut source = S3Source::open_at(options.clone(), checkpoint).unwrap();
    let mut records = Vec::new();
    while let Some(batch) = source.next_batch().unwrap() {
        assert!(batch.deadletters.is_empty(), "{:?}", batch.deadletters);
        records.extend(batch.records);
    }
    (records, source.checkpoint().unwrap())
}

/// The value of field `f` of each record, as text.
fn field(records: &[SourceRecord], f: &str) -> Vec<String> {
    records
        .iter()
        .map(|r| match &r.value[f] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

fn lines(tag: &str, n: usize) -> Vec<u8> {
    (1..=n)
        .map(|i| format!("{{\"f\":\"{tag}{i}\"}}\n"))
        .collect::<String>()
        .into_bytes()
}

fn parsed(bytes: &[u8]) -> S3Checkpoint {
    S3Checkpoint::from_bytes(bytes, "test").unwrap()
}

#[test]
fn formats_are_told_per_object_and_a_pass_with_nothing_new_costs_one_list() {
    let aws = moto();
    let bucket = bucket(&aws, "s3src");
    put(&aws, &bucket, "in/a.jsonl", &lines("a", 2));
    put(&aws, &bucket, "in/b.csv", b"f,n\nb1,1\nb2,2\n");
    put(&aws, &bucket, "in/c.jsonl.gz", &gzip(&lines("c", 2)));
    put(&aws, &bucket, "in/d", b"[{\"f\":\"d1\"}]");
    put(&aws, &bucket, "other/x.jsonl", &lines("x", 1));
    let options = S3SourceOptions::new(aws.clone(), &bucket, "in/");
    let (records, checkpoint) = read_from(&options, None);
    assert_eq!(
        field(&records, "f"),
        vec!["a1", "a2", "b1", "b2", "c1", "c2", "d1"]
    );
    assert_eq!(records[2].value["n"], serde_json::json!(1));
    assert_eq!(
        *records[0].position.uri,
        format!("s3://{bucket}/in/a.jsonl")
    );
    assert_eq!(records[5].position.record, 2);
    let state = parsed(&checkpoint);
    assert_eq!(state.after.as_deref(), Some("in/d"));
    assert!(state.objects.is_empty(), "{state:?}");

    // Nothing new: one LIST (StartAfter the watermark), no GET.
    let before = s3_requests(&aws);
    let (again, same) = read_from(&options, Some(&checkpoint));
    assert!(again.is_empty());
    assert_eq!(s3_requests(&aws) - before, 1);
    assert_eq!(parsed(&same), state);

    // A new object: one LIST and one GET, and only it is read.
    put(&aws, &bucket, "in/e.jsonl", &lines("e", 3));
    let before = s3_requests(&aws);
    let (new, checkpoint) = read_from(&options, Some(&same));
    assert_eq!(field(&new, "f"), vec!["e1", "e2", "e3"]);
    assert_eq!(s3_requests(&aws) - before, 2);
    assert_eq!(parsed(&checkpoint).after.as_deref(), Some("in/e.jsonl"));
}

#[test]
fn a_key_below_the_watermark_is_missed_and_full_listing_reads_it() {
    let aws = moto();
    let bucket = bucket(&aws, "s3src");
    put(&aws, &bucket, "in/b.jsonl", &lines("b", 1));
    let watermark = S3SourceOptions::new(aws.clone(), &bucket, "in/");
    let full = S3SourceOptions {
        full_listing: true,
        ..watermark.clone()
    };
    let (_, by_watermark) = read_from(&watermark, None);
    let (first, by_full) = read_from(&full, None);
    assert_eq!(field(&first, "f"), vec!["b1"]);
    let state = parsed(&by_full);
    assert_eq!(state.after, None);
    assert!(state.objects["in/b.jsonl"].done);

    put(&aws, &bucket, "in/a.jsonl", &lines("a", 1));
    let (missed, _) = read_from(&watermark, Some(&by_watermark));
    assert!(
        missed.is_empty(),
        "documented: a key below the watermark is never listed"
    );
    let (found, by_full) = read_from(&full, Some(&by_full));
    assert_eq!(field(&found, "f"), vec!["a1"]);
    // Full listing lists everything, and reads nothing twice.
    let before = s3_requests(&aws);
    let (again, _) = read_from(&full, Some(&by_full));
    assert!(again.is_empty());
    assert_eq!(s3_requests(&aws) - before, 1);
}

#[test]
fn reading_resumes_mid_object_across_batches_in_every_format() {
    let aws = moto();
    let bucket = bucket(&aws, "s3src");
    put(&aws, &bucket, "in/1.jsonl", &lines("j", 5));
    put(
        &aws,
        &bucket,
        "in/2.csv.gz",
        &gzip(b"f,n\nc1,1\nc2,2\nc3,3\nc4,4\n"),
    );
    put(
        &aws,
        &bucket,
        "in/3.json",
        b"[{\"f\":\"y1\"},{\"f\":\"y2\"},{\"f\":\"y3\"}]",
    );
    put(
        &aws,
        &bucket,
        "in/4.parquet",
        &parquet_bytes(&["p1", "p2", "p3", "p4", "p5"]),
    );
    put(&aws, &bucket, "in/5.csv", b"f,n\nd1,1\nd2,2\nd3,3\n");
    let options = S3SourceOptions {
        batch_rows: 2,
        ..S3SourceOptions::new(aws.clone(), &bucket, "in/")
    };
    let (straight, _) = read_from(&options, None);
    assert_eq!(straight.len(), 5 + 4 + 3 + 5 + 3);
    // Reopen at every checkpoint, as after a crash after each batch.
    let mut resumed = Vec::new();
    let mut checkpoint: Option<Vec<u8>> = None;
    let mut open_mid_object = 0;
    loop {
        let mut source = S3Source::open_at(options.clone(), checkpoint.as_deref()).unwrap();
        let Some(batch) = source.next_batch().unwrap() else {
            break;
        };
        assert!(batch.records.len() <= 2);
        resumed.extend(batch.records);
        let bytes = source.checkpoint().unwrap();
        if parsed(&bytes).objects.values().any(|o| !o.done) {
            open_mid_object += 1;
        }
        checkpoint = Some(bytes);
    }
    assert!(open_mid_object >= 5, "{open_mid_object}");
    assert_eq!(field(&resumed, "f"), field(&straight, "f"));
    let positions =
        |r: &[SourceRecord]| -> Vec<Position> { r.iter().map(|r| r.position.clone()).collect() };
    assert_eq!(positions(&resumed), positions(&straight));
    let state = parsed(&checkpoint.unwrap());
    assert_eq!(state.after.as_deref(), Some("in/5.csv"));
}

#[test]
fn a_plain_object_resumes_with_a_ranged_get() {
    let aws = moto();
    let bucket = bucket(&aws, "s3src");
    put(&aws, &bucket, "in/a.jsonl", &lines("a", 4));
    let options = S3SourceOptions {
        batch_rows: 3,
        ..S3SourceOptions::new(aws.clone(), &bucket, "in/")
    };
    let mut source = S3Source::open(options.clone()).unwrap();
    let first = source.next_batch().unwrap().unwrap();
    assert_eq!(field(&first.records, "f"), vec!["a1", "a2", "a3"]);
    let checkpoint = source.checkpoint().unwrap();
    let progress = parsed(&checkpoint).objects["in/a.jsonl"].clone();
    assert!(!progress.done);
    assert_eq!(progress.offset, 3 * 11);
    let mut source = S3Source::open_at(options, Some(&checkpoint)).unwrap();
    let rest = source.next_batch().unwrap().unwrap();
    assert_eq!(field(&rest.records, "f"), vec!["a4"]);
    assert_eq!(rest.records[0].position.record, 4);
    // Only the bytes after the offset were read and counted.
    assert_eq!(rest.bytes_read, 11);
    assert!(source.next_batch().unwrap().is_none());
}

#[test]
fn an_object_rewritten_after_it_was_partly_read_is_reported_once_by_key_and_etags() {
    let aws = moto();
    let bucket = bucket(&aws, "s3src");
    put(&aws, &bucket, "in/a.jsonl", &lines("a", 3));
    put(&aws, &bucket, "in/b.jsonl", &lines("b", 1));
    let options = S3SourceOptions {
        batch_rows: 1,
        ..S3SourceOptions::new(aws.clone(), &bucket, "in/")
    };
    let mut source = S3Source::open(options.clone()).unwrap();
    source.next_batch().unwrap().unwrap();
    let checkpoint = source.checkpoint().unwrap();
    let was = parsed(&checkpoint).objects["in/a.jsonl"].etag.clone();

    put(&aws, &bucket, "in/a.jsonl", &lines("z", 3));
    let mut source = S3Source::open_at(options.clone(), Some(&checkpoint)).unwrap();
    let error = source.next_batch().unwrap_err();
    let SourceError::ObjectChanged {
        bucket: ref b,
        ref key,
        ref etags,
    } = error
    else {
        panic!("{error}");
    };
    assert_eq!((b.as_str(), key.as_str()), (bucket.as_str(), "in/a.jsonl"));
    assert_eq!(etags.was, was);
    assert_ne!(etags.now, etags.was);
    assert!(etags.now.starts_with('"'), "{}", etags.now);
    assert!(
        error.to_string().starts_with(&format!(
            "object `s3://{bucket}/in/a.jsonl` changed after it was read"
        )),
        "{error}"
    );
    assert!(error.affects_one_file());
    assert!(!error.is_retryable());
    // Reading goes on with the other objects; the changed one is closed under its new ETag.
    let next = source.next_batch().unwrap().unwrap();
    assert_eq!(field(&next.records, "f"), vec!["b1"]);
    assert!(source.next_batch().unwrap().is_none());
    let checkpoint = source.checkpoint().unwrap();
    assert_eq!(parsed(&checkpoint).after.as_deref(), Some("in/b.jsonl"));
    let (again, _) = read_from(&options, Some(&checkpoint));
    assert!(again.is_empty());
}

#[test]
fn with_full_listing_an_object_rewritten_after_it_was_read_is_reported_not_reread() {
    let aws = moto();
    let bucket = bucket(&aws, "s3src");
    put(&aws, &bucket, "in/a.jsonl", &lines("a", 2));
    let options = S3SourceOptions {
        full_listing: true,
        ..S3SourceOptions::new(aws.clone(), &bucket, "in/")
    };
    let (first, checkpoint) = read_from(&options, None);
    assert_eq!(first.len(), 2);
    put(&aws, &bucket, "in/a.jsonl", &lines("a", 3));
    let mut source = S3Source::open_at(options.clone(), Some(&checkpoint)).unwrap();
    let error = source.next_batch().unwrap_err();
    assert!(matches!(error, SourceError::ObjectChanged { ref key, .. } if key == "in/a.jsonl"));
    assert!(source.next_batch().unwrap().is_none());
    let checkpoint = source.checkpoint().unwrap();
    let (again, _) = read_from(&options, Some(&checkpoint));
    assert!(again.is_empty(), "the new content is not read");
}

#[test]
fn a_listing_of_more_than_a_thousand_keys_is_read_page_by_page() {
    let aws = moto();
    let bucket = bucket(&aws, "s3src");
    for i in 0..1003 {
        put(
            &aws,
            &bucket,
            &format!("in/{i:05}.jsonl"),
            format!("{{\"i\":{i}}}\n").as_bytes(),
        );
    }
    let options = S3SourceOptions::new(aws.clone(), &bucket, "in/");
    let before = s3_requests(&aws);
    let source = S3Source::open(options.clone()).unwrap();
    // Two pages of up to 1,000 keys.
    assert_eq!(s3_requests(&aws) - before, 2);
    assert_eq!(source.keys().count(), 1003);
    let (records, checkpoint) = read_from(&options, None);
    let got: Vec<i64> = records
        .iter()
        .map(|r| r.value["i"].as_i64().unwrap())
        .collect();
    assert_eq!(got, (0..1003).collect::<Vec<i64>>());
    assert_eq!(parsed(&checkpoint).after.as_deref(), Some("in/01002.jsonl"));
}

#[test]
fn an_object_of_unknown_format_is_skipped_and_closed() {
    let aws = moto();
    let bucket = bucket(&aws, "s3src");
    put(&aws, &bucket, "in/a.txt", b"hello");
    put(&aws, &bucket, "in/b.jsonl", &lines("b", 1));
    let options = S3SourceOptions::new(aws.clone(), &bucket, "in/");
    let (records, checkpoint) = read_from(&options, None);
    assert_eq!(field(&records, "f"), vec!["b1"]);
    assert_eq!(parsed(&checkpoint).after.as_deref(), Some("in/b.jsonl"));
}

#[test]
fn a_missing_bucket_fails_opening_naming_it() {
    let aws = moto();
    let options = S3SourceOptions::new(aws, "no-such-bucket-s3src", "in/");
    let error = S3Source::open(options).unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("cannot list `s3://no-such-bucket-s3src/in/`: NoSuchBucket"),
        "{error}"
    );
    assert!(!error.is_retryable());
}

/// A Parquet file with one string column `f` holding `values`, and `n` their 1-based index.
fn parquet_bytes(values: &[&str]) -> Vec<u8> {
    let schema = Arc::new(Schema::new(vec![
        Field::new("f", DataType::Utf8, false),
        Field::new("n", DataType::Int64, false),
    ]));
    let batch = RecordBatch::try_new(
        schema.clone(),
        vec![
            Arc::new(StringArray::from(values.to_vec())),
            Arc::new(Int64Array::from_iter_values(1..=values.len() as i64)),
        ],
    )
    .unwrap();
    let mut out = Vec::new();
    let mut writer = parquet::arrow::ArrowWriter::try_new(&mut out, schema, None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
    out
}

#[test]
fn an_ordered_depth_listing_reads_the_keys_of_a_flat_one_in_the_same_order_and_skips_what_was_read()
{
    let aws = moto();
    let bucket = bucket(&aws, "s3depth");
    // Keys at every level, with names that sort around the delimiter (`-` < `/` < `0`).
    let keys = [
        "in/2024-01/a.jsonl",
        "in/2024-01/x/b.jsonl",
        "in/2024-01-b/c.jsonl",
        "in/2024-02/d.jsonl",
        "in/2024-02/y/z/e.jsonl",
        "in/top.jsonl",
        "in/zz/f.jsonl",
    ];
    for (i, key) in keys.iter().enumerate() {
        put(&aws, &bucket, key, &lines(&format!("k{i}-"), 1));
    }
    put(&aws, &bucket, "other/no.jsonl", &lines("no", 1));
    let flat = S3SourceOptions::new(aws.clone(), &bucket, "in/");
    let (flat_records, flat_checkpoint) = read_from(&flat, None);
    for depth in [1, 2, 3] {
        let options = S3SourceOptions {
            ordered_depth: depth,
            ..flat.clone()
        };
        let source = S3Source::open_at(options.clone(), None).unwrap();
        let listed: Vec<&str> = source.keys().collect();
        let mut sorted = keys.to_vec();
        sorted.sort_unstable();
        assert_eq!(listed, sorted, "depth {depth}");
        let (records, checkpoint) = read_from(&options, None);
        assert_eq!(
            field(&records, "f"),
            field(&flat_records, "f"),
            "depth {depth}"
        );
        assert_eq!(parsed(&checkpoint), parsed(&flat_checkpoint));
    }

    // After everything up to `in/2024-02/...` was read, a depth-1 walk lists the top level
    // once and then only the sub-prefixes not wholly read: `in/2024-01/` and `in/2024-01-b/`
    // cost nothing; `in/2024-02/` (the watermark is inside it) and `in/zz/` one LIST each.
    let options = S3SourceOptions {
        ordered_depth: 1,
        ..flat.clone()
    };
    let mut checkpoint = S3Checkpoint::new(&bucket, "in/");
    checkpoint.after = Some("in/2024-02/d.jsonl".to_owned());
    let before = s3_requests(&aws);
    let bytes = serde_json::to_vec(&checkpoint).unwrap();
    let source = S3Source::open_at(options, Some(&bytes)).unwrap();
    assert_eq!(
        source.keys().collect::<Vec<_>>(),
        vec!["in/2024-02/y/z/e.jsonl", "in/top.jsonl", "in/zz/f.jsonl"]
    );
    assert_eq!(s3_requests(&aws) - before, 3);
}
