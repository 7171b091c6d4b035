//! Walking an API's pages: fetch a page, parse it, find the next one; on a thread of its own,
//! ahead of the reader, within a budget of pages and their bytes.
//!
//! The pager owns the client, so requests stay one at a time (paced and retried by
//! [`Client::fetch`]). What the reader has not taken yet is bounded by [`AHEAD_BYTES`] of
//! bodies (in memory, or spooled to disk; a page parsed into values counts
//! [`PARSED_FACTOR`] times its body) and [`AHEAD_PAGES`] pages: the pager waits before
//! fetching once either is reached, so it holds at most the budget plus one page, and pages
//! larger than the budget come one at a time. A pager whose reader is gone stops before its
//! next request (a request under way, with its retries, ends first).

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};
use std::sync::mpsc::{Receiver, SyncSender};
use std::sync::{Arc, Condvar, Mutex};

use super::fetch::Client;
use super::page::{self, Page};
use super::{HttpSourceOptions, set_param};
use crate::config::connectors::{HttpFormat, HttpPaginator};
use crate::config::credentials::redact_url;
use crate::sources::SourceError;

/// Page bytes the pager may hold ahead of the reader (a larger page alone passes).
pub(super) const AHEAD_BYTES: u64 = 8 << 20;
/// Pages the pager may hold ahead of the reader.
pub(super) const AHEAD_PAGES: usize = 8;
/// How many times its body's size a page parsed into `serde_json` values is counted as (the
/// values of a JSON page take a few times its text).
pub(super) const PARSED_FACTOR: u64 = 4;

/// A page fetched and parsed, and the page after it.
pub(super) struct Walked {
    /// Its URL.
    pub url: reqwest::Url,
    /// `url` redacted, as records' positions name it.
    pub shown: String,
    /// Its items.
    pub page: Page,
    /// The next page, `None` at the end.
    pub next: Option<reqwest::Url>,
    /// Bytes received (compressed).
    pub wire_bytes: u64,
    /// What it counts against the budget: its body's bytes (in memory or spooled), times
    /// [`PARSED_FACTOR`] when it was parsed into values.
    held: u64,
}

/// Fetches and parses pages and names the one after each.
pub(super) struct Pager {
    options: Arc<HttpSourceOptions>,
    client: Client,
    records_path: Vec<String>,
    unparsed: bool,
    /// Pages walked before the next one in this pass (for `page_number`).
    pages: u64,
    /// Their records (for `offset`).
    offset: u64,
    /// Hashes of the URLs walked by this pager, so a next link back to one of them (a cycle
    /// of pages) ends the walk instead of reading the same pages for ever. 8 bytes a page.
    walked: HashSet<u64>,
    hasher: RandomState,
}

impl Pager {
    /// A pager whose next page comes after `pages` pages of `offset` records.
    pub fn new(options: Arc<HttpSourceOptions>, client: Client, pages: u64, offset: u64) -> Pager {
        let records_path = options
            .records_path
            .as_deref()
            .map(page::segments)
            .unwrap_or_default();
        let unparsed = options.unparsed && options.incremental.is_none();
        Pager {
            options,
            client,
            records_path,
            unparsed,
            pages,
            offset,
            walked: HashSet::new(),
            hasher: RandomState::new(),
        }
    }

    /// Fetch and parse the page at `url` and find the next.
    pub fn walk(&mut self, url: reqwest::Url) -> Result<Walked, SourceError> {
        let shown = redact_url(url.as_str());
        let fetched = self.client.fetch(&self.options, &url)?;
        let spooled = matches!(fetched.body, super::spool::Body::File { .. });
        let as_text = self.unparsed && self.options.format == HttpFormat::Json;
        let parsed = !(spooled || as_text);
        let held = fetched
            .body
            .len()
            .saturating_mul(if parsed { PARSED_FACTOR } else { 1 });
        let page = page::parse(
            Arc::new(fetched.body),
            self.options.format,
            &self.records_path,
            self.unparsed,
        )
        .map_err(|message| SourceError::Http {
            url: shown.clone(),
            status: None,
            message,
            retryable: false,
        })?;
        let next = self.next_url(&url, &page, fetched.link.as_deref());
        tracing::debug!(url = %shown, records = page.count, spooled, has_next = next.is_some(), "Read a page.");
        self.pages += 1;
        self.offset += page.count;
        self.walked.insert(self.hasher.hash_one(url.as_str()));
        let next = next.filter(|n| {
            let again = self.walked.contains(&self.hasher.hash_one(n.as_str()));
            if again {
                tracing::warn!(url = %shown, next = %redact_url(n.as_str()), "The next page is one already read in this pass: the pages loop, and the pass ends at this page.");
            }
            !again
        });
        Ok(Walked {
            url,
            shown,
            page,
            next,
            wire_bytes: fetched.wire_bytes,
            held,
        })
    }

    /// The page after `url`. The paging parameter is set on `url` itself, so every other
    /// parameter (the incremental one among them) stays as the pass started it.
    fn next_url(
        &self,
        url: &reqwest::Url,
        page: &Page,
        link: Option<&str>,
    ) -> Option<reqwest::Url> {
        let count = page.count;
        let next = match self.options.paginator.as_ref()? {
            HttpPaginator::NextUrl { path } => page::lookup(&page.document, &page::segments(path))
                .and_then(page::as_text)
                .and_then(|next| url.join(&next).ok()),
            HttpPaginator::LinkHeader {} => link
                .and_then(page::link_next)
                .and_then(|next| url.join(&next).ok()),
            HttpPaginator::Cursor { path, param } => {
                if count == 0 {
                    return None;
                }
                let cursor =
                    page::lookup(&page.document, &page::segments(path)).and_then(page::as_text)?;
                let mut next = url.clone();
                set_param(&mut next, param, &cursor);
                Some(next)
            }
            HttpPaginator::Offset {
                param,
                limit_param,
                page_size,
            } => {
                if count < *page_size {
                    return None;
                }
                let mut next = url.clone();
                set_param(&mut next, param, &(self.offset + count).to_string());
                if let Some(limit) = limit_param {
                    set_param(&mut next, limit, &page_size.to_string());
                }
                Some(next)
            }
            HttpPaginator::PageNumber {
                param,
                size_param,
                page_size,
                start,
            } => {
                if count < *page_size {
                    return None;
                }
                let number = start.unwrap_or(1) + self.pages + 1;
                let mut next = url.clone();
                set_param(&mut next, param, &number.to_string());
                if let Some(size) = size_param {
                    set_param(&mut next, size, &page_size.to_string());
                }
                Some(next)
            }
        };
        next.filter(|n| n != url)
    }
}

/// What the pager holds ahead of the reader, and whether the reader is still there.
#[derive(Default)]
struct Held {
    bytes: u64,
    pages: usize,
    closed: bool,
}

/// The budget shared by a pager thread and its reader.
#[derive(Default)]
struct Budget {
    held: Mutex<Held>,
    changed: Condvar,
}

impl Budget {
    /// Wait until there is room for another page; false once the reader is gone.
    fn wait_for_room(&self) -> bool {
        let Ok(mut held) = self.held.lock() else {
            return false;
        };
        while !held.closed && (held.bytes >= AHEAD_BYTES || held.pages >= AHEAD_PAGES) {
            held = match self.changed.wait(held) {
                Ok(held) => held,
                Err(_) => return false,
            };
        }
        !held.closed
    }

    fn add(&self, bytes: u64) {
        if let Ok(mut held) = self.held.lock() {
            held.bytes += bytes;
            held.pages += 1;
        }
    }

    fn take(&self, bytes: u64) {
        if let Ok(mut held) = self.held.lock() {
            held.bytes = held.bytes.saturating_sub(bytes);
            held.pages = held.pages.saturating_sub(1);
        }
        self.changed.notify_all();
    }

    fn close(&self) {
        if let Ok(mut held) = self.held.lock() {
            held.closed = true;
        }
        self.changed.notify_all();
    }
}

/// Pages walked on a thread of their own, from a first URL to the last page or the first
/// error (sent, then the thread ends).
pub(super) struct Ahead {
    pages: Receiver<Result<Walked, SourceError>>,
    budget: Arc<Budget>,
}

impl Ahead {
    /// Start walking from `first`. If no thread can be started, the pager comes back (the
    /// caller walks the pages itself then).
    pub fn start(pager: Pager, first: reqwest::Url) -> Result<Ahead, Option<Box<Pager>>> {
        let budget = Arc::new(Budget::default());
        // The budget bounds what is held; the channel only needs room for as many pages.
        let (tx, rx): (SyncSender<_>, _) = std::sync::mpsc::sync_channel(AHEAD_PAGES);
        let shared = Arc::clone(&budget);
        // The pager reaches the thread through a slot, so it can be taken back if the thread
        // does not start.
        let slot = Arc::new(Mutex::new(Some(pager)));
        let theirs = Arc::clone(&slot);
        let spawned = std::thread::Builder::new()
            .name("skipprd-http-pages".into())
            .spawn(move || {
                let Some(mut pager) = theirs.lock().ok().and_then(|mut p| p.take()) else {
                    return;
                };
                let mut url = Some(first);
                while let Some(at) = url.take() {
                    if !shared.wait_for_room() {
                        return;
                    }
                    let walked = pager.walk(at);
                    if let Ok(w) = &walked {
                        url = w.next.clone();
                        shared.add(w.held);
                    }
                    if tx.send(walked).is_err() {
                        return;
                    }
                }
            });
        match spawned {
            Ok(_) => Ok(Ahead { pages: rx, budget }),
            Err(e) => {
                tracing::debug!(error = %e, "Could not start the pager thread; pages are fetched as they are needed.");
                Err(slot.lock().ok().and_then(|mut p| p.take()).map(Box::new))
            }
        }
    }

    /// The next page, waiting for it; `None` if the pager ended without one (after the last
    /// page, an error, or a panic).
    pub fn next(&self) -> Option<Result<Walked, SourceError>> {
        let walked = self.pages.recv().ok()?;
        if let Ok(w) = &walked {
            self.budget.take(w.held);
        }
        Some(walked)
    }
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.budget.close();
    }
}
