//! The File source (placeholder: being written).
