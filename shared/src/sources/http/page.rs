//! Reading one page: its records (at `records_path`, or per line, or CSV rows) and where the
//! next page is (a URL in the page, a cursor, or the `Link` header's `rel="next"`).

use std::io::BufRead;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::spool::{Body, BodyReader};
use crate::config::connectors::HttpFormat;

/// One element of a page: a record, or what could not be one.
pub(super) enum Item {
    /// A JSON object.
    Record(Map<String, Value>),
    /// Not a record: its text, why, and the failure code.
    Bad(String, String, crate::deadletter::FailureCode),
    /// An element's JSON text, not parsed (see [`parse`]'s `unparsed`): the pipeline types it
    /// from the text, or parses it; a text that is not a JSON object becomes a deadletter.
    Unparsed(Vec<u8>),
}

/// A page's items, read lazily.
pub(super) type Items = Box<dyn Iterator<Item = Item> + Send>;

/// A page's items and the JSON document they came from (for the paginator's paths).
pub(super) struct Page {
    /// The items, in page order.
    pub items: Items,
    /// How many items there are.
    pub count: u64,
    /// The page's JSON document with the records taken out (`Null` for `jsonl` and `csv`).
    pub document: Value,
}

/// Parse `body` in `format`, taking the records from `records_path` (dot segments): a body in
/// memory whole, a spooled one record by record (see [`super::stream`]). With `unparsed`, a
/// JSON page's records array is not built into values: the page is checked to be JSON, then
/// scanned as a spooled one is, each element handed out as its text ([`Item::Unparsed`]).
pub(super) fn parse(
    body: Arc<Body>,
    format: HttpFormat,
    records_path: &[String],
    unparsed: bool,
) -> Result<Page, String> {
    let bytes = match &*body {
        Body::Memory(bytes) if unparsed && format == HttpFormat::Json => {
            serde_json::from_slice::<serde::de::IgnoredAny>(bytes)
                .map_err(|e| format!("the page is not JSON: {e}"))?;
            return parse_spooled(body, format, records_path, true);
        }
        Body::Memory(bytes) => bytes,
        Body::File { .. } => return parse_spooled(body, format, records_path, unparsed),
    };
    let page = parse_bytes(bytes, format, records_path)?;
    Ok(Page {
        count: page.items.len() as u64,
        items: Box::new(page.items.into_iter()),
        document: page.document,
    })
}

/// A spooled page: JSON records streamed from their path, lines and CSV rows from the file.
fn parse_spooled(
    body: Arc<Body>,
    format: HttpFormat,
    records_path: &[String],
    unparsed: bool,
) -> Result<Page, String> {
    let io = |e: std::io::Error| format!("reading the spooled page: {e}");
    match format {
        HttpFormat::Json => {
            let at = super::stream::locate(&body, records_path)?;
            let document = if records_path.is_empty() {
                Value::Null
            } else {
                super::stream::document(&body, at.span)?
            };
            let items: Items = match (at.span, at.elements) {
                (None, _) => Box::new(std::iter::empty()),
                (Some(_), Some(spans)) => Box::new(super::stream::Elements::at(
                    Arc::clone(&body),
                    spans,
                    unparsed,
                )),
                (Some((start, _)), _) if at.is_array => Box::new(super::stream::Elements::new(
                    Arc::clone(&body),
                    start,
                    unparsed,
                )),
                (Some((start, end)), _) => {
                    let bytes = body.range(start, end).map_err(io)?;
                    let parsed: Value = serde_json::from_slice(&bytes)
                        .map_err(|e| format!("the page is not JSON: {e}"))?;
                    let one: Vec<Item> = match parsed {
                        Value::Null => Vec::new(),
                        other => vec![item(other)],
                    };
                    Box::new(one.into_iter())
                }
            };
            Ok(Page {
                items,
                count: at.count,
                document,
            })
        }
        HttpFormat::Jsonl => {
            let lines = || {
                BufRead::split(BodyReader::new(Arc::clone(&body), 0), b'\n').map(|line| {
                    line.map(|mut l| {
                        if l.last() == Some(&b'\r') {
                            l.pop();
                        }
                        l
                    })
                })
            };
            let mut count = 0;
            for line in lines() {
                if !line.map_err(io)?.iter().all(u8::is_ascii_whitespace) {
                    count += 1;
                }
            }
            let items = lines().filter_map(|line| match line {
                Ok(line) if line.iter().all(u8::is_ascii_whitespace) => None,
                Ok(line) => Some(line_item(&line)),
                Err(e) => Some(Item::Bad(
                    String::new(),
                    format!("reading the spooled page: {e}"),
                    crate::deadletter::FailureCode::Malformed,
                )),
            });
            Ok(Page {
                items: Box::new(items),
                count,
                document: Value::Null,
            })
        }
        HttpFormat::Csv => {
            let reader = || {
                csv::ReaderBuilder::new()
                    .flexible(true)
                    .from_reader(BodyReader::new(Arc::clone(&body), 0))
            };
            let count = reader().records().count() as u64;
            let mut rows = reader();
            let headers = rows
                .headers()
                .map_err(|e| format!("cannot read the CSV header: {e}"))?
                .clone();
            let items = rows.into_records().map(move |row| csv_item(&headers, row));
            Ok(Page {
                items: Box::new(items),
                count,
                document: Value::Null,
            })
        }
    }
}

/// A page held whole in memory.
struct Whole {
    items: Vec<Item>,
    document: Value,
}

fn parse_bytes(body: &[u8], format: HttpFormat, records_path: &[String]) -> Result<Whole, String> {
    match format {
        HttpFormat::Json => parse_json(body, records_path),
        HttpFormat::Jsonl => Ok(Whole {
            items: parse_lines(body),
            document: Value::Null,
        }),
        HttpFormat::Csv => Ok(Whole {
            items: parse_csv(body)?,
            document: Value::Null,
        }),
    }
}

fn parse_json(body: &[u8], records_path: &[String]) -> Result<Whole, String> {
    let mut document: Value =
        serde_json::from_slice(body).map_err(|e| format!("the page is not JSON: {e}"))?;
    let records = if records_path.is_empty() {
        std::mem::take(&mut document)
    } else {
        let mut at = &mut document;
        for segment in records_path {
            match at.get_mut(segment.as_str()) {
                Some(next) => at = next,
                None => {
                    // No records here (an empty last page often leaves the key out).
                    return Ok(Whole {
                        items: Vec::new(),
                        document,
                    });
                }
            }
        }
        std::mem::take(at)
    };
    let items = match records {
        Value::Array(values) => values.into_iter().map(item).collect(),
        Value::Null => Vec::new(),
        other => vec![item(other)],
    };
    Ok(Whole { items, document })
}

/// A parsed value as an item: an object is a record, anything else is not.
pub(super) fn item(value: Value) -> Item {
    match value {
        Value::Object(map) => Item::Record(map),
        other => Item::Bad(
            other.to_string(),
            "the record is not a JSON object".into(),
            crate::deadletter::FailureCode::NotAnObject,
        ),
    }
}

fn parse_lines(body: &[u8]) -> Vec<Item> {
    body.split(|b| *b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line))
        .filter(|line| !line.iter().all(u8::is_ascii_whitespace))
        .map(line_item)
        .collect()
}

/// One JSON line as an item.
fn line_item(line: &[u8]) -> Item {
    match serde_json::from_slice::<Value>(line) {
        Ok(value) => item(value),
        Err(e) => Item::Bad(
            String::from_utf8_lossy(line).into_owned(),
            format!("malformed JSON: {e}"),
            crate::deadletter::FailureCode::Malformed,
        ),
    }
}

/// One CSV row as an item, its values as text under the header's names.
fn csv_item(headers: &csv::StringRecord, row: Result<csv::StringRecord, csv::Error>) -> Item {
    match row {
        Ok(row) => Item::Record(
            headers
                .iter()
                .zip(row.iter())
                .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                .collect(),
        ),
        Err(e) => Item::Bad(
            String::new(),
            format!("malformed CSV row: {e}"),
            crate::deadletter::FailureCode::Malformed,
        ),
    }
}

fn parse_csv(body: &[u8]) -> Result<Vec<Item>, String> {
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(body);
    let headers = reader
        .headers()
        .map_err(|e| format!("cannot read the CSV header: {e}"))?
        .clone();
    Ok(reader
        .records()
        .map(|row| csv_item(&headers, row))
        .collect())
}

/// The value at a dot path, if any.
pub(super) fn lookup<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter()
        .try_fold(value, |at, segment| at.get(segment.as_str()))
}

/// A dot path's segments.
pub(super) fn segments(path: &str) -> Vec<String> {
    path.split('.').map(str::to_owned).collect()
}

/// A JSON value as a query parameter or cursor text; `None` for null, empty text, arrays and
/// objects.
pub(super) fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) if !s.is_empty() => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The `rel="next"` target of an RFC 8288 `Link` header value.
pub(super) fn link_next(header: &str) -> Option<String> {
    let mut rest = header;
    while let Some(open) = rest.find('<') {
        let after = &rest[open + 1..];
        let close = after.find('>')?;
        let target = &after[..close];
        let params_end = after[close..].find('<').map_or(after.len(), |n| close + n);
        // The parameters up to the next link, without the `,` that separates links.
        let params = after[close + 1..params_end]
            .trim_end()
            .trim_end_matches(',');
        let is_next = params.split(';').any(|p| {
            let Some((key, value)) = p.split_once('=') else {
                return false;
            };
            key.trim().eq_ignore_ascii_case("rel")
                && value
                    .trim()
                    .trim_matches('"')
                    .split_ascii_whitespace()
                    .any(|rel| rel.eq_ignore_ascii_case("next"))
        });
        if is_next {
            return Some(target.to_owned());
        }
        rest = &after[params_end..];
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `body` parsed held in memory and spooled: the same items and document either way.
    fn both(
        body: &[u8],
        format: HttpFormat,
        path: &[String],
    ) -> Result<(Vec<Item>, Value), String> {
        let mut results = Vec::new();
        for threshold in [usize::MAX, 0] {
            let mut spool = crate::sources::http::spool::Spool::new(threshold);
            spool.write(body).unwrap();
            let page = parse(Arc::new(spool.finish().unwrap()), format, path, false)?;
            let count = page.count;
            let items: Vec<Item> = page.items.collect();
            assert_eq!(count, items.len() as u64);
            results.push((items, page.document));
        }
        let (spooled, memory) = (results.pop().unwrap(), results.pop().unwrap());
        let show = |items: &[Item]| {
            items
                .iter()
                .map(|i| match i {
                    Item::Record(m) => Value::Object(m.clone()).to_string(),
                    Item::Bad(raw, _, code) => format!("{code:?} {raw}"),
                    Item::Unparsed(text) => format!("text {}", String::from_utf8_lossy(text)),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(show(&memory.0), show(&spooled.0));
        if !path.is_empty() {
            assert_eq!(
                lookup(&memory.1, &segments("next")),
                lookup(&spooled.1, &segments("next"))
            );
        }
        Ok(memory)
    }

    #[test]
    fn the_next_link_is_found_among_others() {
        let h = r#"<https://api.x/items?page=1>; rel="prev", <https://api.x/items?page=3>; rel="next", <https://api.x/items?page=9>; rel="last""#;
        assert_eq!(link_next(h).as_deref(), Some("https://api.x/items?page=3"));
        assert_eq!(link_next(r#"<https://a/b>; rel="prev""#), None);
        assert_eq!(
            link_next(r#"<https://a/c>; title="x"; rel="next nofollow""#).as_deref(),
            Some("https://a/c")
        );
        assert_eq!(link_next(""), None);
    }

    #[test]
    fn records_come_from_the_path_and_the_rest_stays_for_the_paginator() {
        let body = br#"{"data":{"items":[{"a":1},2,{"a":3}]},"next":"n"}"#;
        let (items, document) = both(body, HttpFormat::Json, &segments("data.items")).unwrap();
        assert_eq!(items.len(), 3);
        assert!(matches!(items[1], Item::Bad(..)));
        assert_eq!(
            lookup(&document, &segments("next")),
            Some(&Value::String("n".into()))
        );
        let (items, _) = both(
            br#"{"next":null}"#,
            HttpFormat::Json,
            &segments("data.items"),
        )
        .unwrap();
        assert!(items.is_empty());
        let (items, _) = both(br#"[{"a":1},{"a":2}]"#, HttpFormat::Json, &[]).unwrap();
        assert_eq!(items.len(), 2);
        let (items, _) = both(br#"{"a":1}"#, HttpFormat::Json, &[]).unwrap();
        assert_eq!(items.len(), 1);
        for unparsed in [false, true] {
            assert!(
                parse(
                    Arc::new(Body::Memory(b"{".to_vec())),
                    HttpFormat::Json,
                    &[],
                    unparsed
                )
                .is_err()
            );
        }
    }

    #[test]
    fn jsonl_and_csv_pages_give_one_record_per_line() {
        let (items, _) = both(b"{\"a\":1}\n\nnope\r\n{\"a\":2}", HttpFormat::Jsonl, &[]).unwrap();
        assert_eq!(items.len(), 3);
        assert!(matches!(items[1], Item::Bad(..)));
        let (items, _) = both(b"a,b\n1,x\n2,y\n", HttpFormat::Csv, &[]).unwrap();
        assert_eq!(items.len(), 2);
        let Item::Record(first) = &items[0] else {
            unreachable!()
        };
        assert_eq!(first["b"], Value::String("x".into()));
    }
}
