//! Reading one page: its records (at `records_path`, or per line, or CSV rows) and where the
//! next page is (a URL in the page, a cursor, or the `Link` header's `rel="next"`).

use serde_json::{Map, Value};

use crate::config::connectors::HttpFormat;

/// One element of a page: a record, or what could not be one.
pub(super) enum Item {
    /// A JSON object.
    Record(Map<String, Value>),
    /// Not a record: its text, why, and the failure code.
    Bad(String, String, crate::deadletter::FailureCode),
}

/// A page's items and the JSON document they came from (for the paginator's paths).
pub(super) struct Page {
    /// The items, in page order.
    pub items: Vec<Item>,
    /// The page's JSON document with the records taken out (`Null` for `jsonl` and `csv`).
    pub document: Value,
}

/// Parse `body` in `format`, taking the records from `records_path` (dot segments).
pub(super) fn parse(
    body: &[u8],
    format: HttpFormat,
    records_path: &[String],
) -> Result<Page, String> {
    match format {
        HttpFormat::Json => parse_json(body, records_path),
        HttpFormat::Jsonl => Ok(Page {
            items: parse_lines(body),
            document: Value::Null,
        }),
        HttpFormat::Csv => Ok(Page {
            items: parse_csv(body)?,
            document: Value::Null,
        }),
    }
}

fn parse_json(body: &[u8], records_path: &[String]) -> Result<Page, String> {
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
                    return Ok(Page {
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
    Ok(Page { items, document })
}

fn item(value: Value) -> Item {
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
        .map(|line| match serde_json::from_slice::<Value>(line) {
            Ok(value) => item(value),
            Err(e) => Item::Bad(
                String::from_utf8_lossy(line).into_owned(),
                format!("malformed JSON: {e}"),
                crate::deadletter::FailureCode::Malformed,
            ),
        })
        .collect()
}

fn parse_csv(body: &[u8]) -> Result<Vec<Item>, String> {
    let mut reader = csv::ReaderBuilder::new().flexible(true).from_reader(body);
    let headers = reader
        .headers()
        .map_err(|e| format!("cannot read the CSV header: {e}"))?
        .clone();
    let mut items = Vec::new();
    for row in reader.records() {
        match row {
            Ok(row) => {
                let map = headers
                    .iter()
                    .zip(row.iter())
                    .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                    .collect();
                items.push(Item::Record(map));
            }
            Err(e) => items.push(Item::Bad(
                String::new(),
                format!("malformed CSV row: {e}"),
                crate::deadletter::FailureCode::Malformed,
            )),
        }
    }
    Ok(items)
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
        let page = parse(body, HttpFormat::Json, &segments("data.items")).unwrap();
        assert_eq!(page.items.len(), 3);
        assert!(matches!(page.items[1], Item::Bad(..)));
        assert_eq!(
            lookup(&page.document, &segments("next")),
            Some(&Value::String("n".into()))
        );
        let page = parse(
            br#"{"next":null}"#,
            HttpFormat::Json,
            &segments("data.items"),
        )
        .unwrap();
        assert!(page.items.is_empty());
        let page = parse(br#"[{"a":1},{"a":2}]"#, HttpFormat::Json, &[]).unwrap();
        assert_eq!(page.items.len(), 2);
        let page = parse(br#"{"a":1}"#, HttpFormat::Json, &[]).unwrap();
        assert_eq!(page.items.len(), 1);
        assert!(parse(b"{", HttpFormat::Json, &[]).is_err());
    }

    #[test]
    fn jsonl_and_csv_pages_give_one_record_per_line() {
        let page = parse(b"{\"a\":1}\n\nnope\r\n{\"a\":2}", HttpFormat::Jsonl, &[]).unwrap();
        assert_eq!(page.items.len(), 3);
        assert!(matches!(page.items[1], Item::Bad(..)));
        let page = parse(b"a,b\n1,x\n2,y\n", HttpFormat::Csv, &[]).unwrap();
        assert_eq!(page.items.len(), 2);
        let Item::Record(first) = &page.items[0] else {
            unreachable!()
        };
        assert_eq!(first["b"], Value::String("x".into()));
    }
}
