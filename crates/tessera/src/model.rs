//! Model assembly: a checkpoint's configuration mapped to a composition of the text side
//! (tokenizer, template, token embeddings), the shared decoder and the LM head, and — for
//! models that read images — an image encoder whose tokens join the text in one sequence:
//! before it (tessera's native model) or in place of the prompt's image placeholders (the
//! Hugging Face families, as their `inputs_merger` / `masked_scatter` does).
//!
//! A [`Model`] is immutable once loaded (share it across threads by reference or `Arc`);
//! per-sequence state lives in a [`KvCache`].

use std::ops::Range;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use tessera_decoder::weights::MatrixWeight;
use tessera_decoder::{AttentionMask, Blocks, Decoder, GgufMode, KvCache, Linear, MaskPlan, Trace, Weights};
use tessera_text::{ChatTemplate, Message, TokenEmbedding, Tokenizer};
use tessera_vision::RgbImage;

use crate::config::{GenerationConfig, ModelConfig, PromptStyle};
use crate::error::{Result, TesseraError};
use crate::prompt::{Chunk, Prompt};
use crate::source::{self, ModelSource};
use crate::vision::ImageEncoder;

/// How to load a model.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub device: Device,
    /// The working dtype. `None`: f32 on CPU, bf16 on GPUs; GGUF files stay quantized.
    /// `Some(_)` with a GGUF file dequantizes every tensor to that dtype.
    pub dtype: Option<DType>,
    /// Quantize the vision tower's and connector's f32 matrices to `Q8_0` on loading (CPU
    /// only): image encoding runs on the int8 kernels, ~2× faster, at the price of the weights'
    /// and activations' 8-bit rounding (outputs no longer match transformers' f32 exactly).
    pub vision_q8_0: bool,
    /// Gemma 3's pan-and-scan on (the image plus crops along its long side, when its aspect
    /// ratio calls for them), whatever the checkpoint's processor settings say.
    pub pan_and_scan: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self { device: Device::Cpu, dtype: None, vision_q8_0: false, pan_and_scan: false }
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
    pub(crate) config: ModelConfig,
    pub(crate) info: ModelInfo,
    pub(crate) device: Device,
    pub(crate) tokenizer: Tokenizer,
    pub(crate) chat_template: Option<ChatTemplate>,
    pub(crate) generation_config: GenerationConfig,
    pub(crate) eos_ids: Vec<u32>,
    pub(crate) embed: TokenEmbedding,
    pub(crate) decoder: Decoder,
    pub(crate) lm_head: Linear,
    pub(crate) image_encoder: Option<ImageEncoder>,
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
            Some(spec) => {
                let vision_vb = if opts.vision_q8_0 { vb.with_q8_0_matrices() } else { vb.clone() };
                Some(ImageEncoder::load(
                    spec,
                    dir,
                    &vision_vb,
                    config.decoder.hidden_size,
                    &tokenizer,
                    opts.pan_and_scan,
                )?)
            }
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
        let quantization = content.tensor_infos.get("blk.0.attn_q.weight").map(|t| format!("{:?}", t.ggml_dtype));
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
        let (lm, head_name) = text_roots(&vb);
        let embed_weight = lm.pp("embed_tokens").matrix(config.vocab_size, d.hidden_size, "weight")?;
        let embed = match &embed_weight {
            // Quantized rows stay quantized: looked up row by row, and shared with a tied head.
            MatrixWeight::Packed(m) => TokenEmbedding::packed(m.clone(), vb.dtype(), vb.device()),
            other => TokenEmbedding::new(other.dense(vb.dtype())?)?,
        };
        let decoder = Decoder::new(d, &lm)?;
        let lm_head = if config.tie_word_embeddings || !vb.contains(&format!("{head_name}.weight")) {
            Linear::new(embed_weight, None)?
        } else {
            vb.linear(d.hidden_size, config.vocab_size, false, head_name)?
        };
        // EOS ids: generation_config's when it states them (what transformers' generate stops
        // at, so a pad or end-of-text id that is not listed there does not stop generation),
        // else the model config's and the tokenizer's.
        let mut eos_ids = match &generation_config.eos_token_id {
            Some(e) => e.to_vec(),
            None => {
                let mut ids = config.eos_token_ids.clone();
                ids.extend(tokenizer.special().eos_ids.iter().copied());
                ids
            }
        };
        eos_ids.sort_unstable();
        eos_ids.dedup();
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
            image_encoder: None,
        })
    }

    /// The text decoder (for callers that drive it with their own mask plan and positions).
    pub fn decoder(&self) -> &Decoder {
        &self.decoder
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

    /// Refuses more images than the model takes, naming the model.
    pub(crate) fn check_image_count(&self, n: usize) -> Result<()> {
        let max = self.max_images();
        if max == 0 {
            self.vision()?;
        }
        if n > max {
            return Err(TesseraError::InvalidInput(format!(
                "{n} images given but model `{}` accepts at most {max}",
                self.info.source.path().display()
            )));
        }
        Ok(())
    }

    /// Image tokens per image, for models where that does not depend on the image (`None` for
    /// text models and for Idefics3, whose tile count depends on the image's size).
    pub fn image_tokens_per_image(&self) -> Option<usize> {
        self.image_encoder.as_ref()?.fixed_tokens()
    }

    /// Image tokens `image` becomes in the sequence.
    pub fn image_tokens(&self, image: &RgbImage) -> Result<usize> {
        self.vision()?.tokens_for(image)
    }

    /// What a raw prompt writes for each image, before the processor's expansion (`<image>`;
    /// Gemma 3's `<start_of_image>`); `None` for text models and the native model.
    pub fn image_placeholder(&self) -> Option<&str> {
        self.image_encoder.as_ref()?.image_token()
    }

    /// The prompt text that stands for `image` (Hugging Face families; `None` for the native
    /// model, whose image tokens go before the text).
    pub fn image_placeholder_text(&self, image: &RgbImage) -> Result<Option<String>> {
        self.vision()?.placeholder_text(image)
    }

    /// Refuses an image that would take more than `max_tokens` image tokens.
    pub fn check_image_budget(&self, image: &RgbImage, max_tokens: usize, name: &str) -> Result<()> {
        let n = self.image_tokens(image)?;
        if n > max_tokens {
            return Err(TesseraError::InvalidInput(format!(
                "image {name} ({}×{}) takes {n} image tokens, over the budget of {max_tokens} per image",
                image.width, image.height
            )));
        }
        Ok(())
    }

    /// The most images one prompt may carry (0 for text-only models).
    pub fn max_images(&self) -> usize {
        self.image_encoder.as_ref().map(|e| e.max_images()).unwrap_or(0)
    }

    /// A description of the image side for `tessera info`.
    pub fn vision_description(&self) -> Option<String> {
        self.image_encoder.as_ref().map(|e| e.describe())
    }

    /// The preprocessed pixel values the model sees for `image`: `(3, H, W)` for the native
    /// model, `(views, 3, H, W)` for the Hugging Face families (Idefics3: tiles + global view).
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

    pub(crate) fn vision(&self) -> Result<&ImageEncoder> {
        self.image_encoder.as_ref().ok_or_else(|| {
            TesseraError::InvalidInput(format!(
                "model `{}` ({}) takes no images",
                self.info.source.path().display(),
                self.config.family
            ))
        })
    }

    /// The token embedding matrix.
    pub fn token_embedding_table(&self) -> &TokenEmbedding {
        &self.embed
    }

    /// Token embeddings `(b, t, hidden)` for ids `(b, t)`, scaled as the model scales them
    /// (Gemma: by √width, in the weights' dtype).
    pub fn embed_id_tensor(&self, ids: &Tensor) -> Result<Tensor> {
        let e = self.embed.forward(ids)?;
        Ok(match self.config.embed_scale {
            Some(scale) => {
                let scale = Tensor::new(scale as f32, e.device())?.to_dtype(e.dtype())?;
                e.broadcast_mul(&scale)?
            }
            None => e,
        })
    }

    /// Token embeddings `(1, t, hidden)` for `ids`.
    pub fn embed_ids(&self, ids: &[u32]) -> Result<Tensor> {
        self.embed_id_tensor(&Tensor::new(ids, &self.device)?.unsqueeze(0)?)
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

    /// The mask of every layer for `t` new positions after `cached` ones; `image_runs`: the
    /// positions (relative to the first new one) of the images among them. A prefix-LM prompt
    /// (PaliGemma's image + text, the first forward) attends both ways; with
    /// `bidirectional_images` (Gemma 3) each image's tokens see each other both ways; the rest
    /// is causal, within each layer's sliding window.
    pub fn mask_plan(&self, cached: usize, t: usize, image_runs: &[Range<usize>]) -> Result<MaskPlan> {
        let prefix = (self.config.prompt == PromptStyle::PrefixLm && cached == 0).then_some(t);
        let blocks = match self.config.bidirectional_images && !image_runs.is_empty() {
            true => Some(Blocks::new(image_runs.iter().map(|r| cached + r.start..cached + r.end).collect())?),
            false => None,
        };
        Ok(MaskPlan::per_layer(
            self.config
                .layer_windows
                .iter()
                .map(|&window| match (prefix, &blocks, window) {
                    (Some(prefix_len), _, None) => AttentionMask::PrefixLm { prefix_len },
                    (Some(prefix_len), _, Some(window)) => AttentionMask::SlidingPrefixLm { prefix_len, window },
                    (None, Some(blocks), window) => AttentionMask::CausalBlocks { window, blocks: blocks.clone() },
                    (None, None, Some(window)) => AttentionMask::SlidingWindow { window },
                    (None, None, None) => AttentionMask::Causal,
                })
                .collect(),
        ))
    }

    /// The decoder over embeddings `(b, t, hidden)` → final-normed hidden states.
    pub fn forward_hidden(&self, embeds: &Tensor, cache: &mut KvCache, trace: &mut Trace) -> Result<Tensor> {
        self.forward_hidden_with_images(embeds, cache, trace, &[])
    }

    /// [`forward_hidden`](Self::forward_hidden) over rows of which `image_runs` hold images
    /// (a prompt's [`Prompt::image_runs`](crate::Prompt::image_runs)), for the masks that
    /// treat images apart.
    pub fn forward_hidden_with_images(
        &self,
        embeds: &Tensor,
        cache: &mut KvCache,
        trace: &mut Trace,
        image_runs: &[Range<usize>],
    ) -> Result<Tensor> {
        let t = embeds.dim(1)?;
        let start = usize::try_from(cache.len() as i64 + cache.position_delta())
            .map_err(|_| TesseraError::InvalidInput("the cache's RoPE position is negative".into()))?;
        let positions = self.decoder.consecutive_positions(start, t, embeds.device())?;
        self.run_decoder(embeds, cache, trace, image_runs, &positions, &[])
    }

    /// The decoder over `prompt` (its embeddings, see [`Model::prompt_inputs`]) after what
    /// `cache` holds, with the prompt's masks (image blocks) and RoPE positions (M-RoPE
    /// grid positions for the images of Qwen2-VL); the cache then remembers where the next
    /// token's position is.
    pub fn forward_prompt(&self, prompt: &Prompt, cache: &mut KvCache, trace: &mut Trace) -> Result<Tensor> {
        let (embeds, additions) = self.prompt_inputs(prompt)?;
        let (positions, delta) = self.prompt_positions(prompt, cache)?;
        let hidden = self.run_decoder(&embeds, cache, trace, &prompt.image_runs(), &positions, &additions)?;
        cache.set_position_delta(delta);
        Ok(hidden)
    }

    /// The RoPE positions of `prompt`'s rows after `cache`: consecutive, or for M-RoPE models
    /// `(3, t)` — text on one line, each image's tokens at (start, start + row, start + column)
    /// with the text after it continuing at start + max(rows, columns) (transformers'
    /// `get_rope_index`). Also the next position minus the positions cached afterwards.
    pub fn prompt_positions(&self, prompt: &Prompt, cache: &KvCache) -> Result<(Tensor, i64)> {
        let device = &self.device;
        let start = cache.len() as i64 + cache.position_delta();
        if self.config.decoder.rope.mrope.is_none() {
            let first = usize::try_from(start).unwrap_or(0);
            return Ok((self.decoder.consecutive_positions(first, prompt.len(), device)?, cache.position_delta()));
        }
        let vision = self.image_encoder.as_ref();
        let mut streams: [Vec<i64>; 3] = Default::default();
        let mut current = start;
        let mut image_start = std::collections::HashMap::new();
        for chunk in prompt.chunks() {
            match chunk {
                Chunk::Text(r) => {
                    for i in 0..r.len() as i64 {
                        streams.iter_mut().for_each(|s| s.push(current + i));
                    }
                    current += r.len() as i64;
                }
                Chunk::Image { image, tokens } => {
                    let img = &prompt.images()[*image];
                    let (rows, cols) = match vision.map(|v| v.mrope_grid(img)).transpose()?.flatten() {
                        Some(g) => g,
                        None => (1, tokens.end.max(1)),
                    };
                    let first = *image_start.entry(*image).or_insert(current);
                    for k in tokens.clone() {
                        streams[0].push(first);
                        streams[1].push(first + (k / cols) as i64);
                        streams[2].push(first + (k % cols) as i64);
                    }
                    if tokens.end >= rows * cols {
                        current = first + rows.max(cols) as i64;
                    }
                }
            }
        }
        let t = streams[0].len();
        let max = streams.iter().flatten().copied().max().unwrap_or(start - 1);
        let delta = max + 1 - (cache.len() + t) as i64;
        let flat: Vec<u32> = streams
            .iter()
            .flatten()
            .map(|&p| {
                u32::try_from(p).map_err(|_| TesseraError::InvalidInput(format!("RoPE position {p} out of range")))
            })
            .collect::<Result<_>>()?;
        Ok((Tensor::from_vec(flat, (3, t), device)?, delta))
    }

    fn run_decoder(
        &self,
        embeds: &Tensor,
        cache: &mut KvCache,
        trace: &mut Trace,
        image_runs: &[Range<usize>],
        positions: &Tensor,
        additions: &[Tensor],
    ) -> Result<Tensor> {
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
        let masks = self.mask_plan(cache.len(), t, image_runs)?;
        Ok(self.decoder.forward_with_additions(embeds, cache, &masks, positions, additions, trace)?)
    }

    /// The LM head: hidden `(1, t, hidden)` → f32 logits `(t, vocab)`.
    pub fn logits(&self, hidden: &Tensor) -> Result<Tensor> {
        let logits = self.lm_head.forward(hidden)?;
        let logits = match self.config.final_logit_softcapping {
            Some(cap) => ((logits / cap)?.tanh()? * cap)?,
            None => logits,
        };
        Ok(logits.squeeze(0)?.to_dtype(DType::F32)?)
    }
}

/// The text model's root and LM head name, by the checkpoint's naming generation:
/// `model` + `lm_head` (text models), `model.text_model` (Idefics3), `language_model.model` +
/// `language_model.lm_head` (LLaVA / PaliGemma as saved until transformers 4.52, and by 5's
/// `save_pretrained`), `model.language_model` + `lm_head` (the newer layout).
fn text_roots(vb: &Weights) -> (Weights, &'static str) {
    const ROOTS: [(&str, &str); 4] = [
        ("model.text_model", "lm_head"),
        ("language_model.model", "language_model.lm_head"),
        ("model.language_model", "lm_head"),
        ("model", "lm_head"),
    ];
    for (root, head) in ROOTS {
        let lm = vb.pp(root);
        if lm.contains("embed_tokens.weight") {
            return (lm, head);
        }
    }
    (vb.pp("model"), "lm_head")
}

/// A JSON file's contents; errors name the file.
pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value> {
    let err = |reason: String| TesseraError::Config { path: path.to_path_buf(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    serde_json::from_str(&text).map_err(|e| err(format!("invalid JSON: {e}")))
}

/// [`read_json`], or `None` when the file does not exist.
pub(crate) fn read_json_opt(path: &Path) -> Result<Option<serde_json::Value>> {
    if !path.exists() {
        return Ok(None);
    }
    read_json(path).map(Some)
}

fn template_source(dir: &Path) -> String {
    let candidates: [PathBuf; 3] =
        [dir.join("chat_template.jinja"), dir.join("chat_template.json"), dir.join("tokenizer_config.json")];
    candidates.iter().find(|p| p.exists()).map(|p| p.display().to_string()).unwrap_or_else(|| dir.display().to_string())
}
