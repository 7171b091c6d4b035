//! Typing a tokenized JSON line ([`Tape`]) straight into a builder's columns.
//!
//! This is a fast path for [`RecordBatchBuilder::append`]: it types only records where every
//! value fits its own column, with no key the schema lacks and no key twice, and then gives
//! exactly the row `append` gives for the same line parsed by `serde_json`. Anything else
//! (a value that needs a sibling column or JSON text, an unknown or escaped key, a number
//! `serde_json` reads on its slow paths) is refused and leaves the builder as it was, for
//! `append` to decide.

use chrono::Datelike;

use super::{Column, Data, RecordBatchBuilder, StructColumn, UNIX_EPOCH_DAYS_FROM_CE};
use crate::schema::infer::{parse_date, parse_numeric};
use crate::schema::json_tape::{self, Tape, Token};

impl RecordBatchBuilder {
    /// Add the record on `tape` (the tokens of `line`) as a row, or refuse it (`false`,
    /// nothing added) when it needs [`RecordBatchBuilder::append`]: see the
    /// [module docs](self). `scratch` is reused for unescaped strings. Never with
    /// `flatten_events`.
    pub(crate) fn append_tape(&mut self, tape: &Tape, line: &[u8], scratch: &mut Vec<u8>) -> bool {
        if self.flatten_events {
            return false;
        }
        if self
            .root
            .push_tape(tape.tokens(), 0, line, scratch)
            .is_some()
        {
            self.rows += 1;
            true
        } else {
            self.root.truncate(self.rows);
            false
        }
    }
}

impl StructColumn {
    /// Push one row from the object token at `at`; `None` (with columns maybe part-pushed)
    /// when the object is not for the fast path.
    fn push_tape(
        &mut self,
        tokens: &[Token],
        at: usize,
        line: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Option<()> {
        let Token::Object { end } = *tokens.get(at)? else {
            return None;
        };
        let end = end as usize;
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.seen.fill(0);
            self.stamp = 1;
        }
        let stamp = self.stamp;
        let mut key_at = at + 1;
        let mut number = 0;
        while key_at < end {
            let Token::String {
                start,
                end: key_end,
                escaped: false,
            } = *tokens.get(key_at)?
            else {
                return None;
            };
            let slot = self.slot_of(number, line.get(start as usize..key_end as usize)?)?;
            let seen = self.seen.get_mut(slot)?;
            if *seen == stamp {
                // A repeated key: `serde_json` keeps the last value.
                return None;
            }
            *seen = stamp;
            let value_at = key_at + 1;
            self.slots
                .get_mut(slot)?
                .column
                .push_token(tokens, value_at, line, scratch)?;
            key_at = json_tape::skip(tokens, value_at);
            number += 1;
        }
        for (slot, seen) in self.slots.iter_mut().zip(&self.seen) {
            if *seen != stamp {
                slot.column.push_null();
            }
        }
        Some(())
    }

    /// The slot for the `number`-th key of an object, `name`; `None` for a key the schema
    /// has no column for.
    fn slot_of(&mut self, number: usize, name: &[u8]) -> Option<usize> {
        if let Some(&hint) = self.hints.get(number)
            && self
                .slots
                .get(hint)
                .is_some_and(|slot| slot.name.as_bytes() == name)
        {
            return Some(hint);
        }
        let slot = *self.by_name.get(name)?;
        if let Some(hint) = self.hints.get_mut(number) {
            *hint = slot;
        } else if number == self.hints.len() {
            self.hints.push(slot);
        }
        Some(slot)
    }
}

impl Column {
    /// Push the value at token `at`; `None` (with the column maybe part-pushed) when it
    /// does not fit this column directly.
    fn push_token(
        &mut self,
        tokens: &[Token],
        at: usize,
        line: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Option<()> {
        let token = *tokens.get(at)?;
        let text = |token: Token| line.get(token.span()?);
        match (&mut self.data, token) {
            (_, Token::Null) => {
                self.push_null();
                return Some(());
            }
            (Data::Boolean(values), Token::True) => values.append(true),
            (Data::Boolean(values), Token::False) => values.append(false),
            (Data::Int(values), Token::Integer { .. }) => {
                values.push(i32::try_from(json_tape::integer(text(token)?)?).ok()?);
            }
            (Data::Long(values) | Data::TimestampMs(values), Token::Integer { .. }) => {
                values.push(json_tape::integer(text(token)?)?);
            }
            (Data::Timestamp(values), Token::Integer { .. }) => {
                values.push(json_tape::integer(text(token)?)?.checked_mul(1_000_000)?);
            }
            (Data::Double(values), Token::Integer { .. } | Token::Float { .. }) => {
                values.push(json_tape::number(token, line)?);
            }
            (Data::Double(values), Token::String { .. }) => {
                let text = json_tape::string_text(token, line, scratch)?;
                values.push(parse_numeric(std::str::from_utf8(text).ok()?)?);
            }
            (Data::Date(values), Token::String { .. }) => {
                let text = json_tape::string_text(token, line, scratch)?;
                let date = parse_date(std::str::from_utf8(text).ok()?)?;
                values.push(date.num_days_from_ce() - UNIX_EPOCH_DAYS_FROM_CE);
            }
            (Data::Text { offsets, bytes }, Token::String { .. }) => {
                bytes.extend_from_slice(json_tape::string_text(token, line, scratch)?);
                offsets.push(i32::try_from(bytes.len()).ok()?);
            }
            (Data::Struct(columns), Token::Object { .. }) => {
                columns.push_tape(tokens, at, line, scratch)?;
            }
            (
                Data::List {
                    offsets, element, ..
                },
                Token::Array { end },
            ) => {
                let mut item = at + 1;
                while item < end as usize {
                    element.push_token(tokens, item, line, scratch)?;
                    item = json_tape::skip(tokens, item);
                }
                offsets.push(i32::try_from(element.len()).ok()?);
            }
            _ => return None,
        }
        self.validity.append(true);
        Some(())
    }
}
