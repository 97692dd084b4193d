//! The image side of a vision-language family, as the generic code sees it. A family module
//! implements two traits: [`ImageSpec`], what its config resolves to before any weight is read,
//! and [`ImageSide`], what that loads into — the processor (views, resizing rule, token counts,
//! the placeholder text an image expands to), the tower and connector, and the grid an image's
//! tokens take for M-RoPE positions. The model, the prompt code and the engine ask these traits
//! and never match on a family (the shape of vLLM's `SupportsMultiModal` and llama.cpp's `mtmd`
//! interface: a family encodes an image into tokens; only a few flags — the mask rule, M-RoPE —
//! cross into the decoder).
//!
//! What a family feeds the decoder besides the image tokens (Qwen3-VL's DeepStack features,
//! added to the first layers' outputs) travels inside [`ImageFeatures`], which the generic
//! code only slices by position and hands to the decoder.

use std::any::Any;
use std::fmt;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use serde_json::Value;
use tessera_decoder::Weights;
use tessera_text::Tokenizer;
use tessera_vision::RgbImage;

use crate::error::{Result, TesseraError};

/// What a family's image side is loaded from.
pub struct ImageLoad<'a> {
    /// The checkpoint folder (its processor settings).
    pub dir: &'a Path,
    /// The checkpoint's weights (the tower's and connector's matrices possibly quantized).
    pub weights: &'a Weights,
    /// The decoder's width, which image tokens must have.
    pub text_hidden: usize,
    /// Gives the texts of the placeholder ids.
    pub tokenizer: &'a Tokenizer,
    /// Gemma 3's pan-and-scan on, whatever the processor settings say (refused by families
    /// without it).
    pub pan_and_scan: bool,
    /// Processor settings given with the weights (an `mmproj` GGUF's, built from its `clip.*`
    /// metadata) instead of the folder's processor files.
    pub processor: Option<&'a ProcessorSettings>,
}

/// An image processor's settings as a Hugging Face folder states them: the image processor's
/// fields, the processor's own, and the file they came from (for errors).
#[derive(Debug, Clone)]
pub struct ProcessorSettings {
    pub image: Value,
    pub processor: Value,
    pub origin: PathBuf,
}

impl ProcessorSettings {
    /// The settings `at` carries, else those of the folder `at.dir` ([`processor_files`]).
    pub(crate) fn of(at: &ImageLoad<'_>) -> Result<Self> {
        match at.processor {
            Some(given) => Ok(given.clone()),
            None => {
                let (image, processor, origin) = processor_files(at.dir)?;
                Ok(Self { image, processor, origin })
            }
        }
    }
}

/// A family's image side as its config resolves it (the tower's sizes, the connector, the
/// processor rule and the placeholder ids), before any weight or processor file is read.
pub trait ImageSpec: fmt::Debug + Send + Sync + Any {
    /// Reads the processor settings and weights `at` describes into the loaded image side.
    fn load(&self, at: &ImageLoad<'_>) -> Result<Box<dyn ImageSide>>;

    /// Why this image side is not run with int8 matrices (`--vision-int8`), if it is not.
    fn int8_refusal(&self) -> Option<&'static str> {
        None
    }

    /// The `clip.*` metadata llama.cpp's converter writes into this image side's `mmproj` GGUF
    /// (`convert_hf_to_gguf.py --mmproj`), from the folder's processor settings, its
    /// `config.json` and the decoder's width `text_hidden`; `None` where tessera does not write
    /// this family's mmproj.
    /// The tensors are the checkpoint's under their mmproj names
    /// ([`gguf_vision_name`](tessera_decoder::weights::gguf_vision_name)).
    fn mmproj_metadata(
        &self,
        _settings: &ProcessorSettings,
        _config: &Value,
        _text_hidden: usize,
    ) -> Option<MmprojMetadata> {
        None
    }

    /// The mmproj tensors the converter writes from the checkpoint tensor `stored` of shape
    /// `dims`: by default the tensor itself; a family whose converter splits tensors (Qwen2-VL's
    /// fused `qkv`, its Conv3d patch kernel) answers the parts.
    fn mmproj_tensors(&self, stored: &str, dims: &[usize]) -> Vec<MmprojTensor> {
        MmprojTensor::whole(stored, dims)
    }

    /// Rows of the text model's token embedding the mmproj carries, as `(GGUF name, token)`:
    /// Pixtral's `[IMG_BREAK]` row as `v.token_embd.img_break`, which llama.cpp's `clip.cpp`
    /// requires; by default none.
    fn mmproj_embedding_rows(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    /// The architecture the converter writes this model's text GGUF as where the image side
    /// decides it (Mistral 3's `mistral3`, where a Mistral text model alone is `llama`).
    fn text_gguf_arch(&self) -> Option<&'static str> {
        None
    }

    /// What the converter writes into the text model's GGUF (architecture `arch`) about this
    /// image side (Qwen3-VL's `{arch}.n_deepstack_layers`); by default nothing.
    fn text_gguf_metadata(&self, _arch: &str) -> Vec<(String, tessera_decoder::gguf_write::MetaValue)> {
        Vec::new()
    }
}

/// One tensor of an mmproj, from a checkpoint tensor ([`ImageSpec::mmproj_tensors`]).
#[derive(Debug, Clone, PartialEq)]
pub struct MmprojTensor {
    /// Its name as [`gguf_vision_name`](tessera_decoder::weights::gguf_vision_name) and the
    /// quantization rules read it (a Hugging Face name, or the converter's name for a part).
    pub name: String,
    pub dims: Vec<usize>,
    /// The part of the checkpoint tensor it holds; `None`: all of it.
    pub part: Option<Part>,
    /// Heads whose rows the converter permutes for interleaved RoPE (Pixtral's `q_proj` /
    /// `k_proj`, as a Llama's); `None`: the rows as they are.
    pub permute_heads: Option<usize>,
    /// How the converter changes the values (Gemma 3's `mm_soft_emb_norm` stored as `1 + w`,
    /// Gemma 4's patch embedding turned into a Conv2d kernel), if at all.
    pub change: Option<super::text::TensorChange>,
}

/// Part `index` of `parts` equal parts along one axis of a tensor, viewed as
/// `(outer, parts, inner)` (`outer`: the product of the dims before the axis): the rows of
/// `q`, `k` or `v` in a fused `qkv` (`outer` 1), one frame of a Conv3d kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub outer: usize,
    pub parts: usize,
    pub index: usize,
}

impl MmprojTensor {
    /// The whole tensor of shape `dims` under the name `name`, its values as they are.
    pub fn named(name: impl Into<String>, dims: &[usize]) -> Self {
        Self { name: name.into(), dims: dims.to_vec(), part: None, permute_heads: None, change: None }
    }

    /// The checkpoint tensor `stored` as it is.
    pub fn whole(stored: &str, dims: &[usize]) -> Vec<Self> {
        vec![Self::named(stored, dims)]
    }
}

impl Part {
    /// The part's values of the row-major values `x` of the whole tensor.
    pub fn take(&self, x: &[f32]) -> Vec<f32> {
        let inner = x.len() / (self.outer * self.parts).max(1);
        (0..self.outer)
            .flat_map(|o| {
                let start = (o * self.parts + self.index) * inner;
                x[start..start + inner].iter().copied()
            })
            .collect()
    }
}

/// The processor's `key` (`image_mean`, `image_std`): three numbers, else `default`.
pub(crate) fn processor_stats(
    settings: &ProcessorSettings,
    key: &str,
    default: [f32; 3],
) -> std::result::Result<Vec<f32>, String> {
    match settings.image.get(key) {
        None | Some(Value::Null) => Ok(default.to_vec()),
        Some(Value::Array(items)) if items.len() == 3 => items
            .iter()
            .map(|x| x.as_f64().map(|f| f as f32).ok_or_else(|| format!("`{key}` holds a non-number")))
            .collect(),
        Some(other) => Err(format!("`{key}` is {other}, not three numbers")),
    }
}

/// An mmproj's metadata in file order, or why it cannot be written (a reason; the caller names
/// the file).
pub type MmprojMetadata = std::result::Result<Vec<(String, tessera_decoder::gguf_write::MetaValue)>, String>;

/// CLIP's (and OpenAI's) normalization, the default mean and std of several processors.
pub(crate) const CLIP_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
pub(crate) const CLIP_STD: [f32; 3] = [0.268_629_54, 0.261_302_6, 0.275_777_1];

/// `v` as a GGUF `u32` value.
pub(crate) fn gguf_u32(v: usize) -> std::result::Result<tessera_decoder::gguf_write::MetaValue, String> {
    u32::try_from(v)
        .map(tessera_decoder::gguf_write::MetaValue::U32)
        .map_err(|_| format!("{v} does not fit a GGUF u32"))
}

/// The sizes llama.cpp's converter states first in every mmproj it writes through
/// `MmprojModel.set_gguf_parameters`.
pub(crate) struct ClipHeader {
    /// The text model's width (`clip.vision.projection_dim`).
    pub projection_dim: usize,
    pub image_size: usize,
    pub patch_size: usize,
    /// The tower's width (`clip.vision.embedding_length`).
    pub width: usize,
    pub feed_forward: usize,
    pub blocks: usize,
    pub heads: usize,
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
}

impl ClipHeader {
    /// The header of a SigLIP / CLIP tower's mmproj (`tower`'s sizes).
    pub(crate) fn of_tower(
        tower: &tessera_vision::VisionTowerConfig,
        projection_dim: usize,
        mean: Vec<f32>,
        std: Vec<f32>,
    ) -> Self {
        Self {
            projection_dim,
            image_size: tower.image_size,
            patch_size: tower.patch_size,
            width: tower.hidden_size,
            feed_forward: tower.intermediate_size,
            blocks: tower.num_hidden_layers,
            heads: tower.num_attention_heads,
            mean,
            std,
        }
    }

    /// The header's keys in the converter's order: `general.*`, `clip.has_vision_encoder`, the
    /// sizes, the mean and std; each family appends its own keys after them.
    pub(crate) fn keys(self) -> MmprojMetadata {
        use tessera_decoder::gguf_write::MetaValue::{Bool, F32s, Str};
        Ok(vec![
            ("general.architecture".into(), Str("clip".into())),
            ("general.type".into(), Str("mmproj".into())),
            ("clip.has_vision_encoder".into(), Bool(true)),
            ("clip.vision.projection_dim".into(), gguf_u32(self.projection_dim)?),
            ("clip.vision.image_size".into(), gguf_u32(self.image_size)?),
            ("clip.vision.patch_size".into(), gguf_u32(self.patch_size)?),
            ("clip.vision.embedding_length".into(), gguf_u32(self.width)?),
            ("clip.vision.feed_forward_length".into(), gguf_u32(self.feed_forward)?),
            ("clip.vision.block_count".into(), gguf_u32(self.blocks)?),
            ("clip.vision.attention.head_count".into(), gguf_u32(self.heads)?),
            ("clip.vision.image_mean".into(), F32s(self.mean)),
            ("clip.vision.image_std".into(), F32s(self.std)),
        ])
    }
}

/// `stored` without the first of `roots` it lies under (and the dot), if any.
pub(crate) fn under_roots<'a>(stored: &'a str, roots: &[&str]) -> Option<&'a str> {
    roots.iter().find_map(|r| stored.strip_prefix(r)?.strip_prefix('.'))
}

/// A loaded family's image side: how an image becomes pixel values, image tokens in the
/// decoder's width, and a place in the prompt.
pub trait ImageSide: Send + Sync {
    /// How many images one prompt may carry.
    fn max_images(&self) -> usize {
        usize::MAX
    }

    /// Image tokens per image when that does not depend on the image.
    fn fixed_tokens(&self) -> Option<usize>;

    /// Image tokens `img` becomes in the sequence (from its size alone: no pixel work).
    fn tokens_for(&self, img: &RgbImage) -> Result<usize>;

    /// What the rendered prompt writes for an image (`<image>`; Gemma 3's `<start_of_image>`),
    /// before the processor's expansion; `None` when images go before the text instead.
    fn placeholder(&self) -> Option<&str>;

    /// The id whose positions an image's tokens replace; `None` when images go before the text.
    fn image_token_id(&self) -> Option<u32>;

    /// The prompt text `img`'s placeholder expands to (what the reference processor writes);
    /// `None` when images go before the text.
    fn placeholder_text(&self, img: &RgbImage) -> Result<Option<String>>;

    /// The prompt text `img`'s placeholder expands to as the prompt's `index`-th image (from 0):
    /// [`placeholder_text`](Self::placeholder_text), unless the family numbers its images
    /// (MiniCPM-V's `<image_id>N</image_id>`).
    fn placeholder_text_at(&self, img: &RgbImage, _index: usize) -> Result<Option<String>> {
        self.placeholder_text(img)
    }

    /// The `(rows, cols)` grid of `img`'s image tokens for families whose images take M-RoPE
    /// grid positions; `None` for the others.
    fn position_grid(&self, _img: &RgbImage) -> Result<Option<(usize, usize)>> {
        Ok(None)
    }

    /// The preprocessed pixel values the tower reads.
    fn pixel_values(&self, img: &RgbImage, device: &Device) -> Result<Tensor>;

    /// The image as the model sees it (resized, before normalization) and its token grid
    /// `(rows, cols)`, for families whose image is one grid of tokens.
    fn model_view(&self, img: &RgbImage) -> Result<(RgbImage, usize, usize)>;

    /// `img`'s image tokens `(1, n, hidden)` and whatever else the family feeds the decoder.
    fn encode(&self, img: &RgbImage, device: &Device) -> Result<ImageFeatures>;

    /// The vision tower's features `(views, patches, vision_hidden)` as the connector reads
    /// them (a model without a tower returns its image tokens).
    fn tower_features(&self, img: &RgbImage, device: &Device) -> Result<Tensor>;

    /// One paragraph for `tessera info`.
    fn describe(&self) -> String;
}

/// One image encoded: its tokens `(1, n, hidden)` in the decoder's width and, for families that
/// feed the decoder more (Qwen3-VL's DeepStack), rows `(n, hidden)` added to the outputs of the
/// first decoder layers at the image's positions, one per layer.
#[derive(Debug, Clone)]
pub struct ImageFeatures {
    tokens: Tensor,
    layer_additions: Vec<Tensor>,
}

impl ImageFeatures {
    /// Image tokens `(1, n, hidden)` alone.
    pub fn new(tokens: Tensor) -> Self {
        Self { tokens, layer_additions: Vec::new() }
    }

    /// Image tokens and one `(n, hidden)` addition per early decoder layer.
    pub fn with_layer_additions(tokens: Tensor, layer_additions: Vec<Tensor>) -> Self {
        Self { tokens, layer_additions }
    }

    /// The image tokens `(1, n, hidden)`.
    pub fn tokens(&self) -> &Tensor {
        &self.tokens
    }

    /// The additions to the first decoder layers' outputs, `(n, hidden)` each.
    pub fn layer_additions(&self) -> &[Tensor] {
        &self.layer_additions
    }

    /// Bytes the features take.
    pub fn bytes(&self) -> usize {
        std::iter::once(&self.tokens)
            .chain(&self.layer_additions)
            .map(|t| t.elem_count() * t.dtype().size_in_bytes())
            .sum()
    }

    /// The features in `dtype`.
    pub(crate) fn to_dtype(&self, dtype: DType) -> Result<Self> {
        Ok(Self {
            tokens: self.tokens.to_dtype(dtype)?,
            layer_additions: self
                .layer_additions
                .iter()
                .map(|t| t.to_dtype(dtype))
                .collect::<candle_core::Result<_>>()?,
        })
    }
}

/// The image processor's settings and the processor's own fields, from either folder layout:
/// transformers 5's `processor_config.json` with a nested `image_processor`, or the older flat
/// `preprocessor_config.json` (with processor fields, if any, in a flat `processor_config.json`).
/// Also the file they came from, for errors.
pub(crate) fn processor_files(dir: &Path) -> Result<(Value, Value, PathBuf)> {
    let read = crate::model::read_json_opt;
    let proc_path = dir.join("processor_config.json");
    let pre_path = dir.join("preprocessor_config.json");
    let processor = read(&proc_path)?.unwrap_or_else(|| Value::Object(Default::default()));
    if let Some(nested) = processor.get("image_processor").filter(|v| v.is_object()) {
        return Ok((nested.clone(), processor.clone(), proc_path));
    }
    match read(&pre_path)? {
        Some(image) => Ok((image, processor, pre_path)),
        None => Err(TesseraError::Config {
            path: dir.to_path_buf(),
            reason: "no image processor settings: neither preprocessor_config.json nor an `image_processor` in \
                     processor_config.json"
                .into(),
        }),
    }
}

/// The first of `candidates` under which `probe` exists (the checkpoint's naming generation);
/// the first candidate when none matches, so that errors name the expected tensor.
pub(crate) fn first_prefix(vb: &Weights, candidates: &[&str], probe: &str) -> Weights {
    candidates
        .iter()
        .map(|p| vb.pp(p))
        .find(|w| if probe.is_empty() { w.has_any() } else { w.contains(probe) })
        .unwrap_or_else(|| vb.pp(candidates[0]))
}

/// The tokenizer's text of placeholder id `id` (`what` names the config field).
pub(crate) fn token_text(at: &ImageLoad<'_>, id: u32, what: &str) -> Result<String> {
    at.tokenizer.id_to_token(id).ok_or_else(|| TesseraError::Config {
        path: at.dir.join("tokenizer.json"),
        reason: format!("the tokenizer has no token for {what} {id}"),
    })
}
