//! The wiring the two Lambda functions share: logging, the init, and the runtime loop around
//! a blocking handler. Everything they decide lives in [`skipprd::serverless`]; this crate
//! only connects it to `lambda_runtime`.

use std::sync::Arc;

use lambda_runtime::{Diagnostic, LambdaEvent, service_fn};
use skipprd::serverless::{Function, ServerlessError};

/// JSON log lines on stderr (one object per line, for CloudWatch), level from `RUST_LOG`
/// (default `info`). Events and errors are logged; config values and secrets are not.
pub fn init_logging() {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_current_span(false)
        .init();
}

/// The Lambda error for `e`: `errorType` says whether retrying may help.
pub fn diagnostic(e: &ServerlessError) -> Diagnostic {
    Diagnostic {
        error_type: e.error_type(),
        error_message: e.to_string(),
    }
}

/// Init (AWS handle, config; a failure is returned by every invocation, non-retryably unless
/// it says otherwise), then serve invocations with `handle` on a blocking thread until the
/// Runtime API goes away.
pub fn serve<F>(name: &'static str, handle: F) -> Result<(), lambda_runtime::Error>
where
    F: Fn(&Function, serde_json::Value, u64) -> Result<serde_json::Value, ServerlessError>
        + Send
        + Sync
        + 'static,
{
    init_logging();
    let started = std::time::Instant::now();
    let function = Function::init_from_process();
    match &function {
        Ok(f) => tracing::info!(
            function = name,
            pipelines = f.config.pipelines.len(),
            init_ms = started.elapsed().as_secs_f64() * 1000.0,
            "Initialised."
        ),
        Err(e) => {
            tracing::error!(function = name, error = %e, error_type = %e.error_type(), "Init failed; every invocation will return this error.")
        }
    }
    let state = Arc::new((function, handle));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    runtime.block_on(lambda_runtime::run(service_fn(
        move |event: LambdaEvent<serde_json::Value>| {
            let state = state.clone();
            async move {
                let (payload, context) = (event.payload, event.context);
                let request_id = context.request_id.clone();
                let context_id = request_id.clone();
                let outcome = tokio::task::spawn_blocking(move || {
                    let (function, handle) = &*state;
                    match function {
                        Ok(function) => match handle(function, payload, context.deadline) {
                            Ok(summary) => {
                                tracing::info!(request_id = %request_id, summary = %summary, "Invocation done.");
                                Ok(summary)
                            }
                            Err(e) => Err(logged(&request_id, &e)),
                        },
                        Err(e) => Err(logged(&request_id, e)),
                    }
                })
                .await;
                match outcome {
                    Ok(result) => result,
                    Err(join) => Err(logged(
                        &context_id,
                        &ServerlessError::Aborted {
                            message: join.to_string(),
                        },
                    )),
                }
            }
        },
    )))
}

/// Log a failed invocation and turn it into the Lambda error.
fn logged(request_id: &str, e: &ServerlessError) -> Diagnostic {
    tracing::error!(request_id, error = %e, error_type = %e.error_type(), "Invocation failed.");
    diagnostic(e)
}
