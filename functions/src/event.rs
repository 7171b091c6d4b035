//! The invocation event: `{"pipeline": "<name>"}` from a direct invoke or an EventBridge
//! rule's constant input, or an EventBridge scheduled event whose `detail` is that body.

use crate::error::ServerlessError;

/// What an invocation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The pipeline; `None`: the config's only pipeline.
    pub pipeline: Option<String>,
}

/// Read an invocation event (see the crate docs). A body naming its pipeline wins over a
/// `detail` it may also carry.
pub fn parse_event(event: &serde_json::Value) -> Result<Invocation, ServerlessError> {
    let bad = |message: String| ServerlessError::Event { message };
    let object = event.as_object().ok_or_else(|| {
        bad(format!(
            "expected a JSON object such as {{\"pipeline\": \"<name>\"}}, got {}",
            json_kind(event)
        ))
    })?;
    let body = match object.get("detail") {
        Some(detail) if !object.contains_key("pipeline") => {
            detail.as_object().ok_or_else(|| {
                bad(format!(
                    "`detail` must be an object such as {{\"pipeline\": \"<name>\"}}, got {}",
                    json_kind(detail)
                ))
            })?
        }
        _ => object,
    };
    let pipeline = match body.get("pipeline") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(name)) if !name.is_empty() => Some(name.clone()),
        Some(other) => {
            return Err(bad(format!(
                "`pipeline` must be a pipeline name, got {}",
                json_kind(other)
            )));
        }
    };
    Ok(Invocation { pipeline })
}

/// What kind of JSON value `value` is, for messages.
fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(s) if s.is_empty() => "an empty string",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> serde_json::Value {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/events")
            .join(name);
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
    }

    #[test]
    fn the_fixture_events_name_their_pipeline() {
        for name in ["scheduled.json", "direct.json"] {
            assert_eq!(
                parse_event(&fixture(name)).unwrap().pipeline.as_deref(),
                Some("events"),
                "{name}"
            );
        }
    }

    #[test]
    fn an_event_without_a_pipeline_means_the_only_one_and_bad_events_are_refused() {
        let scheduled_without = serde_json::json!({"detail-type": "Scheduled Event", "detail": {}});
        assert_eq!(parse_event(&scheduled_without).unwrap().pipeline, None);
        assert_eq!(parse_event(&serde_json::json!({})).unwrap().pipeline, None);
        for bad in [
            serde_json::json!([1]),
            serde_json::json!("events"),
            serde_json::json!({"pipeline": 3}),
            serde_json::json!({"pipeline": ""}),
            serde_json::json!({"detail": "events"}),
        ] {
            let e = parse_event(&bad).unwrap_err();
            assert!(matches!(e, ServerlessError::Event { .. }), "{bad}: {e}");
            assert_eq!(e.error_type(), "NonRetryable.Event");
        }
        // A body naming its pipeline wins over a `detail` it may also carry.
        let both = serde_json::json!({"pipeline": "a", "detail": {"pipeline": "b"}});
        assert_eq!(parse_event(&both).unwrap().pipeline.as_deref(), Some("a"));
    }
}
