//! Tests of the HTTP source against an in-process HTTP server on 127.0.0.1.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::config::secret::Secret;

/// One answer: status, extra headers, body.
type Answer = (u16, Vec<(String, String)>, Vec<u8>);

/// A server answering each request (path and query, headers) with `handler`; stops when
/// dropped (its thread ends with the test process).
struct Server {
    port: u16,
    hits: Arc<AtomicU64>,
    seen_headers: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(handler: impl Fn(&str, u64) -> Answer + Send + Sync + 'static) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicU64::new(0));
        let seen_headers = Arc::new(Mutex::new(Vec::new()));
        let (h, s) = (hits.clone(), seen_headers.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                let target = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let mut length = 0usize;
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).is_err() || header.trim().is_empty() {
                        break;
                    }
                    if let Some(v) = header.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    s.lock().unwrap().push(header.trim().to_owned());
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let n = h.fetch_add(1, Ordering::SeqCst);
                let (status, headers, body) = handler(&target, n);
                let mut out = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n",
                    body.len()
                );
                for (k, v) in headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                let _ = stream.write_all(out.as_bytes());
                let _ = stream.write_all(&body);
            }
        });
        Server {
            port,
            hits,
            seen_headers,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }
}

fn param(target: &str, name: &str) -> Option<String> {
    let url = reqwest::Url::parse(&format!("http://x{target}")).unwrap();
    url.query_pairs()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

fn records(page: u64, per_page: u64) -> Vec<Value> {
    (0..per_page)
        .map(|i| json!({"id": page * per_page + i, "page": page}))
        .collect()
}

fn options(url: &str) -> HttpSourceOptions {
    HttpSourceOptions {
        url: HttpUrl::new(url),
        method: HttpMethod::Get,
        headers: HttpHeaders::default(),
        body: None,
        auth: ResolvedAuth::None,
        timeout: Duration::from_secs(5),
        format: HttpFormat::Json,
        records_path: Some("data".into()),
        paginator: None,
        incremental: None,
        max_requests_per_second: None,
        batch_rows: 3,
        batch_bytes: 1 << 20,
        batch_time: Duration::from_secs(600),
        max_attempts: 5,
        backoff: Duration::from_millis(10),
        max_page_bytes: 1 << 20,
        spool_bytes: HttpSourceOptions::DEFAULT_SPOOL_BYTES,
        sample_records: None,
        unparsed: false,
    }
}

/// Every id read to the end, and the checkpoint after each batch.
fn read_all(source: &mut HttpSource) -> (Vec<u64>, Vec<Vec<u8>>) {
    let mut ids = Vec::new();
    let mut checkpoints = Vec::new();
    while let Some(batch) = source.next_batch().unwrap() {
        ids.extend(
            batch
                .records
                .iter()
                .map(|r| r.value["id"].as_u64().unwrap()),
        );
        checkpoints.push(source.checkpoint().unwrap());
    }
    (ids, checkpoints)
}

const PAGES: u64 = 5;
const PER_PAGE: u64 = 7;

/// A server of `PAGES` pages of `PER_PAGE` records in the style of `paginator`.
fn paginated(style: &'static str) -> Server {
    Server::start(move |target, _| {
        let page: u64 = match style {
            "offset" => param(target, "offset").map_or(0, |o| o.parse::<u64>().unwrap() / PER_PAGE),
            "page_number" => param(target, "page").map_or(1, |p| p.parse().unwrap()) - 1,
            "cursor" => param(target, "after").map_or(0, |p| p.parse().unwrap()),
            _ => param(target, "p").map_or(0, |p| p.parse().unwrap()),
        };
        let data = if page < PAGES {
            records(page, PER_PAGE)
        } else {
            vec![]
        };
        let more = page + 1 < PAGES;
        let mut headers = vec![];
        let body = match style {
            "next_url" => {
                json!({"data": data, "links": {"next": more.then(|| format!("/items?p={}", page + 1))}})
            }
            "link_header" => {
                if more {
                    headers.push((
                        "Link".to_owned(),
                        format!(
                            "</items?p={}>; rel=\"next\", </items?p=0>; rel=\"first\"",
                            page + 1
                        ),
                    ));
                }
                json!({"data": data})
            }
            "cursor" => json!({"data": data, "cursor": more.then(|| (page + 1).to_string())}),
            _ => json!({"data": data}),
        };
        (200, headers, serde_json::to_vec(&body).unwrap())
    })
}

fn paginator(style: &str) -> HttpPaginator {
    match style {
        "next_url" => HttpPaginator::NextUrl {
            path: "links.next".into(),
        },
        "link_header" => HttpPaginator::LinkHeader {},
        "cursor" => HttpPaginator::Cursor {
            path: "cursor".into(),
            param: "after".into(),
        },
        "offset" => HttpPaginator::Offset {
            param: "offset".into(),
            limit_param: Some("limit".into()),
            page_size: PER_PAGE,
        },
        _ => HttpPaginator::PageNumber {
            param: "page".into(),
            size_param: None,
            page_size: PER_PAGE,
            start: None,
        },
    }
}

/// Resuming at the checkpoint of batch i (of 3 records, `batch_rows` in [`options`]) reads
/// exactly the records after it; the last checkpoint is returned.
fn resumes_after_every_checkpoint<'a>(
    opts: &HttpSourceOptions,
    ids: &[u64],
    checkpoints: &'a [Vec<u8>],
    label: &str,
) -> &'a [u8] {
    let (last, earlier) = checkpoints.split_last().unwrap();
    for (i, checkpoint) in earlier.iter().enumerate() {
        let mut resumed = HttpSource::open_at(opts.clone(), Some(checkpoint)).unwrap();
        let (rest, _) = read_all(&mut resumed);
        let done = ((i + 1) * 3).min(ids.len());
        assert_eq!(
            rest,
            ids[done..].to_vec(),
            "{label} resumed after batch {i}"
        );
    }
    last
}

#[test]
fn every_paginator_reads_every_record_once_and_resumes_from_every_checkpoint() {
    // Pages held in memory, and every page spooled to a file and streamed.
    for (style, spool_bytes) in ["next_url", "link_header", "cursor", "offset", "page_number"]
        .into_iter()
        .flat_map(|s| [(s, HttpSourceOptions::DEFAULT_SPOOL_BYTES), (s, 0)])
    {
        let server = paginated(style);
        let opts = HttpSourceOptions {
            paginator: Some(paginator(style)),
            spool_bytes,
            ..options(&server.url("/items"))
        };
        let mut source = HttpSource::open_at(opts.clone(), None).unwrap();
        let (ids, checkpoints) = read_all(&mut source);
        let expected: Vec<u64> = (0..PAGES * PER_PAGE).collect();
        assert_eq!(ids, expected, "{style}");
        let last = resumes_after_every_checkpoint(&opts, &ids, &checkpoints, style);
        // The last checkpoint closes the pass: the next one starts over at the first page
        // (without `incremental`, every pass reads the whole API).
        let closed: HttpCheckpoint = serde_json::from_slice(last).unwrap();
        assert_eq!(closed.page, None, "{style}");
        let mut again = HttpSource::open_at(opts.clone(), Some(last)).unwrap();
        assert_eq!(read_all(&mut again).0, expected, "{style}: the next pass");
    }
}

#[test]
fn retries_429_and_500_then_lands_everything() {
    let server = Server::start(|target, n| {
        if n % 3 == 0 {
            return (
                429,
                vec![("Retry-After".into(), "0".into())],
                b"slow down".to_vec(),
            );
        }
        if n % 3 == 1 {
            return (500, vec![], b"oops".to_vec());
        }
        let page: u64 = param(target, "p").map_or(0, |p| p.parse().unwrap());
        let more = page + 1 < 3;
        let body =
            json!({"data": records(page, 4), "next": more.then(|| format!("/x?p={}", page + 1))});
        (200, vec![], serde_json::to_vec(&body).unwrap())
    });
    let opts = HttpSourceOptions {
        paginator: Some(HttpPaginator::NextUrl {
            path: "next".into(),
        }),
        ..options(&server.url("/x"))
    };
    let mut source = HttpSource::open_at(opts, None).unwrap();
    let (ids, _) = read_all(&mut source);
    assert_eq!(ids, (0..12).collect::<Vec<_>>());
    assert_eq!(source.retries(), 6);
    assert_eq!(source.requests(), 9);
    assert_eq!(server.hits.load(Ordering::SeqCst), 9);
}

#[test]
fn attempts_are_bounded_and_the_error_is_retryable() {
    let server = Server::start(|_, _| (503, vec![], b"down".to_vec()));
    let mut source = HttpSource::open_at(options(&server.url("/x")), None).unwrap();
    let e = source.next_batch().unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert_eq!(server.hits.load(Ordering::SeqCst), 5);
}

#[test]
fn a_401_names_the_redacted_url_the_status_and_the_body_head_but_never_the_token() {
    let server = Server::start(|_, _| {
        (
            401,
            vec![],
            format!("{}{}", "denied:", "x".repeat(500)).into_bytes(),
        )
    });
    let opts = HttpSourceOptions {
        auth: ResolvedAuth::Bearer(Secret::new("t0k3n-s3cret")),
        ..options(&server.url("/x?api_key=k3y-s3cret&q=1"))
    };
    let mut source = HttpSource::open_at(opts, None).unwrap();
    let e = source.next_batch().unwrap_err();
    let msg = e.to_string();
    assert!(!e.is_retryable());
    assert!(
        matches!(
            e,
            SourceError::Http {
                status: Some(401),
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("api_key=***") && msg.contains("q=1"), "{msg}");
    assert!(msg.contains("denied:xxx"), "{msg}");
    assert!(
        !msg.contains(&"x".repeat(200)),
        "only the first 200 bytes: {msg}"
    );
    assert!(
        !msg.contains("s3cret") && !format!("{e:?}").contains("s3cret"),
        "{msg}"
    );
    assert_eq!(
        server.hits.load(Ordering::SeqCst),
        1,
        "a 401 is not retried"
    );
    // The token was sent.
    let seen = server.seen_headers.lock().unwrap().join("\n");
    assert!(seen.contains("Bearer t0k3n-s3cret"), "{seen}");
    // Checkpoints never hold credentials.
    let checkpoint = String::from_utf8(source.checkpoint().unwrap()).unwrap();
    assert!(!checkpoint.contains("s3cret"), "{checkpoint}");
}

#[test]
fn incremental_asks_a_later_pass_only_for_records_after_the_committed_cursor() {
    let total = Arc::new(AtomicU64::new(10));
    let t = total.clone();
    let server = Server::start(move |target, _| {
        let since: i64 = param(target, "since").map_or(-1, |s| s.parse().unwrap());
        let data: Vec<Value> = (0..t.load(Ordering::SeqCst) as i64)
            .filter(|id| *id > since)
            .map(|id| json!({"id": id, "meta": {"seq": id}}))
            .collect();
        (
            200,
            vec![],
            serde_json::to_vec(&json!({"data": data})).unwrap(),
        )
    });
    let opts = HttpSourceOptions {
        incremental: Some(HttpIncremental {
            cursor_path: "meta.seq".into(),
            param: "since".into(),
            initial_value: None,
        }),
        ..options(&server.url("/e"))
    };
    let mut first = HttpSource::open_at(opts.clone(), None).unwrap();
    let (ids, checkpoints) = read_all(&mut first);
    assert_eq!(ids, (0..10).collect::<Vec<_>>());
    total.store(15, Ordering::SeqCst);
    let mut second =
        HttpSource::open_at(opts.clone(), checkpoints.last().map(Vec::as_slice)).unwrap();
    let (ids, checkpoints) = read_all(&mut second);
    assert_eq!(ids, (10..15).collect::<Vec<_>>());
    let mut third = HttpSource::open_at(opts, checkpoints.last().map(Vec::as_slice)).unwrap();
    assert_eq!(read_all(&mut third).0, Vec::<u64>::new());
}

/// Regression: with `incremental`, the pages after the first were asked for with the cursor
/// of the records already handed out in this pass (`since` moved mid-pass), so an offset,
/// page-number or cursor paginator skipped records; a resumed pass did the same from the
/// checkpoint's cursor. A pass keeps the value it started with on every page.
#[test]
fn incremental_keeps_the_pass_start_cursor_on_every_page_of_the_pass() {
    const TOTAL: i64 = 5 * PER_PAGE as i64;
    let server = Server::start(|target, _| {
        let since: i64 = param(target, "since").map_or(-1, |s| s.parse().unwrap());
        let skip: usize = if let Some(o) = param(target, "offset") {
            o.parse().unwrap()
        } else if let Some(p) = param(target, "page") {
            (p.parse::<usize>().unwrap() - 1) * PER_PAGE as usize
        } else {
            param(target, "after").map_or(0, |a| a.parse().unwrap())
        };
        let data: Vec<Value> = (0..TOTAL)
            .filter(|id| *id > since)
            .skip(skip)
            .take(PER_PAGE as usize)
            .map(|id| json!({"id": id, "seq": id}))
            .collect();
        let cursor = (!data.is_empty()).then(|| (skip + data.len()).to_string());
        (
            200,
            vec![],
            serde_json::to_vec(&json!({"data": data, "cursor": cursor})).unwrap(),
        )
    });
    for style in ["offset", "page_number", "cursor"] {
        let opts = HttpSourceOptions {
            paginator: Some(paginator(style)),
            incremental: Some(HttpIncremental {
                cursor_path: "seq".into(),
                param: "since".into(),
                initial_value: Some("4".into()),
            }),
            ..options(&server.url("/items"))
        };
        let mut source = HttpSource::open_at(opts.clone(), None).unwrap();
        let (ids, checkpoints) = read_all(&mut source);
        let expected: Vec<u64> = (5..TOTAL as u64).collect();
        assert_eq!(ids, expected, "{style}");
        resumes_after_every_checkpoint(&opts, &ids, &checkpoints, style);
    }
}

#[test]
fn gzip_bodies_and_basic_auth() {
    let server = Server::start(|_, _| {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(br#"{"data":[{"id":1},{"id":2}]}"#).unwrap();
        (
            200,
            vec![("Content-Encoding".into(), "gzip".into())],
            gz.finish().unwrap(),
        )
    });
    for spool_bytes in [HttpSourceOptions::DEFAULT_SPOOL_BYTES, 0] {
        let opts = HttpSourceOptions {
            auth: ResolvedAuth::Basic {
                user: "user".into(),
                password: Some(Secret::new("pass")),
            },
            spool_bytes,
            ..options(&server.url("/g"))
        };
        let mut source = HttpSource::open_at(opts, None).unwrap();
        assert_eq!(read_all(&mut source).0, vec![1, 2], "spool {spool_bytes}");
    }
    let seen = server.seen_headers.lock().unwrap().join("\n");
    assert!(seen.contains("Basic dXNlcjpwYXNz"), "{seen}");
}

#[test]
fn a_page_over_the_limit_fails_naming_it() {
    let server = Server::start(|_, _| (200, vec![], vec![b' '; 4096]));
    let opts = HttpSourceOptions {
        max_page_bytes: 1024,
        ..options(&server.url("/big"))
    };
    let mut source = HttpSource::open_at(opts, None).unwrap();
    let e = source.next_batch().unwrap_err();
    assert!(e.to_string().contains("larger than"), "{e}");
}

#[test]
fn a_checkpoint_of_another_version_is_refused() {
    let opts = options("http://127.0.0.1:9/x");
    let bytes = br#"{"version":99,"source":"http://127.0.0.1:9/x","page":null,"cursor":null}"#;
    let e = HttpSource::open_at(opts, Some(bytes)).unwrap_err();
    assert!(matches!(e, SourceError::BadCheckpoint { .. }), "{e}");
}

#[test]
fn a_sample_ends_after_its_records_and_fetches_no_page_beyond_them() {
    let server = paginated("next_url");
    let opts = HttpSourceOptions {
        paginator: Some(paginator("next_url")),
        sample_records: Some(PER_PAGE + 1),
        ..options(&server.url("/items"))
    };
    let mut source = HttpSource::open_at(opts, None).unwrap();
    let (ids, _) = read_all(&mut source);
    assert_eq!(ids, (0..=PER_PAGE).collect::<Vec<_>>());
    // The first page and one record of the second: two requests, not PAGES.
    assert_eq!(server.hits.load(Ordering::SeqCst), 2);
    assert!(source.next_batch().unwrap().is_none());
}

#[test]
fn unparsed_records_parse_to_the_records_a_parsing_read_gives() {
    // A page in memory and a spooled one; a non-object element is a deadletter either way.
    let server = Server::start(|_, _| {
        let body = json!({"data": [{"id": 1, "s": "a\nb"}, 7, {"id": 2, "n": {"x": [1, 2]}}], "next": null});
        (200, vec![], serde_json::to_vec_pretty(&body).unwrap())
    });
    let read = |unparsed: bool, spool_bytes: usize| {
        let opts = HttpSourceOptions {
            paginator: Some(paginator("next_url")),
            unparsed,
            spool_bytes,
            batch_rows: 100,
            ..options(&server.url("/items"))
        };
        let mut source = HttpSource::open_at(opts, None).unwrap();
        let mut batch = source.next_batch().unwrap().unwrap();
        assert_eq!(
            batch.records.iter().all(|r| r.unparsed.is_some()),
            unparsed,
            "unparsed {unparsed}"
        );
        batch.parse_unparsed(|_| true);
        let records: Vec<Value> = batch
            .records
            .iter()
            .map(|r| Value::Object(r.value.clone()))
            .collect();
        let dead: Vec<(u64, crate::deadletter::FailureCode)> = batch
            .deadletters
            .iter()
            .map(|d| (d.offset, d.code))
            .collect();
        (records, dead)
    };
    for spool_bytes in [HttpSourceOptions::DEFAULT_SPOOL_BYTES, 0] {
        let parsed = read(false, spool_bytes);
        assert_eq!(parsed.0.len(), 2);
        assert_eq!(parsed.1.len(), 1);
        assert_eq!(read(true, spool_bytes), parsed, "spool {spool_bytes}");
    }
}

/// Requests the server has seen once `expected` were (or 10 s passed) and a grace period
/// brought no more: a pager over its budget would have asked for more by then.
fn hits_settled_at(server: &Server, expected: u64) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while server.hits.load(Ordering::SeqCst) < expected && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    server.hits.load(Ordering::SeqCst)
}

#[test]
fn the_pager_holds_a_bounded_number_of_pages_and_bytes_ahead_and_stops_with_its_reader() {
    // Small pages: bounded by the page count. Pages of 3 MiB handed out as text: by their
    // bytes. Pages of 1 MiB parsed into values: by four times their bytes.
    for (filler, unparsed, ahead) in [
        (0usize, false, pager::AHEAD_PAGES as u64),
        (3 << 20, true, 3),
        (1 << 20, false, 2),
    ] {
        let server = Server::start(move |target, _| {
            let page: u64 = param(target, "p").map_or(0, |p| p.parse().unwrap());
            let data: Vec<Value> = (0..PER_PAGE)
                .map(|i| json!({"id": page * PER_PAGE + i, "pad": "x".repeat(filler / PER_PAGE as usize)}))
                .collect();
            let next = (page + 1 < 50).then(|| format!("/items?p={}", page + 1));
            let body = json!({"data": data, "links": {"next": next}});
            (200, vec![], serde_json::to_vec(&body).unwrap())
        });
        let opts = HttpSourceOptions {
            paginator: Some(paginator("next_url")),
            max_page_bytes: 16 << 20,
            unparsed,
            ..options(&server.url("/items"))
        };
        let mut source = HttpSource::open_at(opts, None).unwrap();
        let mut batch = source.next_batch().unwrap().unwrap();
        batch.parse_unparsed(|_| true);
        assert_eq!(batch.records[0].value["id"], 0);
        // The page being read and at most `ahead` more.
        assert_eq!(
            hits_settled_at(&server, 1 + ahead),
            1 + ahead,
            "filler {filler}"
        );
        // Taking records of the second page makes room for one more.
        for _ in 0..3 {
            source.next_batch().unwrap().unwrap();
        }
        assert_eq!(
            hits_settled_at(&server, 2 + ahead),
            2 + ahead,
            "filler {filler}"
        );
        drop(source);
        assert_eq!(
            hits_settled_at(&server, 2 + ahead),
            2 + ahead,
            "filler {filler}: after the reader left"
        );
    }
}

/// Regression: next links that form a cycle (a -> b -> a) were followed for ever, reading
/// the same records again and again (only a link to the page itself was caught). The walk
/// ends at the first link back to a page already read in the pass: every record once.
#[test]
fn next_links_that_loop_back_end_the_pass_after_each_page_once() {
    let server = Server::start(|target, _| {
        let (id, next) = if param(target, "p").as_deref() == Some("b") {
            (1, "/loop?p=c")
        } else if param(target, "p").as_deref() == Some("c") {
            (2, "/loop?p=a")
        } else {
            (0, "/loop?p=b")
        };
        let body = json!({"data": [{"id": id}], "next": next});
        (200, vec![], serde_json::to_vec(&body).unwrap())
    });
    let opts = HttpSourceOptions {
        paginator: Some(HttpPaginator::NextUrl {
            path: "next".into(),
        }),
        ..options(&server.url("/loop?p=a"))
    };
    let mut source = HttpSource::open_at(opts, None).unwrap();
    assert_eq!(read_all(&mut source).0, vec![0, 1, 2]);
    assert_eq!(server.hits.load(Ordering::SeqCst), 3);
}

/// Regression (found by an outside-in probe): on SIGTERM during an endless paginated API with
/// the default `batch_size_seconds` (60), the batch being filled ran to its time and the read
/// ahead one after it (110 s to exit, thousands of pages read and thrown away). A stop
/// request now ends the batch at the next page boundary; reading then ends, and a pass from
/// the batch's checkpoint reads on from the record after it.
#[test]
fn a_stop_request_ends_the_batch_being_filled_at_the_next_page() {
    let server = Server::start(|target, _| {
        let page: u64 = param(target, "p").map_or(0, |p| p.parse().unwrap());
        let body = json!({"data": records(page, 5), "next": format!("/x?p={}", page + 1)});
        (200, vec![], serde_json::to_vec(&body).unwrap())
    });
    let opts = || HttpSourceOptions {
        paginator: Some(HttpPaginator::NextUrl {
            path: "next".into(),
        }),
        batch_rows: usize::MAX,
        batch_bytes: u64::MAX,
        ..options(&server.url("/x"))
    };
    let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut source = HttpSource::open_at(opts(), None).unwrap();
    source.stop_on(crate::sources::StopRequest::new(Arc::clone(&flag), None));
    let (tx, rx) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let first = source.next_batch().unwrap();
        let checkpoint = source.checkpoint().unwrap();
        let after = source.next_batch().unwrap();
        tx.send(()).unwrap();
        (first, checkpoint, after)
    });
    // Let some pages be read, then ask to stop.
    while server.hits.load(Ordering::SeqCst) < 3 {
        std::thread::sleep(Duration::from_millis(5));
    }
    flag.store(true, Ordering::SeqCst);
    // A hang guard, not a timing: without the fix the batch fills for 600 s.
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the batch did not end on the stop request");
    let (first, checkpoint, after) = reader.join().unwrap();
    let first = first.expect("a batch with the pages read before the request");
    let ids: Vec<u64> = first
        .records
        .iter()
        .map(|r| r.value["id"].as_u64().unwrap())
        .collect();
    assert!(!ids.is_empty());
    assert_eq!(ids, (0..ids.len() as u64).collect::<Vec<_>>());
    assert_eq!(ids.len() % 5, 0, "the batch ends at a page boundary");
    assert!(after.is_none(), "reading ends after the request");

    // The next pass reads on from the record after the batch.
    let mut next = HttpSource::open_at(
        HttpSourceOptions {
            batch_rows: 3,
            ..opts()
        },
        Some(&checkpoint),
    )
    .unwrap();
    let batch = next.next_batch().unwrap().unwrap();
    assert_eq!(
        batch.records[0].value["id"].as_u64(),
        Some(ids.len() as u64)
    );
}

/// Regression (found by an outside-in probe): a page starting with a UTF-8 byte order mark
/// failed as "not JSON"; the mark is dropped, in every format.
#[test]
fn a_page_with_a_utf8_byte_order_mark_is_read() {
    for (format, body) in [
        (HttpFormat::Json, "{\"data\":[{\"id\":0},{\"id\":1}]}"),
        (HttpFormat::Jsonl, "{\"id\":0}\n{\"id\":1}\n"),
        (HttpFormat::Csv, "id\n0\n1\n"),
    ] {
        let server = Server::start(move |_, _| {
            let mut bytes = b"\xEF\xBB\xBF".to_vec();
            bytes.extend_from_slice(body.as_bytes());
            (200, vec![], bytes)
        });
        let opts = HttpSourceOptions {
            format,
            records_path: (format == HttpFormat::Json).then(|| "data".into()),
            ..options(&server.url("/x"))
        };
        let mut source = HttpSource::open_at(opts, None).unwrap();
        let batch = source.next_batch().unwrap().unwrap();
        assert!(
            batch.deadletters.is_empty(),
            "{format:?}: {:?}",
            batch.deadletters
        );
        let ids: Vec<String> = batch
            .records
            .iter()
            .map(|r| r.value["id"].to_string())
            .collect();
        assert_eq!(ids.len(), 2, "{format:?}");
        assert!(
            ids[0].contains('0') && ids[1].contains('1'),
            "{format:?}: {ids:?}"
        );
    }
}

/// Regression (found by an outside-in probe): a `records_path` naming no key of the pages read
/// nothing and said nothing, like an empty API. The first page now warns, naming the path.
#[test]
fn a_records_path_missing_from_the_first_page_is_warned_about_once() {
    let server = Server::start(|target, _| {
        let page: u64 = param(target, "p").map_or(0, |p| p.parse().unwrap());
        let body = json!({"results": records(page, 2), "next": (page < 2).then(|| format!("/x?p={}", page + 1))});
        (200, vec![], serde_json::to_vec(&body).unwrap())
    });
    let read = |records_path: &str| {
        let opts = HttpSourceOptions {
            records_path: Some(records_path.into()),
            paginator: Some(HttpPaginator::NextUrl {
                path: "next".into(),
            }),
            ..options(&server.url("/x"))
        };
        crate::sources::file::resume_tests::warnings(|| {
            let mut source = HttpSource::open_at(opts, None).unwrap();
            read_all(&mut source).0.len()
        })
    };
    let (rows, warnings) = read("data");
    assert_eq!(rows, 0);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("records_path"), "{warnings:?}");
    let (rows, warnings) = read("results");
    assert_eq!(rows, 6);
    assert!(warnings.is_empty(), "{warnings:?}");
}
