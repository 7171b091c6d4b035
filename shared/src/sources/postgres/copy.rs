//! A page of a table read with `COPY (SELECT ...) TO STDOUT (FORMAT binary)`.
//!
//! The table reader asks for each keyset page as a binary `COPY` of the page's `SELECT`: the
//! server sends each row's values in the same binary forms as a query's results, and the
//! client keeps them in one buffer per page, with an index of where each value starts. A query
//! (`Client::query`) built a `tokio_postgres::Row` per row instead (a vector of value ranges,
//! a type check and a lookup per value): ~12% of the client's CPU on the 10M-row benchmark.
//!
//! The format (PostgreSQL's `COPY` documentation, "Binary Format"), big-endian throughout:
//! the 11-byte signature `PGCOPY\n\xff\r\n\0`, a 32-bit flags field (bit 16: OIDs included;
//! bits 0-15 must be zero), a 32-bit header extension length and that many bytes; then one
//! tuple per row: a 16-bit field count (-1 ends the data), and per field a 32-bit length (-1
//! for NULL) followed by that many bytes.
//!
//! A COPY statement takes no parameters, so the page's starting key is written into the
//! statement as literals ([`literal`]).

/// The binary COPY signature.
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";
/// The flags bit that says each tuple starts with an OID (never asked for here).
const HAS_OIDS: u32 = 1 << 16;
/// A value's length that stands for NULL.
const NULL: u32 = u32::MAX;

/// One page: the bytes the server sent, and where each value is in them.
#[derive(Debug)]
pub(crate) struct CopyPage {
    bytes: Vec<u8>,
    /// `(start, length)` of each value, row after row; length [`NULL`] for NULL.
    values: Vec<(usize, u32)>,
    width: usize,
}

impl CopyPage {
    /// Index the `bytes` of a whole binary COPY output (header to trailer), `width` values
    /// per row. An error says what is wrong and where.
    pub(crate) fn parse(
        bytes: Vec<u8>,
        width: usize,
        rows_hint: usize,
    ) -> Result<CopyPage, String> {
        let mut values = Vec::with_capacity(rows_hint.saturating_mul(width));
        let mut at = header_len(&bytes)?;
        loop {
            let count = i16::from_be_bytes(take(&bytes, at, "a row's field count")?);
            at += 2;
            if count == -1 {
                break;
            }
            if usize::try_from(count).ok() != Some(width) {
                return Err(format!(
                    "a row has {count} values where {width} were asked for (byte {at})"
                ));
            }
            for _ in 0..width {
                let len = u32::from_be_bytes(take(&bytes, at, "a value's length")?);
                at += 4;
                if len == NULL {
                    values.push((at, NULL));
                    continue;
                }
                let end = usize::try_from(len)
                    .ok()
                    .filter(|len| *len <= i32::MAX as usize)
                    .and_then(|len| at.checked_add(len))
                    .filter(|end| *end <= bytes.len())
                    .ok_or_else(|| {
                        format!("a value of {len} bytes at byte {at} runs past the data")
                    })?;
                values.push((at, len));
                at = end;
            }
        }
        if at != bytes.len() {
            return Err(format!(
                "{} bytes after the end of the data",
                bytes.len() - at
            ));
        }
        Ok(CopyPage {
            bytes,
            values,
            width,
        })
    }

    /// The rows on the page.
    pub(crate) fn rows(&self) -> usize {
        self.values.len().checked_div(self.width).unwrap_or(0)
    }

    /// Row `row` (`0..rows()`).
    pub(crate) fn row(&self, row: usize) -> CopyRow<'_> {
        CopyRow { page: self, row }
    }
}

/// One row of a [`CopyPage`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct CopyRow<'a> {
    page: &'a CopyPage,
    row: usize,
}

/// A row's raw values, by column index: a query's `Row` or a row of a [`CopyPage`].
pub(crate) trait RawRow {
    /// The binary value of column `at` (`None` for NULL).
    fn raw(&self, at: usize) -> Result<Option<&[u8]>, String>;
}

impl RawRow for tokio_postgres::Row {
    fn raw(&self, at: usize) -> Result<Option<&[u8]>, String> {
        self.try_get::<_, Option<super::decode::RawValue<'_>>>(at)
            .map(|raw| raw.map(|super::decode::RawValue(bytes)| bytes))
            .map_err(|e| e.to_string())
    }
}

impl RawRow for CopyRow<'_> {
    fn raw(&self, at: usize) -> Result<Option<&[u8]>, String> {
        if at >= self.page.width {
            return Err(format!(
                "no column {at} in a row of {} values",
                self.page.width
            ));
        }
        let (start, len) = self
            .page
            .values
            .get(self.row * self.page.width + at)
            .copied()
            .ok_or_else(|| format!("no row {} on the page", self.row))?;
        if len == NULL {
            return Ok(None);
        }
        // `parse` checked every range.
        Ok(self.page.bytes.get(start..start + len as usize))
    }
}

impl<T: RawRow> RawRow for &T {
    fn raw(&self, at: usize) -> Result<Option<&[u8]>, String> {
        (**self).raw(at)
    }
}

/// The length of the header at the start of `bytes`, checked.
fn header_len(bytes: &[u8]) -> Result<usize, String> {
    if bytes.get(..SIGNATURE.len()) != Some(SIGNATURE.as_slice()) {
        return Err("the data does not start with the binary COPY signature".into());
    }
    let flags = u32::from_be_bytes(take(bytes, 11, "the header's flags")?);
    if flags & HAS_OIDS != 0 || flags & 0xffff != 0 {
        return Err(format!("unexpected header flags {flags:#x}"));
    }
    let extension = u32::from_be_bytes(take(bytes, 15, "the header's extension length")?);
    let end = usize::try_from(extension)
        .ok()
        .and_then(|len| 19usize.checked_add(len))
        .filter(|end| *end <= bytes.len())
        .ok_or("the header's extension runs past the data")?;
    Ok(end)
}

/// `N` bytes at `at`, or an error naming `what` was cut short.
fn take<const N: usize>(bytes: &[u8], at: usize, what: &str) -> Result<[u8; N], String> {
    at.checked_add(N)
        .and_then(|end| bytes.get(at..end))
        .and_then(|slice| slice.try_into().ok())
        .ok_or_else(|| format!("the data ends inside {what} (byte {at})"))
}

/// `text` as an SQL string literal, as PostgreSQL's `quote_literal` writes it: quotes
/// doubled, and when there is a backslash, an `E'...'` literal with backslashes doubled, so
/// the literal means `text` whatever `standard_conforming_strings` says.
pub(crate) fn literal(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 3);
    if text.contains('\\') {
        out.push('E');
    }
    out.push('\'');
    for c in text.chars() {
        if c == '\'' || c == '\\' {
            out.push(c);
        }
        out.push(c);
    }
    out.push('\'');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary COPY output of `rows`, each value `None` (NULL) or bytes.
    fn copy_bytes(rows: &[Vec<Option<&[u8]>>]) -> Vec<u8> {
        let mut out = SIGNATURE.to_vec();
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&3u32.to_be_bytes());
        out.extend_from_slice(b"ext");
        for row in rows {
            out.extend_from_slice(&(row.len() as i16).to_be_bytes());
            for value in row {
                match value {
                    None => out.extend_from_slice(&(-1i32).to_be_bytes()),
                    Some(bytes) => {
                        out.extend_from_slice(&(bytes.len() as i32).to_be_bytes());
                        out.extend_from_slice(bytes);
                    }
                }
            }
        }
        out.extend_from_slice(&(-1i16).to_be_bytes());
        out
    }

    #[test]
    fn values_and_nulls_are_found_row_by_row() -> Result<(), String> {
        let rows = vec![
            vec![Some(&b"one"[..]), None, Some(&b""[..])],
            vec![None, Some(&[0u8, 1, 2][..]), Some(&b"three"[..])],
        ];
        let page = CopyPage::parse(copy_bytes(&rows), 3, 0)?;
        assert_eq!(page.rows(), 2);
        for (i, row) in rows.iter().enumerate() {
            for (at, value) in row.iter().enumerate() {
                assert_eq!(page.row(i).raw(at)?, *value, "row {i} column {at}");
            }
        }
        assert!(page.row(0).raw(3).is_err());
        let empty = CopyPage::parse(copy_bytes(&[]), 3, 10)?;
        assert_eq!(empty.rows(), 0);
        Ok(())
    }

    #[test]
    fn cut_or_malformed_data_is_refused_never_read_past() {
        let whole = copy_bytes(&[vec![Some(&b"abc"[..]), None]]);
        assert!(CopyPage::parse(whole.clone(), 2, 1).is_ok());
        // Every cut short of the whole is an error, not a shorter page.
        for cut in 0..whole.len() {
            assert!(
                CopyPage::parse(whole[..cut].to_vec(), 2, 1).is_err(),
                "cut at {cut}"
            );
        }
        // Another width than asked for.
        let error = CopyPage::parse(whole.clone(), 3, 1).unwrap_err();
        assert!(error.contains("2 values where 3"), "{error}");
        // Bytes after the trailer, a bad signature, OIDs, a value longer than the data.
        let mut trailing = whole.clone();
        trailing.push(0);
        assert!(CopyPage::parse(trailing, 2, 1).is_err());
        let mut signature = whole.clone();
        signature[0] = b'X';
        assert!(CopyPage::parse(signature, 2, 1).is_err());
        let mut oids = whole.clone();
        oids[11..15].copy_from_slice(&HAS_OIDS.to_be_bytes());
        assert!(CopyPage::parse(oids, 2, 1).is_err());
        let mut long = whole;
        let first_len = 19 + 3 + 2;
        long[first_len..first_len + 4].copy_from_slice(&1000i32.to_be_bytes());
        assert!(CopyPage::parse(long, 2, 1).is_err());
    }

    #[test]
    fn literals_quote_as_postgres_does() {
        assert_eq!(literal("plain"), "'plain'");
        assert_eq!(literal(""), "''");
        assert_eq!(literal("it's"), "'it''s'");
        assert_eq!(literal(r"a\b"), r"E'a\\b'");
        assert_eq!(literal(r"x'\"), r"E'x''\\'");
        assert_eq!(literal("ü ' 🦀"), "'ü '' 🦀'");
    }
}
