//! The text side: tokenizers (`tokenizer.json`, or a GGUF file's embedded vocabulary), special
//! tokens, chat templates, image-placeholder expansion, and token embeddings.

pub mod chat;
pub mod embedding;
pub mod error;
pub mod placeholders;
pub mod tokenizer;

pub use chat::{ChatTemplate, Content, ContentPart, Conversation, Message};
pub use embedding::TokenEmbedding;
pub use error::{Result, TextError};
pub use placeholders::{expand_placeholders, idefics3_image_prompt, paligemma_prompt};
pub use tokenizer::{SpecialTokens, TextStream, Tokenizer};
