//! The text side: tokenizers (`tokenizer.json`, or a GGUF file's embedded vocabulary), special
//! tokens, chat templates, image-placeholder expansion, and token embeddings.

pub mod chat;
pub mod conversation;
pub mod embedding;
pub mod error;
mod gguf_gemma4;
pub mod placeholders;
mod pyjson;
pub mod reasoning;
pub mod tokenizer;
pub mod tool_calls;
pub mod tool_grammar;

pub use chat::{ChatTemplate, RenderOptions};
pub use conversation::{media_part_refusal, Content, ContentPart, Conversation, Message};
pub use embedding::TokenEmbedding;
pub use error::{Result, TextError};
pub use placeholders::{expand_placeholders, idefics3_image_prompt, paligemma_prompt};
pub use reasoning::{ReasoningSplitter, Split, ThinkingMarkers};
pub use tokenizer::{SpecialTokens, TextStream, Tokenizer};
pub use tool_calls::{ParsedOutput, ToolCall, ToolFormat};
