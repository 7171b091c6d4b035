//! A redacting wrapper for secret config values.
//!
//! A secret field (password, token, key) must be written as a whole `${NAME}` reference in the
//! config file; plain text is rejected while the file is checked (see [`crate::config::load()`]).
//! After environment substitution the value lives only inside [`Secret`], whose `Debug` and
//! `Display` print `***`, so it cannot reach logs or error messages by accident.

use std::cell::Cell;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer};

thread_local! {
    /// Set while the raw (unsubstituted) file is deserialized: secrets must then be `${NAME}`.
    static REQUIRE_REFERENCE: Cell<bool> = const { Cell::new(false) };
}

/// While the returned guard lives, deserializing a [`Secret`] on this thread fails unless the
/// text is a whole `${NAME}` reference. Used for the first pass over the raw file, so the error
/// carries the key path and line of the offending value.
pub(crate) fn require_references() -> impl Drop {
    struct Guard(bool);
    impl Drop for Guard {
        fn drop(&mut self) {
            REQUIRE_REFERENCE.with(|c| c.set(self.0));
        }
    }
    Guard(REQUIRE_REFERENCE.with(|c| c.replace(true)))
}

/// Whether secrets must be `${NAME}` references right now (see [`require_references`]).
pub(crate) fn references_required() -> bool {
    REQUIRE_REFERENCE.with(Cell::get)
}

/// The message of the error raised for a plaintext secret; the loader recognises it.
pub(crate) const PLAINTEXT_SECRET: &str = "plaintext secret";

/// A secret value: never printed, only exposed on purpose.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wrap a value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself. Call this only where the value is handed to a client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        if references_required() && super::env::reference_name(&text).is_none() {
            return Err(serde::de::Error::custom(PLAINTEXT_SECRET));
        }
        Ok(Secret(text))
    }
}

impl JsonSchema for Secret {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Secret".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "A secret: must be written as a `${NAME}` environment reference.",
            "x-secret": true
        })
    }

    fn inline_schema() -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_value() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?}"), "Secret(***)");
        assert_eq!(format!("{s}"), "***");
        assert_eq!(format!("{:?}", Some(&s)), "Some(Secret(***))");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn plaintext_is_refused_only_while_references_are_required() {
        let plain = serde_json::json!("hunter2");
        assert!(serde_json::from_value::<Secret>(plain.clone()).is_ok());
        let _guard = require_references();
        let err = serde_json::from_value::<Secret>(plain).unwrap_err();
        assert!(err.to_string().contains(PLAINTEXT_SECRET));
        assert!(!err.to_string().contains("hunter2"));
        assert!(serde_json::from_value::<Secret>(serde_json::json!("${PG_PASSWORD}")).is_ok());
    }
}
