//! Typing a batch with the schema as it is: `sync`'s fast path, run on the read-ahead thread.
//!
//! The source hands JSON lines out unparsed. Typing a batch types each line straight from its
//! text into the builders of the schema ([`JsonLineTyper`]); a line the typer refuses is
//! parsed with `serde_json` and typed from the parsed record, as before. The batch needs
//! inference ([`infer_and_type`]: each line parsed and dropped once inferred, then the batch
//! typed from its text with the evolved schema) as soon as a record has a key or namespace the
//! schema lacks, or a value no column takes. Either way the builders hold exactly what typing
//! the parsed records would give.
//!
//! [`Typing::prepare`] runs on the reader thread. When the main thread has batches waiting,
//! it types the batch with the schema as last published; when it has none (it is about to
//! wait), it hands the batch over untyped, for the main thread to type. That splits the work
//! between the two threads by itself: whichever is behind gets less of it.
//! [`Typing::settle`], on the main thread, keeps the reader's work when the schema has not
//! changed since, and types the batch with the current schema when it has, or when the reader
//! left it untyped.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::deadletter::Deadletter;
use crate::schema::{
    JsonLineTyper, PipelineSchema, RecordBatchBuilder, SchemaChange, SchemaError, SchemaInferrer,
    TransformOptions, evolve, namespace_for_record,
};
use crate::sources::cells::CellRow;
use crate::sources::file::parse_json_object;
use crate::sources::{SourceBatch, SourceRecord};

/// Builders by namespace.
pub(crate) type Builders = BTreeMap<String, RecordBatchBuilder>;

/// The schema the reader thread types with, and the transform options.
#[derive(Debug)]
pub(crate) struct Typing {
    current: Mutex<Arc<PipelineSchema>>,
    transform: TransformOptions,
    /// Batches prepared and not yet settled.
    waiting: AtomicUsize,
}

/// A batch as the reader thread left it.
#[derive(Debug)]
pub(crate) struct Prepared {
    batch: SourceBatch,
    /// The schema it was typed with, and the builders; `None` when it was left for the main
    /// thread to type (it had nothing waiting, or the batch needs inference).
    typed: Option<(Arc<PipelineSchema>, Builders)>,
}

impl Typing {
    /// Typing with `schema` until [`Typing::publish`] says otherwise.
    pub(crate) fn new(schema: &PipelineSchema, transform: TransformOptions) -> Self {
        Typing {
            current: Mutex::new(Arc::new(schema.clone())),
            transform,
            waiting: AtomicUsize::new(0),
        }
    }

    /// The transform options.
    pub(crate) fn transform(&self) -> &TransformOptions {
        &self.transform
    }

    /// Type with `schema` from now on (after every evolution).
    pub(crate) fn publish(&self, schema: &PipelineSchema) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(schema.clone());
    }

    fn current(&self) -> Arc<PipelineSchema> {
        Arc::clone(&self.current.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Type `batch` with the schema as last published, unless the main thread has no batch
    /// waiting (on the reader thread).
    ///
    /// A batch that needs inference is handed over as it is, not parsed: the main thread is
    /// usually about to change the schema with an earlier batch's inference (the first
    /// batches of a pass all need it while the schema is empty), after which this one types
    /// from its text; parsed here, every record of it would be typed from its parsed value,
    /// the slow way, and the parsing wasted.
    pub(crate) fn prepare(&self, mut batch: SourceBatch, typer: &mut JsonLineTyper) -> Prepared {
        if self.waiting.fetch_add(1, Ordering::SeqCst) == 0 {
            return Prepared { batch, typed: None };
        }
        let schema = self.current();
        let typed = type_fitting(&mut batch, &schema, &self.transform, typer)
            .map(|builders| (schema, builders));
        Prepared { batch, typed }
    }

    /// The batch, and its builders when it fits the current schema as it is (`None`: it needs
    /// inference, [`infer_and_type`], and is left as it was read).
    pub(crate) fn settle(
        &self,
        prepared: Prepared,
        typer: &mut JsonLineTyper,
    ) -> (SourceBatch, Option<Builders>) {
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        let Prepared { mut batch, typed } = prepared;
        let current = self.current();
        if let Some((schema, builders)) = typed
            && Arc::ptr_eq(&schema, &current)
        {
            return (batch, Some(builders));
        }
        let builders = type_fitting(&mut batch, &current, &self.transform, typer);
        (batch, builders)
    }
}

/// Type `batch` with `schema` as it is, its lines that are not JSON objects parsed (for their
/// deadletters); `None`, with the batch left as it was read (but for the record that told),
/// when it needs inference.
fn type_fitting(
    batch: &mut SourceBatch,
    schema: &PipelineSchema,
    transform: &TransformOptions,
    typer: &mut JsonLineTyper,
) -> Option<Builders> {
    let mut malformed = Vec::new();
    let builders = type_as_is(&mut batch.records, schema, transform, typer, &mut malformed)?;
    if !malformed.is_empty() {
        batch.parse_unparsed(|index| malformed.binary_search(&index).is_ok());
    }
    Some(builders)
}

/// Type `records` with the schema as it is, or `None` when one of them needs more: a
/// namespace or key the schema lacks, or a value that fits no column yet. Unparsed lines are
/// typed from their text when the typer can, else parsed in place; the indexes of those that
/// are not JSON objects are added to `malformed` (they add no row).
fn type_as_is(
    records: &mut [SourceRecord],
    schema: &PipelineSchema,
    transform: &TransformOptions,
    typer: &mut JsonLineTyper,
    malformed: &mut Vec<usize>,
) -> Option<Builders> {
    let mut builders: Builders = BTreeMap::new();
    for (index, record) in records.iter_mut().enumerate() {
        if let Some(cells) = &record.cells {
            if append_cells(
                cells,
                record.namespace.as_deref(),
                schema,
                transform,
                &mut builders,
            ) {
                continue;
            }
            record.value = cells.to_json();
            record.cells = None;
        }
        if let Some(unparsed) = &record.unparsed {
            if typer.append(&unparsed.text, schema, transform, &mut builders) {
                continue;
            }
            match parse_json_object(&unparsed.text) {
                Ok(value) => {
                    record.value = value;
                    record.unparsed = None;
                }
                Err(_) => {
                    malformed.push(index);
                    continue;
                }
            }
        }
        let ns = namespace_for_record(record, transform);
        let builder = builder_of(&mut builders, schema, transform, &ns)?;
        builder
            .append(&record.value, || (String::new(), 0, 0))
            .ok()?;
        if builder.saw_unknown_keys() {
            return None;
        }
    }
    Some(builders)
}

/// Type a row of cells into the builder of its namespace (the source's, or the default:
/// cells are never routed by `namespace_fields`); `false`, with no row added, when it needs
/// the JSON path.
fn append_cells(
    cells: &CellRow,
    namespace: Option<&str>,
    schema: &PipelineSchema,
    transform: &TransformOptions,
    builders: &mut Builders,
) -> bool {
    if !transform.namespace_fields.is_empty() || transform.flatten_events {
        return false;
    }
    let ns = namespace.unwrap_or(&transform.default_namespace);
    builder_of(builders, schema, transform, ns).is_some_and(|b| b.append_cells(cells))
}

/// The builder of namespace `ns` in `builders`, made from `schema` when missing; `None` when
/// the schema has no such namespace.
fn builder_of<'b>(
    builders: &'b mut Builders,
    schema: &PipelineSchema,
    transform: &TransformOptions,
    ns: &str,
) -> Option<&'b mut RecordBatchBuilder> {
    if !builders.contains_key(ns) {
        let ns_schema = schema.namespaces.get(ns)?;
        builders.insert(
            ns.to_owned(),
            RecordBatchBuilder::new(ns_schema)
                .with_flatten_events(transform.flatten_events)
                .with_namespace(ns)
                .with_merge_key(transform.merge_keys.of(ns)),
        );
    }
    builders.get_mut(ns)
}

/// What the slow path of typing gave: the schema changes it made, and the batch's builders.
pub(crate) struct Inferred {
    /// How the schema evolved (empty when it already held the batch).
    pub(crate) changes: Vec<SchemaChange>,
    /// The batch's rows, by namespace.
    pub(crate) builders: Builders,
}

/// Typing's slow path, for a batch [`Typing::settle`] could not type with the schema as it is:
/// infer the batch's shape, evolve `schema` to hold it, and build one Arrow batch per
/// namespace. A record that breaks an inference limit (too many fields or namespaces), or
/// that fits no column even then, goes to `reject` as a deadletter instead of failing every
/// pass from here on. The caller saves the evolved schema.
///
/// The batch's lines are parsed one at a time for inference, each dropped once the inferrer
/// has seen it, then typed from their text with the evolved schema: the batch is never held
/// parsed whole (a first batch of 10,000 records parsed was the largest allocation early in a
/// pass). Lines that are not JSON objects become the batch's deadletters, in read order, as
/// [`SourceBatch::parse_unparsed`] makes them; a line the typer refuses is parsed and typed
/// from its value.
pub(crate) fn infer_and_type(
    batch: &mut SourceBatch,
    schema: &mut PipelineSchema,
    transform: &TransformOptions,
    typer: &mut JsonLineTyper,
    (pipeline, workspace): (&str, &str),
    reject: &mut dyn FnMut(Deadletter),
) -> Result<Inferred, SchemaError> {
    // Rows of cells (a source's typed rows) are inferred and typed as JSON objects.
    for record in &mut batch.records {
        if let Some(cells) = record.cells.take() {
            record.value = cells.to_json();
        }
    }
    let mut rejected = vec![false; batch.records.len()];
    let mut malformed = Vec::new();
    let inferrer = infer_batch(&batch.records, transform, &mut rejected, &mut malformed)?;
    if !malformed.is_empty() {
        let mut index = 0;
        rejected.retain(|_| {
            let keep = malformed.binary_search(&index).is_err();
            index += 1;
            keep
        });
        batch.parse_unparsed(|index| malformed.binary_search(&index).is_ok());
    }
    for (record, _) in batch.records.iter().zip(&rejected).filter(|(_, r)| **r) {
        reject(untypeable(
            record,
            "breaks an inference limit (too many fields or namespaces)",
        ));
    }
    let changes = evolve(schema, &inferrer.finish(pipeline, workspace));
    let mut builders = Builders::new();
    for (record, _) in batch
        .records
        .iter_mut()
        .zip(&rejected)
        .filter(|(_, r)| !**r)
    {
        if let Some(unparsed) = &record.unparsed {
            if typer.append(&unparsed.text, schema, transform, &mut builders) {
                continue;
            }
            // Parsed once already, for inference, as an object; were it not one now, it is
            // rejected, never dropped.
            let value = match parse_json_object(&unparsed.text) {
                Ok(value) => value,
                Err((error, _)) => {
                    reject(untypeable(record, &error));
                    continue;
                }
            };
            record.value = value;
            record.unparsed = None;
        }
        let ns = namespace_for_record(record, transform);
        let Some(builder) = builder_of(&mut builders, schema, transform, &ns) else {
            reject(untypeable(
                record,
                &format!("namespace `{ns}` is not in the schema"),
            ));
            continue;
        };
        let position = &record.position;
        if let Err(dl) = builder.append(&record.value, || {
            (position.uri.clone(), position.record, position.offset)
        }) {
            reject(dl);
        }
    }
    Ok(Inferred { changes, builders })
}

/// Most re-inferences of one batch after records broke an inference limit.
const MAX_INFERENCE_RETRIES: usize = 16;

/// Infer the schema of a batch's records not yet `rejected`, parsing unparsed lines one at a
/// time; a record that breaks an inference limit is marked rejected and the batch inferred
/// again without it (a failed `add` may have left the inferrer half-updated). The indexes of
/// lines that are not JSON objects are added to `malformed`, in order (they are skipped, and
/// left for the caller to turn into deadletters).
fn infer_batch(
    records: &[SourceRecord],
    transform: &TransformOptions,
    rejected: &mut [bool],
    malformed: &mut Vec<usize>,
) -> Result<SchemaInferrer, SchemaError> {
    let mut retries = 0;
    'again: loop {
        let mut inferrer = SchemaInferrer::new(transform.clone());
        for (i, record) in records.iter().enumerate() {
            if rejected[i] || malformed.binary_search(&i).is_ok() {
                continue;
            }
            let parsed;
            let value = match &record.unparsed {
                Some(unparsed) => match parse_json_object(&unparsed.text) {
                    Ok(value) => {
                        parsed = value;
                        &parsed
                    }
                    Err(_) => {
                        malformed.push(i);
                        continue;
                    }
                },
                None => &record.value,
            };
            if let Err(e) = inferrer.add_or(value, record.namespace.as_deref()) {
                if retries == MAX_INFERENCE_RETRIES {
                    return Err(e);
                }
                retries += 1;
                rejected[i] = true;
                continue 'again;
            }
        }
        return Ok(inferrer);
    }
}

/// A deadletter for a record that could not be typed.
fn untypeable(record: &SourceRecord, error: &str) -> Deadletter {
    let raw = match &record.unparsed {
        Some(unparsed) => crate::sources::file::raw_text(&unparsed.text),
        None => Deadletter::clip_raw(&serde_json::to_string(&record.value).unwrap_or_default()),
    };
    Deadletter {
        source_uri: record.position.uri.clone(),
        line: record.position.record,
        offset: record.position.offset,
        raw,
        error: error.to_owned(),
        code: crate::deadletter::FailureCode::Untypeable,
        namespace: None,
    }
}

#[cfg(test)]
mod cells_tests;

#[cfg(test)]
mod tests {
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
                    text: line.as_bytes().to_vec(),
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
                    ::arrow::ipc::writer::StreamWriter::try_new(&mut bytes, &batch.schema())
                        .unwrap();
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
    fn infer(
        lines: &[String],
        sample: usize,
        transform: &TransformOptions,
    ) -> Option<PipelineSchema> {
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
                    let mut members: Vec<(String, String)> =
                        members.into_iter().flatten().collect();
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
}
