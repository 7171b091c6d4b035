//! Parsing and validating the `HttpClient` keys, through real files.

use std::collections::BTreeMap;

use super::*;
use crate::config::load::{LoadedConfig, load_file};
use crate::config::{ConfigError, SourceConnector, validate};

fn load(text: &str, pairs: &[(&str, &str)]) -> Result<LoadedConfig, ConfigError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("skippr.yml");
    std::fs::write(&path, text).unwrap();
    let env: BTreeMap<String, String> = pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    load_file(&path, env)
}

fn http(source: &str, pairs: &[(&str, &str)]) -> Result<HttpClientSourceConfig, ConfigError> {
    let text = format!(
        "pipelines:\n  api:\n    data_source: data_sources.api\ndata_sources:\n  api:\n    HttpClient:\n{}",
        source
            .lines()
            .map(|l| format!("      {l}\n"))
            .collect::<String>()
    );
    let loaded = load(&text, pairs)?;
    validate(&loaded, None)?;
    match &loaded.config.data_sources["api"].connector {
        SourceConnector::HttpClient(c) => Ok((**c).clone()),
        _ => unreachable!(),
    }
}

fn err(source: &str) -> String {
    http(source, &[("TOKEN", "t0k3n")]).unwrap_err().to_string()
}

#[test]
fn the_products_keys_and_ours_parse() {
    let c = http(
        "url: https://api.example.com/v1/items
method: POST
headers:
  Accept: application/json
body: '{\"q\": 1}'
auth:
  strategy: bearer
  token: ${TOKEN}
scrape_interval_seconds: 60
scrape_timeout_seconds: 9
format: json
records_path: data.items
paginator:
  next_url:
    path: links.next
incremental:
  cursor_path: updated_at
  param: since
  initial_value: '2026-01-01'
max_requests_per_second: 2.5
batch_size: 500",
        &[("TOKEN", "t0k3n")],
    )
    .unwrap();
    assert_eq!(c.method, Some(HttpMethod::Post));
    assert_eq!(c.scrape_timeout_seconds, Some(9));
    assert_eq!(
        c.paginator(),
        Some(HttpPaginator::NextUrl {
            path: "links.next".into()
        })
    );
    assert!(matches!(c.resolved_auth(), Ok(ResolvedAuth::Bearer(t)) if t.expose() == "t0k3n"));
    assert_eq!(
        c.incremental.as_ref().map(|i| i.param.as_str()),
        Some("since")
    );
    assert!(!format!("{c:?}").contains("t0k3n"));
}

#[test]
fn flat_auth_spellings_and_the_earlier_keys_are_accepted() {
    let c = http(
        "url: https://api.example.com/\nauth_strategy: basic\nauth_user: me\nauth_password: ${TOKEN}",
        &[("TOKEN", "pw")],
    )
    .unwrap();
    assert!(
        matches!(c.resolved_auth(), Ok(ResolvedAuth::Basic { user, password: Some(p) }) if user == "me" && p.expose() == "pw")
    );
    let c = http(
        "url: https://api.example.com/\nbearer_token: ${TOKEN}\nnext_url_path: next",
        &[("TOKEN", "t")],
    )
    .unwrap();
    assert!(matches!(c.resolved_auth(), Ok(ResolvedAuth::Bearer(_))));
    assert_eq!(
        c.paginator(),
        Some(HttpPaginator::NextUrl {
            path: "next".into()
        })
    );
    let c = http(
        "url: https://api.example.com/\nauth_token: ${TOKEN}",
        &[("TOKEN", "t")],
    )
    .unwrap();
    assert!(matches!(c.resolved_auth(), Ok(ResolvedAuth::Bearer(_))));
    // Every paginator style parses.
    for p in [
        "link_header: {}",
        "cursor: {path: meta.next, param: after}",
        "offset: {param: offset, limit_param: limit, page_size: 100}",
        "page_number: {param: page, page_size: 50, start: 0}",
    ] {
        http(&format!("url: https://a.example/\npaginator: {{{p}}}"), &[]).unwrap();
    }
}

#[test]
fn plaintext_tokens_and_passwords_are_refused_and_never_shown() {
    for (source, key) in [
        ("auth:\n  token: hunter2", "auth.token"),
        ("auth_token: hunter2", "auth_token"),
        ("auth_password: hunter2\nauth_user: u", "auth_password"),
    ] {
        let e = http(&format!("url: https://a.example/\n{source}"), &[]).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, ConfigError::PlaintextSecret { .. }), "{msg}");
        assert!(msg.contains(key), "{key}: {msg}");
        assert!(!msg.contains("hunter2"), "{msg}");
    }
}

#[test]
fn each_mistake_names_its_key() {
    for (source, key, says) in [
        ("url: ftp://a.example/x", "HttpClient.url", "http://"),
        ("url: not a url", "HttpClient.url", "not a valid URL"),
        (
            "url: https://a.example/\nbody: x",
            "HttpClient.body",
            "POST",
        ),
        (
            "url: https://a.example/\nscrape_timeout_seconds: 0",
            "scrape_timeout_seconds",
            "at least 1",
        ),
        (
            "url: https://a.example/\nscrape_interval_seconds: 0",
            "scrape_interval_seconds",
            "at least 1",
        ),
        (
            "url: https://a.example/\nbatch_size: 0",
            "batch_size",
            "at least 1",
        ),
        (
            "url: https://a.example/\nmax_requests_per_second: 0",
            "max_requests_per_second",
            "above 0",
        ),
        (
            "url: https://a.example/\nformat: csv\nrecords_path: data",
            "records_path",
            "json",
        ),
        (
            "url: https://a.example/\nrecords_path: data..x",
            "records_path",
            "dot path",
        ),
        (
            "url: https://a.example/\nformat: jsonl\npaginator: {next_url: {path: n}}",
            "paginator.next_url",
            "json",
        ),
        (
            "url: https://a.example/\nnext_url_path: n\npaginator: {link_header: {}}",
            "next_url_path",
            "one of them",
        ),
        (
            "url: https://a.example/\npaginator: {offset: {param: o, page_size: 0}}",
            "paginator.offset.page_size",
            "at least 1",
        ),
        (
            "url: https://a.example/\nauth: {token: '${TOKEN}'}\nauth_user: u",
            "HttpClient.auth",
            "twice",
        ),
        (
            "url: https://a.example/\nauth: {strategy: bearer, user: u}",
            "auth.token",
            "required",
        ),
        (
            "url: https://a.example/\nauth_strategy: basic",
            "auth_user",
            "required",
        ),
        (
            "url: https://a.example/\nincremental: {cursor_path: '', param: since}",
            "incremental.cursor_path",
            "dot path",
        ),
    ] {
        let msg = err(source);
        assert!(msg.contains(key) && msg.contains(says), "{source}: {msg}");
    }
    let msg = err("url: https://a.example/\npaginator: {}");
    assert!(
        msg.contains("paginator") && msg.contains("exactly one"),
        "{msg}"
    );
    let msg = err("url: https://a.example/\npaginator: {link_header: {}, next_url: {path: n}}");
    assert!(
        msg.contains("paginator") && msg.contains("exactly one"),
        "{msg}"
    );
    let msg = err("url: https://a.example/\npaginator: {next_url: {path: n, extra: 1}}");
    assert!(msg.contains("extra"), "{msg}");
    let msg = err("url: https://a.example/\nmethod: DELETE");
    assert!(msg.contains("DELETE"), "{msg}");
}
