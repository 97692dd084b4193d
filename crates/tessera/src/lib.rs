//! # tessera
//!
//! A multimodal (image + text) LLM inference engine on Candle. This crate maps a checkpoint
//! (a Hugging Face folder, a GGUF file, or a Hub id) to a composition of the `tessera-text`,
//! `tessera-vision` and `tessera-decoder` crates, and owns the generation loop, sampling and
//! the public API.
//!
//! Image + prompt → answer, with the small model this repository ships:
//!
//! ```
//! use std::path::Path;
//! use tessera::{load_image, GenerateParams, LoadOptions, Model, DEFAULT_MAX_PIXELS};
//!
//! let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/shapes-vlm");
//! let model = Model::load(dir, &LoadOptions::default())?;
//! let image = load_image(&Path::new(dir).join("examples/two_circles.png"), DEFAULT_MAX_PIXELS)?;
//! let prompt = model.encode_prompt("How many circles are there?", None, false, std::slice::from_ref(&image))?;
//! let out = model.generate(&prompt, &GenerateParams::default(), &mut |_| {})?;
//! assert_eq!(out.text.trim(), "2"); // answers follow "Answer:" after a space
//! # Ok::<(), tessera::TesseraError>(())
//! ```
//!
//! Text generation with a GGUF checkpoint (`scripts/fetch_smollm2.sh` downloads this one):
//!
//! ```
//! use tessera::{GenerateParams, LoadOptions, Model};
//! # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
//! let model = Model::load(path, &LoadOptions::default())?;
//! let prompt = model.encode_prompt("The capital of France is", None, true, &[])?;
//! let params = GenerateParams { max_new_tokens: 4, ..Default::default() };
//! let out = model.generate(&prompt, &params, &mut |piece| print!("{piece}"))?;
//! assert!(out.text.starts_with(" Paris"));
//! # Ok::<(), tessera::TesseraError>(())
//! ```
//!
//! One loaded [`Model`] serves many threads: it is `Send + Sync` and read-only; generation
//! state lives in a [`KvCache`] per call ([`Model::new_cache`]).

pub mod config;
pub mod device;
pub mod embed;
pub mod engine;
pub mod error;
pub mod export;
pub mod families;
mod forward;
pub mod generate;
mod load_quant;
pub mod model;
pub mod prompt;
pub mod sampling;
pub mod source;
pub mod structured;
mod thinking_budget;
mod vision;

pub use candle_core::{DType, Device, Tensor};
pub use config::{GenerationConfig, ModelConfig, PromptStyle};
pub use device::{default_dtype, parse_dtype, DeviceChoice};
pub use embed::{cosine, Analysis, Embeddings, Neighbour, Pooling};
pub use engine::{Engine, EngineConfig, EngineStats, Event, Sink};
pub use error::{Result, TesseraError};
pub use export::{quantize_to_gguf, QuantizeJob, WrittenFile};
pub use families::mmproj::beside as mmproj_beside;
pub use families::{ImageFeatures, ImageProcessor, ImageSide, ImageSpec};
pub use forward::PREFILL_BLOCK;
pub use generate::{FinishReason, GenerateParams, GenerationOutput, SampledToken, Sequence, Timings, TokenLogprob};
pub use model::{LoadOptions, Model, ModelInfo};
pub use prompt::{Chunk, ImageInputs, Prompt};
pub use sampling::{Sampler, SamplingParams};
pub use source::{resolve, ModelSource};
pub use structured::{ConstraintFactory, OutputFormat, TokenConstraint};
pub use tessera_decoder::QuantMix;
pub use tessera_decoder::{flash_attention_enabled, AttentionMask, Decoder, KvCache, MaskPlan, Trace};
pub use tessera_text::{
    media_part_refusal, ChatTemplate, Content, ContentPart, Conversation, Message, ParsedOutput, ReasoningSplitter,
    RenderOptions, Split, ThinkingMarkers, Tokenizer, ToolCall, ToolFormat,
};
pub use tessera_text::{tool_calls, tool_grammar};
pub use tessera_vision::{
    decode_image, encode_png, load_image, load_image_source, render_heatmap, save_png, RgbImage, VisionError,
    DEFAULT_MAX_PIXELS,
};
