//! Small helpers that keep error messages in one style: one line, lower-case start.

/// An I/O error as a short lower-case phrase: "permission denied" rather than
/// "Permission denied (os error 13)".
pub(crate) fn describe_io(error: &std::io::Error) -> String {
    let text = error.to_string();
    let text = match text.find(" (os error ") {
        Some(at) if text.ends_with(')') => &text[..at],
        _ => text.as_str(),
    };
    lower_first(text)
}

/// `text` with its first character lower-cased, unless it starts an acronym ("CSV", "I/O").
pub(crate) fn lower_first(text: &str) -> String {
    let mut chars = text.chars();
    match (chars.next(), chars.next()) {
        (Some(first), Some(second)) if first.is_uppercase() && !second.is_uppercase() => {
            let mut out = String::with_capacity(text.len());
            out.extend(first.to_lowercase());
            out.push_str(&text[first.len_utf8()..]);
            out
        }
        _ => text.to_owned(),
    }
}
