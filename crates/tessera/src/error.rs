//! The library's error type: every variant names what was wrong (file, field, tensor, id).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TesseraError {
    #[error(transparent)]
    Decoder(#[from] tessera_decoder::DecoderError),

    #[error(transparent)]
    Text(#[from] tessera_text::TextError),

    #[error(transparent)]
    Vision(#[from] tessera_vision::VisionError),

    /// A configuration file is missing, unreadable, or lacks a required field.
    #[error("{path}: {reason}")]
    Config { path: PathBuf, reason: String },

    /// An `mmproj` file that does not go with the text model it was given with.
    #[error("{mmproj} does not go with the model {model}: {reason}")]
    Pair { mmproj: PathBuf, model: PathBuf, reason: String },

    /// The checkpoint's architecture is not one this engine implements.
    #[error("unsupported architecture `{found}` (in {path}); supported: {supported}")]
    UnsupportedArchitecture { found: String, path: PathBuf, supported: String },

    /// A model could not be found or fetched.
    #[error("cannot load model `{spec}`: {reason}")]
    ModelNotFound { spec: String, reason: String },

    /// The request itself is invalid (empty prompt, too long, bad sampling value…).
    #[error("{0}")]
    InvalidInput(String),

    /// The engine's queue is full (or it has stopped): try again later.
    #[error("the server is busy: {0}")]
    Busy(String),

    /// The requested device is not available in this build or on this machine.
    #[error("device `{0}` is not available: {1}")]
    Device(String, String),

    #[error(transparent)]
    Candle(candle_core::Error),
}

pub type Result<T> = std::result::Result<T, TesseraError>;

impl From<candle_core::Error> for TesseraError {
    fn from(e: candle_core::Error) -> Self {
        Self::Candle(tessera_decoder::error::without_backtrace(e))
    }
}
