//! The `HttpClient` source's configuration: the real product's keys (`url`, `method`,
//! `headers`, `body`, `auth`, `scrape_interval_seconds`, `scrape_timeout_seconds`, `format`)
//! and ours (`records_path`, `paginator`, `incremental`, `max_requests_per_second`).

use schemars::JsonSchema;
use serde::Deserialize;

use super::credentials::{HttpHeaders, HttpUrl};
use super::secret::Secret;

/// `HttpClient` source: a paginated JSON REST API. Each pass fetches the first page (or the
/// page after the last committed batch), then follows the `paginator` until a page yields no
/// next one. The position reached (the page and the records taken from it, the `incremental`
/// cursor) is committed with every WAL batch, so a crash resumes after the last committed
/// batch and each record lands once. Without `incremental`, every pass reads the whole API
/// again (its records land again); with it, a pass asks only for records after the last
/// committed cursor. Connection errors, timeouts, 429 and 5xx are retried (8 attempts, after
/// `Retry-After` or an exponential backoff with jitter); another 4xx fails the pass naming the
/// URL (credentials as `***`), the status and the start of the body. A page over 8 MiB is
/// spooled to a temporary file and its records streamed (memory stays bounded; at most
/// 16 GiB). Records go to the namespace `http.{url_host}` made table-safe
/// (`http_api_example_com`) unless `transform.namespace_fields` routes them. `discover` samples
/// the first 10,000 records (its first pages; `--limit` sets the number), never the whole API.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpClientSourceConfig {
    /// Connector version pin. Accepted for compatibility.
    #[serde(default)]
    pub version: Option<String>,
    /// URL of the first page. One that carries a credential (a query parameter named as one,
    /// such as `api_key`, `token` or `sig`, or a `user:password@`) must be a whole `${NAME}`
    /// reference; such values are shown as `***` wherever the URL is printed.
    pub url: HttpUrl,
    /// HTTP method: `GET` (default), `POST` or `PUT`.
    #[serde(default)]
    pub method: Option<HttpMethod>,
    /// Extra request headers. One named as a credential (`Authorization`, `Cookie`,
    /// `X-API-Key`, a name holding `token`, `secret`, `password`, `auth`, `key`...) is a
    /// secret: its value must be a `${NAME}` reference and is never printed.
    #[serde(default)]
    pub headers: HttpHeaders,
    /// Request body, sent as it is with every request (for `POST` and `PUT`). Default: none.
    #[serde(default)]
    pub body: Option<String>,
    /// Authentication: `{strategy: basic | bearer, user, password, token}`. `basic` sends
    /// `user` and `password` (a `${NAME}` reference); `bearer` sends `Authorization: Bearer
    /// {token}` (`token` a `${NAME}` reference). The strategy may be left out when only
    /// `token` (bearer) or `user` (basic) is given. Default: no authentication.
    #[serde(default)]
    pub auth: Option<HttpAuth>,
    /// Flat spelling of `auth.strategy`.
    #[serde(default)]
    pub auth_strategy: Option<AuthStrategy>,
    /// Flat spelling of `auth.user`.
    #[serde(default)]
    pub auth_user: Option<String>,
    /// Flat spelling of `auth.password`: a `${NAME}` reference.
    #[serde(default)]
    pub auth_password: Option<Secret>,
    /// Flat spelling of `auth.token`: a `${NAME}` reference. Also accepted as `bearer_token`
    /// (the earlier spelling).
    #[serde(default, alias = "bearer_token")]
    pub auth_token: Option<Secret>,
    /// Poll again every this many seconds while `skipprd sync` runs: the pipeline's
    /// `sync_frequency_seconds` when that is not given. Each pass walks the pages once.
    #[serde(default)]
    pub scrape_interval_seconds: Option<u64>,
    /// Seconds one request may take, from connecting to the end of its body. Default 5.
    #[serde(default)]
    pub scrape_timeout_seconds: Option<u64>,
    /// Response format: `json` (default: a page is an array of records, one record, or an
    /// object holding the records at `records_path`), `jsonl` (one record per line) or `csv`
    /// (a header row). Gzip bodies (`Content-Encoding: gzip`, or gzip magic bytes) are
    /// decompressed.
    #[serde(default)]
    pub format: Option<HttpFormat>,
    /// Dot path to the array of records in a `json` page, e.g. `data.items`. Default: the page
    /// itself (an array of records, or one record).
    #[serde(default)]
    pub records_path: Option<String>,
    /// Pagination: exactly one of `next_url`, `link_header`, `cursor`, `offset`,
    /// `page_number` (see the `paginator` table below). An empty page, or a next URL equal to
    /// the page's own, also ends. Default: one page.
    #[serde(default)]
    pub paginator: Option<HttpPaginatorConfig>,
    /// Earlier spelling of `paginator: {next_url: {path}}`.
    #[serde(default)]
    pub next_url_path: Option<String>,
    /// Incremental reading: `{cursor_path, param, initial_value}`. Each record's value at the
    /// dot path `cursor_path` is tracked; the greatest one committed is sent as query
    /// parameter `param` on the first request of later passes (`initial_value` on the very
    /// first, when given), so they ask only for records after it. Values compare as numbers
    /// when both are numbers, else as text (ISO 8601 timestamps compare correctly).
    #[serde(default)]
    pub incremental: Option<HttpIncremental>,
    /// Most requests sent per second (retries included). Default: no limit.
    #[serde(default)]
    pub max_requests_per_second: Option<f64>,
    /// Records per batch (one Arrow record batch). Default 10000. A batch also closes once
    /// `BUFFER_THRESHOLD_BYTES` (default 10 MB) of response bodies were read.
    #[serde(default)]
    pub batch_size: Option<usize>,
    /// A batch also closes once this many bytes of response bodies were read. Default: the
    /// pipeline's `buffer_threshold_bytes`, else `BUFFER_THRESHOLD_BYTES`, else 10 MB.
    #[serde(default)]
    pub batch_size_bytes: Option<u64>,
    /// A batch also closes once it has been filling this many seconds (slow pages commit
    /// what they have). Default: the pipeline's `buffer_threshold_seconds`, else
    /// `BUFFER_THRESHOLD_SECONDS`, else 60.
    #[serde(default)]
    pub batch_size_seconds: Option<u64>,
}

/// An HTTP method the source may send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
pub enum HttpMethod {
    /// `GET`.
    #[serde(rename = "GET", alias = "get")]
    Get,
    /// `POST`.
    #[serde(rename = "POST", alias = "post")]
    Post,
    /// `PUT`.
    #[serde(rename = "PUT", alias = "put")]
    Put,
}

/// An authentication strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AuthStrategy {
    /// HTTP Basic: `user` and `password`.
    Basic,
    /// `Authorization: Bearer {token}`.
    Bearer,
}

/// `auth`: how requests authenticate.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpAuth {
    /// `basic` or `bearer`. Default: `bearer` when `token` is given, else `basic`.
    #[serde(default)]
    pub strategy: Option<AuthStrategy>,
    /// User name (basic).
    #[serde(default)]
    pub user: Option<String>,
    /// Password (basic): a `${NAME}` reference.
    #[serde(default)]
    pub password: Option<Secret>,
    /// Token (bearer): a `${NAME}` reference.
    #[serde(default)]
    pub token: Option<Secret>,
}

/// The response format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HttpFormat {
    /// A JSON document per page (default).
    Json,
    /// One JSON object per line.
    Jsonl,
    /// Comma-separated values with a header row.
    Csv,
}

/// `paginator`: how the next page is found; exactly one of its keys.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpPaginatorConfig {
    /// `{path}`: the next page's URL is at this dot path in the page (relative URLs resolve
    /// against the page's; absent, null or empty ends).
    #[serde(default)]
    pub next_url: Option<NextUrlPaginator>,
    /// `{}`: the next page's URL is the `Link` header's `rel="next"` target (RFC 8288).
    #[serde(default)]
    pub link_header: Option<LinkHeaderPaginator>,
    /// `{path, param}`: a cursor at dot path `path` in the page is sent as query parameter
    /// `param` for the next page (absent, null or empty ends).
    #[serde(default)]
    pub cursor: Option<CursorPaginator>,
    /// `{param, limit_param, page_size}`: `param` carries the records skipped so far,
    /// `limit_param` (optional) `page_size`; a page shorter than `page_size` is the last.
    #[serde(default)]
    pub offset: Option<OffsetPaginator>,
    /// `{param, size_param, page_size, start}`: `param` carries the page number (from `start`,
    /// default 1), `size_param` (optional) `page_size`; a page shorter than `page_size` is the
    /// last.
    #[serde(default)]
    pub page_number: Option<PageNumberPaginator>,
}

/// `paginator.next_url`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NextUrlPaginator {
    /// Dot path to the next page's URL.
    pub path: String,
}

/// `paginator.link_header`: no keys.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LinkHeaderPaginator {}

/// `paginator.cursor`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CursorPaginator {
    /// Dot path to the cursor in the page.
    pub path: String,
    /// The query parameter it is sent in.
    pub param: String,
}

/// `paginator.offset`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OffsetPaginator {
    /// The offset parameter.
    pub param: String,
    /// The parameter carrying `page_size`, if any.
    #[serde(default)]
    pub limit_param: Option<String>,
    /// Records per page; a shorter page is the last.
    pub page_size: u64,
}

/// `paginator.page_number`.
#[derive(Debug, Clone, PartialEq, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PageNumberPaginator {
    /// The page-number parameter.
    pub param: String,
    /// The parameter carrying `page_size`, if any.
    #[serde(default)]
    pub size_param: Option<String>,
    /// Records per page; a shorter page is the last.
    pub page_size: u64,
    /// The first page's number. Default 1.
    #[serde(default)]
    pub start: Option<u64>,
}

/// How the next page is found (from [`HttpPaginatorConfig`]).
#[derive(Debug, Clone, PartialEq)]
pub enum HttpPaginator {
    /// The next page's URL is in the page, at this dot path.
    NextUrl {
        /// Dot path to the URL.
        path: String,
    },
    /// The next page's URL is the `Link` header's `rel="next"` target.
    LinkHeader {},
    /// A cursor in the page is sent as a query parameter for the next page.
    Cursor {
        /// Dot path to the cursor.
        path: String,
        /// The query parameter it is sent in.
        param: String,
    },
    /// Records skipped so far are sent as a query parameter.
    Offset {
        /// The offset parameter.
        param: String,
        /// The parameter carrying `page_size`, if any.
        limit_param: Option<String>,
        /// Records per page.
        page_size: u64,
    },
    /// The page number is sent as a query parameter.
    PageNumber {
        /// The page-number parameter.
        param: String,
        /// The parameter carrying `page_size`, if any.
        size_param: Option<String>,
        /// Records per page.
        page_size: u64,
        /// The first page's number (default 1).
        start: Option<u64>,
    },
}

impl HttpPaginatorConfig {
    /// The one paginator given, or `None` when none or several are.
    pub fn paginator(&self) -> Option<HttpPaginator> {
        let mut found = Vec::new();
        if let Some(p) = &self.next_url {
            found.push(HttpPaginator::NextUrl {
                path: p.path.clone(),
            });
        }
        if self.link_header.is_some() {
            found.push(HttpPaginator::LinkHeader {});
        }
        if let Some(p) = &self.cursor {
            found.push(HttpPaginator::Cursor {
                path: p.path.clone(),
                param: p.param.clone(),
            });
        }
        if let Some(p) = &self.offset {
            found.push(HttpPaginator::Offset {
                param: p.param.clone(),
                limit_param: p.limit_param.clone(),
                page_size: p.page_size,
            });
        }
        if let Some(p) = &self.page_number {
            found.push(HttpPaginator::PageNumber {
                param: p.param.clone(),
                size_param: p.size_param.clone(),
                page_size: p.page_size,
                start: p.start,
            });
        }
        if found.len() == 1 { found.pop() } else { None }
    }
}

/// `incremental`: ask later passes only for records after the last one committed.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HttpIncremental {
    /// Dot path to each record's cursor value (an increasing id or timestamp).
    pub cursor_path: String,
    /// Query parameter the last committed value is sent in.
    pub param: String,
    /// Value sent on the first pass. Default: the parameter is not sent then.
    #[serde(default)]
    pub initial_value: Option<String>,
}

/// The authentication a source sends, resolved from `auth` and the flat spellings.
#[derive(Debug, Clone)]
pub enum ResolvedAuth {
    /// No authentication.
    None,
    /// HTTP Basic.
    Basic {
        /// The user.
        user: String,
        /// The password, if any.
        password: Option<Secret>,
    },
    /// A bearer token.
    Bearer(Secret),
}

impl HttpClientSourceConfig {
    /// The default request timeout, in seconds.
    pub const DEFAULT_TIMEOUT_SECONDS: u64 = 5;

    /// The paginator, from `paginator` or the earlier `next_url_path`.
    pub fn paginator(&self) -> Option<HttpPaginator> {
        match &self.paginator {
            Some(p) => p.paginator(),
            None => self
                .next_url_path
                .as_ref()
                .map(|path| HttpPaginator::NextUrl { path: path.clone() }),
        }
    }

    /// The authentication to send, or the key (relative to the connector) that is wrong and
    /// why.
    pub fn resolved_auth(&self) -> Result<ResolvedAuth, (&'static str, &'static str)> {
        let nested = self.auth.as_ref();
        let flat = self.auth_strategy.is_some()
            || self.auth_user.is_some()
            || self.auth_password.is_some()
            || self.auth_token.is_some();
        if nested.is_some() && flat {
            return Err((
                "auth",
                "is given twice: use either `auth: {...}` or the flat `auth_*` keys",
            ));
        }
        let (prefix, strategy, user, password, token) = match nested {
            Some(a) => (
                "auth.",
                a.strategy,
                a.user.clone(),
                a.password.clone(),
                a.token.clone(),
            ),
            None => (
                "auth_",
                self.auth_strategy,
                self.auth_user.clone(),
                self.auth_password.clone(),
                self.auth_token.clone(),
            ),
        };
        let strategy = match strategy {
            Some(s) => s,
            None if token.is_some() => AuthStrategy::Bearer,
            None if user.is_some() || password.is_some() => AuthStrategy::Basic,
            None => return Ok(ResolvedAuth::None),
        };
        let key = |dotted: &'static str, flat: &'static str| {
            if prefix == "auth." { dotted } else { flat }
        };
        match strategy {
            AuthStrategy::Bearer => match token {
                Some(token) if user.is_none() && password.is_none() => {
                    Ok(ResolvedAuth::Bearer(token))
                }
                Some(_) => Err((
                    key("auth.user", "auth_user"),
                    "is not used by the bearer strategy (remove it, or use strategy basic)",
                )),
                None => Err((
                    key("auth.token", "auth_token"),
                    "is required by the bearer strategy",
                )),
            },
            AuthStrategy::Basic => match user {
                Some(user) if token.is_none() => Ok(ResolvedAuth::Basic { user, password }),
                Some(_) => Err((
                    key("auth.token", "auth_token"),
                    "is not used by the basic strategy (remove it, or use strategy bearer)",
                )),
                None => Err((
                    key("auth.user", "auth_user"),
                    "is required by the basic strategy",
                )),
            },
        }
    }
}

#[cfg(test)]
#[path = "http_tests.rs"]
mod tests;
