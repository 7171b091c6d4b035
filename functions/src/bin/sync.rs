//! `skipprd-sync`: the Lambda function that runs one `sync` pass per invocation.
//!
//! Event: `{"pipeline": "<name>"}` directly, as an EventBridge rule's input, or as a scheduled
//! event's `detail`. Returns the pass's summary as JSON, or `{"pipeline", "skipped"}` when
//! another writer holds the lease. Behaviour, settings and error types:
//! [`skipprd_functions`].

fn main() -> Result<(), lambda_runtime::Error> {
    skipprd_functions::serve("skipprd-sync", |function, event, deadline_ms| {
        let outcome = function.sync(&event, deadline_ms)?;
        Ok(serde_json::to_value(outcome).unwrap_or_default())
    })
}
