//! Checks of an `HttpClient` source's keys: each error names the key at fault.

use super::Validator;
use crate::config::ConfigError;
use crate::config::connectors::{HttpClientSourceConfig, HttpFormat, HttpMethod, HttpPaginator};

impl Validator<'_> {
    /// Check the `HttpClient` source `name`'s keys.
    pub(super) fn check_http(
        &self,
        name: &str,
        c: &HttpClientSourceConfig,
    ) -> Result<(), ConfigError> {
        let at = |key: &str| format!("data_sources.{name}.HttpClient.{key}");
        let bad = |key: &str, message: &str| Err(self.bad_value(&at(key), message));
        match reqwest::Url::parse(c.url.expose()) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host_str().is_some() => {}
            Ok(_) => return bad("url", "must be an http:// or https:// URL with a host"),
            Err(e) => return bad("url", &format!("is not a valid URL: {e}")),
        }
        if c.body.is_some() && matches!(c.method, None | Some(HttpMethod::Get)) {
            return bad("body", "is sent only with `method: POST` or `method: PUT`");
        }
        if let Err((key, message)) = c.resolved_auth() {
            return bad(key, message);
        }
        if c.scrape_timeout_seconds == Some(0) {
            return bad("scrape_timeout_seconds", "must be at least 1");
        }
        if c.scrape_interval_seconds == Some(0) {
            return bad("scrape_interval_seconds", "must be at least 1");
        }
        if c.batch_size == Some(0) {
            return bad("batch_size", "must be at least 1");
        }
        if let Some(rate) = c.max_requests_per_second
            && !(rate.is_finite() && rate > 0.0)
        {
            return bad("max_requests_per_second", "must be a number above 0");
        }
        let json = matches!(c.format, None | Some(HttpFormat::Json));
        if let Some(path) = &c.records_path {
            if !json {
                return bad("records_path", "applies to `format: json` only");
            }
            check_path(path).or_else(|m| bad("records_path", &m))?;
        }
        if c.paginator.is_some() && c.next_url_path.is_some() {
            return bad(
                "next_url_path",
                "is the earlier spelling of `paginator: {next_url: {path}}`: give one of them",
            );
        }
        if let Some(p) = &c.paginator
            && p.paginator().is_none()
        {
            return bad(
                "paginator",
                "must hold exactly one of next_url, link_header, cursor, offset, page_number",
            );
        }
        match c.paginator() {
            Some(HttpPaginator::NextUrl { path }) => {
                if !json {
                    return bad("paginator.next_url", "needs `format: json`");
                }
                check_path(&path).or_else(|m| bad("paginator.next_url.path", &m))?;
            }
            Some(HttpPaginator::Cursor { path, param }) => {
                if !json {
                    return bad("paginator.cursor", "needs `format: json`");
                }
                check_path(&path).or_else(|m| bad("paginator.cursor.path", &m))?;
                if param.trim().is_empty() {
                    return bad("paginator.cursor.param", "must not be empty");
                }
            }
            Some(HttpPaginator::Offset {
                param, page_size, ..
            }) => {
                if param.trim().is_empty() {
                    return bad("paginator.offset.param", "must not be empty");
                }
                if page_size == 0 {
                    return bad("paginator.offset.page_size", "must be at least 1");
                }
            }
            Some(HttpPaginator::PageNumber {
                param, page_size, ..
            }) => {
                if param.trim().is_empty() {
                    return bad("paginator.page_number.param", "must not be empty");
                }
                if page_size == 0 {
                    return bad("paginator.page_number.page_size", "must be at least 1");
                }
            }
            Some(HttpPaginator::LinkHeader {}) | None => {}
        }
        if let Some(inc) = &c.incremental {
            check_path(&inc.cursor_path).or_else(|m| bad("incremental.cursor_path", &m))?;
            if inc.param.trim().is_empty() {
                return bad("incremental.param", "must not be empty");
            }
        }
        Ok(())
    }
}

/// A dot path: non-empty segments separated by `.`.
fn check_path(path: &str) -> Result<(), String> {
    if path.split('.').any(|s| s.trim().is_empty()) {
        return Err(format!(
            "'{path}' is not a valid dot path (like `data.items`)"
        ));
    }
    Ok(())
}
