//! Finding, reading and parsing the config file.
//!
//! Discovery order: `--config PATH`, else `SKIPPR_CONFIG_FILE`, else the first of
//! [`CONFIG_FILE_NAMES`] in the current directory. A path given by flag or variable must exist;
//! when no file is found the config is empty (and commands that need a pipeline say it is not
//! defined).
//!
//! The file is read twice, cheaply:
//! 1. typed straight from its text, so an unknown key or a wrong type fails with the key path,
//!    line and column; secret fields must then be whole `${NAME}` references;
//! 2. as a generic tree in which `${NAME}` references are substituted (see
//!    [`super::env`]), then typed again: that is the config the commands use.
//!
//! YAML (`.yml`, `.yaml`, and any other extension), TOML (`.toml`) and JSON (`.json`) share
//! one structure. YAML merge keys (`<<`) are not supported.
//!
//! A config can also be an object in S3 ([`load_s3`], `SKIPPR_CONFIG_S3_URI`, what the Lambda
//! functions use): fetched, then loaded as a file of that name.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::de::DeserializeOwned;

use super::Config;
use super::connectors::NO_CONNECTOR;
use super::env::{Environment, LayeredEnv};
use super::error::{ConfigError, Location, suggest};
use super::secret::{PLAINTEXT_SECRET, require_references};

mod s3;
pub use s3::{CONFIG_S3_URI_VAR, load_s3, parse_s3_uri};

/// File names looked for in the current directory, in order.
pub const CONFIG_FILE_NAMES: &[&str] = &[
    "skippr.yml",
    "skippr.yaml",
    "skipprd.yml",
    "skipprd.yaml",
    "skipprd.toml",
    "skipprd.json",
];

/// How the config file was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// Named by `--config`.
    Flag(PathBuf),
    /// Named by `SKIPPR_CONFIG_FILE`.
    EnvVar(PathBuf),
    /// Found in the current directory.
    Found(PathBuf),
    /// No file: an empty config.
    NotFound,
    /// Given as text (the Python `skippr.Config()`), named in messages by this label.
    Text(String),
}

impl ConfigSource {
    /// The file, when there is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            ConfigSource::Flag(p) | ConfigSource::EnvVar(p) | ConfigSource::Found(p) => Some(p),
            ConfigSource::NotFound | ConfigSource::Text(_) => None,
        }
    }
}

/// A parsed, substituted config and what is needed to validate it.
#[derive(Clone)]
pub struct LoadedConfig {
    /// The typed config, `${NAME}` references replaced.
    pub config: Config,
    /// How the file was found.
    pub source: ConfigSource,
    /// Directory that relative paths in the file are resolved against: the file's directory,
    /// or the current directory when there is no file.
    pub base_dir: PathBuf,
    /// Key paths that were `${NAME}` references, with the variable names.
    pub env_refs: BTreeMap<String, String>,
    /// The environment the file was resolved with (process, then `.env.local`, then `.env`).
    pub env: Arc<dyn Environment + Send + Sync>,
}

impl std::fmt::Debug for LoadedConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedConfig")
            .field("config", &self.config)
            .field("source", &self.source)
            .field("base_dir", &self.base_dir)
            .field("env_refs", &self.env_refs)
            .finish_non_exhaustive()
    }
}

impl LoadedConfig {
    /// The file's path for messages, or a note that there is none.
    pub fn display_name(&self) -> String {
        if let ConfigSource::Text(label) = &self.source {
            return label.clone();
        }
        match self.source.path() {
            Some(p) => p.display().to_string(),
            None => format!(
                "no config file (none of {} in {})",
                CONFIG_FILE_NAMES.join(", "),
                self.base_dir.display()
            ),
        }
    }
}

/// Find the config file: `flag`, else `SKIPPR_CONFIG_FILE`, else the first of
/// [`CONFIG_FILE_NAMES`] in `cwd`.
pub fn discover_config_file(
    flag: Option<&Path>,
    env: &dyn Environment,
    cwd: &Path,
) -> Result<ConfigSource, ConfigError> {
    if let Some(path) = flag {
        return if path.is_file() {
            Ok(ConfigSource::Flag(path.to_path_buf()))
        } else if path.is_dir() {
            Err(ConfigError::NotAFile {
                path: path.to_path_buf(),
                origin: "--config",
            })
        } else {
            Err(ConfigError::FileNotFound {
                path: path.to_path_buf(),
                origin: "--config",
            })
        };
    }
    if let Some(value) = env.var("SKIPPR_CONFIG_FILE").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(value);
        let path = if path.is_relative() {
            cwd.join(path)
        } else {
            path
        };
        return if path.is_file() {
            Ok(ConfigSource::EnvVar(path))
        } else if path.is_dir() {
            Err(ConfigError::NotAFile {
                path,
                origin: "SKIPPR_CONFIG_FILE",
            })
        } else {
            Err(ConfigError::FileNotFound {
                path,
                origin: "SKIPPR_CONFIG_FILE",
            })
        };
    }
    for name in CONFIG_FILE_NAMES {
        let path = cwd.join(name);
        if path.is_file() {
            return Ok(ConfigSource::Found(path));
        }
    }
    Ok(ConfigSource::NotFound)
}

/// Discover and load the config. With no file, an empty config based in `cwd`.
pub fn load<E: Environment + Send + Sync + 'static>(
    flag: Option<&Path>,
    cwd: &Path,
    env: E,
) -> Result<LoadedConfig, ConfigError> {
    let source = discover_config_file(flag, &env, cwd)?;
    match source.path() {
        Some(path) => {
            let path = path.to_path_buf();
            let mut loaded = load_file(&path, env)?;
            loaded.source = source;
            Ok(loaded)
        }
        None => Ok(LoadedConfig {
            config: Config::default(),
            source,
            base_dir: cwd.to_path_buf(),
            env_refs: BTreeMap::new(),
            env: Arc::new(LayeredEnv::new(env)),
        }),
    }
}

/// Load one file (its format from its extension), with `.env`/`.env.local` beside it.
pub fn load_file<E: Environment + Send + Sync + 'static>(
    path: &Path,
    env: E,
) -> Result<LoadedConfig, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let base_dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let env = LayeredEnv::new(env).with_dotenv_files(&base_dir)?;
    let (config, env_refs) = parse_str(&text, Format::from_path(path), path, &env)?;
    Ok(LoadedConfig {
        config,
        source: ConfigSource::Found(path.to_path_buf()),
        base_dir,
        env_refs,
        env: Arc::new(env),
    })
}

/// Load config text that is not in a file (the Python `skippr.Config()`): YAML, with relative
/// paths and `.env`/`.env.local` taken from `base_dir`. `label` names it in messages.
pub fn load_text<E: Environment + Send + Sync + 'static>(
    text: &str,
    label: &str,
    base_dir: &Path,
    env: E,
) -> Result<LoadedConfig, ConfigError> {
    let env = LayeredEnv::new(env).with_dotenv_files(base_dir)?;
    let (config, env_refs) = parse_str(text, Format::Yaml, Path::new(label), &env)?;
    Ok(LoadedConfig {
        config,
        source: ConfigSource::Text(label.to_owned()),
        base_dir: base_dir.to_path_buf(),
        env_refs,
        env: Arc::new(env),
    })
}

/// A config file's syntax.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// YAML (the default).
    Yaml,
    /// TOML.
    Toml,
    /// JSON.
    Json,
}

impl Format {
    /// The format for a file name: `.toml`, `.json`, else YAML.
    pub fn from_path(path: &Path) -> Self {
        match path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            Some("toml") => Format::Toml,
            Some("json") => Format::Json,
            _ => Format::Yaml,
        }
    }
}

/// Parse config text: typed check of the raw text, then substitution, then the final typing.
/// `file` is used in messages only.
pub fn parse_str(
    text: &str,
    format: Format,
    file: &Path,
    env: &dyn Environment,
) -> Result<(Config, BTreeMap<String, String>), ConfigError> {
    if text.trim().is_empty() {
        return Ok((Config::default(), BTreeMap::new()));
    }
    let mut tree = match tree_from_text(text, format, file) {
        Ok(tree) => tree,
        Err(tree_err) => {
            // The typed pass reports syntax errors with a line and column; prefer its error.
            typed_from_text::<Config>(text, format, file)?;
            return Err(tree_err);
        }
    };
    if tree.is_null() {
        // A file of comments only, or a bare `---`.
        return Ok((Config::default(), BTreeMap::new()));
    }
    {
        let _guard = require_references();
        typed_from_text::<Config>(text, format, file)?;
    }
    if let Some(root) = tree.as_object_mut() {
        // Accepted and ignored: their text is never substituted, so it cannot fail the run.
        for ignored in IGNORED_ROOT_KEYS {
            root.remove(*ignored);
        }
    }
    let file_name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "skippr.yml".to_owned());
    let env_refs = super::env::substitute(&mut tree, env, &file_name).map_err(|mut e| {
        // The tree has no lines: the reference's first appearance in the text gives one.
        if let ConfigError::EnvUnset { name, line, .. } | ConfigError::EnvEmpty { name, line, .. } =
            &mut e
        {
            let reference = format!("${{{name}}}");
            *line = text
                .lines()
                .position(|l| l.contains(&reference))
                .map(|at| at + 1);
        }
        e
    })?;
    // The generic tree holds YAML's plain scalars as numbers and booleans (`workspace: 2024`),
    // which the typed pass over the text accepted as text. Turn such a value back into text
    // where a text field expects it, then type again; each round fixes one value.
    let mut rounds = 0usize;
    let config = loop {
        match serde_path_to_error::deserialize::<_, Config>(&tree) {
            Ok(config) => break config,
            Err(e) => {
                let message = e.inner().to_string();
                let scalar_for_text =
                    message.starts_with("invalid type: ") && message.contains("expected a string");
                if scalar_for_text
                    && rounds < MAX_TEXT_COERCIONS
                    && stringify_at(&mut tree, e.path())
                {
                    rounds += 1;
                    continue;
                }
                return Err(classify(file, &e.path().to_string(), &message, None, None));
            }
        }
    };
    Ok((config, env_refs))
}

/// Root keys accepted for compatibility and ignored.
const IGNORED_ROOT_KEYS: &[&str] = &["dbt", "vector_sources"];

/// Upper bound on text coercions of one file (each is one re-typing of the tree).
const MAX_TEXT_COERCIONS: usize = 10_000;

/// Replace the number or boolean at `path` in `tree` by its text; false when there is none.
fn stringify_at(tree: &mut serde_json::Value, path: &serde_path_to_error::Path) -> bool {
    use serde_path_to_error::Segment;
    let mut node = tree;
    for segment in path.iter() {
        node = match (segment, node) {
            (Segment::Map { key }, serde_json::Value::Object(map)) => match map.get_mut(key) {
                Some(next) => next,
                None => return false,
            },
            (Segment::Seq { index }, serde_json::Value::Array(items)) => {
                match items.get_mut(*index) {
                    Some(next) => next,
                    None => return false,
                }
            }
            _ => return false,
        };
    }
    let text = match node {
        serde_json::Value::Number(n) => n.to_string(),
        serde_json::Value::Bool(b) => b.to_string(),
        _ => return false,
    };
    *node = serde_json::Value::String(text);
    true
}

fn typed_from_text<T: DeserializeOwned>(
    text: &str,
    format: Format,
    file: &Path,
) -> Result<T, ConfigError> {
    match format {
        Format::Yaml => {
            let de = serde_norway::Deserializer::from_str(text);
            serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
                let loc = e.inner().location();
                let mut err = classify(
                    file,
                    &e.path().to_string(),
                    &e.inner().to_string(),
                    loc.as_ref().map(|l| l.line()),
                    loc.as_ref().map(|l| l.column()),
                );
                // libyaml reports these errors at the parent map; point at the key itself.
                match &mut err {
                    ConfigError::PlaintextSecret { location, .. } => {
                        if let Some((line, column)) = locate_yaml_key(text, &location.path, 0) {
                            location.line = Some(line);
                            location.column = Some(column);
                        }
                    }
                    ConfigError::Invalid {
                        message, location, ..
                    } => {
                        if let Some(name) = message
                            .strip_prefix('`')
                            .and_then(|m| m.split_once("` is defined twice"))
                            && let Some((line, column)) =
                                locate_yaml_key(text, &format!("{}.{}", location.path, name.0), 1)
                        {
                            location.line = Some(line);
                            location.column = Some(column);
                        }
                    }
                    _ => {}
                }
                err
            })
        }
        Format::Json => {
            let mut de = serde_json::Deserializer::from_str(text);
            serde_path_to_error::deserialize::<_, T>(&mut de).map_err(|e| {
                let (line, column) = (e.inner().line(), e.inner().column());
                classify(
                    file,
                    &e.path().to_string(),
                    &e.inner().to_string(),
                    nonzero(line),
                    nonzero(column),
                )
            })
        }
        Format::Toml => {
            let de = toml::Deserializer::parse(text).map_err(|e| toml_syntax(file, text, &e))?;
            serde_path_to_error::deserialize::<_, T>(de).map_err(|e| {
                let (line, column) = e
                    .inner()
                    .span()
                    .map(|s| line_col(text, s.start))
                    .map_or((None, None), |(l, c)| (Some(l), Some(c)));
                classify(
                    file,
                    &e.path().to_string(),
                    e.inner().message(),
                    line,
                    column,
                )
            })
        }
    }
}

fn tree_from_text(
    text: &str,
    format: Format,
    file: &Path,
) -> Result<serde_json::Value, ConfigError> {
    let syntax = |message: String| ConfigError::Syntax {
        file: file.to_path_buf(),
        message,
        line: None,
        column: None,
    };
    match format {
        Format::Yaml => serde_norway::from_str(text).map_err(|e| syntax(e.to_string())),
        Format::Json => serde_json::from_str(text).map_err(|e| syntax(e.to_string())),
        Format::Toml => toml::from_str(text).map_err(|e| syntax(e.message().to_owned())),
    }
}

fn toml_syntax(file: &Path, text: &str, e: &toml::de::Error) -> ConfigError {
    let (line, column) = e
        .span()
        .map(|s| line_col(text, s.start))
        .map_or((None, None), |(l, c)| (Some(l), Some(c)));
    ConfigError::Syntax {
        file: file.to_path_buf(),
        message: e.message().trim().to_owned(),
        line,
        column,
    }
}

fn nonzero(n: usize) -> Option<usize> {
    (n != 0).then_some(n)
}

/// 1-based line and column of the key at dotted `path` in YAML `text`, found by walking the
/// block structure (each segment a `key:` deeper than its parent). `None` when the layout is
/// not plain block style.
/// With `skip_last` > 0, the last segment's match is the one after that many earlier ones at
/// the same depth (for a key written twice).
fn locate_yaml_key(text: &str, path: &str, skip_last: usize) -> Option<(usize, usize)> {
    let mut lines = text.lines().enumerate();
    let mut parent_indent: Option<usize> = None;
    let mut found = None;
    let segments: Vec<&str> = path.split('.').collect();
    for (n, segment) in segments.iter().enumerate() {
        let skip = if n + 1 == segments.len() {
            skip_last
        } else {
            0
        };
        for _ in 0..skip {
            let needle = format!("{}:", segment.split('[').next().unwrap_or(segment));
            lines.by_ref().find(|(_, line)| {
                let body = line.trim_start();
                let indent = line.len() - body.len();
                parent_indent.is_none_or(|p| indent > p) && body.starts_with(&needle)
            })?;
        }
        let segment = segment.split('[').next().unwrap_or(segment);
        let needle = format!("{segment}:");
        let (line_no, indent) = lines.by_ref().find_map(|(i, line)| {
            let body = line.trim_start();
            let indent = line.len() - body.len();
            let body = body.strip_prefix("- ").unwrap_or(body);
            let deeper = parent_indent.is_none_or(|p| indent > p);
            (deeper && body.starts_with(&needle)).then_some((i, indent))
        })?;
        let column = text
            .lines()
            .nth(line_no)
            .map_or(0, |l| l.find(segment).unwrap_or(0));
        parent_indent = Some(indent);
        found = Some((line_no + 1, column + 1));
    }
    found
}

/// 1-based line and column of byte `offset` in `text`.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// Strip the parser's own decorations (`path: ` prefix, ` at line L column C` suffix).
fn clean_message(message: &str) -> &str {
    let mut msg = message.trim();
    if let Some(i) = msg.rfind(" at line ") {
        let tail = &msg[i + " at line ".len()..];
        if tail
            .split(" column ")
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        {
            msg = &msg[..i];
        }
    }
    if let Some((prefix, rest)) = msg.split_once(": ")
        && !prefix.contains(' ')
        && !prefix.contains('`')
    {
        msg = rest;
    }
    msg
}

/// The text between the first pair of backticks after `marker`.
fn quoted_after<'a>(message: &'a str, marker: &str) -> Option<&'a str> {
    let rest = &message[message.find(marker)? + marker.len()..];
    let rest = rest.strip_prefix('`')?;
    Some(&rest[..rest.find('`')?])
}

/// The backticked names after "expected" in a serde message.
fn expected_names(message: &str) -> Vec<&str> {
    let Some(i) = message.find("expected") else {
        return Vec::new();
    };
    message[i..].split('`').skip(1).step_by(2).collect()
}

fn classify(
    file: &Path,
    path: &str,
    raw_message: &str,
    line: Option<usize>,
    column: Option<usize>,
) -> ConfigError {
    let message = clean_message(raw_message);
    let path = if path == "." {
        String::new()
    } else {
        path.to_owned()
    };
    let join = |key: &str| {
        if path.is_empty() || path.ends_with(&format!(".{key}")) || path == key {
            if path.is_empty() {
                key.to_owned()
            } else {
                path.clone()
            }
        } else {
            format!("{path}.{key}")
        }
    };
    let file = file.to_path_buf();
    if let Some(key) = quoted_after(message, "unknown field ") {
        let suggestion = suggest(key, expected_names(message));
        return ConfigError::UnknownKey {
            file,
            key: key.to_owned(),
            location: Box::new(Location {
                path: join(key),
                line,
                column,
            }),
            suggestion,
        };
    }
    if message.contains(PLAINTEXT_SECRET) {
        return ConfigError::PlaintextSecret {
            file,
            location: Box::new(Location { path, line, column }),
        };
    }
    if let Some(key) = quoted_after(message, "unknown variant ") {
        let names = expected_names(message);
        let suggestion = suggest(key, names.iter().copied());
        // The entry visitor reports an unknown key of a connector entry as an unknown variant
        // (the connector types are the variants). A value of a plain enum field lands here too:
        // tell them apart by whether the names offered are connector types (PascalCase, as
        // `File`; an all-capitals value such as an HTTP method `GET` is not one).
        let is_connector = names.iter().any(|n| {
            n.chars().next().is_some_and(|c| c.is_ascii_uppercase())
                && n.chars().any(|c| c.is_ascii_lowercase())
        });
        if is_connector {
            return ConfigError::UnknownConnector {
                file,
                key: key.to_owned(),
                location: Box::new(Location {
                    path: join(key),
                    line,
                    column,
                }),
                suggestion,
            };
        }
        // Aliases that differ only in case (`GET`, `get`) are offered once.
        let mut choices: Vec<&str> = Vec::with_capacity(names.len());
        for n in &names {
            if !choices.iter().any(|c| c.eq_ignore_ascii_case(n)) {
                choices.push(n);
            }
        }
        let mut message = format!(
            "invalid value `{key}`, expected one of {}",
            choices
                .iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        if let Some(s) = suggestion {
            message.push_str(&format!("; did you mean `{s}`?"));
        }
        return ConfigError::Invalid {
            file,
            message,
            location: Box::new(Location { path, line, column }),
        };
    }
    let mut message = message.to_owned();
    if message.contains("${") {
        message.push_str(" (a ${NAME} reference fills text fields only)");
    }
    if message.starts_with(NO_CONNECTOR) {
        return ConfigError::Invalid {
            file,
            message,
            location: Box::new(Location { path, line, column }),
        };
    }
    if line.is_some() && path.is_empty() {
        return ConfigError::Syntax {
            file,
            message,
            line,
            column,
        };
    }
    ConfigError::Invalid {
        file,
        message,
        location: Box::new(Location { path, line, column }),
    }
}

#[cfg(test)]
mod compat_tests;
#[cfg(test)]
mod tests;
