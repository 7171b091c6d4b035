//! The HTTP source: records from a JSON (or JSON lines, or CSV) REST API, page by page.
//!
//! # Requests
//!
//! Each request carries the configured method, headers, body and authentication (`basic` or
//! `bearer`; the header values are marked sensitive and never logged) and `Accept-Encoding:
//! gzip`; a gzip body is decompressed. A request that fails to connect, times out
//! (`scrape_timeout_seconds`, from connecting to the end of the body) or is answered 429 or
//! 5xx is tried again, at most [`HttpSourceOptions::max_attempts`] times in all, after the
//! server's `Retry-After` (seconds) or else an exponential backoff with jitter
//! ([`HttpSourceOptions::backoff`] doubled per attempt, at most 30 s). Any other answer that
//! is not 2xx fails the pass with [`SourceError::Http`] naming the URL (credentials shown as
//! `***`), the status and the first 200 bytes of the body. `max_requests_per_second` spaces
//! requests (retries included).
//!
//! # Pages
//!
//! A page's body is read up to [`HttpSourceOptions::max_page_bytes`] (decompressed; a larger
//! page fails the pass, naming the limit): held in memory up to
//! [`HttpSourceOptions::spool_bytes`], else spooled to a temporary file and its records
//! streamed from there one at a time (modules `spool` and `stream`). Its records are the array (or the one
//! object) at `records_path`, or the page itself; elements that are not objects become
//! deadletters. The paginator then names the next page: a URL at a dot path (`next_url`), the
//! `Link` header's `rel="next"` (`link_header`), a cursor sent as a query parameter
//! (`cursor`), or a record offset or page number (`offset`, `page_number`: a page with fewer
//! than `page_size` records is the last). An empty page, a missing or empty next URL or
//! cursor, or a next URL equal to the page's own ends the pass.
//!
//! For the sync pass ([`HttpSourceOptions::unparsed`]) a JSON page's records array is not
//! built into values: the page is checked to be JSON, then scanned for each element's bounds
//! (as a spooled page is) and each element handed out as its text, which the pass types from
//! the text as it does JSON lines (see [`crate::pipeline`]'s typing); an element that is not a
//! JSON object becomes a deadletter there. Not with `incremental`, whose cursor is read from
//! each parsed record.
//!
//! Pages are walked (fetched, parsed, the next one named) on a thread of their own, the
//! pager (module `pager`), ahead of the records being handed out, so the API's latency and
//! the page's parsing overlap with the pass's typing and writing. The pager has the client:
//! requests stay one at a time, paced and retried as above. What it holds ahead is bounded
//! (8 MiB of page bodies, in memory or spooled, a parsed page counted 4 times its body, and 8
//! pages; plus the one page that crosses the bound). A sample
//! ([`HttpSourceOptions::sample_records`]) walks pages only as it needs them. A pass that stops
//! early (a stop request, a deadline) may have asked for pages it did not read; they are read
//! again, from the checkpoint, next time.
//!
//! The paging parameter (`cursor`, `offset`, `page_number`) is set on the URL of the page
//! before, so every other query parameter, the `incremental` one among them, stays as the pass
//! started it: a pass asks every page for the records after the same committed cursor.
//!
//! # Checkpoint
//!
//! [`Source::checkpoint`] returns an [`HttpCheckpoint`] as JSON: the page being read (its URL
//! with credential query parameters and `user:password@` removed, put back from the
//! configured URL on resume) and how many of its records were handed out, or nothing once
//! the last page was read to its end; and the greatest `incremental` cursor value handed
//! out. Reopening at it fetches that page again and skips what was taken, so a crash resumes
//! right after the last committed batch (the API must serve a page the same way twice). A
//! pass that starts after a finished one starts at the configured URL, with the incremental
//! parameter set to the committed cursor: without `incremental`, every pass reads the whole
//! API again.
//!
//! [`Source::checkpoint`]: crate::sources::Source::checkpoint

mod fetch;
mod page;
mod pager;
mod spool;
mod stream;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use self::fetch::Client;
use self::page::Item;
use self::pager::{Ahead, Pager, Walked};
use super::{Position, Progress, Source, SourceBatch, SourceError, SourceRecord, UnparsedJson};
use crate::config::connectors::{
    HttpClientSourceConfig, HttpFormat, HttpIncremental, HttpMethod, HttpPaginator, ResolvedAuth,
};
use crate::config::credentials::{HttpHeaders, HttpUrl, is_credential_name, redact_url};
use crate::deadletter::Deadletter;

/// The version of [`HttpCheckpoint`] this build writes and reads.
pub const HTTP_CHECKPOINT_VERSION: u32 = 1;

/// What the HTTP source reads and how.
#[derive(Debug, Clone)]
pub struct HttpSourceOptions {
    /// The first page's URL.
    pub url: HttpUrl,
    /// The method.
    pub method: HttpMethod,
    /// Extra headers.
    pub headers: HttpHeaders,
    /// The request body.
    pub body: Option<String>,
    /// Authentication.
    pub auth: ResolvedAuth,
    /// Time one request may take.
    pub timeout: Duration,
    /// The page format.
    pub format: HttpFormat,
    /// Dot path to a JSON page's records.
    pub records_path: Option<String>,
    /// How the next page is found; `None`: one page.
    pub paginator: Option<HttpPaginator>,
    /// Incremental reading.
    pub incremental: Option<HttpIncremental>,
    /// Most requests per second.
    pub max_requests_per_second: Option<f64>,
    /// A batch closes at this many records and deadletters (at least 1).
    pub batch_rows: usize,
    /// ... or once this many response bytes were read, whichever comes first.
    pub batch_bytes: u64,
    /// ... or once the batch has been filling this long.
    pub batch_time: Duration,
    /// Hand out the elements of a JSON page's records array as their text
    /// ([`SourceRecord::unparsed`]), for a caller that types records from their text (the
    /// sync pass); ignored with `incremental`, whose cursor is read from each parsed record.
    pub unparsed: bool,
    /// Attempts per request, the first included.
    pub max_attempts: u32,
    /// The first retry's backoff (doubled per attempt).
    pub backoff: Duration,
    /// The largest page body (decompressed) read.
    pub max_page_bytes: u64,
    /// A page body larger than this is spooled to a temporary file and its records read one
    /// at a time (memory stays bounded whatever the page's size).
    pub spool_bytes: usize,
    /// Hand out at most this many records and deadletters, then end (as if the last page
    /// ended there): how `discover` samples an API's first pages. `None`: every page.
    pub sample_records: Option<u64>,
}

/// How many records `discover` reads from an HttpClient source unless `--limit` says
/// otherwise: the first pages, enough to see every field a page usually has, without walking
/// an API that may hold millions of records (and charge for each request).
pub const DISCOVER_SAMPLE_RECORDS: u64 = 10_000;

impl HttpSourceOptions {
    /// Default attempts per request.
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;
    /// Default largest page: 16 GiB (of temporary disk: a page larger than
    /// [`Self::DEFAULT_SPOOL_BYTES`] is spooled there, not held in memory).
    pub const DEFAULT_MAX_PAGE_BYTES: u64 = 16 << 30;
    /// Default spool threshold: 8 MiB.
    pub const DEFAULT_SPOOL_BYTES: usize = 8 << 20;

    /// Options from a validated connector config.
    pub fn from_config(
        c: &HttpClientSourceConfig,
        batch_rows: usize,
        batch_bytes: u64,
        batch_time: Duration,
    ) -> Result<HttpSourceOptions, SourceError> {
        let auth = c
            .resolved_auth()
            .map_err(|(key, message)| SourceError::Http {
                url: c.url.redacted(),
                status: None,
                message: format!("`{key}` {message}"),
                retryable: false,
            })?;
        Ok(HttpSourceOptions {
            url: c.url.clone(),
            method: c.method.unwrap_or(HttpMethod::Get),
            headers: c.headers.clone(),
            body: c.body.clone(),
            auth,
            timeout: Duration::from_secs(
                c.scrape_timeout_seconds
                    .unwrap_or(HttpClientSourceConfig::DEFAULT_TIMEOUT_SECONDS),
            ),
            format: c.format.unwrap_or(HttpFormat::Json),
            records_path: c.records_path.clone(),
            paginator: c.paginator(),
            incremental: c.incremental.clone(),
            max_requests_per_second: c.max_requests_per_second,
            batch_rows: c.batch_size.unwrap_or(batch_rows).max(1),
            batch_bytes: c.batch_size_bytes.unwrap_or(batch_bytes).max(1),
            batch_time: c.batch_size_seconds.map_or(batch_time, Duration::from_secs),
            unparsed: false,
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
            backoff: Duration::from_millis(500),
            max_page_bytes: Self::DEFAULT_MAX_PAGE_BYTES,
            spool_bytes: Self::DEFAULT_SPOOL_BYTES,
            sample_records: None,
        })
    }
}

/// The HTTP source's checkpoint (see the [module docs](self#checkpoint)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HttpCheckpoint {
    /// [`HTTP_CHECKPOINT_VERSION`].
    pub version: u32,
    /// The configured URL, redacted: a checkpoint of another URL is not resumed.
    pub source: String,
    /// The page being read; `None` once a pass read its last page to the end.
    pub page: Option<PageAt>,
    /// The greatest incremental cursor value handed out.
    pub cursor: Option<Value>,
}

/// A page part-read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PageAt {
    /// Its URL, without credentials.
    pub url: String,
    /// Records (and deadletters) handed out from it.
    pub taken: u64,
    /// Pages read to their end before it in this pass.
    pub pages: u64,
    /// Records in those pages.
    pub offset: u64,
}

/// A page fetched and being handed out.
struct Loaded {
    /// `url` redacted, as records' positions name it (one string shared by the page's records).
    shown: Arc<str>,
    url: reqwest::Url,
    items: std::iter::Peekable<page::Items>,
    taken: u64,
    next: Option<reqwest::Url>,
}

/// Reads records from a REST API; see the [module documentation](self).
pub struct HttpSource {
    options: Arc<HttpSourceOptions>,
    /// Walks the pages here, until the pass starts it on its own thread (never for a
    /// sample); `None` once it runs there.
    pager: Option<Pager>,
    /// The pager on its own thread, pages ahead of this reader.
    ahead: Option<Ahead>,
    /// The client's requests and retries (readable while the pager has it).
    counts: Arc<fetch::Counts>,
    configured: reqwest::Url,
    cursor_path: Vec<String>,
    /// The page to fetch next (when `current` is done); `None` at the end.
    pending: Option<reqwest::Url>,
    /// Records to skip from the pending page (a resumed part-read page).
    skip: u64,
    current: Option<Loaded>,
    pages: u64,
    offset: u64,
    cursor: Option<Value>,
    bytes_done: u64,
    reported: bool,
    /// Records and deadletters handed out by this source (bounded by `sample_records`).
    handed_out: u64,
    /// Checked between pages: a stop request ends the batch being filled.
    stop: crate::sources::StopRequest,
    /// Whether the first page read was checked for `records_path`.
    checked_path: bool,
}

impl std::fmt::Debug for HttpSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSource")
            .field("url", &self.options.url)
            .field("pages", &self.pages)
            .finish_non_exhaustive()
    }
}

impl HttpSource {
    /// Open the source at `checkpoint` (bytes from [`Source::checkpoint`]) or at its start.
    /// Nothing is fetched yet.
    pub fn open_at(
        options: HttpSourceOptions,
        checkpoint: Option<&[u8]>,
    ) -> Result<HttpSource, SourceError> {
        let shown = options.url.redacted();
        let bad = |message: String| SourceError::BadCheckpoint {
            path: shown.clone(),
            message,
        };
        let configured =
            reqwest::Url::parse(options.url.expose()).map_err(|e| SourceError::Http {
                url: shown.clone(),
                status: None,
                message: format!("not a valid URL: {e}"),
                retryable: false,
            })?;
        let old = match checkpoint {
            None => None,
            Some(bytes) => {
                let c: HttpCheckpoint = serde_json::from_slice(bytes)
                    .map_err(|e| bad(format!("not an HTTP source checkpoint: {e}")))?;
                if c.version != HTTP_CHECKPOINT_VERSION {
                    return Err(bad(format!(
                        "written by checkpoint version {}, this build reads {HTTP_CHECKPOINT_VERSION}",
                        c.version
                    )));
                }
                if c.source != shown {
                    tracing::warn!(
                        was = %c.source,
                        now = %shown,
                        "the HttpClient source now reads `{shown}` instead of `{}`: reading it from the start",
                        c.source
                    );
                    None
                } else {
                    Some(c)
                }
            }
        };
        let client = Client::new(&options)?;
        let counts = Arc::clone(&client.counts);
        let mut source = HttpSource {
            counts,
            pager: None,
            ahead: None,
            cursor_path: options
                .incremental
                .as_ref()
                .map(|i| page::segments(&i.cursor_path))
                .unwrap_or_default(),
            configured,
            pending: None,
            skip: 0,
            current: None,
            pages: 0,
            offset: 0,
            cursor: old.as_ref().and_then(|c| c.cursor.clone()),
            bytes_done: 0,
            reported: false,
            handed_out: 0,
            stop: crate::sources::StopRequest::default(),
            checked_path: false,
            options: Arc::new(options),
        };
        match old.and_then(|c| c.page) {
            Some(at) => {
                let url = reqwest::Url::parse(&at.url)
                    .map_err(|e| bad(format!("the page URL is not valid: {e}")))?;
                source.pending = Some(with_credentials(url, &source.configured));
                source.skip = at.taken;
                source.pages = at.pages;
                source.offset = at.offset;
            }
            None => source.pending = Some(source.first_url()),
        }
        source.pager = Some(Pager::new(
            Arc::clone(&source.options),
            client,
            source.pages,
            source.offset,
        ));
        Ok(source)
    }

    /// Requests retried so far.
    pub fn retries(&self) -> u64 {
        self.counts.retries()
    }

    /// Requests sent so far, retries included.
    pub fn requests(&self) -> u64 {
        self.counts.requests()
    }

    /// The configured URL with the incremental parameter, for the pass's first request.
    fn base_url(&self) -> reqwest::Url {
        let mut url = self.configured.clone();
        if let Some(inc) = &self.options.incremental {
            let value = self
                .cursor
                .as_ref()
                .and_then(page::as_text)
                .or_else(|| inc.initial_value.clone());
            if let Some(value) = value {
                set_param(&mut url, &inc.param, &value);
            }
        }
        url
    }

    fn first_url(&self) -> reqwest::Url {
        let mut url = self.base_url();
        match &self.options.paginator {
            Some(HttpPaginator::Offset {
                param,
                limit_param,
                page_size,
            }) => {
                set_param(&mut url, param, "0");
                if let Some(limit) = limit_param {
                    set_param(&mut url, limit, &page_size.to_string());
                }
            }
            Some(HttpPaginator::PageNumber {
                param,
                size_param,
                page_size,
                start,
            }) => {
                set_param(&mut url, param, &start.unwrap_or(1).to_string());
                if let Some(size) = size_param {
                    set_param(&mut url, size, &page_size.to_string());
                }
            }
            _ => {}
        }
        url
    }

    /// Fetch the pending page; false at the end.
    fn load(&mut self) -> Result<bool, SourceError> {
        let Some(url) = self.pending.take() else {
            return Ok(false);
        };
        let walked = self.walk(url)?;
        self.bytes_done += walked.wire_bytes;
        let count = walked.page.count;
        if count == 0 && !self.checked_path {
            self.warn_if_no_records_path(&walked);
        }
        self.checked_path = true;
        let mut items = walked.page.items.peekable();
        let skip = std::mem::take(&mut self.skip).min(count);
        for _ in 0..skip {
            items.next();
        }
        self.current = Some(Loaded {
            shown: walked.shown.into(),
            url: walked.url,
            items,
            taken: skip,
            next: walked.next,
        });
        Ok(true)
    }

    /// Warn when the first page read has nothing at `records_path`: a path naming no key of
    /// the page reads no record from any page, which looks like an empty API otherwise.
    fn warn_if_no_records_path(&self, walked: &Walked) {
        let Some(path) = &self.options.records_path else {
            return;
        };
        let mut at = &walked.page.document;
        for segment in page::segments(path) {
            match at.get(segment.as_str()) {
                Some(next) => at = next,
                None => {
                    let keys: Vec<String> = match at {
                        Value::Object(map) => {
                            map.keys().take(10).map(|k| format!("{k:?}")).collect()
                        }
                        _ => Vec::new(),
                    };
                    tracing::warn!(
                        url = %walked.shown,
                        records_path = %path,
                        missing = %segment,
                        keys = %keys.join(", "),
                        "The first page has nothing at records_path, so no record is read from it: check records_path against the page's keys."
                    );
                    return;
                }
            }
        }
    }

    /// The page at `url`, from the pager's thread (started at the pass's first page), or
    /// walked here when sampling or when no thread could be started.
    fn walk(&mut self, url: reqwest::Url) -> Result<Walked, SourceError> {
        if self.ahead.is_none()
            && self.options.sample_records.is_none()
            && let Some(pager) = self.pager.take()
        {
            match Ahead::start(pager, url.clone()) {
                Ok(ahead) => self.ahead = Some(ahead),
                Err(back) => self.pager = back.map(|p| *p),
            }
        }
        let stopped = |message: &str| SourceError::Http {
            url: redact_url(url.as_str()),
            status: None,
            message: message.into(),
            retryable: true,
        };
        if let Some(ahead) = &self.ahead {
            let walked = ahead
                .next()
                .unwrap_or_else(|| Err(stopped("the thread fetching pages stopped")))?;
            if walked.url != url {
                return Err(stopped("the pages fetched ahead are not the ones expected"));
            }
            return Ok(walked);
        }
        match &mut self.pager {
            Some(pager) => pager.walk(url),
            // Only if a pager thread could not start and its pager was lost with it.
            None => Err(stopped("no pager is left to fetch pages")),
        }
    }

    /// Keep the greatest incremental cursor value.
    fn track_cursor(&mut self, record: &serde_json::Map<String, Value>) {
        if self.cursor_path.is_empty() {
            return;
        }
        let Some((first, rest)) = self.cursor_path.split_first() else {
            return;
        };
        let Some(value) = record.get(first.as_str()) else {
            return;
        };
        let Some(value) = page::lookup(value, rest) else {
            return;
        };
        if value.is_null() {
            return;
        }
        let greater = match &self.cursor {
            None => true,
            Some(old) => later(value, old),
        };
        if greater {
            self.cursor = Some(value.clone());
        }
    }
}

/// Whether cursor value `a` comes after `b`: as numbers when both are, else as text.
fn later(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) if a.is_number() && b.is_number() => x > y,
        _ => page::as_text(a).unwrap_or_default() > page::as_text(b).unwrap_or_default(),
    }
}

/// Set query parameter `name` to `value`, replacing any earlier value.
fn set_param(url: &mut reqwest::Url, name: &str, value: &str) {
    let kept: Vec<(String, String)> = url
        .query_pairs()
        .filter(|(k, _)| k != name)
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let mut pairs = url.query_pairs_mut();
    pairs.clear();
    for (k, v) in &kept {
        pairs.append_pair(k, v);
    }
    pairs.append_pair(name, value);
}

/// `url` without credential query parameters and `user:password@`, for the checkpoint.
fn without_credentials(url: &reqwest::Url) -> reqwest::Url {
    let mut out = url.clone();
    let _ = out.set_username("");
    let _ = out.set_password(None);
    if out.query().is_some() {
        let kept: Vec<(String, String)> = url
            .query_pairs()
            .filter(|(k, _)| !is_credential_name(k))
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
        if kept.is_empty() {
            out.set_query(None);
        } else {
            out.query_pairs_mut().clear().extend_pairs(kept);
        }
    }
    out
}

/// `url` with the configured URL's credentials put back (same host only).
fn with_credentials(mut url: reqwest::Url, configured: &reqwest::Url) -> reqwest::Url {
    if url.host_str() != configured.host_str() {
        return url;
    }
    if !configured.username().is_empty() {
        let _ = url.set_username(configured.username());
        let _ = url.set_password(configured.password());
    }
    for (k, v) in configured.query_pairs() {
        if is_credential_name(&k) && !url.query_pairs().any(|(have, _)| have == k) {
            url.query_pairs_mut().append_pair(&k, &v);
        }
    }
    url
}

impl Source for HttpSource {
    fn next_batch(&mut self) -> Result<Option<SourceBatch>, SourceError> {
        let mut batch = SourceBatch::default();
        let start_bytes = self.bytes_done;
        let started = std::time::Instant::now();
        let mut count = 0usize;
        let mut stopped = false;
        loop {
            if count >= self.options.batch_rows
                || self
                    .options
                    .sample_records
                    .is_some_and(|n| self.handed_out >= n)
                || (count > 0 && self.bytes_done - start_bytes >= self.options.batch_bytes)
                || (count > 0 && started.elapsed() >= self.options.batch_time)
            {
                break;
            }
            let exhausted = self
                .current
                .as_mut()
                .is_none_or(|c| c.items.peek().is_none());
            if exhausted {
                if let Some(done) = self.current.take() {
                    self.pages += 1;
                    self.offset += done.taken;
                    self.pending = done.next;
                }
                // Between pages: a stop request ends the batch here (the next pass reads on
                // from the checkpoint after it).
                if self.stop.is_requested() {
                    stopped = true;
                    break;
                }
                if !self.load()? {
                    break;
                }
                continue;
            }
            let Some(current) = self.current.as_mut() else {
                break;
            };
            let Some(item) = current.items.next() else {
                continue;
            };
            current.taken += 1;
            let position = Position {
                uri: Arc::clone(&current.shown),
                offset: current.taken,
                record: current.taken,
            };
            match item {
                Item::Record(value) => {
                    self.track_cursor(&value);
                    batch.records.push(SourceRecord {
                        value,
                        position,
                        unparsed: None,
                        cells: None,
                        namespace: None,
                    });
                }
                Item::Unparsed(text) => batch.records.push(SourceRecord {
                    value: serde_json::Map::new(),
                    unparsed: Some(UnparsedJson {
                        text: text.into(),
                        start: position.offset,
                        deadletters_before: batch.deadletters.len(),
                    }),
                    position,
                    cells: None,
                    namespace: None,
                }),
                Item::Bad(raw, error, code) => batch.deadletters.push(Deadletter {
                    source_uri: position.uri.to_string(),
                    line: position.record,
                    offset: position.offset,
                    raw: Deadletter::clip_raw(&raw),
                    error,
                    code,
                    namespace: None,
                }),
            }
            count += 1;
            self.handed_out += 1;
        }
        // A page handed out to its end is closed now, so the checkpoint names the next one.
        if self
            .current
            .as_mut()
            .is_some_and(|c| c.items.peek().is_none())
            && let Some(done) = self.current.take()
        {
            self.pages += 1;
            self.offset += done.taken;
            self.pending = done.next;
        }
        batch.bytes_read = self.bytes_done - start_bytes;
        if count == 0 && stopped {
            tracing::info!(url = %self.options.url, pages = self.pages, "The HttpClient source stops reading on request.");
            return Ok(None);
        }
        if count == 0 {
            if !self.reported {
                self.reported = true;
                tracing::info!(
                    url = %self.options.url,
                    pages = self.pages,
                    requests = self.counts.requests(),
                    retries = self.counts.retries(),
                    "The HttpClient source read its last page."
                );
            }
            return Ok(None);
        }
        Ok(Some(batch))
    }

    fn progress(&self) -> Progress {
        Progress {
            bytes_done: self.bytes_done,
            bytes_total: None,
            files_done: self.pages,
            files_total: None,
            requests: self.counts.requests(),
            retries: self.counts.retries(),
        }
    }

    fn checkpoint(&self) -> Result<Vec<u8>, SourceError> {
        let page = match (&self.current, &self.pending) {
            (Some(current), _) => Some(PageAt {
                url: without_credentials(&current.url).to_string(),
                taken: current.taken,
                pages: self.pages,
                offset: self.offset,
            }),
            (None, Some(pending)) => Some(PageAt {
                url: without_credentials(pending).to_string(),
                taken: self.skip,
                pages: self.pages,
                offset: self.offset,
            }),
            (None, None) => None,
        };
        let checkpoint = HttpCheckpoint {
            version: HTTP_CHECKPOINT_VERSION,
            source: self.options.url.redacted(),
            page,
            cursor: self.cursor.clone(),
        };
        serde_json::to_vec(&checkpoint).map_err(|e| SourceError::BadCheckpoint {
            path: self.options.url.redacted(),
            message: e.to_string(),
        })
    }

    fn stop_on(&mut self, stop: crate::sources::StopRequest) {
        self.stop = stop;
    }
}
