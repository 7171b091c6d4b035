//! One request of the HTTP source, with retries: exponential backoff with full jitter on
//! 429, 5xx and connection errors (honouring `Retry-After`), a bounded body, gzip.

use std::io::Read;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue as ReqHeaderValue};

use super::HttpSourceOptions;
use super::spool::{Body, BodyReader, Spool};
use crate::config::connectors::{HttpMethod, ResolvedAuth};
use crate::config::credentials::redact_url;
use crate::sources::SourceError;

/// A response body, decompressed, and the headers that matter.
pub(super) struct Fetched {
    /// The body, decompressed: in memory, or spooled to a temporary file past
    /// [`HttpSourceOptions::spool_bytes`].
    pub body: Body,
    /// The `Link` header, if any.
    pub link: Option<String>,
    /// Bytes received (compressed).
    pub wire_bytes: u64,
}

/// The client and its runtime; requests block the calling thread.
pub(super) struct Client {
    runtime: Option<tokio::runtime::Runtime>,
    client: reqwest::Client,
    headers: HeaderMap,
    last_request: Option<Instant>,
    /// Requests and retries so far, shared with the source (which reads them while this
    /// client fetches the next page on another thread).
    pub counts: Arc<Counts>,
}

/// A client's requests (retries included) and retries.
#[derive(Debug, Default)]
pub(super) struct Counts {
    requests: AtomicU64,
    retries: AtomicU64,
}

impl Counts {
    /// Requests sent so far, retries included.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Retries made so far.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }
}

/// The UTF-8 byte order mark.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

impl Drop for Client {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl Client {
    /// A client for `options`.
    pub fn new(options: &HttpSourceOptions) -> Result<Client, SourceError> {
        let fail = |message: String| SourceError::Http {
            url: options.url.redacted(),
            status: None,
            message,
            retryable: false,
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("skipprd-http")
            .enable_all()
            .build()
            .map_err(|e| fail(format!("cannot start the HTTP runtime: {e}")))?;
        let client = reqwest::Client::builder()
            .timeout(options.timeout)
            .connect_timeout(options.timeout)
            .build()
            .map_err(|e| fail(format!("cannot build the HTTP client: {e}")))?;
        let mut headers = HeaderMap::new();
        headers.insert(
            reqwest::header::ACCEPT_ENCODING,
            ReqHeaderValue::from_static("gzip"),
        );
        for (name, value) in options.headers.iter() {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| fail(format!("header name `{name}` is not valid")))?;
            let mut value = ReqHeaderValue::from_str(value.expose())
                .map_err(|_| fail(format!("the value of header `{name}` is not valid")))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let auth = match &options.auth {
            ResolvedAuth::None => None,
            ResolvedAuth::Bearer(token) => Some(format!("Bearer {}", token.expose())),
            ResolvedAuth::Basic { user, password } => {
                let pair = format!(
                    "{user}:{}",
                    password.as_ref().map(|p| p.expose()).unwrap_or("")
                );
                Some(format!("Basic {}", base64(pair.as_bytes())))
            }
        };
        if let Some(auth) = auth {
            let mut value = ReqHeaderValue::from_str(&auth)
                .map_err(|_| fail("the authentication value is not a valid header".into()))?;
            value.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        Ok(Client {
            runtime: Some(runtime),
            client,
            headers,
            last_request: None,
            counts: Arc::default(),
        })
    }

    /// GET (or the configured method) `url`, retrying what may succeed later.
    pub fn fetch(
        &mut self,
        options: &HttpSourceOptions,
        url: &reqwest::Url,
    ) -> Result<Fetched, SourceError> {
        let shown = redact_url(url.as_str());
        let mut attempt: u32 = 0;
        loop {
            self.pace(options.max_requests_per_second);
            self.counts.requests.fetch_add(1, Ordering::Relaxed);
            let outcome = self.once(options, url, &shown);
            let (error, wait) = match outcome {
                Ok(fetched) => return Ok(fetched),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(e, retry_after)) => (e, retry_after),
            };
            attempt += 1;
            if attempt >= options.max_attempts {
                return Err(error);
            }
            let backoff = wait.unwrap_or_else(|| jittered(options.backoff, attempt));
            tracing::warn!(
                url = %shown,
                attempt,
                wait_ms = backoff.as_millis() as u64,
                error = %error,
                "An HTTP request failed; retrying."
            );
            self.counts.retries.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(backoff);
        }
    }

    fn pace(&mut self, rate: Option<f64>) {
        if let (Some(rate), Some(last)) = (rate, self.last_request) {
            let gap = Duration::from_secs_f64(1.0 / rate);
            let since = last.elapsed();
            if since < gap {
                std::thread::sleep(gap - since);
            }
        }
        self.last_request = Some(Instant::now());
    }

    fn once(
        &self,
        options: &HttpSourceOptions,
        url: &reqwest::Url,
        shown: &str,
    ) -> Result<Fetched, Attempt> {
        let method = match options.method {
            HttpMethod::Get => reqwest::Method::GET,
            HttpMethod::Post => reqwest::Method::POST,
            HttpMethod::Put => reqwest::Method::PUT,
        };
        let mut request = self
            .client
            .request(method, url.clone())
            .headers(self.headers.clone());
        if let Some(body) = &options.body {
            request = request.body(body.clone());
        }
        let limit = options.max_page_bytes;
        let spool_bytes = options.spool_bytes;
        let future = async move {
            let mut response = request.send().await.map_err(Received::Http)?;
            let status = response.status();
            let headers = response.headers().clone();
            let mut body = Spool::new(spool_bytes).expecting(response.content_length());
            let mut over = false;
            let mut first = true;
            while let Some(chunk) = response.chunk().await.map_err(Received::Http)? {
                // A UTF-8 byte order mark some servers put first is no part of the page.
                let chunk = match chunk.strip_prefix(UTF8_BOM) {
                    Some(rest) if first => rest,
                    _ => &chunk[..],
                };
                first = false;
                if body.len() + chunk.len() as u64 > limit {
                    over = true;
                    break;
                }
                body.write(chunk).map_err(Received::Spool)?;
            }
            let body = body.finish().map_err(Received::Spool)?;
            Ok::<_, Received>((status, headers, body, over))
        };
        let result = self.block_on(future);
        let error = |status: Option<u16>, message: String, retryable: bool| SourceError::Http {
            url: shown.to_owned(),
            status,
            message,
            retryable,
        };
        let (status, headers, body, over) = match result {
            Ok(parts) => parts,
            Err(Received::Http(e)) => {
                // Connection errors, timeouts and broken bodies may succeed on a later try.
                let message = describe(e);
                return Err(Attempt::Retry(error(None, message, true), None));
            }
            Err(Received::Spool(e)) => {
                // The temporary directory is full or gone: retrying the request would not help.
                return Err(Attempt::Fatal(error(
                    None,
                    format!("cannot spool the response to a temporary file: {e}"),
                    false,
                )));
            }
        };
        let code = status.as_u16();
        if !status.is_success() {
            let head = String::from_utf8_lossy(&body.head(200)).into_owned();
            let message = format!("the server answered {status}: {head}");
            if code == 429 || status.is_server_error() {
                let retry_after = headers
                    .get(reqwest::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .map(|s| Duration::from_secs(s.min(300)));
                return Err(Attempt::Retry(
                    error(Some(code), message, true),
                    retry_after,
                ));
            }
            return Err(Attempt::Fatal(error(Some(code), message, false)));
        }
        if over {
            return Err(Attempt::Fatal(error(
                Some(code),
                format!(
                    "the response is larger than the {} MiB a page may take",
                    limit >> 20
                ),
                false,
            )));
        }
        let wire_bytes = body.len();
        let gzip = headers
            .get(reqwest::header::CONTENT_ENCODING)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("gzip"))
            || body.head(2) == [0x1f, 0x8b];
        let body = if gzip {
            let mut out = Spool::new(spool_bytes);
            let mut reader =
                flate2::read::MultiGzDecoder::new(BodyReader::new(std::sync::Arc::new(body), 0))
                    .take(limit + 1);
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = reader.read(&mut buf).map_err(|e| {
                    Attempt::Fatal(error(Some(code), format!("bad gzip body: {e}"), false))
                })?;
                if n == 0 {
                    break;
                }
                out.write(&buf[..n]).map_err(|e| {
                    Attempt::Fatal(error(
                        Some(code),
                        format!("cannot spool the response to a temporary file: {e}"),
                        false,
                    ))
                })?;
            }
            if out.len() > limit {
                return Err(Attempt::Fatal(error(
                    Some(code),
                    format!(
                        "the decompressed response is larger than the {} MiB a page may take",
                        limit >> 20
                    ),
                    false,
                )));
            }
            out.finish().map_err(|e| {
                Attempt::Fatal(error(
                    Some(code),
                    format!("cannot spool the response to a temporary file: {e}"),
                    false,
                ))
            })?
        } else {
            body
        };
        let link = headers
            .get_all(reqwest::header::LINK)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect::<Vec<_>>()
            .join(", ");
        Ok(Fetched {
            body,
            link: (!link.is_empty()).then_some(link),
            wire_bytes,
        })
    }

    fn block_on<F>(&self, future: F) -> F::Output
    where
        F: std::future::Future + Send,
        F::Output: Send,
    {
        let Some(runtime) = self.runtime.as_ref() else {
            unreachable_runtime()
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            // Inside another runtime: a runtime cannot be entered from its threads.
            std::thread::scope(
                |scope| match scope.spawn(move || runtime.block_on(future)).join() {
                    Ok(output) => output,
                    Err(panic) => std::panic::resume_unwind(panic),
                },
            )
        } else {
            runtime.block_on(future)
        }
    }
}

/// The runtime is only taken in `drop`.
#[allow(clippy::panic)]
fn unreachable_runtime() -> ! {
    panic!("the HTTP client's runtime is gone")
}

/// A failed attempt: worth another try (with the server's `Retry-After`), or not.
enum Attempt {
    Retry(SourceError, Option<Duration>),
    Fatal(SourceError),
}

/// `base * 2^(attempt-1)`, at most 30 s, with full jitter.
fn jittered(base: Duration, attempt: u32) -> Duration {
    let cap = Duration::from_secs(30);
    let ceiling = base
        .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
        .min(cap);
    let fraction = random_fraction();
    ceiling.mul_f64(0.5 + fraction / 2.0)
}

/// A number in [0, 1) that differs from call to call (jitter needs no better).
fn random_fraction() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// A reqwest error in one line, without the URL (the caller names it, redacted).
/// Why receiving a response failed: the request, or keeping its body.
enum Received {
    Http(reqwest::Error),
    Spool(std::io::Error),
}

fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut message = if e.is_timeout() {
        "the request timed out".to_owned()
    } else if e.is_connect() {
        "cannot connect".to_owned()
    } else {
        "the request failed".to_owned()
    };
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    message
}

/// Standard base64 with padding.
fn base64(bytes: &[u8]) -> String {
    const TABLE: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(TABLE[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_4648_vectors() {
        for (input, expected) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("user:pass", "dXNlcjpwYXNz"),
        ] {
            assert_eq!(base64(input.as_bytes()), expected);
        }
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_with_jitter() {
        let base = Duration::from_millis(100);
        for attempt in 1..10 {
            let wait = jittered(base, attempt);
            let ceiling = (base * (1 << (attempt - 1))).min(Duration::from_secs(30));
            assert!(
                wait <= ceiling && wait >= ceiling / 2,
                "{attempt}: {wait:?}"
            );
        }
    }
}
