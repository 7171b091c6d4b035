use super::*;
use crate::deadletter::{Deadletter, FailureCode};
use crate::schema::SchemaInferrer;
use crate::sources::{Position, UnparsedJson};
use proptest::prelude::*;

/// A batch of unparsed lines, as the File source gives them, after `before` deadletters
/// (read first).
fn unparsed_batch(lines: &[String], before: usize) -> SourceBatch {
    let mut batch = SourceBatch::default();
    for line in 0..before {
        batch.deadletters.push(Deadletter {
            source_uri: "earlier".into(),
            line: line as u64 + 1,
            offset: 0,
            raw: String::new(),
            error: "too large".into(),
            code: FailureCode::TooLarge,
            namespace: None,
        });
    }
    let mut offset = 0;
    for (index, line) in lines.iter().enumerate() {
        let start = offset;
        offset += line.len() as u64 + 1;
        batch.records.push(SourceRecord {
            value: serde_json::Map::new(),
            position: Position {
                uri: "in.jsonl".into(),
                offset,
                record: index as u64 + 1,
            },
            unparsed: Some(UnparsedJson {
                text: bytes::Bytes::copy_from_slice(line.as_bytes()),
                start,
                // Half the earlier deadletters come before the first line.
                deadletters_before: if index == 0 { before / 2 } else { before },
            }),
            cells: None,
            namespace: None,
        });
    }
    batch
}

/// Each namespace's batch as Arrow IPC stream bytes: equal bytes, equal buffers.
pub(super) fn ipc_bytes(builders: Builders) -> Vec<(String, Vec<u8>)> {
    builders
        .into_iter()
        .map(|(ns, mut builder)| {
            let batch = builder.finish().unwrap();
            let mut bytes = Vec::new();
            let mut writer =
                ::arrow::ipc::writer::StreamWriter::try_new(&mut bytes, &batch.schema()).unwrap();
            writer.write(&batch).unwrap();
            writer.finish().unwrap();
            drop(writer);
            (ns, bytes)
        })
        .collect()
}

/// The reference: every line parsed with `serde_json` first, then typed from the parsed
/// records (the typer never sees a line).
fn typed_the_slow_way(
    lines: &[String],
    before: usize,
    schema: &PipelineSchema,
    transform: &TransformOptions,
) -> (SourceBatch, Option<Builders>) {
    let mut batch = unparsed_batch(lines, before);
    batch.parse_unparsed(|_| true);
    let mut malformed = Vec::new();
    let builders = type_as_is(
        &mut batch.records,
        schema,
        transform,
        &mut JsonLineTyper::default(),
        &mut malformed,
    );
    assert!(malformed.is_empty());
    (batch, builders)
}

/// [`infer_and_type`] on `batch` with a copy of `schema`, failing the test on any
/// deadletter.
pub(super) fn infer_rejecting_nothing(
    batch: &mut SourceBatch,
    schema: &PipelineSchema,
    transform: &TransformOptions,
    typer: &mut JsonLineTyper,
) -> Inferred {
    let mut evolved = schema.clone();
    infer_and_type(
        batch,
        &mut evolved,
        transform,
        typer,
        ("p", "w"),
        &mut |dl| panic!("{dl:?}"),
    )
    .unwrap()
}

/// Check that typing `lines` from their text gives what parsing them first gives, with
/// the schema as it is or, when the batch needs inference, with the schema inference
/// evolves from them (read one line at a time, against every line parsed first).
fn check_same_as_slow_path(
    lines: &[String],
    before: usize,
    schema: &PipelineSchema,
    transform: &TransformOptions,
) -> Result<bool, TestCaseError> {
    let (mut slow_batch, slow) = typed_the_slow_way(lines, before, schema, transform);
    let mut batch = unparsed_batch(lines, before);
    let mut typer = JsonLineTyper::default();
    let fast = type_fitting(&mut batch, schema, transform, &mut typer);
    prop_assert_eq!(fast.is_some(), slow.is_some());
    let typed = fast.is_some();
    match (fast, slow) {
        (Some(fast), Some(slow)) => {
            prop_assert_eq!(&batch.deadletters, &slow_batch.deadletters);
            prop_assert_eq!(ipc_bytes(fast), ipc_bytes(slow));
            prop_assert_eq!(batch.records.len(), slow_batch.records.len());
        }
        _ => {
            let ids = ("p", "w");
            let (mut fast_schema, mut slow_schema) = (schema.clone(), schema.clone());
            let (mut fast_rejects, mut slow_rejects) = (Vec::new(), Vec::new());
            let fast = infer_and_type(
                &mut batch,
                &mut fast_schema,
                transform,
                &mut typer,
                ids,
                &mut |dl| fast_rejects.push(dl),
            );
            let slow = infer_and_type(
                &mut slow_batch,
                &mut slow_schema,
                transform,
                &mut JsonLineTyper::default(),
                ids,
                &mut |dl| slow_rejects.push(dl),
            );
            let (Ok(fast), Ok(slow)) = (fast, slow) else {
                return Err(TestCaseError::fail("inference failed"));
            };
            prop_assert_eq!(&batch.deadletters, &slow_batch.deadletters);
            prop_assert_eq!(fast_schema, slow_schema);
            let describe = |c: &Vec<SchemaChange>| -> Vec<String> {
                c.iter().map(ToString::to_string).collect()
            };
            prop_assert_eq!(describe(&fast.changes), describe(&slow.changes));
            let located = |d: &Vec<Deadletter>| -> Vec<(u64, String)> {
                d.iter().map(|d| (d.line, d.error.clone())).collect()
            };
            prop_assert_eq!(located(&fast_rejects), located(&slow_rejects));
            prop_assert_eq!(ipc_bytes(fast.builders), ipc_bytes(slow.builders));
        }
    }
    Ok(typed)
}

/// JSON text for a value, written in one of the ways `serde_json` reads the same.
fn value_text() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        (-5i64..5).prop_map(|n| n.to_string()),
        any::<i32>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        (1_262_304_000i64..1_262_304_010).prop_map(|n| n.to_string()),
        (1_262_304_000_000i64..1_262_304_000_010).prop_map(|n| n.to_string()),
        (-1e6f64..1e6).prop_map(|n| n.to_string()),
        (-1e6f64..1e6).prop_map(|n| format!("{n:e}")),
        prop_oneof![
            Just("-0"),
            Just("-0.0"),
            Just("1.50"),
            Just("2E3"),
            Just("1e-7"),
            Just("123456789012345678901234"),
            Just("0.1e400"),
            Just("1e400"),
        ]
        .prop_map(str::to_owned),
        prop_oneof![
            Just(r#""2024-01-31""#),
            Just(r#""2023-02-30""#),
            Just(r#""12.5""#),
            Just(r#""-1.5e3""#),
            Just(r#""waived""#),
            Just(r#""a \"quoted\" \\ \/ text\n""#),
            Just(r#""\u00e9t\u00E9""#),
            Just(r#""\ud83d\ude00""#),
            Just(r#""2024\u002d01-31""#),
            Just(r#""ünïcode ✓""#),
            Just(r#""""#),
        ]
        .prop_map(str::to_owned),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            (prop::collection::vec(inner.clone(), 0..4), any::<bool>()).prop_map(
                |(items, spaced)| format!("[{}]", items.join(if spaced { " , " } else { "," }))
            ),
            (
                prop::collection::vec((key_text(), inner), 0..4),
                any::<bool>()
            )
                .prop_map(|(members, spaced)| object_text(&members, spaced)),
        ]
    })
}

/// An object key: a few names, some sibling names and the namespace field, once escaped.
fn key_text() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop_oneof![
            Just("a"),
            Just("b"),
            Just("B"),
            Just("c.d"),
            Just("a_string"),
            Just("a_double"),
            Just("t"),
        ]
        .prop_map(|key| format!("\"{key}\"")),
        1 => Just(r#""\u0061""#.to_owned()),
    ]
}

fn object_text(members: &[(String, String)], spaced: bool) -> String {
    let (comma, colon) = if spaced { (" , ", " : ") } else { (",", ":") };
    let members: Vec<String> = members
        .iter()
        .map(|(key, value)| format!("{key}{colon}{value}"))
        .collect();
    format!("{{{}}}", members.join(comma))
}

/// A line: mostly objects, some not JSON at all, some JSON that is not an object.
fn line_text() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => (
            prop::collection::vec((key_text(), value_text()), 0..6),
            any::<bool>(),
            prop_oneof![Just(""), Just(" "), Just("\t")],
        )
            .prop_map(|(members, spaced, pad)| format!(
                "{pad}{}{pad}",
                object_text(&members, spaced)
            )),
        1 => prop_oneof![
            Just("{broken"),
            Just("[1,2]"),
            Just("42"),
            Just("{\"a\":1} trailing"),
            Just("{\"a\":01}"),
            Just("{\"a\":\"\\x\"}"),
            Just("{\"a\":1,}"),
        ]
        .prop_map(str::to_owned),
    ]
}

fn transform_options() -> impl Strategy<Value = TransformOptions> {
    (
        prop_oneof![
            Just(vec![]),
            Just(vec!["t".to_owned()]),
            Just(vec!["t".to_owned(), "b".to_owned()]),
            Just(vec!["a.t".to_owned()]),
        ],
        prop::bool::weighted(0.1),
        merge_keys(),
    )
        .prop_map(
            |(namespace_fields, flatten_events, merge_keys)| TransformOptions {
                namespace_fields,
                flatten_events,
                merge_keys,
                ..TransformOptions::default()
            },
        )
}

/// Merge keys over the keys the lines use (`a` with its siblings `a_string` and
/// `a_double`): none, in every namespace, or in all but the default one.
pub(super) fn merge_keys() -> impl Strategy<Value = crate::schema::MergeKeys> {
    prop_oneof![
        2 => Just(crate::schema::MergeKeys::default()),
        1 => prop_oneof![Just(vec!["a"]), Just(vec!["a", "b"])].prop_map(|columns| {
            crate::schema::MergeKeys {
                columns: columns.into_iter().map(str::to_owned).collect(),
                default: true,
                namespaces: std::collections::BTreeMap::new(),
            }
        }),
        1 => Just(crate::schema::MergeKeys {
            columns: vec!["a".to_owned()],
            default: true,
            namespaces: std::collections::BTreeMap::from([("default".to_owned(), false)]),
        }),
    ]
}

/// The schema inferred from the objects among the first `sample` lines.
fn infer(lines: &[String], sample: usize, transform: &TransformOptions) -> Option<PipelineSchema> {
    let mut inferrer = SchemaInferrer::new(transform.clone());
    for line in lines.iter().take(sample) {
        if let Ok(record) = parse_json_object(line.as_bytes()) {
            inferrer.add(&record).ok()?;
        }
    }
    Some(inferrer.finish("p", "w"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn typing_lines_from_their_text_equals_typing_them_parsed(
        lines in prop::collection::vec(line_text(), 1..12),
        sample_all in prop::bool::weighted(0.7),
        sample in 0..12usize,
        transform in transform_options(),
        before in 0..3usize,
    ) {
        let sample = if sample_all { lines.len() } else { sample };
        let Some(schema) = infer(&lines, sample, &transform) else {
            return Ok(());
        };
        check_same_as_slow_path(&lines, before, &schema, &transform)?;
    }
}

/// Text for a value of one kind (so that records agree on each key's type and mostly fit
/// the schema inferred from them), written in any way `serde_json` reads the same.
fn value_of_kind(kind: usize) -> BoxedStrategy<String> {
    match kind {
        0 => any::<i32>().prop_map(|n| n.to_string()).boxed(),
        1 => prop_oneof![
            (-1e9f64..1e9).prop_map(|n| n.to_string()),
            (-1e9f64..1e9).prop_map(|n| format!("{n:E}")),
            any::<i64>().prop_map(|n| n.to_string()),
            (0u32..100_000, 0u32..1000).prop_map(|(i, f)| format!("{i}.{f:03}")),
            Just(r#""12.25""#.to_owned()),
        ]
        .boxed(),
        2 => prop_oneof![
            "[a-zA-Z0-9 ]{0,12}".prop_map(|text| format!("\"{text}\"")),
            Just(r#""tab\there \u00e9 \/ \"q\"""#.to_owned()),
            Just(r#""日本 ✓""#.to_owned()),
        ]
        .boxed(),
        3 => (2000u32..2100, 1u32..13, 1u32..29)
            .prop_map(|(y, m, d)| format!("\"{y}-{m:02}-{d:02}\""))
            .boxed(),
        4 => any::<bool>().prop_map(|b| b.to_string()).boxed(),
        5 => (1_262_304_000i64..4_102_444_799)
            .prop_map(|n| n.to_string())
            .boxed(),
        6 => prop::collection::vec(value_of_kind(2), 0..3)
            .prop_map(|items| format!("[{}]", items.join(",")))
            .boxed(),
        _ => (
            prop::option::of(value_of_kind(0)),
            prop::option::of(value_of_kind(1)),
        )
            .prop_map(|(x, y)| {
                let mut members = Vec::new();
                if let Some(x) = x {
                    members.push(("\"x\"".to_owned(), x));
                }
                if let Some(y) = y {
                    members.push(("\"y\"".to_owned(), y));
                }
                object_text(&members, false)
            })
            .boxed(),
    }
}

/// Lines whose keys each keep one kind of value, in varying order, some null or missing.
fn regular_lines() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(0..8usize, 5).prop_flat_map(|kinds| {
        let line = (
            kinds
                .iter()
                .enumerate()
                .map(|(key, &kind)| {
                    prop_oneof![
                        6 => value_of_kind(kind).prop_map(Some),
                        1 => Just(Some("null".to_owned())),
                        1 => Just(None),
                    ]
                    .prop_map(move |value| value.map(|v| (format!("\"k{key}\""), v)))
                })
                .collect::<Vec<_>>(),
            prop_oneof![Just("a"), Just("b"), Just("Other Kind")],
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(members, t, spaced, reversed)| {
                let mut members: Vec<(String, String)> = members.into_iter().flatten().collect();
                members.push(("\"t\"".to_owned(), format!("\"{t}\"")));
                if reversed {
                    members.reverse();
                }
                object_text(&members, spaced)
            });
        prop::collection::vec(line, 1..40)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn regular_lines_typed_from_their_text_equal_them_typed_parsed(
        lines in regular_lines(),
        sample in 1..40usize,
        namespaced in any::<bool>(),
    ) {
        let transform = TransformOptions {
            namespace_fields: if namespaced { vec!["t".to_owned()] } else { vec![] },
            ..TransformOptions::default()
        };
        let Some(schema) = infer(&lines, sample, &transform) else {
            return Ok(());
        };
        check_same_as_slow_path(&lines, 0, &schema, &transform)?;
    }
}

#[test]
fn records_that_fit_are_typed_from_their_text_without_being_parsed() {
    let lines: Vec<String> = [
            r#"{"t":"ride","id":1,"price":6.9,"at":1767225629,"day":"2026-10-04","tags":["x"],"s":{"n":"Hyde Park","geo":{"lat":51.44813,"lon":-0.07958}}}"#,
            r#"{"t":"dock","id":2,"ok":true}"#,
            r#"{ "id" : 3 , "t" : "ride" , "price" : "12.50" , "tags" : [ ] , "s" : { "n" : "Caf\u00e9 \"Q\"" } }"#,
        ]
        .map(str::to_owned)
        .to_vec();
    let transform = TransformOptions {
        namespace_fields: vec!["t".into()],
        ..TransformOptions::default()
    };
    let schema = infer(&lines, lines.len(), &transform).unwrap();
    assert!(check_same_as_slow_path(&lines, 1, &schema, &transform).unwrap());
    let mut batch = unparsed_batch(&lines, 0);
    let builders = type_fitting(
        &mut batch,
        &schema,
        &transform,
        &mut JsonLineTyper::default(),
    )
    .unwrap();
    assert!(batch.records.iter().all(|r| r.unparsed.is_some()));
    assert_eq!(builders["ride"].len(), 2);
    assert_eq!(builders["dock"].len(), 1);
}

/// Under `merge_by_key`, a record whose key column would be NULL is a `bad_key`
/// deadletter, whether its batch needs inference or fits the schema as it is (its line
/// then refused by the typer, and the batch inferred again).
#[test]
fn records_without_a_merge_key_of_their_own_are_rejected_on_both_paths() {
    let transform = TransformOptions {
        default_namespace: "p".into(),
        merge_keys: crate::schema::MergeKeys {
            columns: vec!["id".into()],
            default: true,
            namespaces: std::collections::BTreeMap::new(),
        },
        ..TransformOptions::default()
    };
    let lines: Vec<String> = [
        r#"{"id":1,"v":"a","s":1}"#,
        r#"{"id":1,"v":"b","s":2}"#,
        r#"{"id":null,"v":"n1","s":3}"#,
        r#"{"v":"missing","s":5}"#,
        r#"{"id":2,"v":"x","s":6}"#,
        r#"{"id":"2","v":"strkey","s":7}"#,
        r#"{"id":{"o":1},"v":"k-obj","s":11}"#,
        // Not numeric, so no string folds into the numbers (`id` stays `int`).
        r#"{"id":"abc","v":"k-abc","s":12}"#,
    ]
    .map(str::to_owned)
    .to_vec();
    let mut schema = PipelineSchema::empty("p", "w");
    let mut batch = unparsed_batch(&lines, 0);
    let mut rejects = Vec::new();
    let inferred = infer_and_type(
        &mut batch,
        &mut schema,
        &transform,
        &mut JsonLineTyper::default(),
        ("p", "w"),
        &mut |dl| rejects.push(dl),
    )
    .unwrap();
    let rejected = |rejects: &[Deadletter]| -> Vec<(u64, FailureCode)> {
        rejects.iter().map(|d| (d.line, d.code)).collect()
    };
    assert_eq!(
        rejected(&rejects),
        [3, 4, 6, 7, 8].map(|line| (line, FailureCode::BadKey))
    );
    assert!(
        rejects
            .iter()
            .all(|d| d.error.contains("`primary_key` column `id`"))
    );
    assert_eq!(inferred.builders["p"].len(), 3);
    let names: Vec<&str> = schema.namespaces["p"]
        .fields
        .iter()
        .map(|f| f.name.as_str())
        .collect();
    assert_eq!(names, ["id", "id_string", "id_struct", "s", "v"]);

    // The next batch fits the schema: its good lines are typed from their text, and one
    // routed to `id_string` sends the batch to inference, which rejects it alone.
    let good: Vec<String> = [r#"{"id":3,"v":"c","s":8}"#, r#"{"id":4,"v":"d","s":9}"#]
        .map(str::to_owned)
        .to_vec();
    let mut batch = unparsed_batch(&good, 0);
    let mut typer = JsonLineTyper::default();
    let builders = type_fitting(&mut batch, &schema, &transform, &mut typer).unwrap();
    assert_eq!(builders["p"].len(), 2);
    let mut lines = good.clone();
    lines.insert(1, r#"{"id":"xyz","v":"k-xyz","s":10}"#.to_owned());
    let mut batch = unparsed_batch(&lines, 0);
    assert!(type_fitting(&mut batch, &schema, &transform, &mut typer).is_none());
    let mut rejects = Vec::new();
    let inferred = infer_and_type(
        &mut batch,
        &mut schema,
        &transform,
        &mut typer,
        ("p", "w"),
        &mut |dl| rejects.push(dl),
    )
    .unwrap();
    assert!(inferred.changes.is_empty());
    assert_eq!(rejected(&rejects), [(2, FailureCode::BadKey)]);
    assert_eq!(inferred.builders["p"].len(), 2);
}

#[test]
fn values_routed_to_sibling_columns_are_typed_from_the_text_too() {
    let transform = TransformOptions::default();
    // `d` is a number mostly, an object sometimes: `d` (struct) and `d_double`; `z` text
    // or a number: one double column; `i[].q` an int or text: `q` and `q_string`; `e`
    // (struct) has `e_double` and, through it, `e_double_string` (keys of the data).
    let known: Vec<String> = [
        r#"{"d":{"code":"W","pct":10},"z":"12345","i":[{"q":1},{"q":"two"}]}"#,
        r#"{"d":0.5,"z":12345,"i":[{"q":2}]}"#,
        r#"{"e":{"k":1},"e_double":1.5,"e_double_string":"s"}"#,
    ]
    .map(str::to_owned)
    .to_vec();
    let schema = infer(&known, known.len(), &transform).unwrap();
    // Each line, and whether the tape types it (else `append` does): the same row.
    let lines = [
        (r#"{"d":1.25,"z":"54321","i":[{"q":3},{"q":"x"}]}"#, true),
        // The sibling's own key comes after the value routed to it, null.
        (r#"{"d":2,"d_double":null}"#, true),
        (r#"{"d_double":null,"d":{"code":"X","pct":5}}"#, true),
        // Depth first: text skips `e_double` for its own sibling `e_double_string`.
        (r#"{"e":"txt","e_double":null}"#, true),
        // A taken sibling closes its branch (`e_double_string` is not tried): no home,
        // `append` decides.
        (r#"{"e":7,"e_double":8}"#, false),
        // Its own value keeps it: the number has no home, the record needs `append`.
        (r#"{"d":3,"d_double":4}"#, false),
    ];
    for (line, from_tape) in lines {
        let one = vec![line.to_owned()];
        assert!(
            check_same_as_slow_path(&one, 0, &schema, &transform).is_ok(),
            "{line}"
        );
        let mut batch = unparsed_batch(&one, 0);
        let mut typer = JsonLineTyper::default();
        let typed = type_fitting(&mut batch, &schema, &transform, &mut typer).is_some();
        let from_text = batch.records.iter().all(|r| r.unparsed.is_some());
        assert_eq!(typed && from_text, from_tape, "{line}");
    }
}

#[test]
fn a_batch_with_an_unknown_key_or_a_conflict_is_inferred_one_line_at_a_time() {
    let transform = TransformOptions::default();
    let known = vec![r#"{"a":1,"s":"x"}"#.to_owned()];
    let schema = infer(&known, 1, &transform).unwrap();
    for odd in [r#"{"a":2,"new":1}"#, r#"{"a":{"b":1}}"#, r#"{"a":2,"a":3}"#] {
        let lines = vec![known[0].clone(), odd.to_owned(), "not json".to_owned()];
        let mut batch = unparsed_batch(&lines, 0);
        let mut typer = JsonLineTyper::default();
        let typed = type_fitting(&mut batch, &schema, &transform, &mut typer);
        // A repeated key is not an unknown key: the last value wins, as when parsed.
        assert_eq!(typed.is_none(), odd != r#"{"a":2,"a":3}"#, "{odd}");
        assert!(check_same_as_slow_path(&lines, 0, &schema, &transform).is_ok());
        if typed.is_none() {
            // Left as read but for the record that told (parsed by the typer's fallback).
            assert_eq!(batch.records.len(), 3);
            assert!(batch.deadletters.is_empty());
            let inferred = infer_rejecting_nothing(&mut batch, &schema, &transform, &mut typer);
            assert!(!inferred.changes.is_empty(), "{odd}");
            assert_eq!(inferred.builders["default"].len(), 2);
            assert_eq!(batch.records.len(), 2);
            assert!(
                batch.records[0].unparsed.is_some(),
                "typed from its text with the evolved schema, never held parsed"
            );
        }
        assert_eq!(batch.deadletters.len(), 1);
        assert_eq!(batch.deadletters[0].code, FailureCode::Malformed);
        let start = known[0].len() + 1 + odd.len() + 1;
        assert_eq!(
            (batch.deadletters[0].line, batch.deadletters[0].offset),
            (3, start as u64)
        );
    }
}

#[test]
fn a_batch_prepared_with_an_older_schema_is_typed_again_with_the_current_one() {
    let transform = TransformOptions::default();
    let old = infer(&[r#"{"a":1}"#.to_owned()], 1, &transform).unwrap();
    let lines = vec![
        r#"{"a":2,"b":"x"}"#.to_owned(),
        r#"{"a":3,"b":"y"}"#.to_owned(),
    ];
    let new = infer(&lines, 1, &transform).unwrap();
    let typing = Typing::new(&old, transform);
    let mut typer = JsonLineTyper::default();
    // With no batch waiting, the reader leaves the batch to the main thread.
    let untyped = typing.prepare(unparsed_batch(&lines, 0), &mut typer);
    assert!(untyped.typed.is_none());
    // `b` is unknown to the old schema: the batch needs inference, and is handed over
    // as it is: only the record that told so was parsed.
    let prepared = typing.prepare(unparsed_batch(&lines, 0), &mut typer);
    assert!(prepared.typed.is_none());
    assert!(prepared.batch.records[1].unparsed.is_some());
    assert!(typing.settle(untyped, &mut typer).1.is_none());
    typing.publish(&new);
    let (batch, builders) = typing.settle(prepared, &mut typer);
    let mut builders = builders.unwrap();
    assert_eq!(batch.records.len(), 2);
    assert!(
        batch.records[1].unparsed.is_some(),
        "typed from its text with the new schema, never parsed"
    );
    let rows = builders.get_mut("default").unwrap().finish().unwrap();
    assert_eq!(rows.num_columns(), 2);
    assert_eq!(rows.num_rows(), 2);
    // Prepared with the current schema: kept as it is.
    let untyped = typing.prepare(unparsed_batch(&lines, 0), &mut typer);
    let prepared = typing.prepare(unparsed_batch(&lines, 0), &mut typer);
    assert!(prepared.typed.is_some());
    assert!(typing.settle(prepared, &mut typer).1.is_some());
    assert!(typing.settle(untyped, &mut typer).1.is_some());
}
