//! Pipeline commands.
