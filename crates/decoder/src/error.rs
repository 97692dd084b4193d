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
    Candle(candle_core::Error),
}

impl From<candle_core::Error> for DecoderError {
    fn from(e: candle_core::Error) -> Self {
        Self::Candle(without_backtrace(e))
    }
}

/// `e` without the backtrace Candle attaches when `RUST_BACKTRACE` is set (its message prints
/// every frame after the text): tessera's errors stay one readable line.
pub fn without_backtrace(e: candle_core::Error) -> candle_core::Error {
    use candle_core::Error as E;
    match e {
        E::WithBacktrace { inner, .. } => without_backtrace(*inner),
        E::WithPath { inner, path } => E::WithPath { inner: Box::new(without_backtrace(*inner)), path },
        E::Context { inner, context } => E::Context { inner: Box::new(without_backtrace(*inner)), context },
        e => e,
    }
}

pub type Result<T> = std::result::Result<T, DecoderError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candle_errors_lose_their_backtrace_and_keep_their_message() {
        let traced = |inner: candle_core::Error| candle_core::Error::WithBacktrace {
            inner: Box::new(inner),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        };
        let e = traced(candle_core::Error::Msg("no CUDA device".into()));
        assert!(e.to_string().lines().count() > 1, "the frames follow the message");
        assert_eq!(DecoderError::from(e).to_string(), "no CUDA device");
        let nested = traced(candle_core::Error::Msg("bad".into())).with_path("/m/model.safetensors");
        assert_eq!(DecoderError::from(nested).to_string(), "path: \"/m/model.safetensors\" bad");
    }
}
