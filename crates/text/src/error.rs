//! Typed errors for tokenizers, chat templates and token embeddings.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// A tokenizer file is missing or invalid.
    #[error("cannot load tokenizer from {path}: {reason}")]
    TokenizerFile { path: PathBuf, reason: String },

    /// A GGUF file's tokenizer metadata is missing or malformed.
    #[error("GGUF tokenizer metadata `{key}`: {reason}")]
    GgufMetadata { key: String, reason: String },

    /// A tokenizer kind this engine does not build.
    #[error("unsupported tokenizer: {0}")]
    Unsupported(String),

    /// Encoding or decoding failed.
    #[error("tokenizer: {0}")]
    Tokenize(String),

    /// A chat template failed to parse or render (including `raise_exception` from the template).
    #[error("chat template ({origin}): {reason}")]
    Template { origin: String, reason: String },

    /// A conversation (`--messages`, a request's `messages`) is not in the chat format.
    #[error("chat messages: {0}")]
    Messages(String),

    /// A token id outside the vocabulary.
    #[error("token id {id} is out of range for a vocabulary of {vocab_size}")]
    TokenOutOfRange { id: u32, vocab_size: usize },

    /// The prompt's image placeholders and the images given differ in number.
    #[error("the prompt has {found} `{placeholder}` placeholder(s) but {images} image(s) were given")]
    Placeholders { placeholder: String, found: usize, images: usize },

    /// A file could not be read.
    #[error("cannot read {path}: {reason}")]
    Io { path: PathBuf, reason: String },

    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}

pub type Result<T> = std::result::Result<T, TextError>;
