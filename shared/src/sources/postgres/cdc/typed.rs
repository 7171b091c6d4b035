//! A change record as a row of typed cells (see [`crate::sources::cells`]), for `sync` and
//! `discover` to infer and type like the snapshot's pages.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{CHANGE_COLUMN_TYPES, COMMIT_LSN, COMMIT_TS, LSN, OP, Table};
use crate::sources::cells::{CellPage, CellRow, Declared, parse_instant_text};
use crate::sources::postgres::decode::Decoder;

/// The column names of a change record, with what typing its values needs: the names (one
/// `Arc` for every record of this shape, so typing maps them to columns once), each name's
/// declared type, and for instants whether they are UTC (`timestamptz`, `_commit_ts`).
#[derive(Debug)]
pub(super) struct Shape {
    names: Arc<[String]>,
    declared: Arc<[Option<Declared>]>,
    utc: Vec<bool>,
}

impl Shape {
    fn of(table: &Table, record: &Map<String, Value>) -> Shape {
        let mut declared = Vec::with_capacity(record.len());
        let mut utc = Vec::with_capacity(record.len());
        for name in record.keys() {
            let (d, u) = match name.as_str() {
                OP => (CHANGE_COLUMN_TYPES[0], false),
                LSN => (CHANGE_COLUMN_TYPES[1], false),
                COMMIT_LSN => (CHANGE_COLUMN_TYPES[2], false),
                COMMIT_TS => (CHANGE_COLUMN_TYPES[3], true),
                _ => match table
                    .columns
                    .iter()
                    .position(|(column, _, _)| column == name)
                {
                    Some(at) => (
                        table.declared.get(at).copied().flatten(),
                        matches!(table.columns[at].1, Some(Decoder::Timestamptz)),
                    ),
                    None => (None, false),
                },
            };
            declared.push(d);
            utc.push(u);
        }
        Shape {
            names: record.keys().cloned().collect(),
            declared: declared.into(),
            utc,
        }
    }

    fn matches(&self, record: &Map<String, Value>) -> bool {
        self.names.len() == record.len()
            && self.names.iter().zip(record.keys()).all(|(a, b)| a == b)
    }
}

/// A change's record as typed cells (see [`crate::sources::cells`]), each column with the type
/// its decoder declares: the values of the table's `timestamp` and `timestamptz` columns and
/// `_commit_ts` as instants (their text, as [`Decoder::parse_text`] writes it, read back),
/// every other value as its JSON value. `None` when a name repeats (a table with a column
/// named `_op`, ...). The table keeps the last record's [`Shape`] for the next.
pub(super) fn typed_row(table: &mut Table, record: &Map<String, Value>) -> Option<CellRow> {
    if !table
        .shape
        .as_ref()
        .is_some_and(|shape| shape.matches(record))
    {
        table.shape = Some(Shape::of(table, record));
    }
    let shape = table.shape.as_ref()?;
    let mut page =
        CellPage::new(Arc::clone(&shape.names))?.with_declared(Arc::clone(&shape.declared));
    for (at, value) in record.values().enumerate() {
        let instant = match (shape.declared.get(at), value.as_str()) {
            (Some(Some(Declared::Timestamp)), Some(text)) => parse_instant_text(text),
            _ => None,
        };
        let utc = shape.utc.get(at).copied().unwrap_or(false);
        if !instant.is_some_and(|micros| page.push_instant(micros, utc)) {
            page.push_json(value.clone()).ok()?;
        }
    }
    let page = Arc::new(page);
    CellRow::all(&page).next()
}
