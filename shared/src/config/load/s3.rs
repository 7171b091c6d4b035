//! A config kept as an object in S3 (`SKIPPR_CONFIG_S3_URI=s3://bucket/key`), fetched through
//! the process's [`Aws`] handle and then loaded as a file of that name would be (its format
//! from the key's extension).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::aws::{Aws, SdkFailure};

use super::{ConfigError, ConfigSource, Environment, Format, LayeredEnv, LoadedConfig, parse_str};

/// The variable naming a config object in S3 (`s3://bucket/key`).
pub const CONFIG_S3_URI_VAR: &str = "SKIPPR_CONFIG_S3_URI";

/// `s3://bucket/key` -> (bucket, key); anything else is a [`ConfigError::S3Uri`].
pub fn parse_s3_uri(uri: &str) -> Result<(String, String), ConfigError> {
    let bad = |message: &str| ConfigError::S3Uri {
        uri: uri.to_owned(),
        message: message.to_owned(),
    };
    let rest = uri
        .strip_prefix("s3://")
        .ok_or_else(|| bad("expected s3://bucket/key"))?;
    match rest.split_once('/') {
        Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() && !key.ends_with('/') => {
            Ok((bucket.to_owned(), key.to_owned()))
        }
        _ => Err(bad("expected s3://bucket/key (a bucket and an object key)")),
    }
}

/// Fetch the config object `uri` (`s3://bucket/key`) with `aws` and load it: the file's name
/// in messages is the URI, relative paths in it resolve against `base_dir`, `${NAME}`
/// references against `env` (no `.env` files: there is no directory beside an object).
/// Blocking.
pub fn load_s3<E: Environment + Send + Sync + 'static>(
    uri: &str,
    aws: &Aws,
    base_dir: &Path,
    env: E,
) -> Result<LoadedConfig, ConfigError> {
    let (bucket, key) = parse_s3_uri(uri)?;
    let text = fetch_text(aws, &bucket, &key, uri)?;
    let name = PathBuf::from(uri);
    let env = LayeredEnv::new(env);
    let (config, env_refs) = parse_str(&text, Format::from_path(&name), &name, &env)?;
    Ok(LoadedConfig {
        config,
        source: ConfigSource::Found(name),
        base_dir: base_dir.to_path_buf(),
        env_refs,
        env: Arc::new(env),
    })
}

/// The object's text; a fetch failure or a body that is not UTF-8 names `uri`.
fn fetch_text(aws: &Aws, bucket: &str, key: &str, uri: &str) -> Result<String, ConfigError> {
    let client = aws.s3(None);
    let fetch_err = |failure: SdkFailure| ConfigError::S3Fetch {
        uri: uri.to_owned(),
        failure: Box::new(failure),
    };
    let bytes = aws.block_on(async {
        let out = client
            .get_object()
            .bucket(bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| fetch_err(SdkFailure::from_sdk(&e)))?;
        out.body
            .collect()
            .await
            .map(|b| b.into_bytes())
            .map_err(|e| {
                fetch_err(SdkFailure {
                    code: "body".into(),
                    status: None,
                    message: e.to_string(),
                    retryable: true,
                })
            })
    })?;
    String::from_utf8(bytes.to_vec()).map_err(|_| ConfigError::S3Uri {
        uri: uri.to_owned(),
        message: "the object is not UTF-8 text".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_s3_uris_need_a_bucket_and_a_key() {
        assert_eq!(
            parse_s3_uri("s3://b/dir/skippr.yml").unwrap(),
            ("b".to_owned(), "dir/skippr.yml".to_owned())
        );
        for bad in ["b/k", "s3://b", "s3://b/", "s3:///k", "s3://b/dir/"] {
            assert!(parse_s3_uri(bad).is_err(), "{bad}");
        }
    }
}
