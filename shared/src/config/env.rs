//! Environment variables: `${NAME}` substitution and `.env` files.
//!
//! - A text value that is exactly `${NAME}` (`NAME` matching `[A-Za-z_][A-Za-z0-9_]*`) is
//!   replaced by the variable's value. A partial use such as `x${NAME}` stays literal text.
//! - An unset or empty variable fails the load, naming the variable and the key path.
//! - Lookup order: the process environment, then `.env.local`, then `.env`, both beside the
//!   config file. So `.env` fills variables that are unset, `.env.local` overrides `.env`, and
//!   a variable set in the real environment always wins (as with dotenv-flow and most tools).
//!   The process environment is never modified.

use std::collections::BTreeMap;
use std::path::Path;

use super::error::ConfigError;

/// Where variable values come from. The real process environment in production, a map in tests.
pub trait Environment {
    /// The variable's value, if set (it may be empty).
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessEnv;

impl Environment for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

impl Environment for BTreeMap<String, String> {
    fn var(&self, name: &str) -> Option<String> {
        self.get(name).cloned()
    }
}

/// An environment layered over `.env` files: `base` first, then each file's values in order.
#[derive(Debug, Clone)]
pub struct LayeredEnv<E> {
    base: E,
    /// Later entries win over earlier ones; all lose to `base`.
    files: Vec<BTreeMap<String, String>>,
}

impl<E: Environment> LayeredEnv<E> {
    /// `base` with no files.
    pub fn new(base: E) -> Self {
        LayeredEnv {
            base,
            files: Vec::new(),
        }
    }

    /// Read `.env` then `.env.local` from `dir` (each optional).
    pub fn with_dotenv_files(mut self, dir: &Path) -> Result<Self, ConfigError> {
        for name in [".env", ".env.local"] {
            let path = dir.join(name);
            match std::fs::read_to_string(&path) {
                Ok(text) => self.files.push(parse_dotenv(&text, &path)?),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(ConfigError::Read { path, source }),
            }
        }
        Ok(self)
    }
}

impl<E: Environment> Environment for LayeredEnv<E> {
    fn var(&self, name: &str) -> Option<String> {
        self.base
            .var(name)
            .or_else(|| self.files.iter().rev().find_map(|f| f.get(name).cloned()))
    }
}

/// Parse a `.env` file: `NAME=value` lines, optional `export ` prefix, `#` comments, blank
/// lines, values optionally in single quotes (literal) or double quotes (with `\n`, `\"`, `\\`
/// escapes). An unquoted value ends at ` #`.
pub fn parse_dotenv(text: &str, path: &Path) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut vars = BTreeMap::new();
    for (index, raw) in text.lines().enumerate() {
        let err = |message: &str| ConfigError::DotEnv {
            path: path.to_path_buf(),
            line: index + 1,
            message: message.to_owned(),
        };
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line).trim_start();
        let Some((name, value)) = line.split_once('=') else {
            return Err(err("expected NAME=value"));
        };
        let name = name.trim();
        if !is_var_name(name) {
            return Err(err(&format!("`{name}` is not a valid variable name")));
        }
        let value = value.trim();
        let value = if let Some(rest) = value.strip_prefix('\'') {
            rest.strip_suffix('\'')
                .ok_or_else(|| err("unterminated single quote"))?
                .to_owned()
        } else if let Some(rest) = value.strip_prefix('"') {
            let inner = rest
                .strip_suffix('"')
                .ok_or_else(|| err("unterminated double quote"))?;
            unescape_double_quoted(inner)
        } else {
            match value.find(" #") {
                Some(i) => value[..i].trim_end().to_owned(),
                None => value.to_owned(),
            }
        };
        vars.insert(name.to_owned(), value);
    }
    Ok(vars)
}

fn unescape_double_quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

fn is_var_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
}

/// The variable name when `text` is exactly `${NAME}`.
pub fn reference_name(text: &str) -> Option<&str> {
    let name = text.strip_prefix("${")?.strip_suffix('}')?;
    is_var_name(name).then_some(name)
}

/// Replace every whole-value `${NAME}` text in `value`, returning the key paths that were
/// substituted, each with its variable name. Keys are never substituted.
pub fn substitute(
    value: &mut serde_json::Value,
    env: &dyn Environment,
    file_name: &str,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut refs = BTreeMap::new();
    walk(value, &mut String::new(), env, file_name, &mut refs)?;
    Ok(refs)
}

fn walk(
    value: &mut serde_json::Value,
    path: &mut String,
    env: &dyn Environment,
    file_name: &str,
    refs: &mut BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    match value {
        serde_json::Value::String(text) => {
            if let Some(name) = reference_name(text) {
                let name = name.to_owned();
                match env.var(&name) {
                    None => {
                        return Err(ConfigError::EnvUnset {
                            file_name: file_name.to_owned(),
                            name,
                            path: path.clone(),
                            line: None,
                        });
                    }
                    Some(v) if v.is_empty() => {
                        return Err(ConfigError::EnvEmpty {
                            file_name: file_name.to_owned(),
                            name,
                            path: path.clone(),
                            line: None,
                        });
                    }
                    Some(v) => {
                        *text = v;
                        refs.insert(path.clone(), name);
                    }
                }
            }
        }
        serde_json::Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(item, path, env, file_name, refs)?;
                path.truncate(len);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                walk(item, path, env, file_name, refs)?;
                path.truncate(len);
            }
        }
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn whole_value_references_are_replaced_and_recorded() {
        let mut v = json!({"a": {"b": "${HOST}", "c": ["${PORT_TEXT}"]}});
        let refs = substitute(
            &mut v,
            &env(&[("HOST", "db"), ("PORT_TEXT", "5432")]),
            "skippr.yml",
        )
        .unwrap();
        assert_eq!(v, json!({"a": {"b": "db", "c": ["5432"]}}));
        assert_eq!(refs.get("a.b").map(String::as_str), Some("HOST"));
        assert_eq!(refs.get("a.c[0]").map(String::as_str), Some("PORT_TEXT"));
    }

    #[test]
    fn partial_and_malformed_references_stay_literal() {
        let mut v = json!({"a": "x${HOST}", "b": "${1BAD}", "c": "${HOST", "d": "$HOST"});
        let before = v.clone();
        let refs = substitute(&mut v, &env(&[("HOST", "db")]), "skippr.yml").unwrap();
        assert_eq!(v, before);
        assert!(refs.is_empty());
    }

    #[test]
    fn unset_variable_fails_naming_variable_and_path() {
        let mut v = json!({"data_sources": {"pg": {"Postgres": {"password": "${PG_PASSWORD}"}}}});
        let err = substitute(&mut v, &env(&[]), "skippr.yml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "skippr.yml references ${PG_PASSWORD} at data_sources.pg.Postgres.password, but that environment variable is not set"
        );
    }

    #[test]
    fn empty_variable_fails_naming_variable_and_path() {
        let mut v = json!({"a": "${EMPTY}"});
        let err = substitute(&mut v, &env(&[("EMPTY", "")]), "skippr.yml").unwrap_err();
        assert_eq!(
            err.to_string(),
            "skippr.yml references ${EMPTY} at a, but that environment variable is empty"
        );
    }

    #[test]
    fn dotenv_parses_quotes_comments_and_export() {
        let text = "# comment\n\nexport A=1\nB = 'lit ${X} # not comment'\nC=\"line\\nnext\"\nD=plain # trailing\n";
        let vars = parse_dotenv(text, Path::new(".env")).unwrap();
        assert_eq!(vars["A"], "1");
        assert_eq!(vars["B"], "lit ${X} # not comment");
        assert_eq!(vars["C"], "line\nnext");
        assert_eq!(vars["D"], "plain");
    }

    #[test]
    fn dotenv_errors_name_file_and_line() {
        let err = parse_dotenv("A=1\nnot a pair\n", Path::new("/p/.env")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot parse '/p/.env' line 2: expected NAME=value"
        );
    }

    #[test]
    fn process_env_wins_then_env_local_then_env() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(".env"),
            "A=from_env\nB=from_env\nC=from_env\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join(".env.local"),
            "B=from_local\nC=from_local\n",
        )
        .unwrap();
        let layered = LayeredEnv::new(env(&[("C", "from_process")]))
            .with_dotenv_files(dir.path())
            .unwrap();
        assert_eq!(layered.var("A").as_deref(), Some("from_env"));
        assert_eq!(layered.var("B").as_deref(), Some("from_local"));
        assert_eq!(layered.var("C").as_deref(), Some("from_process"));
        assert_eq!(layered.var("D"), None);
    }
}
