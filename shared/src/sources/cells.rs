//! Rows a source decoded into typed cells instead of JSON objects (the Postgres source's
//! tables), for `sync` to type straight into Arrow columns.
//!
//! A [`CellPage`] holds a page of rows column by column order: each cell is a null, a
//! boolean, a 64-bit integer, a finite double, UTF-8 text (in the page's one text buffer) or,
//! for anything else (arrays), a JSON value. A [`CellRow`] is one row of a shared page; it is
//! what a [`SourceRecord`](super::SourceRecord) carries in
//! [`cells`](super::SourceRecord::cells).
//!
//! The contract that keeps both typing paths equal: a row's cells stand for exactly the JSON
//! object [`CellRow::to_json`] gives (an integer cell is that JSON integer, a text cell that
//! JSON string, ...). Typing a row from its cells
//! (`RecordBatchBuilder::append_cells`) either gives the row typing that object gives, or
//! refuses, and the caller types the object.

use std::sync::Arc;

use serde_json::{Map, Number, Value};

/// One cell of a row (borrowed from its page).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Cell<'a> {
    /// SQL NULL: JSON `null`.
    Null,
    /// A JSON boolean.
    Bool(bool),
    /// A JSON integer.
    Long(i64),
    /// A JSON number that is not an integer: always finite.
    Double(f64),
    /// A JSON string.
    Text(&'a str),
    /// Any other JSON value.
    Json(&'a Value),
}

/// How a cell is stored in its page (text by its range in the page's text).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stored {
    Null,
    Bool(bool),
    Long(i64),
    Double(f64),
    Text { start: u32, end: u32 },
    Json(u32),
}

/// Rows of cells under one list of column names.
#[derive(Debug, Default)]
pub struct CellPage {
    names: Arc<[String]>,
    /// Row-major: row `r`, column `c` at `r * names.len() + c`.
    cells: Vec<Stored>,
    text: String,
    json: Vec<Value>,
}

/// Why a cell could not be added to a page.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CellError {
    /// The page's text would pass 4 GiB.
    #[error("a page's text would pass 4 GiB")]
    TextTooLong,
    /// The page holds 2^32 JSON values already.
    #[error("a page holds too many JSON values")]
    TooManyValues,
}

impl From<CellError> for String {
    fn from(error: CellError) -> String {
        error.to_string()
    }
}

impl CellPage {
    /// An empty page for rows with these column names, or `None` when a name repeats (a
    /// JSON object would keep only the last: such rows go as JSON objects instead).
    pub fn new(names: Arc<[String]>) -> Option<CellPage> {
        let mut sorted: Vec<&String> = names.iter().collect();
        sorted.sort();
        if sorted.windows(2).any(|pair| pair[0] == pair[1]) {
            return None;
        }
        Some(CellPage {
            names,
            ..CellPage::default()
        })
    }

    /// Rows in the page (complete ones).
    pub fn rows(&self) -> usize {
        self.cells.len().checked_div(self.names.len()).unwrap_or(0)
    }

    /// Add a null cell to the row being filled.
    pub fn push_null(&mut self) {
        self.cells.push(Stored::Null);
    }

    /// Add a boolean.
    pub fn push_bool(&mut self, value: bool) {
        self.cells.push(Stored::Bool(value));
    }

    /// Add an integer.
    pub fn push_long(&mut self, value: i64) {
        self.cells.push(Stored::Long(value));
    }

    /// Add a float: a JSON number when finite, else the text `NaN`, `Infinity` or
    /// `-Infinity` (JSON has no such numbers).
    pub fn push_double(&mut self, value: f64) -> Result<(), CellError> {
        if value.is_finite() {
            self.cells.push(Stored::Double(value));
            Ok(())
        } else {
            self.push_text(if value.is_nan() {
                "NaN"
            } else if value > 0.0 {
                "Infinity"
            } else {
                "-Infinity"
            })
        }
    }

    /// Add a text cell.
    pub fn push_text(&mut self, text: &str) -> Result<(), CellError> {
        self.write_text(|out| out.push_str(text))
    }

    /// Add a text cell written by `write` into the page's text (no allocation of its own).
    pub fn write_text(&mut self, write: impl FnOnce(&mut String)) -> Result<(), CellError> {
        self.try_write_text(|out| {
            write(out);
            Ok(())
        })
    }

    /// [`CellPage::write_text`] with a writer that can fail: on its error (or a text past
    /// 4 GiB) no cell is added and nothing it wrote stays.
    pub fn try_write_text<E: From<CellError>>(
        &mut self,
        write: impl FnOnce(&mut String) -> Result<(), E>,
    ) -> Result<(), E> {
        let start = self.text.len();
        let written = write(&mut self.text).and_then(|()| {
            let range = u32::try_from(start).and_then(|s| Ok((s, u32::try_from(self.text.len())?)));
            range.map_err(|_| E::from(CellError::TextTooLong))
        });
        match written {
            Ok((start, end)) => {
                self.cells.push(Stored::Text { start, end });
                Ok(())
            }
            Err(e) => {
                self.text.truncate(start);
                Err(e)
            }
        }
    }

    /// Add any JSON value (a string, number, boolean or null is stored as its own cell).
    pub fn push_json(&mut self, value: Value) -> Result<(), CellError> {
        match value {
            Value::Null => self.push_null(),
            Value::Bool(flag) => self.push_bool(flag),
            Value::String(text) => return self.push_text(&text),
            Value::Number(number) if number.as_i64().is_some() => {
                self.push_long(number.as_i64().unwrap_or_default());
            }
            other => {
                let index = u32::try_from(self.json.len()).map_err(|_| CellError::TooManyValues)?;
                self.json.push(other);
                self.cells.push(Stored::Json(index));
            }
        }
        Ok(())
    }

    fn cell(&self, at: usize) -> Cell<'_> {
        match self.cells.get(at) {
            None | Some(Stored::Null) => Cell::Null,
            Some(Stored::Bool(flag)) => Cell::Bool(*flag),
            Some(Stored::Long(int)) => Cell::Long(*int),
            Some(Stored::Double(float)) => Cell::Double(*float),
            Some(Stored::Text { start, end }) => {
                Cell::Text(self.text.get(*start as usize..*end as usize).unwrap_or(""))
            }
            Some(Stored::Json(index)) => match self.json.get(*index as usize) {
                Some(value) => Cell::Json(value),
                None => Cell::Null,
            },
        }
    }
}

/// One row of a shared [`CellPage`].
#[derive(Debug, Clone)]
pub struct CellRow {
    page: Arc<CellPage>,
    row: usize,
}

impl PartialEq for CellRow {
    fn eq(&self, other: &Self) -> bool {
        self.page.names == other.page.names && self.cells().eq(other.cells())
    }
}

impl CellRow {
    /// Every row of `page`, in order.
    pub fn all(page: &Arc<CellPage>) -> impl Iterator<Item = CellRow> + '_ {
        (0..page.rows()).map(|row| CellRow {
            page: Arc::clone(page),
            row,
        })
    }

    /// The column names, shared by every row of the page (the same `Arc`).
    pub fn names(&self) -> &Arc<[String]> {
        &self.page.names
    }

    /// The cells, in column order.
    pub fn cells(&self) -> impl Iterator<Item = Cell<'_>> + '_ {
        let width = self.page.names.len();
        let first = self.row * width;
        (first..first + width).map(|at| self.page.cell(at))
    }

    /// The JSON object the cells stand for (see the [module docs](self)).
    pub fn to_json(&self) -> Map<String, Value> {
        let mut object = Map::with_capacity(self.page.names.len());
        for (name, cell) in self.page.names.iter().zip(self.cells()) {
            let value = match cell {
                Cell::Null => Value::Null,
                Cell::Bool(flag) => Value::Bool(flag),
                Cell::Long(int) => Value::from(int),
                Cell::Double(float) => Number::from_f64(float).map_or(Value::Null, Value::Number),
                Cell::Text(text) => Value::String(text.to_owned()),
                Cell::Json(value) => value.clone(),
            };
            object.insert(name.clone(), value);
        }
        object
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(list: &[&str]) -> Arc<[String]> {
        list.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn rows_read_back_as_the_json_objects_they_stand_for() {
        let mut page = CellPage::new(names(&["a", "b", "c"])).unwrap();
        page.push_long(-7);
        page.push_text("x\"y").unwrap();
        page.push_json(json!([1, null, "z"])).unwrap();
        page.push_null();
        page.push_double(f64::NAN).unwrap();
        page.push_double(2.5).unwrap();
        // A failed writer leaves no cell and no text.
        assert_eq!(
            page.try_write_text(|out| {
                out.push_str("half");
                Err(CellError::TooManyValues)
            }),
            Err(CellError::TooManyValues)
        );
        let page = Arc::new(page);
        let rows: Vec<Map<String, Value>> = CellRow::all(&page).map(|r| r.to_json()).collect();
        assert_eq!(
            Value::Array(rows.into_iter().map(Value::Object).collect()),
            json!([{"a": -7, "b": "x\"y", "c": [1, null, "z"]}, {"a": null, "b": "NaN", "c": 2.5}])
        );
        assert_eq!(CellRow::all(&page).count(), 2);
        assert_eq!(
            CellRow::all(&page)
                .nth(1)
                .unwrap()
                .cells()
                .collect::<Vec<_>>(),
            vec![Cell::Null, Cell::Text("NaN"), Cell::Double(2.5)]
        );
    }

    #[test]
    fn a_repeated_column_name_makes_no_page() {
        assert!(CellPage::new(names(&["a", "b", "a"])).is_none());
        assert!(CellPage::new(names(&[])).is_some_and(|p| p.rows() == 0));
    }
}
