//! Typing a row of typed cells ([`CellRow`], the Postgres source's) straight into a
//! builder's columns.
//!
//! This is a fast path for [`RecordBatchBuilder::append`], as `from_tape` is for JSON lines:
//! it types only rows where every cell fits its own column, with no column the schema lacks,
//! and then gives exactly the row `append` gives for the object [`CellRow::to_json`] makes.
//! Anything else (a value that needs a sibling column or its JSON text, an unknown column) is
//! refused and leaves the builder as it was, for `append` to decide, which
//! [`RecordBatchBuilder::append_of_cells`] calls with the row's object.

use std::sync::Arc;

use chrono::Datelike;
use serde_json::Value;

use super::{Column, Data, RecordBatchBuilder, UNIX_EPOCH_DAYS_FROM_CE, parse_decimal};
use crate::deadletter::Deadletter;
use crate::schema::infer::{parse_date, parse_numeric};
use crate::sources::cells::{Cell, CellRow, date_text, decimal_text, instant_text};

/// Where each column of a page's rows goes: the slot of each name (for the page's names,
/// compared by pointer), and the slots no name fills.
#[derive(Debug, Default)]
pub(super) struct CellSlots {
    names: Option<Arc<[String]>>,
    /// Per column of the row, its slot (`None`: the schema has no such field).
    slots: Vec<Option<usize>>,
    /// Slots no column of the row fills (a null is pushed to each).
    unfilled: Vec<usize>,
}

thread_local! {
    /// While [`RecordBatchBuilder::append_of_cells`] types the JSON object of a row of typed
    /// cells: the addresses of the strings in it that are its instant cells' text. Such a
    /// text fits a `timestamp` (or, in whole milliseconds, a `timestamp_ms`) column, as the
    /// instant itself does; a text cell that only looks like one does not.
    static INSTANT_TEXTS: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The instant `value` is, when it is the text of an instant cell of the row
/// [`RecordBatchBuilder::append_of_cells`] is typing.
pub(super) fn instant_of(value: &Value) -> Option<i64> {
    let text = value.as_str()?;
    let address = text.as_ptr() as usize;
    if !INSTANT_TEXTS.with(|texts| texts.borrow().contains(&address)) {
        return None;
    }
    crate::sources::cells::parse_instant_text(text)
}

impl RecordBatchBuilder {
    /// [`Self::append`] for the JSON object ([`CellRow::to_json`]) of a row of typed cells
    /// that [`Self::append_cells`] refused: the text of an instant cell fits a `timestamp`
    /// column here (as the instant does), so the row lands as its cells would have.
    pub(crate) fn append_of_cells(
        &mut self,
        row: &CellRow,
        locate: impl FnOnce() -> (String, u64, u64),
    ) -> Result<(), Deadletter> {
        let record = row.to_json();
        let instants: Vec<usize> = row
            .names()
            .iter()
            .zip(row.cells())
            .filter(|(_, cell)| matches!(cell, Cell::Instant { .. }))
            .filter_map(|(name, _)| record.get(name)?.as_str())
            .filter(|text| !text.is_empty())
            .map(|text| text.as_ptr() as usize)
            .collect();
        /// Clears the instants' addresses however `append` ends (they name `record`'s
        /// strings, which a later value could reuse).
        struct Clear;
        impl Drop for Clear {
            fn drop(&mut self) {
                INSTANT_TEXTS.with(|texts| texts.borrow_mut().clear());
            }
        }
        INSTANT_TEXTS.with(|texts| *texts.borrow_mut() = instants);
        let _clear = Clear;
        self.append(&record, locate)
    }

    /// Add `row` as a row, or refuse it (`false`, nothing added) when it needs
    /// [`RecordBatchBuilder::append`]: see the [module docs](self). Never with
    /// `flatten_events`.
    pub(crate) fn append_cells(&mut self, row: &CellRow) -> bool {
        if self.flatten_events {
            return false;
        }
        let names = row.names();
        if !self
            .cell_slots
            .names
            .as_ref()
            .is_some_and(|known| Arc::ptr_eq(known, names))
        {
            let slots: Vec<Option<usize>> = names
                .iter()
                .map(|name| self.root.by_name.get(name.as_bytes()).copied())
                .collect();
            let unfilled = (0..self.root.slots.len())
                .filter(|slot| !slots.contains(&Some(*slot)))
                .collect();
            self.cell_slots = CellSlots {
                names: Some(Arc::clone(names)),
                slots,
                unfilled,
            };
        }
        let mut pushed = true;
        for (cell, slot) in row.cells().zip(&self.cell_slots.slots) {
            let column = match slot.and_then(|slot| self.root.slots.get_mut(slot)) {
                Some(slot) => &mut slot.column,
                None => {
                    pushed = false;
                    break;
                }
            };
            if column.push_cell(cell).is_none() {
                pushed = false;
                break;
            }
        }
        if pushed {
            for &slot in &self.cell_slots.unfilled {
                if let Some(slot) = self.root.slots.get_mut(slot) {
                    slot.column.push_null();
                }
            }
            // A JSON value in a key column may be an object or an array kept as text.
            pushed = self.keys.is_empty()
                || self.keys_hold()
                    && !row.cells().zip(&self.cell_slots.slots).any(|(cell, slot)| {
                        matches!(cell, Cell::Json(_))
                            && self
                                .keys
                                .iter()
                                .any(|(_, key)| key.is_some() && key == slot)
                    });
        }
        if pushed {
            self.rows += 1;
        } else {
            self.root.truncate(self.rows);
        }
        pushed
    }
}

impl Column {
    /// Push one cell; `None` (nothing pushed) when it does not fit this column directly.
    fn push_cell(&mut self, cell: Cell<'_>) -> Option<()> {
        match (&mut self.data, cell) {
            (_, Cell::Null) => {
                self.push_null();
                return Some(());
            }
            (_, Cell::Json(value)) => {
                // The JSON path itself, for a value it places in this column.
                if value.is_null() || !self.fits(value) {
                    return None;
                }
                return self.push(Some(value)).ok();
            }
            (
                Data::Decimal {
                    values,
                    precision,
                    scale,
                },
                Cell::Decimal {
                    unscaled,
                    scale: from,
                },
            ) => values.push(rescale_decimal(unscaled, from, *precision, *scale)?),
            // Anywhere else, a decimal goes where its text would.
            (_, Cell::Decimal { unscaled, scale }) => {
                return self.push_cell(Cell::Text(&decimal_text(unscaled, scale)));
            }
            (Data::Boolean(values), Cell::Bool(flag)) => values.append(flag),
            (Data::Int(values), Cell::Long(int)) => values.push(i32::try_from(int).ok()?),
            (Data::Long(values) | Data::TimestampMs(values), Cell::Long(int)) => values.push(int),
            (Data::Timestamp(values), Cell::Long(secs)) => {
                values.push(secs.checked_mul(1_000_000)?);
            }
            #[allow(
                clippy::cast_precision_loss,
                reason = "the JSON path reads an integer into a double column as `as_f64` does"
            )]
            (Data::Double(values), Cell::Long(int)) => values.push(int as f64),
            (Data::Double(values), Cell::Double(float)) => values.push(float),
            (Data::Double(values), Cell::Text(text)) => values.push(parse_numeric(text)?),
            (Data::Timestamp(values), Cell::Instant { micros, .. }) => values.push(micros),
            (Data::TimestampMs(values), Cell::Instant { micros, .. }) if micros % 1_000 == 0 => {
                values.push(micros / 1_000);
            }
            // A column that held these as text before they were typed keeps its text.
            (Data::Text { offsets, bytes }, Cell::Instant { micros, utc }) => {
                push_text(offsets, bytes, &instant_text(micros, utc)?)?;
            }
            (
                Data::Decimal {
                    values,
                    precision,
                    scale,
                },
                Cell::Text(text),
            ) => values.push(parse_decimal(text, *precision, *scale)?),
            (Data::Date(values), Cell::Date(days)) => values.push(days),
            (Data::Text { offsets, bytes }, Cell::Date(days)) => {
                push_text(offsets, bytes, &date_text(days)?)?;
            }
            (Data::Date(values), Cell::Text(text)) => {
                values.push(parse_date(text)?.num_days_from_ce() - UNIX_EPOCH_DAYS_FROM_CE);
            }
            (Data::Text { offsets, bytes }, Cell::Text(text)) => push_text(offsets, bytes, text)?,
            _ => return None,
        }
        self.validity.append(true);
        Some(())
    }
}

/// A decimal's unscaled value at scale `from`, as a `decimal(precision, scale)` column holds
/// it; `None` when that column cannot: what [`parse_decimal`] gives for its text (no digit
/// dropped, at most `precision - scale` digits before the point).
fn rescale_decimal(unscaled: i128, from: u8, precision: u8, scale: u8) -> Option<i128> {
    let value = unscaled.checked_mul(10i128.checked_pow(u32::from(scale.checked_sub(from)?))?)?;
    (value.unsigned_abs() < 10u128.checked_pow(u32::from(precision))?).then_some(value)
}

/// Append `text` to a string column's buffers; `None` (nothing added) past 2 GiB.
fn push_text(offsets: &mut Vec<i32>, bytes: &mut Vec<u8>, text: &str) -> Option<()> {
    let end = i32::try_from(bytes.len() + text.len()).ok()?;
    bytes.extend_from_slice(text.as_bytes());
    offsets.push(end);
    Some(())
}

/// Decimal test values: per step, the generator's state (for drawing scales and the like)
/// and an unscaled value of 0 to 38 digits, either sign (xorshift from `seed`, repeatable).
#[cfg(test)]
pub(crate) fn sample_decimals(seed: u64) -> impl Iterator<Item = (u64, i128)> {
    std::iter::successors(Some(seed), |state| {
        let mut state = *state;
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        Some(state)
    })
    .skip(1)
    .map(|state| {
        let digits = (state % 39) as u32;
        let magnitude =
            i128::from(state >> 16) * i128::from(state as u32) % 10i128.pow(digits.max(1));
        (
            state,
            if state & 1 == 1 {
                -magnitude
            } else {
                magnitude
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A decimal cell goes into a decimal column exactly when its text would, as the same
    /// value: every scale and precision against values of every length and scale.
    #[test]
    fn a_rescaled_decimal_is_what_its_text_parses_to() {
        for (state, unscaled) in crate::schema::sample_decimals(0x9e37_79b9_7f4a_7c15).take(50_000)
        {
            let from = ((state >> 8) % 39) as u8;
            let precision = 1 + ((state >> 24) % 38) as u8;
            let scale = ((state >> 40) % u64::from(precision + 1)) as u8;
            assert_eq!(
                rescale_decimal(unscaled, from, precision, scale),
                parse_decimal(&decimal_text(unscaled, from), precision, scale),
                "{unscaled} at scale {from} into decimal({precision},{scale})"
            );
        }
    }
}
