//! Configuration (placeholder: being written).
