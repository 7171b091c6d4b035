//! The records of a spooled page (see [`super::spool`]), read one at a time.
//!
//! A first pass over the body finds the value at `records_path` (object keys from the root)
//! and counts its elements without keeping any; a second pass hands the elements out one by
//! one, each parsed on its own. The rest of the page (what the paginator reads: a next URL, a
//! cursor) is parsed from the bytes around the records, with `[]` in their place. Memory is one
//! element and the read buffers, whatever the page's size.

use std::io::{self, BufRead};
use std::sync::Arc;

use serde_json::Value;

use super::page::{Item, item};
use super::spool::{Body, BodyReader};
use crate::deadletter::FailureCode;

/// The most bytes one element (or the page around the records) may take in memory.
pub(super) const MAX_ELEMENT_BYTES: usize = 64 << 20;

/// A pull scanner over a body: just enough JSON to skip values and read keys.
pub(super) struct Scanner {
    r: BodyReader,
}

/// What went wrong scanning.
type ScanResult<T> = Result<T, String>;

fn io_error(e: io::Error) -> String {
    format!("reading the spooled page: {e}")
}

impl Scanner {
    pub(super) fn new(body: Arc<Body>, offset: u64) -> Scanner {
        Scanner {
            r: BodyReader::new(body, offset),
        }
    }

    fn offset(&self) -> u64 {
        self.r.offset()
    }

    /// The next byte that is not whitespace, not consumed; `None` at the end.
    fn skip_ws(&mut self) -> ScanResult<Option<u8>> {
        loop {
            let buf = self.r.fill_buf().map_err(io_error)?;
            if buf.is_empty() {
                return Ok(None);
            }
            match buf.iter().position(|b| !b.is_ascii_whitespace()) {
                Some(i) => {
                    let b = buf[i];
                    self.r.consume(i);
                    return Ok(Some(b));
                }
                None => {
                    let n = buf.len();
                    self.r.consume(n);
                }
            }
        }
    }

    fn bump(&mut self) {
        self.r.consume(1);
    }

    /// Expect `byte` (after whitespace) and consume it.
    fn expect(&mut self, byte: u8) -> ScanResult<()> {
        match self.skip_ws()? {
            Some(b) if b == byte => {
                self.bump();
                Ok(())
            }
            Some(b) => Err(format!(
                "the page is not JSON: expected `{}` at byte {}, found `{}`",
                byte as char,
                self.offset(),
                b as char
            )),
            None => Err(format!(
                "the page is not JSON: it ends where `{}` was expected",
                byte as char
            )),
        }
    }

    /// Consume one value, appending its bytes to `capture` up to `cap` bytes (past that the
    /// capture stops and `true` is returned: the value was too large to keep).
    fn skip_value(&mut self, mut capture: Option<&mut Vec<u8>>, cap: usize) -> ScanResult<bool> {
        let first = self
            .skip_ws()?
            .ok_or_else(|| "the page is not JSON: it ends where a value was expected".to_owned())?;
        if matches!(first, b',' | b':' | b']' | b'}') {
            // No value starts here: consuming nothing would leave the caller at this byte
            // for ever.
            return Err(format!(
                "the page is not JSON: `{}` where a value was expected at byte {}",
                first as char,
                self.offset()
            ));
        }
        let scalar = !matches!(first, b'{' | b'[' | b'"');
        let mut depth = 0usize;
        let mut in_string = false;
        let mut escaped = false;
        let mut over = false;
        loop {
            let buf = self.r.fill_buf().map_err(io_error)?;
            if buf.is_empty() {
                if scalar {
                    return Ok(over);
                }
                return Err("the page is not JSON: it ends inside a value".to_owned());
            }
            let mut i = 0;
            let mut done = false;
            while i < buf.len() {
                if in_string && !escaped {
                    // Most of a record's bytes are in strings: jump to the next quote or
                    // backslash instead of looking at every byte.
                    match memchr::memchr2(b'"', b'\\', &buf[i..]) {
                        Some(at) => i += at,
                        None => {
                            i = buf.len();
                            break;
                        }
                    }
                }
                let b = buf[i];
                if scalar {
                    if matches!(b, b',' | b']' | b'}') || b.is_ascii_whitespace() {
                        done = true;
                        break;
                    }
                } else if in_string {
                    if escaped {
                        escaped = false;
                    } else if b == b'\\' {
                        escaped = true;
                    } else if b == b'"' {
                        in_string = false;
                        if depth == 0 {
                            i += 1;
                            done = true;
                            break;
                        }
                    }
                } else {
                    match b {
                        b'"' => in_string = true,
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth = depth.checked_sub(1).ok_or_else(|| {
                                "the page is not JSON: a bracket closes nothing".to_owned()
                            })?;
                            if depth == 0 {
                                i += 1;
                                done = true;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                i += 1;
            }
            if let Some(c) = capture.as_deref_mut()
                && !over
            {
                if c.len() + i > cap {
                    over = true;
                    c.clear();
                } else {
                    c.extend_from_slice(&buf[..i]);
                }
            }
            self.r.consume(i);
            if done {
                return Ok(over);
            }
        }
    }

    /// Read an object key (the scanner at its opening quote), decoded; `None` when it is longer
    /// than any path segment could be (it is skipped).
    fn read_key(&mut self) -> ScanResult<Option<String>> {
        let mut raw = Vec::new();
        let over = self.skip_value(Some(&mut raw), 64 * 1024)?;
        if over {
            return Ok(None);
        }
        serde_json::from_slice::<String>(&raw)
            .map(Some)
            .map_err(|e| format!("the page is not JSON: a bad key: {e}"))
    }
}

/// Where the records of a page are.
pub(super) struct Located {
    /// The byte span of the value at the path; `None` when the path is not in the page.
    pub span: Option<(u64, u64)>,
    /// Whether that value is an array.
    pub is_array: bool,
    /// Its elements (1 for a value that is not an array).
    pub count: u64,
    /// Where each element of the array is (`[start, end)` byte offsets), for a body in memory
    /// of at most [`MAX_SPANS`] elements: handing them out is then a copy each, without
    /// scanning the array a second time. `None`: scan it again ([`Elements::new`]).
    pub elements: Option<Vec<(u64, u64)>>,
}

/// The most element spans [`locate`] keeps (16 bytes each).
pub(super) const MAX_SPANS: usize = 1 << 18;

/// Find the value at `path` in `body` and count its elements.
pub(super) fn locate(body: &Arc<Body>, path: &[String]) -> ScanResult<Located> {
    let absent = Located {
        span: None,
        is_array: false,
        count: 0,
        elements: None,
    };
    let mut s = Scanner::new(Arc::clone(body), 0);
    'segments: for segment in path {
        if s.skip_ws()? != Some(b'{') {
            return Ok(absent);
        }
        s.bump();
        loop {
            match s.skip_ws()? {
                Some(b'}') | None => return Ok(absent),
                Some(b',') => {
                    s.bump();
                    continue;
                }
                Some(b'"') => {}
                Some(other) => {
                    return Err(format!(
                        "the page is not JSON: `{}` where a key was expected at byte {}",
                        other as char,
                        s.offset()
                    ));
                }
            }
            let key = s.read_key()?;
            s.expect(b':')?;
            if key.as_deref() == Some(segment.as_str()) {
                continue 'segments;
            }
            s.skip_value(None, 0)?;
        }
    }
    let Some(first) = s.skip_ws()? else {
        return Err("the page is empty".to_owned());
    };
    let start = s.offset();
    if first != b'[' {
        s.skip_value(None, 0)?;
        let is_null = first == b'n';
        return Ok(Located {
            span: Some((start, s.offset())),
            is_array: false,
            count: u64::from(!is_null),
            elements: None,
        });
    }
    s.bump();
    let mut count = 0;
    let mut elements = matches!(**body, Body::Memory(_)).then(Vec::new);
    loop {
        match s.skip_ws()? {
            Some(b']') => {
                s.bump();
                break;
            }
            Some(b',') => s.bump(),
            None => return Err("the page is not JSON: it ends inside the records".to_owned()),
            Some(_) => {
                let at = s.offset();
                s.skip_value(None, 0)?;
                count += 1;
                if let Some(spans) = elements.as_mut() {
                    if spans.len() < MAX_SPANS {
                        spans.push((at, s.offset()));
                    } else {
                        elements = None;
                    }
                }
            }
        }
    }
    Ok(Located {
        span: Some((start, s.offset())),
        is_array: true,
        count,
        elements,
    })
}

/// The page around the records, `[]` in their place (or the whole page without them).
pub(super) fn document(body: &Body, span: Option<(u64, u64)>) -> ScanResult<Value> {
    let (start, end) = span.unwrap_or((body.len(), body.len()));
    let rest = body.len() - (end - start);
    if rest > MAX_ELEMENT_BYTES as u64 {
        return Err(format!(
            "the page holds {} MiB beside its records, more than the {} MiB read into memory",
            rest >> 20,
            MAX_ELEMENT_BYTES >> 20
        ));
    }
    let mut bytes = body.range(0, start).map_err(io_error)?;
    if span.is_some() {
        bytes.extend_from_slice(b"[]");
    }
    bytes.extend(body.range(end, body.len()).map_err(io_error)?);
    serde_json::from_slice(&bytes).map_err(|e| format!("the page is not JSON: {e}"))
}

/// The elements of the array at `start`, one [`Item`] each.
pub(super) struct Elements {
    from: ElementsFrom,
    started: bool,
    done: bool,
    /// Hand each element out as its text ([`Item::Unparsed`]) instead of parsing it.
    unparsed: bool,
}

/// Where [`Elements`] finds the elements.
enum ElementsFrom {
    /// Scanning the array.
    Scan(Scanner),
    /// At the spans [`locate`] kept.
    Spans(Arc<Body>, std::vec::IntoIter<(u64, u64)>),
}

impl Elements {
    pub(super) fn new(body: Arc<Body>, start: u64, unparsed: bool) -> Elements {
        Elements::with(ElementsFrom::Scan(Scanner::new(body, start)), unparsed)
    }

    /// The elements at `spans` (from [`locate`]) of `body`.
    pub(super) fn at(body: Arc<Body>, spans: Vec<(u64, u64)>, unparsed: bool) -> Elements {
        Elements::with(ElementsFrom::Spans(body, spans.into_iter()), unparsed)
    }

    fn with(from: ElementsFrom, unparsed: bool) -> Elements {
        Elements {
            from,
            started: false,
            done: false,
            unparsed,
        }
    }

    fn step(&mut self) -> ScanResult<Option<Item>> {
        let s = match &mut self.from {
            ElementsFrom::Scan(s) => s,
            ElementsFrom::Spans(body, spans) => {
                let Some((start, end)) = spans.next() else {
                    return Ok(None);
                };
                if end - start > MAX_ELEMENT_BYTES as u64 {
                    return Ok(Some(too_large()));
                }
                let raw = body.range(start, end).map_err(io_error)?;
                return Ok(Some(self.element(raw)));
            }
        };
        if !self.started {
            self.started = true;
            s.expect(b'[')?;
        }
        loop {
            match s.skip_ws()? {
                Some(b']') | None => return Ok(None),
                Some(b',') => s.bump(),
                Some(_) => break,
            }
        }
        let mut raw = Vec::new();
        if s.skip_value(Some(&mut raw), MAX_ELEMENT_BYTES)? {
            return Ok(Some(too_large()));
        }
        Ok(Some(self.element(raw)))
    }

    /// The item an element's text makes.
    fn element(&self, raw: Vec<u8>) -> Item {
        if self.unparsed {
            return Item::Unparsed(raw);
        }
        match serde_json::from_slice::<Value>(&raw) {
            Ok(value) => item(value),
            Err(e) => Item::Bad(
                String::from_utf8_lossy(&raw).into_owned(),
                format!("malformed JSON: {e}"),
                FailureCode::Malformed,
            ),
        }
    }
}

/// The item for an element larger than [`MAX_ELEMENT_BYTES`].
fn too_large() -> Item {
    Item::Bad(
        String::new(),
        format!(
            "the record is larger than the {} MiB a record may take",
            MAX_ELEMENT_BYTES >> 20
        ),
        FailureCode::TooLarge,
    )
}

impl Iterator for Elements {
    type Item = Item;

    fn next(&mut self) -> Option<Item> {
        if self.done {
            return None;
        }
        match self.step() {
            Ok(Some(item)) => Some(item),
            Ok(None) => {
                self.done = true;
                None
            }
            // The first pass read the same bytes, so this is the disk failing: say so once.
            Err(message) => {
                self.done = true;
                Some(Item::Bad(String::new(), message, FailureCode::Malformed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::http::spool::Spool;

    fn spooled(text: &str) -> Arc<Body> {
        let mut spool = Spool::new(0);
        for chunk in text.as_bytes().chunks(3) {
            spool.write(chunk).unwrap();
        }
        Arc::new(spool.finish().unwrap())
    }

    fn path(p: &str) -> Vec<String> {
        p.split('.').map(str::to_owned).collect()
    }

    fn records(items: Elements) -> Vec<String> {
        items
            .map(|i| match i {
                Item::Record(map) => Value::Object(map).to_string(),
                Item::Bad(raw, error, _) => format!("bad {raw}: {error}"),
                Item::Unparsed(text) => format!("text {}", String::from_utf8_lossy(&text)),
            })
            .collect()
    }

    /// The items of the array at `path` in `body`, read as `parse` does: from the spans
    /// `locate` kept (a body in memory), else scanned again.
    fn items_at(body: &Arc<Body>, path: &[String], unparsed: bool) -> (bool, Vec<String>) {
        let at = locate(body, path).unwrap();
        let (start, _) = at.span.unwrap();
        match at.elements {
            Some(spans) => {
                assert_eq!(spans.len() as u64, at.count);
                (
                    true,
                    records(Elements::at(Arc::clone(body), spans, unparsed)),
                )
            }
            None => (
                false,
                records(Elements::new(Arc::clone(body), start, unparsed)),
            ),
        }
    }

    /// A page in memory is read from the spans its first pass kept, a spooled one scanned
    /// twice: the same records either way, whatever the strings hold (escaped quotes and
    /// backslashes, brackets, an escape split across the reader's 64 KiB buffers).
    #[test]
    fn a_page_in_memory_and_spooled_gives_the_same_records() {
        let tricky = [
            r#"{"a":"x\\"}"#,
            r#"{"b":"\\\"]}","c":"[{"}"#,
            r#"{"d":"\u005d\"\\n","e":[{"f":"}"}]}"#,
            r#"{ "g" : "plain" }"#,
            r#"17"#,
            r#""just text \" ]""#,
        ];
        let mut elements = Vec::new();
        for i in 0..12_000 {
            elements.push(tricky[i % tricky.len()].to_owned());
            // Shift later elements by a few bytes so escapes land on every buffer offset.
            if i % 7 == 0 {
                elements.push(format!(r#"{{"pad":"{}\\"}}"#, "y".repeat(i % 13)));
            }
        }
        let text = format!(
            r#"{{"data":{{"items":[{}]}},"links":{{"next":null}}}}"#,
            elements.join(" ,\n")
        );
        assert!(text.len() > 3 * 64 * 1024);
        for unparsed in [true, false] {
            let memory = Arc::new(Body::Memory(text.clone().into_bytes()));
            let (from_spans, in_memory) = items_at(&memory, &path("data.items"), unparsed);
            let (scanned, on_disk) = items_at(&spooled(&text), &path("data.items"), unparsed);
            assert!(from_spans && !scanned);
            assert_eq!(in_memory.len(), elements.len());
            assert_eq!(in_memory, on_disk);
            if unparsed {
                let expected: Vec<String> = elements.iter().map(|e| format!("text {e}")).collect();
                assert_eq!(in_memory, expected);
            }
        }
    }

    /// Regression: a stray `}` or `:` among a spooled page's records (a page never checked
    /// whole, it is too large) made the scanner count the same byte as a record for ever.
    #[test]
    fn a_stray_closing_brace_among_the_records_fails_the_page_instead_of_hanging() {
        for broken in [r#"{"data":[1, }]}"#, r#"{"data":[{"a":1} : 2]}"#] {
            let body = spooled(broken);
            let error = locate(&body, &path("data")).err();
            assert!(
                error
                    .as_deref()
                    .is_some_and(|e| e.contains("where a value was expected")),
                "{broken}: {error:?}"
            );
            let items = records(Elements::new(body, 8, true));
            assert!(
                items
                    .last()
                    .is_some_and(|i| i.contains("where a value was expected"))
            );
        }
    }

    #[test]
    fn records_at_a_path_are_found_counted_and_read_one_by_one() {
        let text = r#" { "meta" : {"items": "decoy", "x": [1, {"a": "]}"}]},
            "data": {"ite\u006ds": [ {"a": 1}, {"b": "x\"]"}, 3 , {"c": [1,[2]]} ] ,"z":{}},
            "links": {"next": "/p?2"} } "#;
        let body = spooled(text);
        let at = locate(&body, &path("data.items")).unwrap();
        assert!(at.is_array);
        assert_eq!(at.count, 4);
        let (start, _) = at.span.unwrap();
        assert_eq!(
            records(Elements::new(Arc::clone(&body), start, false)),
            vec![
                r#"{"a":1}"#.to_owned(),
                r#"{"b":"x\"]"}"#.to_owned(),
                "bad 3: the record is not a JSON object".to_owned(),
                r#"{"c":[1,[2]]}"#.to_owned(),
            ]
        );
        let doc = document(&body, at.span).unwrap();
        assert_eq!(doc["links"]["next"], "/p?2");
        assert_eq!(doc["data"]["items"], serde_json::json!([]));
        assert_eq!(doc["meta"]["items"], "decoy");
    }

    #[test]
    fn a_root_array_an_absent_path_and_broken_pages() {
        let body = spooled(r#"[{"a":1},{"a":2}]"#);
        let at = locate(&body, &[]).unwrap();
        assert_eq!((at.is_array, at.count), (true, 2));
        assert_eq!(records(Elements::new(Arc::clone(&body), 0, false)).len(), 2);

        let body = spooled(r#"{"next": null, "other": [1,2]}"#);
        let at = locate(&body, &path("data.items")).unwrap();
        assert!(at.span.is_none());
        assert_eq!(at.count, 0);
        assert!(document(&body, None).unwrap()["next"].is_null());

        let body = spooled(r#"{"data": {"a": 1}}"#);
        let at = locate(&body, &path("data")).unwrap();
        assert_eq!((at.is_array, at.count), (false, 1));

        for broken in [
            r#"{"data": [1, 2"#,
            r#"{"data" 1}"#,
            r#"{"data": [{"a": "x}]"#,
        ] {
            assert!(locate(&spooled(broken), &path("data")).is_err(), "{broken}");
        }
    }
}
