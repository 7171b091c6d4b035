//! Typing JSON lines straight from their text into the record batch builders of their
//! namespaces, without building `serde_json` values (the fast path of `sync`).
//!
//! [`JsonLineTyper::append`] tokenizes a line ([`Tape`]), routes it to its namespace from the
//! tokens, by the same rules as [`super::namespace_for`], and types it into that namespace's
//! builder with [`RecordBatchBuilder::append_tape`]. A line it cannot type exactly as the
//! `serde_json` path would is refused, with nothing added anywhere: the caller parses it and
//! types the parsed record as before.

use std::collections::BTreeMap;

use super::json_tape::{self, Tape, Token};
use super::{PipelineSchema, RecordBatchBuilder, TransformOptions, sanitize_namespace};

/// Namespace names remembered for the raw values that named them.
const NAMES_KEPT: usize = 256;

/// Types JSON lines into per-namespace builders; keeps its buffers from line to line.
#[derive(Debug, Default)]
pub(crate) struct JsonLineTyper {
    tape: Tape,
    scratch: Vec<u8>,
    /// The namespace field values of a line, joined with `_`.
    joined: Vec<u8>,
    /// Joined namespace field values already seen, with the namespace they name.
    names: Vec<(Vec<u8>, String)>,
}

/// Where a line goes.
enum Route {
    /// The default namespace.
    Default,
    /// The namespace in `names` at this index.
    Named(usize),
}

impl JsonLineTyper {
    /// Type `line` into the builder of its namespace in `builders` (made from `schema` when
    /// missing, as `sync` makes them). `false`, with no row added, when the line needs the
    /// `serde_json` path: it is not in the tokenizer's subset, its namespace is not in the
    /// schema, or a value fits neither its column nor a free sibling column the tape can
    /// type (see [`RecordBatchBuilder::append_tape`]). Never with `flatten_events`.
    pub(crate) fn append(
        &mut self,
        line: &[u8],
        schema: &PipelineSchema,
        transform: &TransformOptions,
        builders: &mut BTreeMap<String, RecordBatchBuilder>,
    ) -> bool {
        if transform.flatten_events || !self.tape.parse(line) {
            return false;
        }
        let namespace = match self.route(line, transform) {
            Some(Route::Default) => transform.default_namespace.as_str(),
            Some(Route::Named(index)) => match self.names.get(index) {
                Some((_, name)) => name.as_str(),
                None => return false,
            },
            None => return false,
        };
        let builder = match builders.get_mut(namespace) {
            Some(builder) => builder,
            None => {
                let Some(ns_schema) = schema.namespaces.get(namespace) else {
                    return false;
                };
                builders.entry(namespace.to_owned()).or_insert(
                    RecordBatchBuilder::new(ns_schema)
                        .with_flatten_events(transform.flatten_events)
                        .with_namespace(namespace)
                        .with_merge_key(transform.merge_keys.of(namespace)),
                )
            }
        };
        builder.append_tape(&self.tape, line, &mut self.scratch)
    }

    /// The line's namespace, as [`super::namespace::route`] finds it in the parsed record;
    /// `None` when the tokens cannot tell exactly (an escaped key on the way, or a number
    /// whose text `serde_json` would write differently).
    fn route(&mut self, line: &[u8], transform: &TransformOptions) -> Option<Route> {
        if transform.namespace_fields.is_empty() {
            return Some(Route::Default);
        }
        let tokens = self.tape.tokens();
        self.joined.clear();
        for (index, path) in transform.namespace_fields.iter().enumerate() {
            let mut at = 0;
            for part in path.split('.') {
                match member(tokens, line, at, part.as_bytes())? {
                    Some(value) => at = value,
                    None => return Some(Route::Default),
                }
            }
            if index > 0 {
                self.joined.push(b'_');
            }
            let token = *tokens.get(at)?;
            match token {
                Token::String { .. } => {
                    let text = json_tape::string_text(token, line, &mut self.scratch)?;
                    self.joined.extend_from_slice(text);
                }
                Token::Integer { .. } => {
                    let text = json_tape::integer_text(line.get(token.span()?)?)?;
                    self.joined.extend_from_slice(text);
                }
                Token::True => self.joined.extend_from_slice(b"true"),
                Token::False => self.joined.extend_from_slice(b"false"),
                Token::Float { .. } => return None,
                Token::Null | Token::Object { .. } | Token::Array { .. } => {
                    return Some(Route::Default);
                }
            }
        }
        if let Some(index) = self.names.iter().position(|(raw, _)| *raw == self.joined) {
            return Some(Route::Named(index));
        }
        let name = sanitize_namespace(std::str::from_utf8(&self.joined).ok()?);
        if self.names.len() == NAMES_KEPT {
            self.names.pop();
        }
        self.names.push((self.joined.clone(), name));
        Some(Route::Named(self.names.len() - 1))
    }
}

/// The value of the member `name` of the object at token `at` (the last one, as
/// `serde_json` keeps it): `Some(None)` when there is none or `at` is not an object, `None`
/// when a key is escaped (it cannot be compared as it is).
fn member(tokens: &[Token], line: &[u8], at: usize, name: &[u8]) -> Option<Option<usize>> {
    let Some(&Token::Object { end }) = tokens.get(at) else {
        return Some(None);
    };
    let mut found = None;
    let mut key = at + 1;
    while key < end as usize {
        let Token::String {
            start,
            end: key_end,
            escaped: false,
        } = *tokens.get(key)?
        else {
            return None;
        };
        if line.get(start as usize..key_end as usize)? == name {
            found = Some(key + 1);
        }
        key = json_tape::skip(tokens, key + 1);
    }
    Some(found)
}
