//! `skipprd-discover`: the Lambda function that infers and saves a pipeline's schema.
//!
//! Event: `{"pipeline": "<name>"}` (as for `skipprd-sync`). Returns the schema summary as JSON.
//! Behaviour, settings and error types: [`skipprd_functions`].

fn main() -> Result<(), lambda_runtime::Error> {
    skipprd_functions::serve("skipprd-discover", |function, event, _deadline_ms| {
        let summary = function.discover(&event)?;
        Ok(serde_json::to_value(summary).unwrap_or_default())
    })
}
