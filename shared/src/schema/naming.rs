//! The one naming policy: what a value or key of the data becomes when it names a table, a
//! catalog column, a nested field in a Hive type string, or a partition directory.
//!
//! Data is hostile: a namespace field may hold `""`, `"!!!"`, `"заказ"`, a 1,100-byte string
//! or a NUL; a key may be 300 characters long or hold a newline. Every function here turns
//! *any* string into a name that is valid where it goes, the same in every run and build
//! (the hash is a fixed FNV-1a), and distinct for inputs that should not share a name (with
//! the probability of a 32-bit hash where information is lost).
//!
//! | function | used for | keeps | replaces | bound |
//! |---|---|---|---|---|
//! | [`table_name`] | a namespace's table (and WAL part, Iceberg table directory, Glue table) | ASCII letters (lowercased), digits, `_` | runs of space `-` `.` `/` `:` by one `_` (same table); anything else by `_` plus a hash suffix | [`MAX_TABLE_NAME_BYTES`] |
//! | [`column_name`] | a top-level column name that keeps its case (catalogs other than Glue) | everything printable | control characters and `%` percent-escaped (`%0A`, `%25`) | [`MAX_COLUMN_NAME_BYTES`] |
//! | [`nested_field_name`] | a struct field inside a Hive type string that keeps its case | letters, digits, `_`, non-ASCII | additionally `:` `,` `<` `>` `` ` `` quotes, space and `\` percent-escaped | [`MAX_COLUMN_NAME_BYTES`] |
//! | [`undotted_name`] | an Iceberg field for a key with `.` that Iceberg would read as a path (`a.b` beside a struct `a`) | everything but `.` and `%` | `.` and `%` percent-escaped (`%2E`, `%25`) | none |
//! | [`glue_column_name`] | a column or struct field of a Glue table, as Athena names them | lowercase ASCII letters, digits, `_` | anything else by `_`, letters lowercased, plus a hash suffix whenever the key changed | [`MAX_TABLE_NAME_BYTES`] |
//! | [`partition_segment`] | a `name=value` directory of a partitioned table | printable characters | Hive's set (`/` `\` `=` `%` `:` `#` `?` `*` quotes `[` `]` `{` `}` `^` DEL, NUL and control characters) percent-escaped, as Hive and Spark do; a null value is `null` | [`MAX_SEGMENT_BYTES`] |
//!
//! A name that would be longer than its bound is cut at a character boundary and ends in
//! `_` + 8 hex digits of the hash of the whole input, so two long values that share a
//! prefix still get two names. The percent escapes are reversible (a `%` of the input is
//! escaped too), so escaped names of distinct inputs are distinct until the bound cuts them.
//!
//! The Iceberg schema, the Parquet files and the query engine keep keys exactly as the data
//! has them (Iceberg and Parquet take any string), but for a key with a `.` that would name
//! the same path as a nested field (an [`undotted_name`]); only the Glue catalog, which Athena
//! reads, sees [`glue_column_name`]s (and the Parquet files of the `Athena` destination,
//! whose columns Athena finds by those names), the original key kept as the column comment.

/// The longest table name: 128 bytes. Glue allows 255, a file name 255 and a WAL part name
/// 1,024; 128 leaves room for the suffixes derived file names add (`.metadata.json`,
/// temporary names) on every file system.
pub const MAX_TABLE_NAME_BYTES: usize = 128;

/// The longest catalog column or nested field name: 255 bytes, Glue's limit.
pub const MAX_COLUMN_NAME_BYTES: usize = 255;

/// The longest partition directory name (`name=value`, escaped): 128 bytes, well under the
/// 255 of a file name and keeping a path of several partition fields short.
pub const MAX_SEGMENT_BYTES: usize = 128;

/// The length of a hash suffix: `_` and 8 hex digits.
const SUFFIX_BYTES: usize = 9;

/// A table-safe name for a namespace value (see the [module docs](self)).
///
/// ASCII letters are lowercased and digits and `_` kept; each run of the separators space,
/// `-`, `.`, `/` and `:` becomes one `_`; leading and trailing `_` are trimmed. When that
/// loses information (the value holds any other character, or nothing is left but `_`), or
/// the name would be longer than [`MAX_TABLE_NAME_BYTES`] (it is cut to fit), the name ends
/// in `_` and 8 hex digits of a stable hash of the whole value, so distinct values do not
/// share a table by accident (`"ÄÖ"` and `"!!!"` get different names). Never empty, never
/// longer than [`MAX_TABLE_NAME_BYTES`], only `[a-z0-9_]`.
pub fn table_name(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len().min(MAX_TABLE_NAME_BYTES) + SUFFIX_BYTES);
    let mut lossy = false;
    let mut in_run = false;
    for ch in raw.chars() {
        if ch.is_ascii_alphanumeric() || ch == '_' {
            out.push(ch.to_ascii_lowercase());
            in_run = false;
        } else {
            lossy |= !matches!(ch, ' ' | '-' | '.' | '/' | ':');
            if !in_run {
                out.push('_');
                in_run = true;
            }
        }
    }
    let mut name = out.trim_matches('_').to_owned();
    lossy |= name.is_empty() || name.len() > MAX_TABLE_NAME_BYTES;
    if lossy {
        // Only ASCII is left, so any byte is a character boundary.
        name.truncate(MAX_TABLE_NAME_BYTES - SUFFIX_BYTES);
        name.truncate(name.trim_end_matches('_').len());
        name.push_str(&suffix(raw));
    }
    name
}

/// A Glue column (or Hive struct field) name that follows Athena's rules: only lowercase ASCII
/// letters, digits and `_`, at most [`MAX_TABLE_NAME_BYTES`] bytes. A key that already is such
/// a name is kept; any other key (`userId`, `a b`, `заказ`, ``) has each other character
/// replaced by `_`, ASCII letters lowercased, and ends in `_` + 8 hex digits of the hash of
/// the whole key, so `userId` and `userid` (or `a-b` and `a_b`) stay two columns and a key
/// gets the same name in every run whatever other keys the table has. The caller keeps the
/// original key in the column comment.
pub fn glue_column_name(raw: &str) -> String {
    let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    if !raw.is_empty() && raw.len() <= MAX_TABLE_NAME_BYTES && raw.chars().all(valid) {
        return raw.to_owned();
    }
    let mut name: String = raw
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if valid(c) { c } else { '_' }
        })
        .collect();
    // Only ASCII is left, so any byte is a character boundary.
    name.truncate(MAX_TABLE_NAME_BYTES - SUFFIX_BYTES);
    name.push_str(&suffix(raw));
    name
}

/// A Glue column name for a top-level key (see the [module docs](self)): control
/// characters (and `%`) percent-escaped, at most [`MAX_COLUMN_NAME_BYTES`] bytes (cut, with a
/// hash suffix), and an empty key is `_` + the hash. A key that is printable and short is
/// kept exactly.
pub fn column_name(raw: &str) -> String {
    escaped_name(raw, MAX_COLUMN_NAME_BYTES, |c| c.is_control() || c == '%')
}

/// An Iceberg field name for a key that holds `.` where Iceberg would read it as a path: a
/// key `a.b` beside a struct or list `a` (Iceberg indexes fields by dotted full names, and
/// the field `b` of `a` is `a.b` too; see [`crate::sinks::iceberg::schema`]). `.` and `%` are
/// percent-escaped (`a.b` -> `a%2Eb`, `50%.x` -> `50%25%2Ex`), so the name holds no `.` and
/// [`dotted_key`] gives the key back.
pub fn undotted_name(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len() + 4);
    escape_into(&mut out, raw, |c| c == '.' || c == '%');
    out
}

/// The key an [`undotted_name`] was made from, or `None` when `name` cannot be one (it holds
/// no `%2E`, or a `%` that is neither `%2E` nor `%25`, or a `.`).
pub fn dotted_key(name: &str) -> Option<String> {
    if !name.contains("%2E") || name.contains('.') {
        return None;
    }
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        match rest.get(at..at + 3) {
            Some("%2E") => out.push('.'),
            Some("%25") => out.push('%'),
            _ => return None,
        }
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// PostgreSQL's identifier limit (`NAMEDATALEN - 1`), in bytes.
pub const MAX_POSTGRES_NAME_BYTES: usize = 63;

/// A PostgreSQL identifier (always used quoted) for a table or column name: kept exactly when
/// it fits [`MAX_POSTGRES_NAME_BYTES`] and has no control character (PostgreSQL would
/// silently cut a longer one, so two long names could meet); otherwise control characters
/// (and `%`) percent-escaped and the name cut to fit, with a hash suffix of the whole name.
pub fn postgres_name(raw: &str) -> String {
    escaped_name(raw, MAX_POSTGRES_NAME_BYTES, |c| c.is_control() || c == '%')
}

/// A struct field name for a Hive type string (`struct<name:type,...>`): [`column_name`]'s
/// escapes plus the characters the type syntax uses or that need quoting (`:` `,` `<` `>`
/// `` ` `` `'` `"` space `\` `;` `(` `)`), so the type string always parses.
pub fn nested_field_name(raw: &str) -> String {
    escaped_name(raw, MAX_COLUMN_NAME_BYTES, |c| {
        c.is_control()
            || c.is_whitespace()
            || matches!(
                c,
                '%' | ':' | ',' | '<' | '>' | '`' | '\'' | '"' | '\\' | ';' | '(' | ')'
            )
    })
}

/// The directory of one partition field of a data file: `name=value`, both escaped as Hive
/// and Spark escape partition paths (see the [module docs](self)), `value` `None` for null.
/// The result is one path segment (never `.`, `..` or containing `/` or NUL), at most
/// [`MAX_SEGMENT_BYTES`] bytes (cut, with a hash suffix of the unescaped `name=value`).
///
/// The path is informational: Iceberg keeps each file's partition values in its manifests,
/// and no reader parses them back from the path.
pub fn partition_segment(name: &str, value: Option<&str>) -> String {
    let mut segment = String::new();
    escape_into(&mut segment, name, hive_escaped);
    segment.push('=');
    match value {
        Some(value) => escape_into(&mut segment, value, hive_escaped),
        None => segment.push_str("null"),
    }
    if segment.len() <= MAX_SEGMENT_BYTES {
        return segment;
    }
    let hashed = format!("{name}={}", value.unwrap_or("\u{0}null"));
    cut(&mut segment, MAX_SEGMENT_BYTES - SUFFIX_BYTES);
    segment.push_str(&suffix(&hashed));
    segment
}

/// The value in a `name=value` directory [`partition_segment`] made, unescaped (`None` for
/// `null`); `None` when `segment` has no `=`. A segment cut to [`MAX_SEGMENT_BYTES`] gives
/// the value's beginning and hash suffix, not the value: the partition's registered values
/// (an `Athena` sink's Glue partitions) are the record of those.
pub fn partition_segment_value(segment: &str) -> Option<Option<String>> {
    let (_, value) = segment.split_once('=')?;
    if value == "null" {
        return Some(None);
    }
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%')
            .then(|| value.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    Some(Some(String::from_utf8_lossy(&out).into_owned()))
}

/// Whether Hive's `FileUtils.escapePathName` escapes `c` (and NUL, which it cannot write).
fn hive_escaped(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '"' | '#'
                | '%'
                | '\''
                | '*'
                | '/'
                | ':'
                | '='
                | '?'
                | '\\'
                | '{'
                | '}'
                | '['
                | ']'
                | '^'
        )
}

/// `raw` with every character `escape` picks written as `%XX` per UTF-8 byte, bounded by
/// `max` bytes (cut with a hash suffix); empty gives `_` + the hash.
fn escaped_name(raw: &str, max: usize, escape: impl Fn(char) -> bool) -> String {
    if raw.is_empty() {
        return suffix(raw);
    }
    let mut out = String::with_capacity(raw.len().min(max));
    escape_into(&mut out, raw, escape);
    if out.len() > max {
        cut(&mut out, max - SUFFIX_BYTES);
        out.push_str(&suffix(raw));
    }
    out
}

fn escape_into(out: &mut String, raw: &str, escape: impl Fn(char) -> bool) {
    for ch in raw.chars() {
        if escape(ch) {
            let mut buf = [0u8; 4];
            for byte in ch.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{byte:02X}"));
            }
        } else {
            out.push(ch);
        }
    }
}

/// Cut `name` to at most `max` bytes, at a character boundary and never inside a `%XX`
/// escape.
fn cut(name: &mut String, max: usize) {
    let mut end = max.min(name.len());
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    // A `%` in the last two bytes starts an escape the cut would split (`%` and hex digits
    // are ASCII, so cutting before the `%` stays on a character boundary).
    let bytes = name.as_bytes();
    if let Some(at) = (end.saturating_sub(2)..end)
        .rev()
        .find(|&i| bytes[i] == b'%')
    {
        end = at;
    }
    name.truncate(end);
}

/// `_` and 8 hex digits: the top 32 bits of the FNV-1a hash of `raw`.
fn suffix(raw: &str) -> String {
    format!("_{:08x}", fnv1a_64(raw.as_bytes()) >> 32)
}

/// The 64-bit FNV-1a hash: fixed, so a value gets the same name in every run and build.
pub(crate) fn fnv1a_64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &byte in bytes {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests;
