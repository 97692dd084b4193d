//! # tessera
//!
//! A multimodal (image + text) LLM inference engine on Candle. This crate maps a checkpoint
//! (a Hugging Face folder, a GGUF file, or a Hub id) to a composition of the `tessera-text`,
//! `tessera-vision` and `tessera-decoder` crates, and owns the generation loop, sampling and
//! the public API.
//!
//! ```no_run
//! use tessera::{GenerateParams, LoadOptions, Model};
//! let model = Model::load("models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf", &LoadOptions::default())?;
//! let prompt = model.encode_prompt("The capital of France is", None, true, 0)?;
//! let out = model.generate(&prompt, &GenerateParams { max_new_tokens: 8, ..Default::default() }, &mut |t| print!("{t}"))?;
//! assert!(out.text.starts_with(" Paris"));
//! # Ok::<(), tessera::TesseraError>(())
//! ```

pub mod config;
pub mod device;
pub mod embed;
pub mod error;
pub mod generate;
pub mod model;
pub mod sampling;
pub mod source;
mod vision;

pub use candle_core::{DType, Device, Tensor};
pub use config::{Architecture, GenerationConfig, ModelConfig, VisionSpec};
pub use embed::{cosine, Embeddings, Neighbour, Pooling};
pub use device::{default_dtype, parse_dtype, DeviceChoice};
pub use error::{Result, TesseraError};
pub use generate::{FinishReason, GenerateParams, GenerationOutput, Timings, TokenLogprob};
pub use model::{LoadOptions, Model, ModelInfo};
pub use sampling::{Sampler, SamplingParams};
pub use source::{resolve, ModelSource};
pub use tessera_decoder::{KvCache, Trace};
pub use tessera_text::{ChatTemplate, ContentPart, Message, Tokenizer};
pub use tessera_vision::{load_image, render_heatmap, save_png, RgbImage, DEFAULT_MAX_PIXELS};
