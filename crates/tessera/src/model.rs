//! Model assembly: a checkpoint's configuration mapped to a composition of the text side
//! (tokenizer, template, token embeddings), the shared decoder and the LM head, and — for
//! models that read images — an image encoder whose tokens join the text in one sequence:
//! before it (tessera's native model) or in place of the prompt's image placeholders (the
//! Hugging Face families, as their `inputs_merger` / `masked_scatter` does).
//!
//! A [`Model`] is immutable once loaded (share it across threads by reference or `Arc`);
//! per-sequence state lives in a [`KvCache`]. This file loads a model and owns its logits;
//! prompts are built in `prompt.rs`, run in `forward.rs` (masks, positions, the decoder) and
//! `generate.rs` (the decode loop); the image side is the family's (`families/`), asked in
//! `vision.rs`.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use tessera_decoder::weights::MatrixWeight;
use tessera_decoder::{Decoder, GgufMode, KvCache, Linear, QuantMix, QuantPlan, Weights};
use tessera_text::{ChatTemplate, Message, RenderOptions, TokenEmbedding, Tokenizer};

use crate::config::{GenerationConfig, ModelConfig};
use crate::error::{Result, TesseraError};
use crate::families::image::ProcessorSettings;
use crate::families::{ImageLoad, ImageSide, ImageSpec, TextFamily};
use crate::forward::PREFILL_BLOCK;
use crate::source::{self, ModelSource};

/// How to load a model.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub device: Device,
    /// The working dtype. `None`: f32 on CPU, bf16 on GPUs; GGUF files stay quantized.
    /// `Some(_)` with a GGUF file dequantizes every tensor to that dtype.
    pub dtype: Option<DType>,
    /// Quantize the vision tower's and connector's f32 matrices to `Q8_0` on loading (CPU
    /// only, with tessera's kernels; refused elsewhere): image encoding runs on the int8 kernels, ~2× faster, at the price of the weights'
    /// and activations' 8-bit rounding (outputs no longer match transformers' f32 exactly).
    pub vision_q8_0: bool,
    /// Quantize a safetensors checkpoint's matrices on loading (CPU only, with tessera's
    /// kernels; refused elsewhere and for GGUF files, already stored in their own types): the
    /// text model's as llama-quantize does for this type (the `_M` mixes' per-tensor rules,
    /// its fallbacks for rows that 256-value blocks do not tile), the vision tower's and
    /// connector's as llama-quantize does for the mmproj llama.cpp's converter writes (unless
    /// `vision_q8_0`, which keeps them at `Q8_0`). Matmuls then run on the int8 kernels.
    pub quantize: Option<QuantMix>,
    /// Gemma 3's pan-and-scan on (the image plus crops along its long side, when its aspect
    /// ratio calls for them), whatever the checkpoint's processor settings say.
    pub pan_and_scan: bool,
    /// The dtype the KV cache stores keys and values in. `None`: the working dtype. On the CPU
    /// under f32 activations, `Some(F16)` halves the cache's memory and the bytes each decode
    /// step reads (llama.cpp's default cache type), at the price of rounding the keys and values
    /// to 16 bits.
    pub kv_cache_dtype: Option<DType>,
    /// Positions per prompt block ([`Model::prefill_blocks`]); `None`: [`PREFILL_BLOCK`]. One
    /// at least the prompt's length runs a prompt (up to its turn ends) in one forward.
    pub prefill_block: Option<usize>,
    /// llama.cpp's `mmproj` GGUF holding the vision tower and projector of a GGUF text model
    /// (`families::mmproj`); refused with a model folder, whose image side is its own.
    pub mmproj: Option<PathBuf>,
    /// The most image tokens per image where an mmproj states no budget (llama.cpp's
    /// `--image-max-tokens`; Gemma 4's `gemma4v`, whose processor default is 280). `None`: the
    /// family's processor default.
    pub image_max_tokens: Option<usize>,
}

impl Default for LoadOptions {
    fn default() -> Self {
        Self {
            device: Device::Cpu,
            dtype: None,
            vision_q8_0: false,
            quantize: None,
            pan_and_scan: false,
            kv_cache_dtype: None,
            prefill_block: None,
            mmproj: None,
            image_max_tokens: None,
        }
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
    /// The `mmproj` GGUF the image side came from, for a GGUF text model loaded with one.
    pub mmproj: Option<PathBuf>,
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
    /// The config's `embed_scale` as a scalar on the device in the embeddings' dtype, made once.
    pub(crate) embed_scale: Option<Tensor>,
    pub(crate) decoder: Decoder,
    /// The decoder's per-layer input table, when it takes them ([`ModelConfig::per_layer_inputs`]).
    pub(crate) per_layer: Option<tessera_decoder::PerLayerEmbedding>,
    pub(crate) lm_head: Linear,
    /// The family's image side, for models that take images.
    pub(crate) images: Option<Box<dyn ImageSide>>,
    /// The KV cache's dtype when it differs from the working dtype.
    pub(crate) kv_cache_dtype: Option<DType>,
    /// Positions per prompt block ([`LoadOptions::prefill_block`]).
    pub(crate) prefill_block: usize,
    /// Structured output's token trie, built on first use.
    pub(crate) grammars: std::sync::OnceLock<std::result::Result<std::sync::Arc<crate::structured::Grammars>, String>>,
}

/// `opts.kv_cache_dtype` when it differs from the working dtype `working`: only an f16 cache
/// under f32 activations (the CPU attention kernels read it as it is; every other path converts
/// what it reads).
fn kv_cache_dtype(opts: &LoadOptions, working: DType) -> Result<Option<DType>> {
    match opts.kv_cache_dtype {
        None => Ok(None),
        Some(dt) if dt == working => Ok(None),
        Some(DType::F16) if working == DType::F32 => Ok(Some(DType::F16)),
        Some(dt) => Err(TesseraError::InvalidInput(format!(
            "a {} KV cache (--kv-cache-dtype) under {} activations is not supported: the cache can \
             differ from the working dtype only as f16 under f32",
            dt.as_str(),
            working.as_str(),
        ))),
    }
}

impl Model {
    /// Resolves `spec` (a folder, a `.gguf` file, or `org/name[@rev]`) and loads it.
    pub fn load(spec: &str, opts: &LoadOptions) -> Result<Self> {
        Self::load_source(&source::resolve(spec)?, opts)
    }

    pub fn load_source(source: &ModelSource, opts: &LoadOptions) -> Result<Self> {
        let flag = match opts.quantize {
            Some(mix) => Some(format!("load-time quantization (--quantize {mix})")),
            None => opts.vision_q8_0.then(|| "int8 vision (--vision-int8)".to_string()),
        };
        if let (Some(flag), false) = (&flag, tessera_decoder::kernels_run_on(&opts.device)) {
            return Err(TesseraError::InvalidInput(format!(
                "{flag} runs on tessera's CPU kernels, {}",
                if opts.device.is_cpu() {
                    "which TESSERA_KERNELS=off turns off".to_string()
                } else {
                    format!("not on {:?}", opts.device.location())
                }
            )));
        }
        let model = match source {
            ModelSource::Dir(dir) if opts.mmproj.is_some() => Err(TesseraError::InvalidInput(format!(
                "an mmproj file goes with a GGUF text model, not with the model folder {} (whose image side is its \
                 own)",
                dir.display()
            ))),
            ModelSource::Dir(dir) => Self::load_dir(dir, opts),
            ModelSource::Gguf(path) if opts.quantize.is_some() => Err(TesseraError::InvalidInput(format!(
                "--quantize {}: {} is a GGUF file, already stored in its own types; --quantize quantizes \
                 safetensors checkpoints (llama-quantize requantizes GGUF files)",
                opts.quantize.map(|m| m.name()).unwrap_or_default(),
                path.display()
            ))),
            ModelSource::Gguf(path) => Self::load_gguf(path, opts),
        }?;
        // On CUDA each host thread queues its work on its own stream (Candle runs on the
        // per-thread default stream), and a copy from host memory may still be on its way to the
        // device when the call returns. The server's engine and its request threads read the
        // weights from other threads' streams: they must be in place before this returns.
        opts.device.synchronize()?;
        Ok(model)
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
        if let Some(why) = config.vision.as_ref().and_then(|v| v.int8_refusal()).filter(|_| opts.vision_q8_0) {
            return Err(TesseraError::InvalidInput(format!("--vision-int8 is refused for {}: {why}", config.family)));
        }
        let (text_plan, vision_plan) = crate::load_quant::plans(&config, &vb, opts);
        let info = ModelInfo {
            source: ModelSource::Dir(dir.to_path_buf()),
            dtype,
            quantization: None,
            tokenizer_source: tokenizer_path.display().to_string(),
            chat_template_source: chat_template.as_ref().map(|_| template_source(dir)),
            mmproj: None,
        };
        let images = match &config.vision {
            Some(spec) => {
                let vb = match &vision_plan {
                    Some(plan) => vb.with_quantization(plan.clone()),
                    None => vb.clone(),
                };
                Some(load_image_side(spec.as_ref(), dir, &vb, config.decoder.hidden_size, &tokenizer, None, opts)?)
            }
            None => None,
        };
        let text_vb = match &text_plan {
            Some(plan) => vb.with_quantization(plan.clone()),
            None => vb.clone(),
        };
        let mut model = Self::assemble(config, text_vb, tokenizer, chat_template, generation_config, info, opts)?;
        model.images = images;
        model.info.quantization = crate::load_quant::summary(text_plan.as_deref(), vision_plan.as_deref());
        // Everything is read: a file that changed meanwhile may have given a mix of two versions.
        vb.check_unchanged()?;
        Ok(model)
    }

    fn load_gguf(path: &Path, opts: &LoadOptions) -> Result<Self> {
        let content = tessera_decoder::weights::read_gguf(path)?;
        let mut config = ModelConfig::from_gguf(&content, path)?;
        let tokenizer = Tokenizer::from_gguf(&content)?;
        let chat_template = match content.metadata.get("tokenizer.chat_template").map(|v| v.to_string()) {
            Some(Ok(src)) => {
                let special = tokenizer.special();
                let origin = format!("`tokenizer.chat_template` in {}", path.display());
                Some(ChatTemplate::with_origin(src, special.bos_token.clone(), special.eos_token.clone(), origin)?)
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
            mmproj: opts.mmproj.clone(),
        };
        let vb = Weights::from_gguf_content(path, content, mode, dtype, &opts.device)?;
        let images = match &opts.mmproj {
            Some(mmproj) => {
                let text = (config.text_family, config.decoder.hidden_size);
                let (mmproj, images) = Self::load_mmproj(mmproj, path, &tokenizer, text, dtype, opts)?;
                config.family = mmproj.family;
                config.bidirectional_images = mmproj.bidirectional_images;
                if mmproj.plain_positions {
                    config.decoder.rope.mrope = None;
                }
                config.vision = Some(mmproj.spec);
                Some(images)
            }
            None => None,
        };
        let mut model =
            Self::assemble(config, vb.clone(), tokenizer, chat_template, GenerationConfig::default(), info, opts)?;
        model.images = images;
        vb.check_unchanged()?;
        Ok(model)
    }

    /// The image side in the `mmproj` GGUF at `path`, for the text model at `model` of family
    /// and width `text` and tokenizer `tokenizer`: what its metadata gives (family, spec) and
    /// what that loads. Matrices of block types stay quantized (the int8 kernels run them)
    /// unless `opts.dtype` asks for one.
    fn load_mmproj(
        path: &Path,
        model: &Path,
        tokenizer: &Tokenizer,
        text: (TextFamily, usize),
        dtype: DType,
        opts: &LoadOptions,
    ) -> Result<(crate::families::mmproj::Mmproj, Box<dyn ImageSide>)> {
        let text_hidden = text.1;
        let mut content = tessera_decoder::weights::read_gguf(path)?;
        let mmproj = crate::families::mmproj::read(&mut content, path, model, tokenizer, text, opts.image_max_tokens)?;
        // Quantized blocks stay quantized, as the text model's (unless a dtype is asked for).
        let mode = if opts.dtype.is_some() { GgufMode::Dequantized } else { GgufMode::Quantized };
        let mut vb = Weights::from_gguf_content(path, content, mode, dtype, &opts.device)?;
        if opts.vision_q8_0 {
            vb = vb.with_quantization(std::sync::Arc::new(QuantPlan::vision(QuantMix::Q8_0, std::iter::empty())));
        }
        let dir = path.parent().unwrap_or(Path::new("."));
        let images =
            load_image_side(mmproj.spec.as_ref(), dir, &vb, text_hidden, tokenizer, Some(&mmproj.settings), opts)?;
        vb.check_unchanged()?;
        Ok((mmproj, images))
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
        let info_dtype = info.dtype;
        let (lm, head_name) = text_roots(&vb);
        let embed_weight = lm.pp("embed_tokens").matrix(config.vocab_size, d.hidden_size, "weight")?;
        let embed = match &embed_weight {
            // Quantized rows stay quantized: looked up row by row, and shared with a tied head.
            MatrixWeight::Packed(m) => TokenEmbedding::packed(m.clone(), vb.dtype(), vb.device()),
            other => TokenEmbedding::new(other.dense(vb.dtype())?)?,
        };
        let decoder = Decoder::new(d, &lm)?;
        let per_layer = match config.per_layer_inputs {
            Some(p) => Some(tessera_decoder::PerLayerEmbedding::load(
                p.vocab,
                d.hidden_size,
                d.num_hidden_layers,
                p.dim,
                d.rms_norm_eps,
                &lm,
            )?),
            None => None,
        };
        let lm_head = if config.tie_word_embeddings || !vb.contains(&format!("{head_name}.weight")) {
            Linear::shared(embed_weight, None)?
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
        let embed_scale = match config.embed_scale {
            Some(scale) => Some(Tensor::new(scale as f32, &opts.device)?.to_dtype(embed.dtype())?),
            None => None,
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
            embed_scale,
            decoder,
            per_layer,
            lm_head,
            images: None,
            kv_cache_dtype: kv_cache_dtype(opts, info_dtype)?,
            prefill_block: match opts.prefill_block {
                None => PREFILL_BLOCK,
                Some(0) => {
                    return Err(TesseraError::InvalidInput(
                        "a prefill block (--prefill-block) of 0 positions: it must hold at least 1".into(),
                    ))
                }
                Some(n) => n,
            },
            grammars: std::sync::OnceLock::new(),
        })
    }

    /// Positions per prompt block ([`Model::prefill_blocks`]).
    pub fn prefill_block(&self) -> usize {
        self.prefill_block
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

    /// A fresh KV cache for one sequence (in the dtype [`LoadOptions::kv_cache_dtype`] chose).
    pub fn new_cache(&self) -> KvCache {
        self.decoder.new_cache().with_dtype(self.kv_cache_dtype)
    }

    /// The dtype the KV cache stores keys and values in.
    pub fn kv_cache_dtype(&self) -> DType {
        self.kv_cache_dtype.unwrap_or(self.info.dtype)
    }

    /// Renders a conversation with the model's chat template.
    pub fn render_chat(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String> {
        self.render_chat_with(messages, add_generation_prompt, &RenderOptions::default())
    }

    /// [`render_chat`](Self::render_chat) with tools and template variables.
    pub fn render_chat_with(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        opts: &RenderOptions,
    ) -> Result<String> {
        let template = self.chat_template.as_ref().ok_or_else(|| {
            TesseraError::InvalidInput(format!(
                "{} has no chat template; use raw prompts",
                self.info.source.path().display()
            ))
        })?;
        Ok(template.render_with(messages, add_generation_prompt, opts)?)
    }

    /// The token embedding matrix.
    pub fn token_embedding_table(&self) -> &TokenEmbedding {
        &self.embed
    }

    /// Token embeddings `(b, t, hidden)` for `ids`, `b` rows of `t` ids one after the other,
    /// scaled as the model scales them (Gemma: by √width, in the weights' dtype). The ids are
    /// checked on the host; only they are sent to the device.
    pub fn embed_id_rows(&self, ids: &[u32], (b, t): (usize, usize)) -> Result<Tensor> {
        let aliased;
        let ids = match self.config.embed_as.is_empty() {
            true => ids,
            false => {
                aliased = self.embedded_ids(ids);
                &aliased[..]
            }
        };
        let e = self.embed.lookup(ids, (b, t)).map_err(|e| match e {
            // Ids come from the tokenizer (or the caller): name where the tokenizer came from.
            e @ tessera_text::TextError::TokenOutOfRange { .. } => TesseraError::InvalidInput(format!(
                "{e}: the model has no embedding for it (tokenizer: {})",
                self.info.tokenizer_source
            )),
            e => e.into(),
        })?;
        Ok(match &self.embed_scale {
            Some(scale) => e.broadcast_mul(scale)?,
            None => e,
        })
    }

    /// `ids` as the embedding tables read them ([`ModelConfig::embed_as`]).
    pub(crate) fn embedded_ids(&self, ids: &[u32]) -> Vec<u32> {
        let alias = |id: u32| self.config.embed_as.iter().find(|(from, _)| *from == id).map_or(id, |(_, to)| *to);
        ids.iter().map(|&id| alias(id)).collect()
    }

    /// Token embeddings `(1, t, hidden)` for `ids`.
    pub fn embed_ids(&self, ids: &[u32]) -> Result<Tensor> {
        self.embed_id_rows(ids, (1, ids.len()))
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

/// The family's image side `spec` loaded from the weights `vb` (quantizing as `vb` says), the
/// processor files in `dir` or the `processor` settings an mmproj gives, for a decoder of width
/// `text_hidden`.
fn load_image_side(
    spec: &dyn ImageSpec,
    dir: &Path,
    vb: &Weights,
    text_hidden: usize,
    tokenizer: &Tokenizer,
    processor: Option<&ProcessorSettings>,
    opts: &LoadOptions,
) -> Result<Box<dyn ImageSide>> {
    let at = ImageLoad { dir, weights: vb, text_hidden, tokenizer, pan_and_scan: opts.pan_and_scan, processor };
    spec.load(&at)
}

/// The text model's root and LM head name, by the checkpoint's naming generation:
/// `model` + `lm_head` (text models), `model.text_model` (Idefics3), `language_model.model` +
/// `language_model.lm_head` (LLaVA / PaliGemma as saved until transformers 4.52, and by 5's
/// `save_pretrained`), `model.language_model` + `lm_head` (the newer layout).
pub(crate) fn text_roots(vb: &Weights) -> (Weights, &'static str) {
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
