//! Credentials inside values that are not secrets as a whole: HTTP headers and URLs.
//!
//! An API key often travels in a header (`Authorization`, `X-API-Key`) or in the URL's query
//! (`?api_key=...`) rather than in a field of its own. So a header or query parameter whose
//! *name* says it carries a credential ([`is_credential_name`]) is a secret like a
//! [`Secret`] field: in the config file it must be a whole `${NAME}` reference (a header
//! value), or the whole URL must be one (a query parameter or a `user:password@` in the
//! URL); plain text is rejected while the file is checked, naming the key, never the value.
//! Once loaded, [`HeaderValue`] and [`HttpUrl`] print such parts as `***` in `Debug` and
//! `Display`, so they cannot reach logs or error messages; other headers and parameters are
//! shown as written, which is what makes a URL in a message useful.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::de::{DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::secret::{PLAINTEXT_SECRET, Secret, references_required};

/// Name fragments that make a header or query parameter a credential, compared with the
/// name lowercased and `-` read as `_`.
const CREDENTIAL_FRAGMENTS: &[&str] = &[
    "auth",
    "token",
    "secret",
    "password",
    "passwd",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "session",
    "cookie",
    "signature",
    "credential",
];

/// Whole names (after the same folding) that are credentials though no fragment matches.
const CREDENTIAL_NAMES: &[&str] = &["key", "sig", "code", "x_amz_security_token", "pass"];

/// The placeholder printed instead of a credential.
const REDACTED: &str = "***";

/// Whether a header or query parameter named `name` carries a credential (case-insensitive;
/// `-` and `_` alike): `Authorization`, `Proxy-Authorization`, `Cookie`, `X-API-Key`,
/// `api_key`, `access_token`, `client_secret`, `password`, `key`, `sig` and the like.
pub fn is_credential_name(name: &str) -> bool {
    let folded: String = name
        .chars()
        .map(|c| match c {
            '-' | '.' | ' ' => '_',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    CREDENTIAL_NAMES.contains(&folded.as_str())
        || CREDENTIAL_FRAGMENTS
            .iter()
            .any(|fragment| folded.contains(fragment))
}

/// One header's value: shown as written, or a credential that is never shown.
#[derive(Clone, PartialEq, Eq)]
pub enum HeaderValue {
    /// An ordinary header (`Accept: application/json`).
    Plain(String),
    /// A header whose name carries a credential ([`is_credential_name`]).
    Secret(Secret),
}

impl HeaderValue {
    /// The value to send. Call this only where the request is built.
    pub fn expose(&self) -> &str {
        match self {
            HeaderValue::Plain(value) => value,
            HeaderValue::Secret(secret) => secret.expose(),
        }
    }

    /// Whether the value is a credential.
    pub fn is_secret(&self) -> bool {
        matches!(self, HeaderValue::Secret(_))
    }
}

impl fmt::Debug for HeaderValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderValue::Plain(value) => fmt::Debug::fmt(value, f),
            HeaderValue::Secret(secret) => fmt::Debug::fmt(secret, f),
        }
    }
}

impl fmt::Display for HeaderValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderValue::Plain(value) => f.write_str(value),
            HeaderValue::Secret(secret) => fmt::Display::fmt(secret, f),
        }
    }
}

/// Request headers, by name: those named as credentials are [`HeaderValue::Secret`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpHeaders(pub BTreeMap<String, HeaderValue>);

impl HttpHeaders {
    /// The headers, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &HeaderValue)> {
        self.0.iter().map(|(name, value)| (name.as_str(), value))
    }

    /// The header `name`, compared case-insensitively as HTTP does.
    pub fn get(&self, name: &str) -> Option<&HeaderValue> {
        self.0
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value)
    }
}

/// Reads one header's value knowing its name.
struct HeaderSeed<'a>(&'a str);

impl<'de> DeserializeSeed<'de> for HeaderSeed<'_> {
    type Value = HeaderValue;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<HeaderValue, D::Error> {
        if is_credential_name(self.0) {
            Secret::deserialize(deserializer).map(HeaderValue::Secret)
        } else {
            String::deserialize(deserializer).map(HeaderValue::Plain)
        }
    }
}

impl<'de> Deserialize<'de> for HttpHeaders {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct HeadersVisitor;
        impl<'de> Visitor<'de> for HeadersVisitor {
            type Value = HttpHeaders;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a map of header names to values")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<HttpHeaders, A::Error> {
                let mut headers = BTreeMap::new();
                while let Some(name) = map.next_key::<String>()? {
                    let value = map.next_value_seed(HeaderSeed(&name))?;
                    if headers.insert(name.clone(), value).is_some() {
                        return Err(serde::de::Error::custom(format_args!(
                            "`{name}` is defined twice"
                        )));
                    }
                }
                Ok(HttpHeaders(headers))
            }
        }
        deserializer.deserialize_map(HeadersVisitor)
    }
}

impl JsonSchema for HttpHeaders {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "HttpHeaders".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "object",
            "additionalProperties": { "type": "string" },
            "description": "Request headers. A header named as a credential (Authorization, \
                Cookie, X-API-Key, a name holding token, secret, password, key...) is a \
                secret: its value must be a `${NAME}` environment reference.",
        })
    }

    fn inline_schema() -> bool {
        true
    }
}

/// A URL that may carry credentials in its query (`?api_key=...`) or its user info
/// (`user:password@`): `Debug` and `Display` show it with those values as `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct HttpUrl(String);

impl HttpUrl {
    /// Wrap a URL.
    pub fn new(url: impl Into<String>) -> Self {
        HttpUrl(url.into())
    }

    /// The URL itself, credentials included. Call this only where the request is built.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL with the password of its user info and the values of its credential query
    /// parameters replaced by `***`.
    pub fn redacted(&self) -> String {
        redact_url(&self.0)
    }
}

/// The parts of a URL that carry credentials, as byte ranges of their values.
fn credential_ranges(url: &str) -> Vec<std::ops::Range<usize>> {
    let mut ranges = Vec::new();
    let end = url.find('#').unwrap_or(url.len());
    let query_at = url[..end].find('?');
    let before_query = query_at.unwrap_or(end);
    // User info: `scheme://user:password@host`.
    if let Some(scheme_end) = url[..before_query].find("://") {
        let authority_start = scheme_end + 3;
        let authority_end = url[authority_start..before_query]
            .find('/')
            .map_or(before_query, |at| authority_start + at);
        if let Some(at) = url[authority_start..authority_end].rfind('@') {
            let userinfo = authority_start..authority_start + at;
            if let Some(colon) = url[userinfo.clone()].find(':') {
                ranges.push(userinfo.start + colon + 1..userinfo.end);
            }
        }
    }
    if let Some(query_at) = query_at {
        let mut start = query_at + 1;
        for pair in url[query_at + 1..end].split('&') {
            if let Some(eq) = pair.find('=') {
                let name = percent_decoded(&pair[..eq]);
                if is_credential_name(&name) && eq + 1 < pair.len() {
                    ranges.push(start + eq + 1..start + pair.len());
                }
            }
            start += pair.len() + 1;
        }
    }
    ranges
}

/// `%XX` escapes and `+` decoded, for comparing a parameter's name.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|pair| std::str::from_utf8(pair).ok())
                    .and_then(|pair| u8::from_str_radix(pair, 16).ok());
                if let Some(byte) = hex {
                    out.push(byte);
                    i += 3;
                    continue;
                }
                out.push(b'%');
            }
            b'+' => out.push(b' '),
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `url` with its credential values as `***` (see [`HttpUrl::redacted`]).
pub fn redact_url(url: &str) -> String {
    let mut out = String::with_capacity(url.len());
    let mut last = 0;
    for range in credential_ranges(url) {
        out.push_str(&url[last..range.start]);
        out.push_str(REDACTED);
        last = range.end;
    }
    out.push_str(&url[last..]);
    out
}

impl fmt::Debug for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "HttpUrl({:?})", self.redacted())
    }
}

impl fmt::Display for HttpUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl<'de> Deserialize<'de> for HttpUrl {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if references_required()
            && super::env::reference_name(&text).is_none()
            && !credential_ranges(&text).is_empty()
        {
            return Err(serde::de::Error::custom(PLAINTEXT_SECRET));
        }
        Ok(HttpUrl(text))
    }
}

impl JsonSchema for HttpUrl {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "HttpUrl".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A URL. One that carries a credential (a query parameter named as \
                one, such as api_key or token, or a user:password@) must be written as a whole \
                `${NAME}` environment reference.",
        })
    }

    fn inline_schema() -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
