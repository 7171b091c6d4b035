use super::*;
use crate::config::secret::require_references;

#[test]
fn credential_names_are_recognised_whatever_their_spelling() {
    for name in [
        "Authorization",
        "proxy-authorization",
        "Cookie",
        "X-API-Key",
        "x_api_key",
        "apikey",
        "api_key",
        "access_token",
        "client_secret",
        "password",
        "key",
        "sig",
        "X-Auth-Token",
        "X-Amz-Security-Token",
    ] {
        assert!(is_credential_name(name), "{name}");
    }
    for name in [
        "Accept",
        "User-Agent",
        "page",
        "limit",
        "since",
        "format",
        "keys_only2",
    ] {
        assert!(!is_credential_name(name), "{name}");
    }
}

#[test]
fn a_url_shows_its_credentials_as_stars() {
    let url = HttpUrl::new(
        "https://bob:hunter2@api.example.com/v1/items?page=2&api_key=K3Y&limit=10#top",
    );
    let shown = url.to_string();
    assert_eq!(
        shown,
        "https://bob:***@api.example.com/v1/items?page=2&api_key=***&limit=10#top"
    );
    assert!(!format!("{url:?}").contains("hunter2") && !format!("{url:?}").contains("K3Y"));
    assert_eq!(
        url.expose(),
        "https://bob:hunter2@api.example.com/v1/items?page=2&api_key=K3Y&limit=10#top"
    );
    // Percent-encoded names, empty values, no query, user without password.
    assert_eq!(
        redact_url("http://h/?api%5Fkey=x&token="),
        "http://h/?api%5Fkey=***&token="
    );
    assert_eq!(redact_url("http://bob@h/p"), "http://bob@h/p");
    assert_eq!(
        redact_url("http://h/p?%zz=1&%e2%82=2&токен=3"),
        "http://h/p?%zz=1&%e2%82=2&токен=3"
    );
}

#[test]
fn headers_named_as_credentials_are_secrets() {
    let headers: HttpHeaders = serde_json::from_value(serde_json::json!({
        "Accept": "application/json",
        "X-API-Key": "K3Y",
    }))
    .unwrap();
    assert!(!headers.get("accept").unwrap().is_secret());
    let key = headers.get("x-api-key").unwrap();
    assert!(key.is_secret());
    assert_eq!(key.expose(), "K3Y");
    let shown = format!("{headers:?}");
    assert!(
        shown.contains("application/json") && !shown.contains("K3Y"),
        "{shown}"
    );
}

#[test]
fn plaintext_credentials_are_refused_while_references_are_required() {
    let _guard = require_references();
    let refused =
        serde_json::from_value::<HttpHeaders>(serde_json::json!({"Authorization": "Bearer abc"}));
    let message = refused.unwrap_err().to_string();
    assert!(
        message.contains(PLAINTEXT_SECRET) && !message.contains("abc"),
        "{message}"
    );
    assert!(
        serde_json::from_value::<HttpHeaders>(
            serde_json::json!({"Authorization": "${AUTH}", "Accept": "text/csv"})
        )
        .is_ok()
    );
    for url in ["https://h/x?token=abc", "https://u:p@h/x"] {
        let message = serde_json::from_value::<HttpUrl>(serde_json::json!(url))
            .unwrap_err()
            .to_string();
        assert!(message.contains(PLAINTEXT_SECRET), "{url}: {message}");
    }
    for url in ["${API_URL}", "https://h/x?page=1", "https://u@h/x?token="] {
        assert!(
            serde_json::from_value::<HttpUrl>(serde_json::json!(url)).is_ok(),
            "{url}"
        );
    }
}
