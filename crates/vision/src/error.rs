//! Typed errors for image loading and preprocessing; each names the file or field at fault.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum VisionError {
    #[error("cannot read image {path}: {reason}")]
    Io { path: PathBuf, reason: String },

    /// Encoding an image (PNG) failed.
    #[error("cannot encode image as PNG: {0}")]
    Encode(String),

    #[error("{path} is not an image in a supported format (PNG, JPEG, WebP, GIF, BMP): {reason}")]
    NotAnImage { path: PathBuf, reason: String },

    #[error("cannot decode image {path} (truncated or corrupt?): {reason}")]
    Decode { path: PathBuf, reason: String },

    #[error("image {path} has zero size ({width}×{height})")]
    ZeroSize { path: PathBuf, width: u32, height: u32 },

    #[error("image {path} is {width}×{height} = {pixels} pixels, over the limit of {limit} pixels")]
    TooLarge { path: PathBuf, width: u32, height: u32, pixels: u64, limit: u64 },

    /// An image reference (a chat message's image part) that cannot be resolved.
    #[error("image `{source_ref}`: {reason}")]
    Source { source_ref: String, reason: String },

    #[error("invalid image preprocessing configuration: {0}")]
    Config(String),

    /// A vision tensor is missing or malformed in the checkpoint.
    #[error(transparent)]
    Weights(#[from] tessera_decoder::DecoderError),

    #[error(transparent)]
    Candle(candle_core::Error),
}

pub type Result<T> = std::result::Result<T, VisionError>;

impl From<candle_core::Error> for VisionError {
    fn from(e: candle_core::Error) -> Self {
        Self::Candle(tessera_decoder::error::without_backtrace(e))
    }
}
