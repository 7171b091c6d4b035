//! Why an invocation (or the init before it) failed, and the Lambda `errorType` that says
//! whether retrying may help: `Retryable.<Kind>` or `NonRetryable.<Kind>`.

use skipprd::config::ConfigError;
use skipprd::pipeline::PipelineError;

use crate::env::DEADLINE_MARGIN_VAR;

/// Why an invocation (or the init before it) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerlessError {
    /// The event is not one this function accepts.
    #[error("invalid event: {message}")]
    Event {
        /// What is wrong.
        message: String,
    },
    /// The config could not be found, fetched, parsed or validated.
    #[error(transparent)]
    Config(Box<ConfigError>),
    /// The config would keep the WAL or the state store on the function's disk, which does
    /// not outlive the execution environment.
    #[error(
        "{setting}={value} keeps {what} on the function's disk, which is lost with the execution environment: {fix}"
    )]
    LocalState {
        /// The setting.
        setting: &'static str,
        /// Its value.
        value: String,
        /// What would live there.
        what: &'static str,
        /// How to fix it.
        fix: &'static str,
    },
    /// `SKIPPR_DEADLINE_MARGIN_SECONDS` is not a number of seconds.
    #[error("{DEADLINE_MARGIN_VAR}={value}: not a non-negative number of seconds")]
    Margin {
        /// The value.
        value: String,
    },
    /// The AWS configuration could not be loaded.
    #[error("AWS: {0}")]
    Aws(#[from] skipprd::aws::AwsError),
    /// The command failed.
    #[error(transparent)]
    Pipeline(Box<PipelineError>),
    /// The work panicked or was cancelled.
    #[error("the pass ended abnormally: {message}")]
    Aborted {
        /// What happened.
        message: String,
    },
}

impl From<ConfigError> for ServerlessError {
    fn from(e: ConfigError) -> Self {
        ServerlessError::Config(Box::new(e))
    }
}

impl From<PipelineError> for ServerlessError {
    fn from(e: PipelineError) -> Self {
        ServerlessError::Pipeline(Box::new(e))
    }
}

impl ServerlessError {
    /// Whether the same invocation may succeed later, unchanged.
    pub fn is_retryable(&self) -> bool {
        match self {
            ServerlessError::Event { .. }
            | ServerlessError::LocalState { .. }
            | ServerlessError::Margin { .. }
            | ServerlessError::Aws(_)
            | ServerlessError::Aborted { .. } => false,
            ServerlessError::Config(e) => e.is_retryable(),
            ServerlessError::Pipeline(e) => e.is_retryable(),
        }
    }

    /// The Lambda `errorType`: `Retryable.<Kind>` or `NonRetryable.<Kind>`.
    pub fn error_type(&self) -> String {
        let kind = match self {
            ServerlessError::Event { .. } => "Event",
            ServerlessError::Config(e) if matches!(**e, ConfigError::S3Fetch { .. }) => {
                "ConfigFetch"
            }
            ServerlessError::Config(_) | ServerlessError::Margin { .. } => "Config",
            ServerlessError::Pipeline(e) if e.is_config() => "Config",
            ServerlessError::LocalState { .. } => "LocalState",
            ServerlessError::Aws(_) => "Aws",
            ServerlessError::Pipeline(_) => "Pipeline",
            ServerlessError::Aborted { .. } => "Aborted",
        };
        let class = if self.is_retryable() {
            "Retryable"
        } else {
            "NonRetryable"
        };
        format!("{class}.{kind}")
    }
}

#[cfg(test)]
mod tests {
    use skipprd::aws::SdkFailure;
    use skipprd::state::StateError;

    use super::*;

    #[test]
    fn error_types_follow_retryability() {
        let throttled = ServerlessError::from(ConfigError::S3Fetch {
            uri: "s3://b/k".into(),
            failure: Box::new(SdkFailure {
                code: "SlowDown".into(),
                status: Some(503),
                message: "slow down".into(),
                retryable: true,
            }),
        });
        assert!(throttled.is_retryable());
        assert_eq!(throttled.error_type(), "Retryable.ConfigFetch");
        let lease = ServerlessError::from(PipelineError::State {
            pipeline: "p".into(),
            source: StateError::Aws {
                table: "t".into(),
                key: "k".into(),
                op: "GetItem",
                failure: Box::new(SdkFailure {
                    code: "InternalServerError".into(),
                    status: Some(500),
                    message: "boom".into(),
                    retryable: true,
                }),
            },
        });
        assert_eq!(lease.error_type(), "Retryable.Pipeline");
        let missing = ServerlessError::from(PipelineError::State {
            pipeline: "p".into(),
            source: StateError::TableMissing {
                table: "t".into(),
                region: "us-east-1".into(),
            },
        });
        assert_eq!(missing.error_type(), "NonRetryable.Pipeline");
    }
}
