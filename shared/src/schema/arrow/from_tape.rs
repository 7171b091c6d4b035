//! Typing a tokenized JSON line ([`Tape`]) straight into a builder's columns.
//!
//! This is a fast path for [`RecordBatchBuilder::append`]: it types only records with no key
//! the schema lacks and no key twice, where every value fits its own column or, as `append`
//! routes it, the first free sibling column (`<name>_<type>`, depth first) that takes it,
//! and then gives exactly the row `append` gives for the same line parsed by `serde_json`.
//! Anything else (a value that needs JSON text or fits nowhere, an unknown or escaped key, a
//! number `serde_json` reads on its slow paths) is refused and leaves the builder as it was,
//! for `append` to decide.
//!
//! Sibling routing follows `append` step by step: a value its own column does not take (by
//! the same shallow test, [`Column::fits_token`] for `fits`) leaves a null there and waits
//! until the whole object is read (a sibling is free only when the object has no non-null
//! value of its own for it, wherever its key stands); then the waiting values, in column
//! order, take the first free sibling that fits, found by the same traversal `append` uses
//! (`first_home`). Where the tape cannot tell what `fits`
//! would say (escapes it cannot read, integers beyond 64 bits), the record is refused.

use chrono::Datelike;

use super::{
    Column, Data, RecordBatchBuilder, StructColumn, UNIX_EPOCH_DAYS_FROM_CE, parse_decimal,
};
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
            && self.keys_hold()
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
            self.valued.fill(0);
            self.stamp = 1;
        }
        let stamp = self.stamp;
        self.deferred.clear();
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
            let token = *tokens.get(value_at)?;
            if !matches!(token, Token::Null) {
                *self.valued.get_mut(slot)? = stamp;
            }
            let column = &mut self.slots.get_mut(slot)?.column;
            let before = column.len();
            if column.push_token(tokens, value_at, line, scratch).is_none() {
                // `append` would put it here (only it can), or route it to a sibling.
                if column.fits_token(token, line, scratch)? {
                    return None;
                }
                column.truncate(before);
                column.push_null();
                self.deferred.push((slot, value_at));
            }
            key_at = json_tape::skip(tokens, value_at);
            number += 1;
        }
        if !self.deferred.is_empty() {
            self.route_deferred(tokens, line, scratch)?;
        }
        for (slot, seen) in self.slots.iter_mut().zip(&self.seen) {
            if *seen != stamp {
                slot.column.push_null();
            }
        }
        Some(())
    }

    /// Push each value its own column did not take into its home among the free siblings
    /// (see the [module docs](self)); `None` when one has no home, or the tape cannot tell.
    fn route_deferred(
        &mut self,
        tokens: &[Token],
        line: &[u8],
        scratch: &mut Vec<u8>,
    ) -> Option<()> {
        let stamp = self.stamp;
        self.deferred.sort_unstable();
        for index in 0..self.deferred.len() {
            let (from, value_at) = *self.deferred.get(index)?;
            let token = *tokens.get(value_at)?;
            let free = |sibling: usize| self.valued.get(sibling) != Some(&stamp);
            let home = super::first_home(&self.slots, from, &free, &mut |column| {
                column.fits_token(token, line, scratch)
            })??;
            let column = &mut self.slots.get_mut(home)?.column;
            if *self.seen.get(home)? == stamp {
                // Its own key was null: that null gives way to the routed value.
                column.truncate(column.len().checked_sub(1)?);
            }
            column.push_token(tokens, value_at, line, scratch)?;
            *self.seen.get_mut(home)? = stamp;
            *self.valued.get_mut(home)? = stamp;
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
    /// [`Column::fits`] for a non-null token: whether `append` would put its value in this
    /// column; `None` when the tape cannot tell (a string escape it cannot read, an integer
    /// `serde_json` makes a `u64` or a float).
    fn fits_token(&self, token: Token, line: &[u8], scratch: &mut Vec<u8>) -> Option<bool> {
        let text = |token: Token| line.get(token.span()?);
        Some(match (&self.data, token) {
            (_, Token::Null) => return None,
            (Data::Text { .. }, _) => true,
            (Data::Boolean(_), token) => matches!(token, Token::True | Token::False),
            (Data::Int(_), Token::Integer { .. }) => {
                i32::try_from(json_tape::integer(text(token)?)?).is_ok()
            }
            (Data::Long(_) | Data::TimestampMs(_), Token::Integer { .. }) => {
                json_tape::integer(text(token)?)?;
                true
            }
            (Data::Timestamp(_), Token::Integer { .. }) => json_tape::integer(text(token)?)?
                .checked_mul(1_000_000)
                .is_some(),
            // An integer beyond `i64` (or `-0`): `append` decides (see `Column::fits`).
            (Data::Double(_), Token::Integer { .. }) => {
                json_tape::integer(text(token)?)?;
                true
            }
            (Data::Double(_), Token::Float { .. }) => true,
            (Data::Double(_), Token::String { .. }) => {
                let text = json_tape::string_text(token, line, scratch)?;
                parse_numeric(std::str::from_utf8(text).ok()?).is_some()
            }
            (Data::Date(_), Token::String { .. }) => {
                let text = json_tape::string_text(token, line, scratch)?;
                parse_date(std::str::from_utf8(text).ok()?).is_some()
            }
            (
                Data::Decimal {
                    precision, scale, ..
                },
                Token::String { .. },
            ) => {
                let text = json_tape::string_text(token, line, scratch)?;
                parse_decimal(std::str::from_utf8(text).ok()?, *precision, *scale).is_some()
            }
            (Data::Struct(_), token) => matches!(token, Token::Object { .. }),
            (Data::List { .. }, token) => matches!(token, Token::Array { .. }),
            (Data::Int(_) | Data::Long(_) | Data::TimestampMs(_) | Data::Timestamp(_), _)
            | (Data::Double(_) | Data::Date(_) | Data::Decimal { .. }, _) => false,
        })
    }

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
            (Data::Double(values), Token::Integer { .. }) => {
                // Not an integer beyond `i64` (or `-0`): see `fits_token`.
                json_tape::integer(text(token)?)?;
                values.push(json_tape::number(token, line)?);
            }
            (Data::Double(values), Token::Float { .. }) => {
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
            (
                Data::Decimal {
                    values,
                    precision,
                    scale,
                },
                Token::String { .. },
            ) => {
                let text = json_tape::string_text(token, line, scratch)?;
                values.push(parse_decimal(
                    std::str::from_utf8(text).ok()?,
                    *precision,
                    *scale,
                )?);
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
