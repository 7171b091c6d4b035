//! AWS clients for the AWS backends (S3 source and WAL, DynamoDB store, Glue catalog, Athena).
//!
//! Every client comes from one [`Aws`] handle, built once per process (per Lambda init) from
//! aws-config's default chain, so the same code talks to AWS in production and to a local
//! server in tests:
//!
//! - **region**: the connector's `region` when given, else `AWS_REGION` / the profile;
//! - **credentials**: the standard chain (environment, profile and SSO, web identity, ECS and
//!   EC2 instance metadata); nothing is read from `skippr.yml`;
//! - **endpoint**: `AWS_ENDPOINT_URL`, or a per-service `AWS_ENDPOINT_URL_<SERVICE>` (for example
//!   `AWS_ENDPOINT_URL_S3`), or a connector's `endpoint`. S3 uses path-style addressing
//!   whenever an endpoint other than AWS's own is set (local servers such as moto or MinIO
//!   serve buckets by path);
//! - **timeouts**: every request is bounded, so that none outlives the writer's lease: the
//!   whole operation (every attempt and the backoff between them) by half the lease TTL, each
//!   attempt by a quarter of it (at least 5 s and 2 s), connecting by 3.1 s (or the attempt
//!   timeout when shorter). The TTL is `SKIPPR_LEASE_TTL_SECONDS` (default 30 s: 15 s per
//!   operation, 7.5 s per attempt); [`timeouts_for_lease`] is the rule. The lease is renewed
//!   every TTL/3, so a request that starts under a renewed lease ends (or is abandoned) before
//!   that lease can expire. TTLs under 10 s (tests) get the floors, and their requests may
//!   outlive the lease. A slow link that needs longer for a big WAL body needs a longer TTL.
//!   Response bodies streamed after the operation returned are guarded by the SDK's
//!   stalled-stream protection instead;
//! - **retries**: the SDK's standard mode (exponential backoff with jitter on throttling,
//!   5xx and transport errors): `AWS_MAX_ATTEMPTS` (default 3) and `AWS_RETRY_MODE` tune it.
//!   An error that survives the retries is reported with [`SdkFailure::retryable`] set when a
//!   later attempt may still succeed.
//!
//! The core is synchronous (threads, not tasks): [`Aws::block_on`] runs an SDK call to the end
//! on the handle's own small Tokio runtime. It may be called from any thread, including a
//! thread of another Tokio runtime (the Lambda handler's): then the call runs on a helper
//! thread, since a runtime cannot be entered twice.
//!
//! Every request the clients send is counted per service ([`Aws::requests`]), so a pass can
//! report what it cost in API calls (see `bench/run`).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use aws_config::BehaviorVersion;
use aws_sdk_s3::config::interceptors::BeforeTransmitInterceptorContextRef;
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_types::error::metadata::ProvideErrorMetadata;

/// The connect timeout when the attempt timeout is longer (the SDK's default).
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(3100);

/// The shortest operation timeout, whatever the TTL: a loaded machine or the SDK's retry
/// backoff (about 1 s before the first retry) must not fail requests of a test-sized lease.
pub const MIN_OPERATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// The shortest attempt timeout, whatever the TTL.
pub const MIN_ATTEMPT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The timeouts of every AWS request for a writer lease of `ttl` (see the module docs): the
/// operation within `ttl / 2`, each attempt within `ttl / 4` (at least
/// [`MIN_OPERATION_TIMEOUT`] and [`MIN_ATTEMPT_TIMEOUT`]), connecting within 3.1 s or the
/// attempt timeout, whichever is shorter.
pub fn timeouts_for_lease(ttl: std::time::Duration) -> aws_config::timeout::TimeoutConfig {
    let attempt = (ttl / 4).max(MIN_ATTEMPT_TIMEOUT);
    aws_config::timeout::TimeoutConfig::builder()
        .operation_timeout((ttl / 2).max(MIN_OPERATION_TIMEOUT))
        .operation_attempt_timeout(attempt)
        .connect_timeout(attempt.min(CONNECT_TIMEOUT))
        .build()
}

/// The lease TTL the timeouts follow: `SKIPPR_LEASE_TTL_SECONDS` when it is a positive whole
/// number (config validation refuses anything else), else
/// [`crate::state::DEFAULT_LEASE_TTL`].
pub fn lease_ttl_from_env() -> std::time::Duration {
    std::env::var("SKIPPR_LEASE_TTL_SECONDS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|n| *n > 0)
        .map_or(
            crate::state::DEFAULT_LEASE_TTL,
            std::time::Duration::from_secs,
        )
}

/// An AWS call that failed after the SDK's retries: what it was, and whether trying again later
/// may succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdkFailure {
    /// The service's error code (`NoSuchKey`, `ConditionalCheckFailedException`, ...) or, for
    /// errors that never reached the service, `timeout` / `dispatch` / `response`.
    pub code: String,
    /// The HTTP status, when a response came back.
    pub status: Option<u16>,
    /// The error with its context, one line.
    pub message: String,
    /// Throttling, a 5xx, a timeout or a transport error: a later attempt may succeed.
    pub retryable: bool,
}

impl fmt::Display for SdkFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(status) => write!(f, "{} (HTTP {status}): {}", self.code, self.message),
            None => write!(f, "{}: {}", self.code, self.message),
        }
    }
}

/// Error codes of throttling and of transient service faults: retryable.
const RETRYABLE_CODES: &[&str] = &[
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottledException",
    "TooManyRequestsException",
    "ProvisionedThroughputExceededException",
    "TransactionInProgressException",
    "RequestLimitExceeded",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "RequestThrottled",
    "SlowDown",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
];

/// Whether an AWS error code names throttling or a transient service fault (`SlowDown`,
/// `ThrottlingException`, `InternalError`, ...): a later attempt may succeed. For the errors
/// that come without an HTTP status (a `DeleteObjects` response lists one per key).
pub fn is_retryable_code(code: &str) -> bool {
    RETRYABLE_CODES.contains(&code)
}

impl SdkFailure {
    /// Classify an SDK error.
    pub fn from_sdk<E, R>(error: &aws_sdk_s3::error::SdkError<E, R>) -> SdkFailure
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: fmt::Debug + HasStatus,
    {
        use aws_sdk_s3::error::SdkError;
        let message = aws_sdk_s3::error::DisplayErrorContext(error).to_string();
        match error {
            SdkError::ConstructionFailure(_) => SdkFailure {
                code: "construction".into(),
                status: None,
                message,
                retryable: false,
            },
            SdkError::TimeoutError(_) => SdkFailure {
                code: "timeout".into(),
                status: None,
                message,
                retryable: true,
            },
            SdkError::DispatchFailure(_) => SdkFailure {
                code: "dispatch".into(),
                status: None,
                message,
                retryable: true,
            },
            SdkError::ResponseError(e) => {
                let status = e.raw().status_code();
                SdkFailure {
                    code: "response".into(),
                    status: Some(status),
                    message,
                    retryable: status >= 500 || status == 429,
                }
            }
            SdkError::ServiceError(e) => {
                let status = e.raw().status_code();
                let code = e.err().code().unwrap_or("unknown").to_owned();
                // The service's own message: the error context would add the raw response
                // (headers, body) to every log line and invocation error.
                let message = e.err().message().map_or_else(
                    || aws_sdk_s3::error::DisplayErrorContext(e.err()).to_string(),
                    str::to_owned,
                );
                let retryable = status >= 500 || status == 429 || is_retryable_code(&code);
                SdkFailure {
                    code,
                    status: Some(status),
                    message,
                    retryable,
                }
            }
            _ => SdkFailure {
                code: "unknown".into(),
                status: None,
                message,
                retryable: true,
            },
        }
    }
}

/// A raw HTTP response with a status code (what the SDK's errors carry).
pub trait HasStatus {
    /// The HTTP status code.
    fn status_code(&self) -> u16;
}

impl HasStatus for aws_smithy_runtime_api::http::Response {
    fn status_code(&self) -> u16 {
        self.status().as_u16()
    }
}

/// Counts requests per service.
#[derive(Debug, Default)]
struct Counter {
    by_service: Mutex<BTreeMap<String, u64>>,
}

#[derive(Debug)]
struct Counting {
    service: &'static str,
    counter: Arc<Counter>,
}

impl Intercept for Counting {
    fn name(&self) -> &'static str {
        "skipprd-request-counter"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        _cfg: &mut ConfigBag,
    ) -> Result<(), aws_smithy_runtime_api::box_error::BoxError> {
        if let Ok(mut map) = self.counter.by_service.lock() {
            *map.entry(self.service.to_owned()).or_default() += 1;
        }
        Ok(())
    }
}

/// Why the AWS configuration could not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AwsError {
    /// The runtime for SDK calls could not be started.
    #[error("cannot start the runtime for AWS calls: {0}")]
    Runtime(#[source] std::io::Error),
    /// The runtime SDK calls run on has shut down (the process is exiting).
    #[error("the runtime for AWS calls has shut down")]
    Stopped,
    /// No region is configured.
    #[error(
        "no AWS region is set: set AWS_REGION (or a profile's region), or `region` on the connector"
    )]
    NoRegion,
    /// An AWS backend is configured but no AWS handle was loaded for it (a bug of the caller).
    #[error("no AWS configuration was loaded for {purpose}")]
    NotLoaded {
        /// What needed it, for example `the S3 WAL`.
        purpose: &'static str,
    },
}

impl AwsError {
    /// Whether trying again later may succeed: never. None of these errors is a refused or
    /// throttled request (those are [`SdkFailure`]s, with their own flag); a missing region
    /// or a runtime that cannot start does not go away by itself.
    pub fn is_retryable(&self) -> bool {
        match self {
            AwsError::Runtime(_)
            | AwsError::Stopped
            | AwsError::NoRegion
            | AwsError::NotLoaded { .. } => false,
        }
    }
}

/// The shared SDK configuration, the runtime SDK calls run on, and the request counter.
#[derive(Clone)]
pub struct Aws {
    config: aws_config::SdkConfig,
    runtime: Arc<tokio::runtime::Runtime>,
    counter: Arc<Counter>,
    /// Path-style S3 requests or not, when configured ([`Aws::for_object_store`]); `None`:
    /// path-style exactly when an endpoint is set.
    path_style: Option<bool>,
    /// The S3 endpoint of an object store of its own ([`Aws::for_object_store`]), set on
    /// each S3 client (a shared-config endpoint would lose to `AWS_ENDPOINT_URL`).
    s3_endpoint: Option<String>,
}

impl fmt::Debug for Aws {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Aws")
            .field("region", &self.config.region())
            .field("endpoint_url", &self.config.endpoint_url())
            .finish_non_exhaustive()
    }
}

impl Aws {
    /// Load the configuration from the environment (see the module docs); `region` overrides
    /// the environment's.
    pub fn load(region: Option<&str>) -> Result<Aws, AwsError> {
        Aws::load_for_lease(region, lease_ttl_from_env())
    }

    /// [`Aws::load`] with the timeouts of a writer lease of `lease_ttl`
    /// ([`timeouts_for_lease`]) instead of the environment's TTL.
    pub fn load_for_lease(
        region: Option<&str>,
        lease_ttl: std::time::Duration,
    ) -> Result<Aws, AwsError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("skipprd-aws")
            .enable_all()
            .build()
            .map_err(AwsError::Runtime)?;
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .timeout_config(timeouts_for_lease(lease_ttl));
        if let Some(region) = region {
            loader = loader.region(aws_config::Region::new(region.to_owned()));
        }
        let config = runtime.block_on(loader.load());
        if config.region().is_none() {
            return Err(AwsError::NoRegion);
        }
        Ok(Aws {
            config,
            runtime: Arc::new(runtime),
            counter: Arc::default(),
            path_style: None,
            s3_endpoint: None,
        })
    }

    /// [`Aws::load`] with the environment's region, or `fallback` when the environment names
    /// none (a pipeline's connector region: see
    /// [`crate::config::validate::AwsSettings::fallback_region`]).
    pub fn load_with_fallback(fallback: Option<&str>) -> Result<Aws, AwsError> {
        match (Aws::load(None), fallback) {
            (Err(AwsError::NoRegion), Some(region)) => Aws::load(Some(region)),
            (loaded, _) => loaded,
        }
    }

    /// The same configuration in another region (clients built from it share the runtime and
    /// the request counter).
    pub fn with_region(&self, region: &str) -> Aws {
        let config = self
            .config
            .to_builder()
            .region(aws_config::Region::new(region.to_owned()))
            .build();
        Aws {
            config,
            runtime: self.runtime.clone(),
            counter: self.counter.clone(),
            path_style: self.path_style,
            s3_endpoint: self.s3_endpoint.clone(),
        }
    }

    /// The same configuration for an S3-compatible store of its own (a `SkipprLake`
    /// `object_store` map): its endpoint, its keys, its addressing. Clients built from it share
    /// the runtime and the request counter; only S3 clients should be built from it.
    pub fn for_object_store(&self, access: &crate::config::validate::ObjectStoreAccess) -> Aws {
        let mut builder = self.config.to_builder();
        if let Some((id, secret)) = &access.keys {
            let credentials = aws_sdk_s3::config::Credentials::new(
                id.expose(),
                secret.expose(),
                None,
                None,
                "skippr.yml object_store",
            );
            builder = builder.credentials_provider(
                aws_sdk_s3::config::SharedCredentialsProvider::new(credentials),
            );
        }
        Aws {
            config: builder.build(),
            runtime: self.runtime.clone(),
            counter: self.counter.clone(),
            path_style: access.path_style.or(self.path_style),
            s3_endpoint: access.endpoint.clone().or_else(|| self.s3_endpoint.clone()),
        }
    }

    /// The region.
    pub fn region(&self) -> Option<&str> {
        self.config.region().map(|r| r.as_ref())
    }

    fn counting(&self, service: &'static str) -> Counting {
        Counting {
            service,
            counter: self.counter.clone(),
        }
    }

    /// An S3 client; `endpoint` overrides the environment's endpoint (a connector's
    /// `endpoint`). Path-style addressing is used with any endpoint other than AWS's.
    pub fn s3(&self, endpoint: Option<&str>) -> aws_sdk_s3::Client {
        let endpoint = endpoint.or(self.s3_endpoint.as_deref());
        let mut builder =
            aws_sdk_s3::config::Builder::from(&self.config).interceptor(self.counting("s3"));
        let custom_endpoint = endpoint.is_some()
            || self.config.endpoint_url().is_some()
            || std::env::var_os("AWS_ENDPOINT_URL_S3").is_some();
        if let Some(endpoint) = endpoint {
            builder = builder.endpoint_url(endpoint);
        }
        if let Some(path_style) = self.path_style {
            builder = builder.force_path_style(path_style);
        } else if custom_endpoint {
            builder = builder.force_path_style(true);
        }
        aws_sdk_s3::Client::from_conf(builder.build())
    }

    /// A DynamoDB client.
    pub fn dynamodb(&self) -> aws_sdk_dynamodb::Client {
        let conf = aws_sdk_dynamodb::config::Builder::from(&self.config)
            .interceptor(self.counting("dynamodb"))
            .build();
        aws_sdk_dynamodb::Client::from_conf(conf)
    }

    /// A Glue client.
    pub fn glue(&self) -> aws_sdk_glue::Client {
        let conf = aws_sdk_glue::config::Builder::from(&self.config)
            .interceptor(self.counting("glue"))
            .build();
        aws_sdk_glue::Client::from_conf(conf)
    }

    /// An Athena client.
    pub fn athena(&self) -> aws_sdk_athena::Client {
        let conf = aws_sdk_athena::config::Builder::from(&self.config)
            .interceptor(self.counting("athena"))
            .build();
        aws_sdk_athena::Client::from_conf(conf)
    }

    /// Requests sent so far, per service (`s3`, `dynamodb`, `glue`, `athena`), retries included.
    pub fn requests(&self) -> BTreeMap<String, u64> {
        self.counter
            .by_service
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// Run `future` (an SDK call) on the handle's runtime and wait for it from async code of
    /// any runtime (the SDK's HTTP client needs a runtime with I/O, which the sinks' own
    /// small runtimes do not have). A panic in `future` is resumed here.
    pub async fn run<F>(&self, future: F) -> Result<F::Output, AwsError>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match self.runtime.spawn(future).await {
            Ok(output) => Ok(output),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(AwsError::Stopped),
        }
    }

    /// Run `future` (an SDK call) to completion from synchronous code.
    pub fn block_on<F>(&self, future: F) -> F::Output
    where
        F: std::future::Future + Send,
        F::Output: Send,
    {
        if tokio::runtime::Handle::try_current().is_ok() {
            // Inside another runtime (a Lambda handler's blocking section): a runtime cannot
            // be entered from one of its own or another runtime's threads, so use a helper thread.
            std::thread::scope(|scope| {
                let runtime = &self.runtime;
                match scope.spawn(move || runtime.block_on(future)).join() {
                    Ok(output) => output,
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            })
        } else {
            self.runtime.block_on(future)
        }
    }
}

/// One bucket, for whole-object reads and writes (the schema store and the `S3` deadletter
/// sink): each write is one PUT, which S3 makes visible whole or not at all, and a second PUT
/// of the same key replaces the first.
#[derive(Clone)]
pub struct Bucket {
    aws: Aws,
    client: aws_sdk_s3::Client,
    name: String,
}

impl fmt::Debug for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bucket")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Bucket {
    /// The bucket `name`, reached through `aws` (`endpoint` overrides the environment's, as in
    /// [`Aws::s3`]).
    pub fn new(aws: &Aws, name: &str, endpoint: Option<&str>) -> Bucket {
        Bucket {
            aws: aws.clone(),
            client: aws.s3(endpoint),
            name: name.to_owned(),
        }
    }

    /// The bucket's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `s3://{bucket}/{key}`, for messages.
    pub fn uri(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.name)
    }

    /// Write `bytes` as the whole object `key`, replacing any object of that name.
    pub fn put(&self, key: &str, bytes: Vec<u8>, content_type: &str) -> Result<(), SdkFailure> {
        self.aws
            .block_on(async {
                self.client
                    .put_object()
                    .bucket(&self.name)
                    .key(key)
                    .content_type(content_type)
                    .body(aws_sdk_s3::primitives::ByteStream::from(bytes))
                    .send()
                    .await
            })
            .map(|_| ())
            .map_err(|e| SdkFailure::from_sdk(&e))
    }

    /// The bytes of the object `key`, or `None` when there is no such object. A missing
    /// bucket is an error, not `None`.
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, SdkFailure> {
        self.aws.block_on(self.get_async(key))
    }

    /// [`Bucket::get`], for callers already in async code (concurrent reads).
    pub async fn get_async(&self, key: &str) -> Result<Option<Vec<u8>>, SdkFailure> {
        match self
            .client
            .get_object()
            .bucket(&self.name)
            .key(key)
            .send()
            .await
        {
            Ok(out) => match out.body.collect().await {
                Ok(data) => Ok(Some(data.into_bytes().to_vec())),
                Err(e) => Err(SdkFailure {
                    code: "body".into(),
                    status: None,
                    message: e.to_string(),
                    retryable: true,
                }),
            },
            Err(e) => {
                let failure = SdkFailure::from_sdk(&e);
                let missing_key = failure.code == "NoSuchKey"
                    || (failure.status == Some(404) && failure.code != "NoSuchBucket");
                if missing_key { Ok(None) } else { Err(failure) }
            }
        }
    }

    /// Delete the object `key`. Deleting a key that does not exist succeeds (as in S3).
    pub fn delete(&self, key: &str) -> Result<(), SdkFailure> {
        self.aws
            .block_on(async {
                self.client
                    .delete_object()
                    .bucket(&self.name)
                    .key(key)
                    .send()
                    .await
            })
            .map(|_| ())
            .map_err(|e| SdkFailure::from_sdk(&e))
    }

    /// The keys under `prefix`, in key order (every page).
    pub fn list(&self, prefix: &str) -> Result<Vec<String>, SdkFailure> {
        Ok(self
            .list_sized(prefix)?
            .into_iter()
            .map(|(key, _)| key)
            .collect())
    }

    /// The keys under `prefix` with their sizes in bytes, in key order (every page: one
    /// request per 1,000 keys).
    pub fn list_sized(&self, prefix: &str) -> Result<Vec<(String, u64)>, SdkFailure> {
        let objects = self.aws.block_on(list_objects(
            self.client.clone(),
            self.name.clone(),
            prefix.to_owned(),
        ))?;
        Ok(objects.into_iter().map(|o| (o.key, o.size)).collect())
    }

    /// The objects under `prefix` with their sizes and modification times, in key order
    /// (every page), from async code of any runtime (the call runs on the [`Aws`] runtime).
    pub async fn list_objects(&self, prefix: &str) -> Result<Vec<ObjectInfo>, SdkFailure> {
        self.aws
            .run(list_objects(
                self.client.clone(),
                self.name.clone(),
                prefix.to_owned(),
            ))
            .await
            .map_err(|e| SdkFailure {
                code: "runtime".into(),
                status: None,
                message: e.to_string(),
                retryable: false,
            })?
    }

    /// The S3 client (for the operations this type does not wrap).
    pub fn client(&self) -> &aws_sdk_s3::Client {
        &self.client
    }
}

/// An object of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The key.
    pub key: String,
    /// The size in bytes.
    pub size: u64,
    /// When the object was written (S3's `LastModified`: whole seconds; for a multipart
    /// upload, when the upload started), when S3 said.
    pub last_modified: Option<std::time::SystemTime>,
}

/// Every object under `prefix` of `bucket`, in key order (one request per 1,000 keys).
async fn list_objects(
    client: aws_sdk_s3::Client,
    bucket: String,
    prefix: String,
) -> Result<Vec<ObjectInfo>, SdkFailure> {
    let mut objects = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let out = client
            .list_objects_v2()
            .bucket(&bucket)
            .prefix(&prefix)
            .set_continuation_token(token.take())
            .send()
            .await
            .map_err(|e| SdkFailure::from_sdk(&e))?;
        objects.extend(out.contents().iter().filter_map(|o| {
            Some(ObjectInfo {
                key: o.key()?.to_owned(),
                size: u64::try_from(o.size().unwrap_or(0)).unwrap_or(0),
                last_modified: o
                    .last_modified()
                    .and_then(|t| std::time::SystemTime::try_from(*t).ok()),
            })
        }));
        match out.next_continuation_token() {
            Some(next) if out.is_truncated() == Some(true) => token = Some(next.to_owned()),
            _ => break,
        }
    }
    objects.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(objects)
}

#[cfg(test)]
pub(crate) mod testing {
    //! The local AWS of the tests: the moto server `tests/run` starts.

    use super::{Aws, SdkFailure};

    /// The failure [`SdkFailure::from_sdk`] makes of an S3 service error answering `status`
    /// with the error `code` (for example 403 `AccessDenied`, 503 `SlowDown`).
    pub(crate) fn sdk_failure(status: u16, code: &str) -> SdkFailure {
        let error = aws_sdk_s3::operation::put_object::PutObjectError::generic(
            aws_sdk_s3::error::ErrorMetadata::builder()
                .code(code)
                .message(format!("the service said {code}"))
                .build(),
        );
        let raw = aws_smithy_runtime_api::http::Response::new(
            aws_smithy_runtime_api::http::StatusCode::try_from(status).unwrap(),
            aws_smithy_types::body::SdkBody::empty(),
        );
        SdkFailure::from_sdk(&aws_sdk_s3::error::SdkError::service_error(error, raw))
    }

    /// The [`Aws`] handle pointed at the test server. Fails, naming the fix, when the
    /// server is not there (run the tests through `bash tests/run`).
    pub(crate) fn moto() -> Aws {
        let endpoint = std::env::var("SKIPPR_TEST_AWS_ENDPOINT").unwrap_or_default();
        assert!(
            !endpoint.is_empty(),
            "SKIPPR_TEST_AWS_ENDPOINT is not set: the AWS tests need the moto server that `bash tests/run` starts (or start `moto_server -H 127.0.0.1 -p PORT` and export SKIPPR_TEST_AWS_ENDPOINT and AWS_ENDPOINT_URL=http://127.0.0.1:PORT, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"
        );
        assert_eq!(
            std::env::var("AWS_ENDPOINT_URL").ok().as_deref(),
            Some(endpoint.as_str()),
            "AWS_ENDPOINT_URL must point at the test server too"
        );
        Aws::load(Some("us-east-1")).unwrap()
    }

    /// A fresh bucket with a unique name.
    pub(crate) fn bucket(aws: &Aws, stem: &str) -> String {
        let name = format!(
            "{stem}-{}",
            uuid::Uuid::new_v4().simple().to_string()[..12].to_owned()
        );
        let client = aws.s3(None);
        aws.block_on(async { client.create_bucket().bucket(&name).send().await })
            .unwrap();
        name
    }
}

#[cfg(test)]
mod tests {
    use super::testing::sdk_failure;
    use super::*;

    #[test]
    fn the_timeouts_follow_the_lease_ttl() {
        let t = timeouts_for_lease(std::time::Duration::from_secs(30));
        assert_eq!(
            t.operation_timeout(),
            Some(std::time::Duration::from_secs(15))
        );
        assert_eq!(
            t.operation_attempt_timeout(),
            Some(std::time::Duration::from_millis(7500))
        );
        assert_eq!(t.connect_timeout(), Some(CONNECT_TIMEOUT));
        let short = timeouts_for_lease(std::time::Duration::from_secs(2));
        assert_eq!(short.operation_timeout(), Some(MIN_OPERATION_TIMEOUT));
        assert_eq!(short.operation_attempt_timeout(), Some(MIN_ATTEMPT_TIMEOUT));
        assert_eq!(short.connect_timeout(), Some(MIN_ATTEMPT_TIMEOUT));
    }

    /// A server that accepts the connection and never answers: the request gives up with a
    /// retryable timeout (within the operation timeout, 5 s for the 2 s lease TTL here)
    /// instead of waiting for ever. The 60 s bound only keeps a regression from hanging the suite.
    #[test]
    fn a_request_to_a_hung_server_times_out_as_retryable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let held = std::thread::spawn(move || {
            let mut open = Vec::new();
            for stream in listener.incoming().take(8) {
                open.push(stream);
            }
            open
        });
        let aws =
            Aws::load_for_lease(Some("us-east-1"), std::time::Duration::from_secs(2)).unwrap();
        let client = aws.s3(Some(&endpoint));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let result =
                aws.block_on(async { client.get_object().bucket("b").key("k").send().await });
            let _ = tx.send(result.map(|_| ()).map_err(|e| SdkFailure::from_sdk(&e)));
        });
        let failure = rx
            .recv_timeout(std::time::Duration::from_secs(60))
            .expect("the request to a hung server never returned")
            .expect_err("a hung server cannot answer");
        assert!(failure.retryable, "{failure}");
        assert_eq!(failure.code, "timeout", "{failure}");
        drop(held);
    }

    #[test]
    fn refusals_are_not_retryable_and_throttling_faults_and_timeouts_are() {
        let denied = sdk_failure(403, "AccessDenied");
        assert_eq!(denied.code, "AccessDenied");
        assert_eq!(denied.status, Some(403));
        assert!(!denied.retryable, "{denied}");
        assert!(!sdk_failure(404, "NoSuchBucket").retryable);
        for (status, code) in [
            (503, "SlowDown"),
            (500, "InternalError"),
            (429, "TooManyRequests"),
            (400, "ThrottlingException"),
        ] {
            assert!(sdk_failure(status, code).retryable, "{status} {code}");
        }
        let timeout = SdkFailure::from_sdk(&aws_sdk_s3::error::SdkError::<
            aws_sdk_s3::operation::put_object::PutObjectError,
            aws_smithy_runtime_api::http::Response,
        >::timeout_error("no answer"));
        assert!(timeout.retryable, "{timeout}");
        assert!(is_retryable_code("SlowDown"));
        assert!(!is_retryable_code("AccessDenied"));
    }

    /// An `object_store` map's endpoint and keys reach the S3 clients built from
    /// [`Aws::for_object_store`] (and only those): pointed at a closed port, its requests fail
    /// while the handle it came from still reaches the test server.
    #[test]
    fn an_object_store_map_sends_s3_requests_to_its_own_endpoint() {
        use crate::config::Secret;
        use crate::config::validate::ObjectStoreAccess;
        let aws = super::testing::moto();
        let name = super::testing::bucket(&aws, "objstore");
        let endpoint = std::env::var("SKIPPR_TEST_AWS_ENDPOINT").unwrap();
        let keys = Some((Secret::new("store-key"), Secret::new("store-secret")));
        let own = aws.for_object_store(&ObjectStoreAccess {
            endpoint: Some(endpoint),
            keys: keys.clone(),
            path_style: Some(true),
        });
        let store = Bucket::new(&own, &name, None);
        store.put("k", b"v".to_vec(), "text/plain").unwrap();
        assert_eq!(store.get("k").unwrap().as_deref(), Some(&b"v"[..]));
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            drop(listener);
            format!("http://127.0.0.1:{port}")
        };
        let elsewhere = aws.for_object_store(&ObjectStoreAccess {
            endpoint: Some(closed),
            keys,
            path_style: None,
        });
        let failure = Bucket::new(&elsewhere, &name, None).get("k").unwrap_err();
        assert!(failure.retryable, "{failure}");
        assert_eq!(
            Bucket::new(&aws, &name, None).get("k").unwrap().as_deref(),
            Some(&b"v"[..])
        );
        // The keys never show in the handle's debug output.
        assert!(!format!("{own:?}").contains("store-secret"));
    }
}
