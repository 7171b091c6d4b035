//! The one error type of the `config` module.

use std::path::PathBuf;

/// Where in a config file something is: a key path and, when the parser knows it, a line and
/// column (1-based).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    /// Dotted key path, for example `data_sinks.lake.Duckdb.warehouse`.
    pub path: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.path.is_empty() {
            f.write_str("the top level")?;
        } else {
            f.write_str(&self.path)?;
        }
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, " (line {line}, column {column})"),
            (Some(line), None) => write!(f, " (line {line})"),
            _ => Ok(()),
        }
    }
}

/// Everything that can be wrong with a configuration. Each message is one line that names the
/// file and the key path; none ever contains a secret's value.
///
/// All config errors make the CLI exit with code 2.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A config file named by `--config` or `SKIPPR_CONFIG_FILE` does not exist.
    #[error("config file '{path}' (from {origin}) does not exist")]
    FileNotFound {
        /// The path as given.
        path: PathBuf,
        /// `--config` or `SKIPPR_CONFIG_FILE`.
        origin: &'static str,
    },
    /// A config file named by `--config` or `SKIPPR_CONFIG_FILE` is a directory.
    #[error("config file '{path}' (from {origin}) is a directory, not a file")]
    NotAFile {
        /// The path as given.
        path: PathBuf,
        /// `--config` or `SKIPPR_CONFIG_FILE`.
        origin: &'static str,
    },
    /// An environment variable or flag that skipprd reads has a value it cannot use.
    #[error("{name} = '{value}': {message}")]
    BadSetting {
        /// The variable (`BUFFER_THRESHOLD_BYTES`) or flag (`--wal-storage`).
        name: String,
        /// Its value.
        value: String,
        /// What is wrong, and what to use instead.
        message: String,
    },
    /// The config file (or a `.env` file) exists but cannot be read.
    #[error("cannot read '{path}': {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// `SKIPPR_CONFIG_S3_URI` is not an `s3://bucket/key` URI, or the object it names is not
    /// text.
    #[error("{}={uri}: {message}", crate::config::load::CONFIG_S3_URI_VAR)]
    S3Uri {
        /// The value.
        uri: String,
        /// What is wrong.
        message: String,
    },
    /// The config object could not be fetched from S3.
    #[error("fetching the config {uri}: {failure}")]
    S3Fetch {
        /// The object.
        uri: String,
        /// What S3 said.
        failure: Box<crate::aws::SdkFailure>,
    },
    /// The file is not valid YAML/TOML/JSON.
    #[error("Invalid Skippr configuration in '{file}': {message}{}", at_suffix(.line, .column))]
    Syntax {
        /// The file.
        file: PathBuf,
        /// The parser's message.
        message: String,
        /// 1-based line, when known.
        line: Option<usize>,
        /// 1-based column, when known.
        column: Option<usize>,
    },
    /// A key is not one the format knows.
    #[error("Invalid Skippr configuration in '{file}': unknown field `{key}` at {location}{}", suggestion_suffix(.suggestion))]
    UnknownKey {
        /// The file.
        file: PathBuf,
        /// The unknown key.
        key: String,
        /// Its full path and position.
        location: Box<Location>,
        /// A close known key, when there is one.
        suggestion: Option<String>,
    },
    /// A connector type that is not one we know.
    #[error("Invalid Skippr configuration in '{file}': unknown connector type `{key}` at {location}{}", suggestion_suffix(.suggestion))]
    UnknownConnector {
        /// The file.
        file: PathBuf,
        /// The unknown type name.
        key: String,
        /// Its full path and position.
        location: Box<Location>,
        /// A close known type, when there is one.
        suggestion: Option<String>,
    },
    /// A value has the wrong type, a required key is missing, or similar.
    #[error("Invalid Skippr configuration in '{file}': {message} at {location}")]
    Invalid {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        message: String,
        /// Where.
        location: Box<Location>,
    },
    /// A secret field holds plain text instead of a `${NAME}` reference.
    #[error(
        "Invalid Skippr configuration in '{file}': {location} is a secret and must be a ${{NAME}} reference to an environment variable, not plain text"
    )]
    PlaintextSecret {
        /// The file.
        file: PathBuf,
        /// Where (the value itself is never shown).
        location: Box<Location>,
    },
    /// `${NAME}` refers to an unset variable.
    #[error(
        "{file_name} references ${{{name}}} at {path}{}, but that environment variable is not set",
        on_line(*.line)
    )]
    EnvUnset {
        /// The config file's name, as users know it (`skippr.yml`).
        file_name: String,
        /// The variable.
        name: String,
        /// The key path.
        path: String,
        /// The line of the file where the reference first appears, when found.
        line: Option<usize>,
    },
    /// `${NAME}` refers to an empty variable.
    #[error(
        "{file_name} references ${{{name}}} at {path}{}, but that environment variable is empty",
        on_line(*.line)
    )]
    EnvEmpty {
        /// The config file's name.
        file_name: String,
        /// The variable.
        name: String,
        /// The key path.
        path: String,
        /// The line of the file where the reference first appears, when found.
        line: Option<usize>,
    },
    /// A `.env` file line that is not `NAME=value`.
    #[error("cannot parse '{path}' line {line}: {message}")]
    DotEnv {
        /// The `.env` file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A `<section>.<name>` reference to something that is not defined.
    #[error("Invalid Skippr configuration in '{file}': {from} references '{reference}', but '{name}' is not defined.{}", suggestion_suffix(.suggestion))]
    DanglingReference {
        /// The file.
        file: PathBuf,
        /// The key that holds the reference (`pipelines.bikehire.data_source`).
        from: String,
        /// The reference as written.
        reference: String,
        /// The name that is missing.
        name: String,
        /// A defined name that is close.
        suggestion: Option<String>,
    },
    /// A reference that is not of the form `<section>.<name>` or points at the wrong section.
    #[error(
        "Invalid Skippr configuration in '{file}': {from} is '{reference}', but it must be a reference of the form '{expected}.<name>'"
    )]
    BadReference {
        /// The file.
        file: PathBuf,
        /// The key that holds the reference.
        from: String,
        /// The value as written.
        reference: String,
        /// The section it must name.
        expected: &'static str,
    },
    /// A pipeline or logical connector name that is not allowed.
    #[error("Invalid Skippr configuration in '{file}': {section} name '{name}' {reason}")]
    BadName {
        /// The file.
        file: PathBuf,
        /// The section (`pipelines`, `data_sources`, ...).
        section: &'static str,
        /// The name.
        name: String,
        /// Why it is refused.
        reason: String,
    },
    /// A connector that skipprd knows but this build cannot run yet.
    #[error("connector `{connector}` ({section}.{name}) is not supported yet")]
    Unsupported {
        /// The connector type.
        connector: &'static str,
        /// Its section.
        section: &'static str,
        /// Its logical name.
        name: String,
    },
    /// A setting value that is recognised but not supported (`store.type: cloud-tables`,
    /// `WAL_STORAGE=clustered`).
    #[error("{setting} = '{value}' is not supported{}", note_suffix(.note))]
    UnsupportedSetting {
        /// The key or variable.
        setting: String,
        /// Its value.
        value: String,
        /// What to do instead.
        note: Option<String>,
    },
    /// A value that is out of range or contradicts another.
    #[error("Invalid Skippr configuration in '{file}': {path}: {message}")]
    BadValue {
        /// The file.
        file: PathBuf,
        /// The key path.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// A command names a pipeline the configuration does not define.
    #[error("pipeline '{name}' is not defined in {file}{}", defined_suffix(.defined))]
    PipelineNotDefined {
        /// The pipeline name asked for.
        name: String,
        /// The config file, or a note that none was found.
        file: String,
        /// The names that are defined.
        defined: Vec<String>,
    },
    /// A command needs a pipeline and the configuration defines none.
    #[error("no pipelines are defined in {file}")]
    NoPipelines {
        /// The config file, or a note that none was found.
        file: String,
    },
    /// A command needs a pipeline and none was named while several are defined.
    #[error(
        "{count} pipelines are defined in {file} ({names}): choose one with --pipeline or PIPELINE_NAME"
    )]
    PipelineAmbiguous {
        /// The config file.
        file: String,
        /// How many.
        count: usize,
        /// Their names, comma-separated.
        names: String,
    },
}

impl ConfigError {
    /// Whether retrying the same operation might succeed. Config errors never are (the input
    /// must change), except an interrupted read and an S3 fetch that failed transiently.
    pub fn is_retryable(&self) -> bool {
        match self {
            ConfigError::Read { source, .. } => source.kind() == std::io::ErrorKind::Interrupted,
            ConfigError::S3Fetch { failure, .. } => failure.retryable,
            _ => false,
        }
    }
}

fn at_suffix(line: &Option<usize>, column: &Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(" (line {l}, column {c})"),
        (Some(l), None) => format!(" (line {l})"),
        _ => String::new(),
    }
}

fn suggestion_suffix(suggestion: &Option<String>) -> String {
    match suggestion {
        Some(s) => format!("; did you mean `{s}`?"),
        None => String::new(),
    }
}

fn note_suffix(note: &Option<String>) -> String {
    match note {
        Some(n) => format!(": {n}"),
        None => String::new(),
    }
}

fn defined_suffix(defined: &[String]) -> String {
    if defined.is_empty() {
        " (no pipelines are defined)".to_owned()
    } else {
        format!(" (defined: {})", defined.join(", "))
    }
}

/// The closest of `candidates` to `word`, when it is close enough to be a likely typo.
pub(crate) fn suggest<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let lower = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .map(|c| {
            (
                strsim::damerau_levenshtein(&lower, &c.to_ascii_lowercase()),
                c,
            )
        })
        .filter(|(d, c)| *d <= 2.max(c.len() / 4) && *d < c.len())
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c.to_owned())
}

/// ` (line N)`, or nothing.
fn on_line(line: Option<usize>) -> String {
    line.map(|n| format!(" (line {n})")).unwrap_or_default()
}
