//! Model assembly: a checkpoint's configuration mapped to a composition of the text side
//! (tokenizer, template, token embeddings) and the shared decoder, plus the LM head.
//!
//! A [`Model`] is immutable once loaded (share it across threads by reference or `Arc`);
//! per-sequence state lives in a [`KvCache`].

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use tessera_decoder::{AttentionMask, Decoder, GgufMode, KvCache, Linear, Trace, Weights};
use tessera_text::{ChatTemplate, Message, TokenEmbedding, Tokenizer};

use tessera_text::{ContentPart};
use tessera_vision::RgbImage;

use crate::config::{GenerationConfig, ModelConfig};
use crate::error::{Result, TesseraError};
use crate::source::{self, ModelSource};
use crate::vision::ImageEncoder;

/// How to load a model.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub device: Device,
    /// The working dtype. `None`: f32 on CPU, bf16 on GPUs; GGUF files stay quantized.
    /// `Some(_)` with a GGUF file dequantizes every tensor to that dtype.
    pub dtype: Option<DType>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self { device: Device::Cpu, dtype: None }
    }
}

/// What was loaded, for `tessera info` and logs.
#[derive(Debug, Clone)]
pub struct ModelInfo {
    pub source: ModelSource,
    pub dtype: DType,
    /// `Some("Q4_1")`-style description when matmul weights are quantized.
    pub quantization: Option<String>,
    pub tokenizer_source: String,
    pub chat_template_source: Option<String>,
}

pub struct Model {
    config: ModelConfig,
    info: ModelInfo,
    device: Device,
    tokenizer: Tokenizer,
    chat_template: Option<ChatTemplate>,
    generation_config: GenerationConfig,
    eos_ids: Vec<u32>,
    embed: TokenEmbedding,
    decoder: Decoder,
    lm_head: Linear,
    mask: AttentionMask,
    image_encoder: Option<ImageEncoder>,
}

impl Model {
    /// Resolves `spec` (a folder, a `.gguf` file, or `org/name[@rev]`) and loads it.
    pub fn load(spec: &str, opts: &LoadOptions) -> Result<Self> {
        Self::load_source(&source::resolve(spec)?, opts)
    }

    pub fn load_source(source: &ModelSource, opts: &LoadOptions) -> Result<Self> {
        match source {
            ModelSource::Dir(dir) => Self::load_dir(dir, opts),
            ModelSource::Gguf(path) => Self::load_gguf(path, opts),
        }
    }

    fn load_dir(dir: &Path, opts: &LoadOptions) -> Result<Self> {
        let config = ModelConfig::from_config_file(&dir.join("config.json"))?;
        let dtype = opts.dtype.unwrap_or_else(|| crate::device::default_dtype(&opts.device));
        let files = source::weight_files_in(dir)?;
        let vb = Weights::from_safetensors(&files, dtype, &opts.device)?;
        let tokenizer_path = dir.join("tokenizer.json");
        let mut tokenizer = Tokenizer::from_file(&tokenizer_path)?;
        let tokenizer_config = read_json_opt(&dir.join("tokenizer_config.json"))?;
        if let Some(tc) = &tokenizer_config {
            let special = tessera_text::SpecialTokens::from_tokenizer_config(tc, &tokenizer);
            tokenizer = tokenizer.with_special(special);
        }
        let chat_template = ChatTemplate::from_model_dir(dir)?;
        let gen_path = dir.join("generation_config.json");
        let generation_config =
            if gen_path.exists() { GenerationConfig::from_file(&gen_path)? } else { GenerationConfig::default() };
        let info = ModelInfo {
            source: ModelSource::Dir(dir.to_path_buf()),
            dtype,
            quantization: None,
            tokenizer_source: tokenizer_path.display().to_string(),
            chat_template_source: chat_template.as_ref().map(|_| template_source(dir)),
        };
        let image_encoder = match &config.vision {
            Some(spec) => Some(ImageEncoder::load(spec, dir, &vb)?),
            None => None,
        };
        let mut model = Self::assemble(config, vb, tokenizer, chat_template, generation_config, info, opts)?;
        model.image_encoder = image_encoder;
        Ok(model)
    }

    fn load_gguf(path: &Path, opts: &LoadOptions) -> Result<Self> {
        let content = tessera_decoder::weights::read_gguf(path)?;
        let config = ModelConfig::from_gguf(&content, path)?;
        let tokenizer = Tokenizer::from_gguf(&content)?;
        let chat_template = match content.metadata.get("tokenizer.chat_template").map(|v| v.to_string()) {
            Some(Ok(src)) => {
                let special = tokenizer.special();
                Some(ChatTemplate::new(src, special.bos_token.clone(), special.eos_token.clone())?)
            }
            _ => None,
        };
        let quantization = content
            .tensor_infos
            .get("blk.0.attn_q.weight")
            .map(|t| format!("{:?}", t.ggml_dtype));
        let (mode, dtype) = match opts.dtype {
            Some(dt) => (GgufMode::Dequantized, dt),
            None => (GgufMode::Quantized, DType::F32),
        };
        let info = ModelInfo {
            source: ModelSource::Gguf(path.to_path_buf()),
            dtype,
            quantization: (mode == GgufMode::Quantized).then_some(quantization).flatten(),
            tokenizer_source: format!("{} (embedded vocabulary)", path.display()),
            chat_template_source: chat_template.as_ref().map(|_| "tokenizer.chat_template (GGUF)".to_string()),
        };
        let vb = Weights::from_gguf_content(path, content, mode, dtype, &opts.device)?;
        Self::assemble(config, vb, tokenizer, chat_template, GenerationConfig::default(), info, opts)
    }

    fn assemble(
        config: ModelConfig,
        vb: Weights,
        tokenizer: Tokenizer,
        chat_template: Option<ChatTemplate>,
        generation_config: GenerationConfig,
        info: ModelInfo,
        opts: &LoadOptions,
    ) -> Result<Self> {
        let d = &config.decoder;
        let lm = vb.pp("model");
        let embed_weight = lm.pp("embed_tokens").matrix(config.vocab_size, d.hidden_size, "weight")?;
        let embed = TokenEmbedding::new(embed_weight.dense(vb.dtype())?)?;
        let decoder = Decoder::new(d, &lm)?;
        let lm_head = if config.tie_word_embeddings || !vb.contains("lm_head.weight") {
            Linear::new(embed_weight, None)?
        } else {
            vb.linear(d.hidden_size, config.vocab_size, false, "lm_head")?
        };
        // EOS ids from every place a checkpoint may state them.
        let mut eos_ids = config.eos_token_ids.clone();
        if let Some(e) = &generation_config.eos_token_id {
            eos_ids.extend(e.to_vec());
        }
        eos_ids.extend(tokenizer.special().eos_ids.iter().copied());
        eos_ids.sort_unstable();
        eos_ids.dedup();
        let mask = match config.sliding_window {
            Some(window) => AttentionMask::SlidingWindow { window },
            None => AttentionMask::Causal,
        };
        Ok(Self {
            config,
            info,
            device: opts.device.clone(),
            tokenizer,
            chat_template,
            generation_config,
            eos_ids,
            embed,
            decoder,
            lm_head,
            mask,
            image_encoder: None,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    pub fn info(&self) -> &ModelInfo {
        &self.info
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn chat_template(&self) -> Option<&ChatTemplate> {
        self.chat_template.as_ref()
    }

    pub fn generation_config(&self) -> &GenerationConfig {
        &self.generation_config
    }

    /// Every token id that ends generation.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// The context length (maximum positions).
    pub fn max_positions(&self) -> usize {
        self.config.decoder.max_position_embeddings
    }

    /// A fresh KV cache for one sequence.
    pub fn new_cache(&self) -> KvCache {
        self.decoder.new_cache()
    }

    /// Renders a conversation with the model's chat template.
    pub fn render_chat(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        let template = self.chat_template.as_ref().ok_or_else(|| {
            TesseraError::InvalidInput(format!(
                "{} has no chat template; use raw prompts",
                self.info.source.path().display()
            ))
        })?;
        Ok(template.render(messages, add_generation_prompt)?)
    }

    /// Token ids for a prompt: `raw` encodes the text as the reference tokenizer does (with
    /// whatever BOS its post-processor adds); otherwise the text is the user message of a
    /// chat, rendered by the template (which carries its own special tokens).
    ///
    /// With `num_images > 0` the user message's content is `[image, …, image, text]`.
    pub fn encode_prompt(&self, text: &str, system: Option<&str>, raw: bool, num_images: usize) -> Result<Vec<u32>> {
        if raw {
            return Ok(self.tokenizer.encode(text, true)?);
        }
        let mut messages = Vec::new();
        if let Some(s) = system {
            messages.push(Message::text("system", s));
        }
        if num_images == 0 {
            messages.push(Message::text("user", text));
        } else {
            let mut parts = vec![ContentPart::Image; num_images];
            parts.push(ContentPart::Text { text: text.to_string() });
            messages.push(Message::parts("user", parts));
        }
        let rendered = self.render_chat(&messages, true)?;
        Ok(self.tokenizer.encode(&rendered, false)?)
    }

    /// Image tokens per image, for models that take images.
    pub fn image_tokens_per_image(&self) -> Option<usize> {
        self.image_encoder.as_ref().map(|e| e.tokens_per_image())
    }

    /// The most images one prompt may carry (0 for text-only models).
    pub fn max_images(&self) -> usize {
        self.image_encoder.as_ref().map(|e| e.max_images()).unwrap_or(0)
    }

    /// A description of the image side for `tessera info`.
    pub fn vision_description(&self) -> Option<String> {
        self.image_encoder.as_ref().map(|e| e.describe())
    }

    /// The preprocessed pixel values `(3, H, W)` the model sees for `image`.
    pub fn pixel_values(&self, image: &RgbImage) -> Result<Tensor> {
        self.vision()?.pixel_values(image, &self.device)
    }

    /// The image as the model sees it (resized, not normalized) and its patch grid `(rows, cols)`.
    pub fn model_view(&self, image: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        self.vision()?.model_view(image)
    }

    /// Image tokens `(1, N, hidden)` for `image`, in the decoder's width.
    pub fn encode_image(&self, image: &RgbImage) -> Result<Tensor> {
        self.vision()?.encode(image, &self.device)
    }

    fn vision(&self) -> Result<&ImageEncoder> {
        self.image_encoder.as_ref().ok_or_else(|| {
            TesseraError::InvalidInput(format!(
                "model `{}` ({}) takes no images",
                self.info.source.path().display(),
                self.config.architecture.name()
            ))
        })
    }

    /// The input sequence `[image tokens …][text tokens]` as embeddings `(1, t, hidden)`.
    pub fn prompt_embeddings(&self, images: &[RgbImage], ids: &[u32]) -> Result<Tensor> {
        if !images.is_empty() && images.len() > self.max_images() {
            if self.image_encoder.is_none() {
                self.vision()?;
            }
            return Err(TesseraError::InvalidInput(format!(
                "{} images given but model `{}` accepts at most {}",
                images.len(),
                self.info.source.path().display(),
                self.max_images()
            )));
        }
        let mut parts = images.iter().map(|img| self.encode_image(img)).collect::<Result<Vec<_>>>()?;
        if !ids.is_empty() {
            parts.push(self.embed_ids(ids)?);
        }
        if parts.is_empty() {
            return Err(TesseraError::InvalidInput("empty input: no images and no tokens".into()));
        }
        let dtype = parts.last().map(|p| p.dtype()).unwrap_or(DType::F32);
        let parts = parts.into_iter().map(|p| p.to_dtype(dtype)).collect::<candle_core::Result<Vec<_>>>()?;
        Ok(Tensor::cat(&parts, 1)?)
    }

    /// The token embedding matrix.
    pub fn token_embedding_table(&self) -> &TokenEmbedding {
        &self.embed
    }

    /// Token embeddings `(1, t, hidden)` for `ids`.
    pub fn embed_ids(&self, ids: &[u32]) -> Result<Tensor> {
        let ids = Tensor::new(ids, &self.device)?.unsqueeze(0)?;
        Ok(self.embed.forward(&ids)?)
    }

    /// Runs `ids` after what `cache` holds; returns f32 logits `(t, vocab)` for every new position.
    pub fn forward_all(&self, ids: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let hidden = self.forward_hidden(&self.embed_ids(ids)?, cache, &mut Trace::default())?;
        self.logits(&hidden)
    }

    /// Runs `ids` after what `cache` holds; returns f32 logits `(vocab,)` of the last position.
    pub fn forward_last(&self, ids: &[u32], cache: &mut KvCache) -> Result<Tensor> {
        let hidden = self.forward_hidden(&self.embed_ids(ids)?, cache, &mut Trace::default())?;
        let t = hidden.dim(1)?;
        self.logits(&hidden.narrow(1, t - 1, 1)?)?.squeeze(0).map_err(Into::into)
    }

    /// The decoder over embeddings `(1, t, hidden)` → final-normed hidden states.
    pub fn forward_hidden(&self, embeds: &Tensor, cache: &mut KvCache, trace: &mut Trace) -> Result<Tensor> {
        let t = embeds.dim(1)?;
        if t == 0 {
            return Err(TesseraError::InvalidInput("empty input: no tokens to run".into()));
        }
        if cache.len() + t > self.max_positions() {
            return Err(TesseraError::InvalidInput(format!(
                "{} positions exceed the model's context of {} tokens",
                cache.len() + t,
                self.max_positions()
            )));
        }
        Ok(self.decoder.forward_traced(embeds, cache, &self.mask, trace)?)
    }

    /// The LM head: hidden `(1, t, hidden)` → f32 logits `(t, vocab)`.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        Ok(self.lm_head.forward(hidden)?.squeeze(0)?.to_dtype(DType::F32)?)
    }
}

fn read_json_opt(path: &Path) -> Result<Option<serde_json::Value>> {
    if !path.exists() {
        return Ok(None);
    }
    let err = |reason: String| TesseraError::Config { path: path.to_path_buf(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    serde_json::from_str(&text).map(Some).map_err(|e| err(format!("invalid JSON: {e}")))
}

fn template_source(dir: &Path) -> String {
    let candidates: [PathBuf; 3] =
        [dir.join("chat_template.jinja"), dir.join("chat_template.json"), dir.join("tokenizer_config.json")];
    candidates
        .iter()
        .find(|p| p.exists())
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| dir.display().to_string())
}
