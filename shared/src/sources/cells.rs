//! Rows a source decoded into typed cells instead of JSON objects (the Postgres source's
//! tables), for `sync` to type straight into Arrow columns.
//!
//! A [`CellPage`] holds a page of rows column by column order: each cell is a null, a
//! boolean, a 64-bit integer, a finite double, an instant (a typed timestamp), UTF-8 text (in
//! the page's one text buffer) or, for anything else (arrays), a JSON value. A [`CellRow`] is one row of a shared page; it is
//! what a [`SourceRecord`](super::SourceRecord) carries in
//! [`cells`](super::SourceRecord::cells).
//!
//! The contract that keeps both typing paths equal: a row's cells stand for exactly the JSON
//! object [`CellRow::to_json`] gives (an integer cell is that JSON integer, a text cell that
//! JSON string, an instant its ISO 8601 text, ...). Typing a row from its cells
//! (`RecordBatchBuilder::append_cells`) either gives the row typing that object gives, or
//! refuses, and the caller types the object (where an instant's text fits a timestamp
//! column, `RecordBatchBuilder::append_of_cells`).
//!
//! Where the two differ is inference, on purpose: a source that hands out cells knows its
//! columns' types, so an integer cell is an integer (never a Unix time, as an integer in a
//! JSON record may be) and an instant is a `timestamp` (never a string, as ISO 8601 text in a
//! JSON record is).

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
    /// An instant, in microseconds after 1970-01-01T00:00:00 UTC (within the years
    /// [`instant_text`] can write): its JSON form is that text.
    Instant {
        /// Microseconds after the Unix epoch.
        micros: i64,
        /// Whether the source's value named UTC (text ending in `Z`), or was a wall-clock
        /// time without a zone (read as UTC all the same; its text has no `Z`).
        utc: bool,
    },
    /// A day, in days after 1970-01-01, in the years 1 to 9999: its JSON form is its
    /// `YYYY-MM-DD` text.
    Date(i32),
    /// A decimal number, `unscaled` / 10^`scale`, of at most 38 digits (see
    /// [`DECIMAL_LIMIT`]): its JSON form is its [`decimal_text`], with exactly `scale` digits
    /// after the point, as a Postgres `numeric` is written.
    Decimal {
        /// The digits as an integer, with the sign.
        unscaled: i128,
        /// Digits after the point (at most 38).
        scale: u8,
    },
    /// Any other JSON value.
    Json(&'a Value),
}

/// The instants [`instant_text`] can write, in microseconds after the Unix epoch.
const INSTANT_MICROS: std::ops::RangeInclusive<i64> = chrono::DateTime::<chrono::Utc>::MIN_UTC
    .timestamp_micros()
    ..=chrono::DateTime::<chrono::Utc>::MAX_UTC.timestamp_micros();

/// 10^38: a decimal cell's unscaled value stays below it in magnitude (38 digits, the most a
/// `decimal` column holds).
pub const DECIMAL_LIMIT: u128 = 10u128.pow(38);

/// A decimal's text: the sign, the integer digits (at least one), and when `scale` > 0 a
/// point and exactly `scale` digits (`1250, 2` is `12.50`; `-5, 3` is `-0.005`).
pub fn decimal_text(unscaled: i128, scale: u8) -> String {
    let digits = unscaled.unsigned_abs().to_string();
    let scale = usize::from(scale);
    let mut out = String::with_capacity(digits.len() + scale + 3);
    if unscaled < 0 {
        out.push('-');
    }
    if scale == 0 {
        out.push_str(&digits);
        return out;
    }
    match digits.len().checked_sub(scale) {
        Some(whole) if whole > 0 => {
            out.push_str(&digits[..whole]);
            out.push('.');
            out.push_str(&digits[whole..]);
        }
        _ => {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', scale - digits.len()));
            out.push_str(&digits);
        }
    }
    out
}

/// A day's text (`YYYY-MM-DD`), for days after 1970-01-01 within chrono's years.
pub fn date_text(days: i32) -> Option<String> {
    // Days from 0001-01-01 (day 1 of the common era) to 1970-01-01.
    let at = chrono::NaiveDate::from_num_days_from_ce_opt(days.checked_add(719_163)?)?;
    Some(at.format("%Y-%m-%d").to_string())
}

/// An instant's text (`YYYY-MM-DDTHH:MM:SS.ffffff`, then `Z` when `utc`); `None` beyond the
/// years chrono writes (about 262,000 years either side of year 0).
pub fn instant_text(micros: i64, utc: bool) -> Option<String> {
    let at = chrono::DateTime::from_timestamp_micros(micros)?.naive_utc();
    let zone = if utc { "Z" } else { "" };
    Some(format!("{}{zone}", at.format("%Y-%m-%dT%H:%M:%S%.6f")))
}

/// The instant an [`instant_text`] names (with or without its `Z`), if `text` is exactly
/// that shape: the inverse of [`instant_text`], for a cell's text typed into a `timestamp`
/// column.
pub fn parse_instant_text(text: &str) -> Option<i64> {
    let body = text.strip_suffix('Z').unwrap_or(text);
    let at = chrono::NaiveDateTime::parse_from_str(body, "%Y-%m-%dT%H:%M:%S%.6f").ok()?;
    let micros = at.and_utc().timestamp_micros();
    // Only the exact text (six fraction digits, a four-digit or signed year as written).
    (instant_text(micros, body.len() != text.len()).as_deref() == Some(text)).then_some(micros)
}

/// How a cell is stored in its page (text by its range in the page's text).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stored {
    Null,
    Bool(bool),
    Long(i64),
    Double(f64),
    Text {
        start: u32,
        end: u32,
    },
    Instant {
        micros: i64,
        utc: bool,
    },
    Date(i32),
    /// The unscaled value at this index of the page's decimals.
    Decimal {
        index: u32,
        scale: u8,
    },
    Json(u32),
}

/// The type a typed source declares for a column: what inference makes of the column
/// whatever its values' range (an `int8` column is `long` even while its values are small)
/// and when every value seen is NULL (a NULL carries no type of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Declared {
    /// `boolean`.
    Boolean,
    /// `int`.
    Int,
    /// `long`.
    Long,
    /// `double`.
    Double,
    /// `date`.
    Date,
    /// `timestamp`.
    Timestamp,
    /// `decimal(precision, scale)`: text cells that are decimals of that type (see
    /// [`crate::schema::FieldType::Decimal`]).
    Decimal {
        /// Digits in all (1 to 38).
        precision: u8,
        /// Digits after the point (at most `precision`).
        scale: u8,
    },
}

/// Rows of cells under one list of column names.
#[derive(Debug, Default)]
pub struct CellPage {
    names: Arc<[String]>,
    /// Per column, the type its source declares (empty: none declared).
    declared: Arc<[Option<Declared>]>,
    /// Row-major: row `r`, column `c` at `r * names.len() + c`.
    cells: Vec<Stored>,
    text: String,
    json: Vec<Value>,
    /// The unscaled values of the decimal cells (kept aside: an `i128` in every cell would
    /// double the size of all of them).
    decimals: Vec<i128>,
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

    /// The page with the types its source declares for its columns (one per name, in
    /// order; a list of another length declares nothing).
    #[must_use]
    pub fn with_declared(mut self, declared: Arc<[Option<Declared>]>) -> Self {
        if declared.len() == self.names.len() {
            self.declared = declared;
        }
        self
    }

    /// Make room for `rows` more rows and `text` more bytes of text (and a decimal per row in
    /// each column declared `decimal`).
    pub fn reserve(&mut self, rows: usize, text: usize) {
        self.cells
            .reserve_exact(rows.saturating_mul(self.names.len()));
        self.text.reserve_exact(text);
        let decimal_columns = self
            .declared
            .iter()
            .filter(|d| matches!(d, Some(Declared::Decimal { .. })))
            .count();
        self.decimals
            .reserve_exact(rows.saturating_mul(decimal_columns));
    }

    /// Bytes of text in the page.
    pub fn text_len(&self) -> usize {
        self.text.len()
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

    /// Add an instant (microseconds after the Unix epoch; `utc`: see [`Cell::Instant`]), or
    /// `false`, with nothing added, when [`instant_text`] cannot write it (the caller adds
    /// its own text instead).
    pub fn push_instant(&mut self, micros: i64, utc: bool) -> bool {
        // A range, not `from_timestamp_micros(micros).is_some()`: that works out the calendar
        // date (1% of the Postgres benchmark's CPU).
        if !INSTANT_MICROS.contains(&micros) {
            return false;
        }
        self.cells.push(Stored::Instant { micros, utc });
        true
    }

    /// Add a day (days after 1970-01-01), or `false`, with nothing added, outside the years 1
    /// to 9999 (whose text is not `YYYY-MM-DD`; the caller adds its own text instead).
    pub fn push_date(&mut self, days: i32) -> bool {
        // 0001-01-01 and 9999-12-31, in days after 1970-01-01 (a calendar per date was 1.4%
        // of the Postgres benchmark's CPU).
        if !(-719_162..=2_932_896).contains(&days) {
            return false;
        }
        self.cells.push(Stored::Date(days));
        true
    }

    /// Add a decimal (`unscaled` / 10^`scale`), or `false`, with nothing added, when it has
    /// more than 38 digits or a scale over 38 (the caller adds its text instead).
    pub fn push_decimal(&mut self, unscaled: i128, scale: u8) -> bool {
        let Ok(index) = u32::try_from(self.decimals.len()) else {
            return false;
        };
        if scale > 38 || unscaled.unsigned_abs() >= DECIMAL_LIMIT {
            return false;
        }
        self.decimals.push(unscaled);
        self.cells.push(Stored::Decimal { index, scale });
        true
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
            Some(Stored::Instant { micros, utc }) => Cell::Instant {
                micros: *micros,
                utc: *utc,
            },
            Some(Stored::Date(days)) => Cell::Date(*days),
            Some(Stored::Decimal { index, scale }) => match self.decimals.get(*index as usize) {
                Some(unscaled) => Cell::Decimal {
                    unscaled: *unscaled,
                    scale: *scale,
                },
                None => Cell::Null,
            },
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

    /// The type the source declares for each column, in column order (`None` for each when
    /// it declares none).
    pub fn declared(&self) -> impl Iterator<Item = Option<Declared>> + '_ {
        (0..self.page.names.len()).map(|at| self.page.declared.get(at).copied().flatten())
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
                Cell::Instant { micros, utc } => {
                    instant_text(micros, utc).map_or(Value::Null, Value::String)
                }
                Cell::Date(days) => date_text(days).map_or(Value::Null, Value::String),
                Cell::Decimal { unscaled, scale } => Value::String(decimal_text(unscaled, scale)),
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

    /// An instant is taken exactly where its text can be written, to the microsecond at
    /// either end of chrono's years.
    #[test]
    fn instants_are_taken_exactly_where_their_text_can_be_written() {
        let (first, last) = (*INSTANT_MICROS.start(), *INSTANT_MICROS.end());
        for micros in [
            i64::MIN,
            first - 1,
            first,
            first + 1,
            -1,
            0,
            last - 1,
            last,
            last + 1,
            i64::MAX,
        ] {
            let mut page = CellPage::new(names(&["at"])).unwrap();
            let writable = instant_text(micros, true).is_some();
            assert_eq!(page.push_instant(micros, true), writable, "{micros}");
            assert_eq!(page.rows(), usize::from(writable), "{micros}");
        }
        assert!(first < -8_000_000_000_000_000_000 && last > 8_000_000_000_000_000_000);
    }

    #[test]
    fn reserving_rows_makes_room_for_a_decimal_per_declared_decimal_column() {
        let decimal = Some(Declared::Decimal {
            precision: 12,
            scale: 2,
        });
        let declared: Arc<[Option<Declared>]> = vec![decimal, Some(Declared::Long), decimal].into();
        let mut page = CellPage::new(names(&["a", "b", "c"]))
            .map(|page| page.with_declared(declared))
            .unwrap_or_default();
        page.reserve(1000, 0);
        assert!(
            page.decimals.capacity() >= 2000,
            "{}",
            page.decimals.capacity()
        );
        assert!(page.cells.capacity() >= 3000);
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
    fn an_instant_reads_back_from_exactly_its_own_text() {
        for (micros, utc, text) in [
            (0, true, "1970-01-01T00:00:00.000000Z"),
            (1_704_067_200_000_001, false, "2024-01-01T00:00:00.000001"),
            (-62_135_596_800_000_000, true, "0001-01-01T00:00:00.000000Z"),
            (-62_167_219_200_000_000, true, "0000-01-01T00:00:00.000000Z"),
            (
                253_402_300_800_000_000,
                false,
                "+10000-01-01T00:00:00.000000",
            ),
        ] {
            assert_eq!(instant_text(micros, utc).as_deref(), Some(text));
            assert_eq!(parse_instant_text(text), Some(micros), "{text}");
        }
        // Only that exact shape.
        for text in [
            "2024-01-01T00:00:00Z",
            "2024-01-01 00:00:00.000000",
            "2024-01-01T00:00:00.000000+00:00",
            "2024-01-01T00:00:00.0000001",
            "infinity",
        ] {
            assert_eq!(parse_instant_text(text), None, "{text}");
        }
        let mut days = CellPage::new(names(&["day"])).unwrap();
        assert!(days.push_date(-719_162), "0001-01-01");
        assert!(!days.push_date(-719_163), "0000-12-31");
        assert!(days.push_date(2_932_896), "9999-12-31");
        assert!(!days.push_date(2_932_897), "10000-01-01");
        assert!(!days.push_date(i32::MAX));
        let days = Arc::new(days);
        let texts: Vec<Value> = CellRow::all(&days)
            .map(|r| r.to_json()["day"].clone())
            .collect();
        assert_eq!(texts, [json!("0001-01-01"), json!("9999-12-31")]);
        let mut page = CellPage::new(names(&["at"])).unwrap();
        assert!(!page.push_instant(i64::MAX, true), "past chrono's years");
        assert!(page.push_instant(-1, true));
        let page = Arc::new(page);
        assert_eq!(
            CellRow::all(&page).next().unwrap().to_json()["at"],
            json!("1969-12-31T23:59:59.999999Z")
        );
    }

    #[test]
    fn a_repeated_column_name_makes_no_page() {
        assert!(CellPage::new(names(&["a", "b", "a"])).is_none());
        assert!(CellPage::new(names(&[])).is_some_and(|p| p.rows() == 0));
    }
}
