//! Shaping records as they leave the source: the transforms `record_field_path` and
//! `inject_fields`, applied by [`Shaped`], a [`Source`] over any source, before typing and
//! before inference, so `discover` and `sync` see the same records.
//!
//! - `record_field_path: data.items`: the records are found at that dot path inside each record
//!   read. An array there gives one record per element, an object one record; each keeps the
//!   read record's position (they are read, committed and resumed together). A read record
//!   without the path, or with something else there (a string, an array holding a non-object),
//!   becomes a `not_an_object` deadletter naming the path: nothing is dropped silently.
//! - `inject_fields: {env: prod, source_system: crm}`: each key is set to its value in every
//!   record (after `record_field_path`), replacing a value the record had under that key:
//!   the config says what the field holds.
//!
//! With either set, the source hands its records out parsed (typing from JSON text is a fast
//! path for records as read; shaped records are new values).

use serde_json::{Map, Value};

use super::{Progress, Source, SourceBatch, SourceError, SourceRecord};
use crate::deadletter::{Deadletter, FailureCode};

/// The shaping transforms (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Shape {
    /// The dot path of the records inside each record read (`record_field_path`), split at
    /// its dots.
    pub record_path: Option<Vec<String>>,
    /// Fields set in every record (`inject_fields`), in config order.
    pub inject: Vec<(String, Value)>,
}

impl Shape {
    /// Whether the shape changes anything.
    pub fn is_active(&self) -> bool {
        self.record_path.is_some() || !self.inject.is_empty()
    }

    /// Shape `batch` in place: records found at the path (or deadletters), fields injected.
    /// Records must be parsed (open the source with parsed records when shaping).
    pub fn apply(&self, batch: &mut SourceBatch) {
        if !self.is_active() {
            return;
        }
        let mut out = Vec::with_capacity(batch.records.len());
        for mut record in std::mem::take(&mut batch.records) {
            if record.unparsed.is_some() {
                // Not expected (the source was opened parsed); shaping needs the value.
                batch.deadletters.push(self.dead(
                    &record,
                    "the record was not parsed before shaping (a bug: please report it)",
                ));
                continue;
            }
            match &self.record_path {
                None => out.push(record),
                Some(path) => match take_path(&mut record.value, path) {
                    Some(Value::Object(inner)) => out.push(SourceRecord {
                        value: inner,
                        ..record
                    }),
                    Some(Value::Array(items)) => {
                        if let Some(bad) = items.iter().position(|v| !v.is_object()) {
                            let message = format!(
                                "element {} of `{}` is not an object",
                                bad + 1,
                                path.join(".")
                            );
                            record.value = restore(path, Value::Array(items));
                            batch.deadletters.push(self.dead(&record, &message));
                            continue;
                        }
                        for item in items {
                            if let Value::Object(inner) = item {
                                out.push(SourceRecord {
                                    value: inner,
                                    position: record.position.clone(),
                                    unparsed: None,
                                    cells: None,
                                    namespace: record.namespace.clone(),
                                });
                            }
                        }
                    }
                    Some(other) => {
                        let message = format!(
                            "`{}` holds {}, not an object or an array of objects",
                            path.join("."),
                            kind(&other)
                        );
                        record.value = restore(path, other);
                        batch.deadletters.push(self.dead(&record, &message));
                    }
                    None => {
                        let message = format!("the record has no `{}`", path.join("."));
                        batch.deadletters.push(self.dead(&record, &message));
                    }
                },
            }
        }
        for record in &mut out {
            for (key, value) in &self.inject {
                record.value.insert(key.clone(), value.clone());
            }
        }
        batch.records = out;
    }

    fn dead(&self, record: &SourceRecord, error: &str) -> Deadletter {
        let raw = serde_json::to_string(&record.value).unwrap_or_default();
        Deadletter {
            source_uri: record.position.uri.to_string(),
            line: record.position.record,
            offset: record.position.offset,
            raw: Deadletter::clip_raw(&raw),
            error: format!("record_field_path: {error}"),
            code: FailureCode::NotAnObject,
            namespace: None,
        }
    }
}

/// Take the value at `path` out of `record` (`None`: the path is missing).
fn take_path(record: &mut Map<String, Value>, path: &[String]) -> Option<Value> {
    let (last, parents) = path.split_last()?;
    let mut at = record;
    for key in parents {
        at = at.get_mut(key)?.as_object_mut()?;
    }
    at.remove(last)
}

/// A record holding only `value` at `path`, for a deadletter's text.
fn restore(path: &[String], value: Value) -> Map<String, Value> {
    let mut value = value;
    for key in path.iter().rev() {
        let mut map = Map::new();
        map.insert(key.clone(), value);
        value = Value::Object(map);
    }
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A source whose batches are shaped by a [`Shape`]; progress and checkpoints are the inner
/// source's (shaping keeps every record's position).
pub struct Shaped {
    inner: Box<dyn Source>,
    shape: Shape,
}

impl Shaped {
    /// Shape what `inner` reads.
    pub fn new(inner: Box<dyn Source>, shape: Shape) -> Shaped {
        Shaped { inner, shape }
    }
}

impl Source for Shaped {
    fn next_batch(&mut self) -> Result<Option<SourceBatch>, SourceError> {
        let mut batch = self.inner.next_batch()?;
        if let Some(batch) = batch.as_mut() {
            self.shape.apply(batch);
        }
        Ok(batch)
    }

    fn progress(&self) -> Progress {
        self.inner.progress()
    }

    fn checkpoint(&self) -> Result<Vec<u8>, SourceError> {
        self.inner.checkpoint()
    }

    fn stop_on(&mut self, stop: crate::sources::StopRequest) {
        self.inner.stop_on(stop);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::Position;

    fn record(text: &str, line: u64) -> SourceRecord {
        let Value::Object(value) = serde_json::from_str(text).unwrap() else {
            panic!("not an object: {text}")
        };
        SourceRecord {
            value,
            position: Position {
                uri: "in.jsonl".into(),
                offset: line * 10,
                record: line,
            },
            unparsed: None,
            cells: None,
            namespace: None,
        }
    }

    fn shaped(shape: &Shape, lines: &[&str]) -> SourceBatch {
        let mut batch = SourceBatch {
            records: lines
                .iter()
                .enumerate()
                .map(|(i, l)| record(l, i as u64 + 1))
                .collect(),
            ..SourceBatch::default()
        };
        shape.apply(&mut batch);
        batch
    }

    fn texts(batch: &SourceBatch) -> Vec<String> {
        batch
            .records
            .iter()
            .map(|r| serde_json::to_string(&r.value).unwrap())
            .collect()
    }

    #[test]
    fn records_at_a_path_are_taken_out_one_per_element_keeping_their_position() {
        let shape = Shape {
            record_path: Some(vec!["data".into(), "items".into()]),
            inject: Vec::new(),
        };
        let batch = shaped(
            &shape,
            &[
                r#"{"data":{"items":[{"a":1},{"a":2}]},"meta":1}"#,
                r#"{"data":{"items":{"a":3}}}"#,
                r#"{"data":{"items":[]}}"#,
            ],
        );
        assert_eq!(texts(&batch), [r#"{"a":1}"#, r#"{"a":2}"#, r#"{"a":3}"#]);
        let lines: Vec<u64> = batch.records.iter().map(|r| r.position.record).collect();
        assert_eq!(lines, [1, 1, 2]);
        assert!(batch.deadletters.is_empty());
    }

    #[test]
    fn a_record_without_records_at_the_path_is_a_deadletter_naming_it() {
        let shape = Shape {
            record_path: Some(vec!["data".into()]),
            inject: Vec::new(),
        };
        let batch = shaped(
            &shape,
            &[
                r#"{"other":1}"#,
                r#"{"data":"text"}"#,
                r#"{"data":[{"a":1},2]}"#,
                r#"{"data":{"ok":true}}"#,
            ],
        );
        assert_eq!(texts(&batch), [r#"{"ok":true}"#]);
        let errors: Vec<(&str, u64)> = batch
            .deadletters
            .iter()
            .map(|d| (d.error.as_str(), d.line))
            .collect();
        assert_eq!(
            errors,
            [
                ("record_field_path: the record has no `data`", 1),
                (
                    "record_field_path: `data` holds a string, not an object or an array of objects",
                    2
                ),
                ("record_field_path: element 2 of `data` is not an object", 3),
            ]
        );
        assert_eq!(batch.deadletters[1].raw, r#"{"data":"text"}"#);
        assert!(
            batch
                .deadletters
                .iter()
                .all(|d| d.code == FailureCode::NotAnObject)
        );
    }

    #[test]
    fn injected_fields_are_set_in_every_record_after_the_path() {
        let shape = Shape {
            record_path: Some(vec!["rows".into()]),
            inject: vec![
                ("env".into(), Value::from("prod")),
                ("a".into(), Value::from(0)),
            ],
        };
        let batch = shaped(&shape, &[r#"{"rows":[{"a":1,"b":2},{"c":3}]}"#]);
        assert_eq!(
            texts(&batch),
            [
                r#"{"a":0,"b":2,"env":"prod"}"#,
                r#"{"c":3,"env":"prod","a":0}"#
            ]
        );
        let plain = Shape::default();
        assert!(!plain.is_active());
        assert_eq!(texts(&shaped(&plain, &[r#"{"x":1}"#])), [r#"{"x":1}"#]);
    }
}
