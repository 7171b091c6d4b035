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
use crate::schema::cells_typed;
use crate::schema::{
    JsonLineTyper, PipelineSchema, RecordBatchBuilder, SchemaChange, SchemaError, SchemaInferrer,
    TransformOptions, evolve, namespace_for_record,
};
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
            if cells_typed(transform) {
                let ns = record.namespace.as_deref();
                let builder = builder_of(
                    &mut builders,
                    schema,
                    transform,
                    cells_namespace(ns, transform),
                )?;
                if !builder.append_cells(cells) {
                    builder
                        .append_of_cells(cells, || (String::new(), 0, 0))
                        .ok()?;
                    if builder.saw_unknown_keys() {
                        return None;
                    }
                }
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

/// The namespace of a row of cells typed as cells ([`cells_typed`]): the source's, or the
/// default (such rows are never routed by `namespace_fields`).
fn cells_namespace<'n>(namespace: Option<&'n str>, transform: &'n TransformOptions) -> &'n str {
    namespace.unwrap_or(&transform.default_namespace)
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
    // Rows of cells (a source's typed rows) are inferred and typed from their cells, unless
    // they are routed or flattened as JSON objects.
    if !cells_typed(transform) {
        for record in &mut batch.records {
            if let Some(cells) = record.cells.take() {
                record.value = cells.to_json();
            }
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
        if let Some(cells) = &record.cells {
            let ns = cells_namespace(record.namespace.as_deref(), transform);
            let Some(builder) = builder_of(&mut builders, schema, transform, ns) else {
                reject(untypeable(
                    record,
                    &format!("namespace `{ns}` is not in the schema"),
                ));
                continue;
            };
            if builder.append_cells(cells) {
                continue;
            }
            let position = &record.position;
            if let Err(dl) = builder.append_of_cells(cells, || {
                (position.uri.to_string(), position.record, position.offset)
            }) {
                reject(dl);
            }
            continue;
        }
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
            (position.uri.to_string(), position.record, position.offset)
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
                None if record.cells.is_some() => {
                    if let Err(e) = inferrer.add_record(record) {
                        if retries == MAX_INFERENCE_RETRIES {
                            return Err(e);
                        }
                        retries += 1;
                        rejected[i] = true;
                        continue 'again;
                    }
                    continue;
                }
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
    let raw = match (&record.unparsed, &record.cells) {
        (Some(unparsed), _) => crate::sources::file::raw_text(&unparsed.text),
        (None, Some(cells)) => {
            Deadletter::clip_raw(&serde_json::to_string(&cells.to_json()).unwrap_or_default())
        }
        (None, None) => {
            Deadletter::clip_raw(&serde_json::to_string(&record.value).unwrap_or_default())
        }
    };
    Deadletter {
        source_uri: record.position.uri.to_string(),
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
mod tests;
