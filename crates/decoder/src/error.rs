//! Typed errors for the decoder building blocks and weight loading.

use std::path::PathBuf;

/// Everything that can go wrong while loading weights or running a decoder.
#[derive(Debug, thiserror::Error)]
pub enum DecoderError {
    /// A weight file could not be opened or parsed (missing, truncated, not the claimed format).
    #[error("cannot read weights file {path}: {reason}")]
    WeightFile { path: PathBuf, reason: String },

    /// A tensor the model needs is not in the checkpoint.
    #[error("tensor `{name}` is missing from {source_desc}")]
    MissingTensor { name: String, source_desc: String },

    /// A tensor has a different shape than the configuration implies.
    #[error("tensor `{name}` in {source_desc} has shape {found:?}, expected {expected:?}")]
    TensorShape { name: String, source_desc: String, expected: Vec<usize>, found: Vec<usize> },

    /// A tensor's bytes could not be read (e.g. the file is truncated).
    #[error("cannot load tensor `{name}` from {source_desc}: {reason}")]
    TensorData { name: String, source_desc: String, reason: String },

    /// The configuration is inconsistent (e.g. heads do not divide the width).
    #[error("invalid decoder configuration: {0}")]
    Config(String),

    /// The sequence would run past what the model (or its cache) supports.
    #[error("sequence of {requested} positions exceeds the model's context of {max} positions")]
    ContextOverflow { requested: usize, max: usize },

    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

pub type Result<T> = std::result::Result<T, DecoderError>;
