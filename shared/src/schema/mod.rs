//! Schemas (placeholder: being written).
