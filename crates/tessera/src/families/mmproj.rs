//! llama.cpp's `mmproj` GGUF: the vision tower and projector of a vision-language model, written
//! by `convert_hf_to_gguf.py --mmproj` to sit beside the text model's GGUF (the pairs llama.cpp's
//! `tools/mtmd` loads). Its `clip.*` metadata states the projector type, the tower's sizes and
//! the processor's normalization; its tensors (`v.blk.N.attn_q.weight`, `mm.model.fc.weight`)
//! are read under their Hugging Face names through
//! [`gguf_vision_name`](tessera_decoder::weights::gguf_vision_name). Each projector type maps to
//! the family that implements it ([`PROJECTORS`], one row per projector type), whose image side
//! then loads from these weights and settings as it would from a checkpoint folder. A pair that
//! does not fit (another family's mmproj, another width, an unknown projector type) is refused
//! in one line naming both files. Key names: gguf-py's `constants.py` (`Keys.Clip`), llama.cpp
//! 0c1e57098 as llama-cpp-python 0.3.36 vendors it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::gguf_file;
use tessera_decoder::Activation;
use tessera_text::Tokenizer;
use tessera_vision::{TowerKind, VisionTowerConfig};

use super::image::{ImageSpec, ProcessorSettings};
use super::text::TextFamily;
use crate::config::{gguf_f64, gguf_usize};
use crate::error::{Result, TesseraError};

/// How one projector type's family reads an mmproj (errors are reasons; the caller names the
/// file).
type FromMmproj = fn(&MmprojInput<'_>) -> std::result::Result<MmprojSide, String>;

/// Every projector type (`clip.projector_type`) tessera reads, with the family function that
/// turns the mmproj's metadata into that family's image side. The one place that maps an mmproj
/// to a family; adding one is a row here and the family's `from_mmproj`.
pub const PROJECTORS: &[(&str, FromMmproj)] = &[
    // Idefics3 / SmolVLM (llama.cpp's conversion/smolvlm.py): SigLIP tiles, pixel shuffle.
    ("idefics3", super::idefics3::from_mmproj),
    // LLaVA 1.5 / LLaVA-interleave (llama.cpp's legacy-models/convert_image_encoder_to_gguf.py):
    // CLIP or SigLIP, two linears.
    ("mlp", super::llava::from_mmproj),
    // Qwen2-VL, Qwen2.5-VL, Qwen3-VL (llama.cpp's conversion/qwen*.py): a 3-D patch kernel split
    // in two, 2-D RoPE, a 2x2 merger; 2.5's windows, 3's DeepStack.
    ("qwen2vl_merger", |input| super::qwen2_vl::from_mmproj(input, "qwen2vl_merger")),
    ("qwen2.5vl_merger", |input| super::qwen2_vl::from_mmproj(input, "qwen2.5vl_merger")),
    ("qwen3vl_merger", |input| super::qwen2_vl::from_mmproj(input, "qwen3vl_merger")),
    // Gemma 3 (llama.cpp's conversion/gemma.py): SigLIP, average pooling, soft-emb norm, one
    // projection.
    ("gemma3", super::gemma3::from_mmproj),
    // Mistral 3 (llama.cpp's conversion/llava.py, LlavaVisionModel): Pixtral, 2-D RoPE, RMSNorm,
    // a 2x2 patch merger, two linears.
    ("pixtral", super::mistral3_mmproj::from_mmproj),
    // MiniCPM-V 4.6 (llama.cpp's conversion/minicpm.py): SigLIP, a window-attention merger, a
    // 2x2 downsample MLP; sliced images, plain positions.
    ("minicpmv4_6", super::minicpm_mmproj::from_mmproj),
    // InternVL3 (llama.cpp's conversion/internvl.py): InternViT (CLS token, layer scale), pixel
    // shuffle, LayerNorm + two linears; tiles and a thumbnail.
    ("internvl", super::internvl::from_mmproj),
    // Gemma 4 (llama.cpp's conversion/gemma.py, Gemma4VisionAudioModel): patches, learned
    // column and row tables, 2-D RoPE, clipped linears, k x k pooling, standardization, one
    // projection.
    ("gemma4v", super::gemma4::from_mmproj),
];

/// What a family's `from_mmproj` reads: the mmproj's metadata, and the text model it is paired
/// with.
pub struct MmprojInput<'a> {
    pub clip: ClipMetadata<'a>,
    /// The mmproj's tensors by their names in the file, with their shapes (row-major).
    pub tensors: &'a HashMap<String, gguf_file::TensorInfo>,
    /// The text model's tokenizer (the family's image token ids).
    pub tokenizer: &'a Tokenizer,
    /// The text model's file and family (errors about its vocabulary name them; one projector
    /// type can serve two families' towers).
    pub model: &'a Path,
    pub text_family: TextFamily,
    /// The most image tokens an image may take where the file states no budget
    /// (`LoadOptions::image_max_tokens`, llama.cpp's `--image-max-tokens`; Gemma 4).
    pub image_max_tokens: Option<usize>,
}

/// A family's image side as an mmproj gives it.
pub struct MmprojSide {
    /// The family (`ModelConfig::family`).
    pub family: &'static str,
    pub spec: Arc<dyn ImageSpec>,
    /// The image processor's settings in `preprocessor_config.json`'s terms.
    pub image: serde_json::Value,
    /// The text decoders this family pairs with (a text GGUF of another is another model's).
    pub text: &'static [TextFamily],
    /// The width of the image tokens the projector makes (must be the text model's).
    pub width: usize,
    /// The file names each tower block's `mlp.fc1` `ffn_down` and `fc2` `ffn_up` (llama.cpp's
    /// legacy LLaVA script); the reader swaps them back, as `clip.cpp` does.
    pub swapped_ffn: bool,
    /// Each image's tokens attend to each other both ways (`ModelConfig::bidirectional_images`).
    pub bidirectional_images: bool,
    /// The processor's own settings in `processor_config.json`'s terms (Pixtral's patch and
    /// merge sizes); `{}` for most.
    pub processor: serde_json::Value,
    /// The images take plain consecutive positions: M-RoPE sections the text GGUF states
    /// (a `qwen35` one's) are not used (`ModelConfig`'s `rope.mrope` is cleared).
    pub plain_positions: bool,
}

impl MmprojInput<'_> {
    /// The row-major shape of the tensor the file names `name`.
    pub fn shape(&self, name: &str) -> std::result::Result<&[usize], String> {
        self.tensors.get(name).map(|t| t.shape.dims()).ok_or_else(|| format!("the mmproj has no tensor `{name}`"))
    }

    /// The id of `text` in the text model's vocabulary; the error names the model's file
    /// (`projector` names the type that needs it).
    pub fn token(&self, projector: &str, text: &str) -> std::result::Result<u32, String> {
        self.tokenizer.token_to_id(text).ok_or_else(|| {
            format!(
                "projector type `{projector}` needs the `{text}` token, which the vocabulary of the text model {} \
                 ({}) lacks",
                self.model.display(),
                self.text_family.name()
            )
        })
    }
}

/// An `mmproj` file's image side: the family's spec and the processor settings its metadata
/// gives.
pub struct Mmproj {
    /// The family the projector type belongs to (`ModelConfig::family`).
    pub family: &'static str,
    pub spec: Arc<dyn ImageSpec>,
    pub settings: ProcessorSettings,
    pub bidirectional_images: bool,
    /// [`MmprojSide::plain_positions`].
    pub plain_positions: bool,
}

/// Typed access to an `mmproj` GGUF's `clip.*` metadata; errors name the key.
pub struct ClipMetadata<'a> {
    md: &'a HashMap<String, gguf_file::Value>,
}

impl ClipMetadata<'_> {
    pub(crate) fn usize_opt(&self, key: &str) -> std::result::Result<Option<usize>, String> {
        match self.md.get(key) {
            None => Ok(None),
            Some(v) => gguf_usize(v).map(Some).ok_or_else(|| format!("`{key}` is not a non-negative integer")),
        }
    }

    pub(crate) fn usize(&self, key: &str) -> std::result::Result<usize, String> {
        self.usize_opt(key)?.ok_or_else(|| format!("the metadata has no `{key}`"))
    }

    pub(crate) fn f64(&self, key: &str) -> std::result::Result<Option<f64>, String> {
        match self.md.get(key) {
            None => Ok(None),
            Some(v) => gguf_f64(v).map(Some).ok_or_else(|| format!("`{key}` is not a number")),
        }
    }

    pub(crate) fn bool(&self, key: &str) -> std::result::Result<Option<bool>, String> {
        match self.md.get(key) {
            None => Ok(None),
            Some(v) => v.to_bool().map(Some).map_err(|_| format!("`{key}` is not a boolean")),
        }
    }

    fn string(&self, key: &str) -> std::result::Result<Option<&str>, String> {
        match self.md.get(key) {
            None => Ok(None),
            Some(v) => v.to_string().map(|s| Some(s.as_str())).map_err(|_| format!("`{key}` is not a string")),
        }
    }

    /// A list of integers (`clip.vision.feature_layer`), `None` when absent.
    pub(crate) fn ints_opt(&self, key: &str) -> std::result::Result<Option<Vec<usize>>, String> {
        let Some(v) = self.md.get(key) else { return Ok(None) };
        let items = v.to_vec().map_err(|_| format!("`{key}` is not a list"))?;
        let ints = items
            .iter()
            .map(|x| gguf_usize(x).ok_or_else(|| format!("`{key}` holds a value that is not a non-negative integer")));
        ints.collect::<std::result::Result<Vec<_>, _>>().map(Some)
    }

    /// `settings` (an image processor's `preprocessor_config.json` keys) with the pixel
    /// normalization every mmproj states the same way: rescaled by 1/255, then normalized by the
    /// file's `clip.vision.image_mean` / `image_std`.
    pub(crate) fn normalized(&self, mut settings: serde_json::Value) -> std::result::Result<serde_json::Value, String> {
        settings["do_rescale"] = true.into();
        settings["rescale_factor"] = (1.0 / 255.0).into();
        settings["do_normalize"] = true.into();
        settings["image_mean"] = self.floats("clip.vision.image_mean")?.into();
        settings["image_std"] = self.floats("clip.vision.image_std")?.into();
        Ok(settings)
    }

    /// A SigLIP tower's configuration from the `clip.vision.*` keys (Idefics3's and Gemma 3's
    /// towers): sizes, patch, epsilon (1e-6 when absent) and the tanh GELU, which `clip.use_gelu`
    /// false would contradict (`family` names the projector in that error).
    pub(crate) fn siglip_tower(&self, family: &str) -> std::result::Result<VisionTowerConfig, String> {
        if self.bool("clip.use_gelu")? == Some(false) {
            return Err(format!("`clip.use_gelu` is false: a {family} tower uses GELU"));
        }
        let tower = VisionTowerConfig {
            kind: TowerKind::Siglip,
            hidden_size: self.usize("clip.vision.embedding_length")?,
            intermediate_size: self.usize("clip.vision.feed_forward_length")?,
            num_hidden_layers: self.usize("clip.vision.block_count")?,
            num_attention_heads: self.usize("clip.vision.attention.head_count")?,
            num_channels: 3,
            image_size: self.usize("clip.vision.image_size")?,
            patch_size: self.usize("clip.vision.patch_size")?,
            layer_norm_eps: self.f64("clip.vision.attention.layer_norm_epsilon")?.unwrap_or(1e-6),
            hidden_act: Activation::GeluTanh,
        };
        tower.validate().map_err(|e| e.to_string())?;
        Ok(tower)
    }

    /// A list of numbers (`clip.vision.image_mean`).
    pub(crate) fn floats(&self, key: &str) -> std::result::Result<Vec<f64>, String> {
        let v = self.md.get(key).ok_or_else(|| format!("the metadata has no `{key}`"))?;
        let items = v.to_vec().map_err(|_| format!("`{key}` is not a list"))?;
        items.iter().map(|x| gguf_f64(x).ok_or_else(|| format!("`{key}` holds a value that is not a number"))).collect()
    }

    /// A list of booleans (`clip.vision.is_deepstack_layers`), `None` when absent.
    pub(crate) fn bools(&self, key: &str) -> std::result::Result<Option<Vec<bool>>, String> {
        let Some(v) = self.md.get(key) else { return Ok(None) };
        let items = v.to_vec().map_err(|_| format!("`{key}` is not a list"))?;
        let flags =
            items.iter().map(|x| x.to_bool().map_err(|_| format!("`{key}` holds a value that is not a boolean")));
        flags.collect::<std::result::Result<Vec<_>, _>>().map(Some)
    }
}

/// Reads the image side of the `mmproj` GGUF at `path` (its parsed header `content`) for the
/// GGUF text model at `model`, of family `text_family` and width `text_hidden`, whose tokenizer
/// is `tokenizer`; `image_max_tokens` is [`MmprojInput::image_max_tokens`]. Tensor names the
/// family says are swapped are put right in `content`.
pub fn read(
    content: &mut gguf_file::Content,
    path: &Path,
    model: &Path,
    tokenizer: &Tokenizer,
    (text_family, text_hidden): (TextFamily, usize),
    image_max_tokens: Option<usize>,
) -> Result<Mmproj> {
    let err = |reason: String| TesseraError::Config { path: path.to_path_buf(), reason };
    let mismatch =
        |reason: String| TesseraError::Pair { mmproj: path.to_path_buf(), model: model.to_path_buf(), reason };
    let clip = ClipMetadata { md: &content.metadata };
    let arch = clip.string("general.architecture").map_err(err)?;
    if arch != Some("clip") {
        return Err(err(format!(
            "not an mmproj file: `general.architecture` is {}, not `clip`",
            arch.map_or("absent".to_string(), |a| format!("`{a}`"))
        )));
    }
    if clip.bool("clip.has_vision_encoder").map_err(err)? == Some(false) {
        return Err(err("the mmproj has no vision encoder (`clip.has_vision_encoder` is false)".into()));
    }
    // Files of one modality name the type once; mixed ones per modality.
    let projector = match clip.string("clip.projector_type").map_err(err)? {
        Some(p) => p,
        None => clip
            .string("clip.vision.projector_type")
            .map_err(err)?
            .ok_or_else(|| err("the metadata names no projector type (`clip.projector_type`)".into()))?,
    }
    .to_string();
    let Some((_, from_mmproj)) = PROJECTORS.iter().find(|(name, _)| *name == projector) else {
        let names: Vec<&str> = PROJECTORS.iter().map(|(name, _)| *name).collect();
        return Err(mismatch(format!(
            "its projector type `{projector}` is not supported (supported: {})",
            names.join(", ")
        )));
    };
    let input = MmprojInput { clip, tensors: &content.tensor_infos, tokenizer, model, text_family, image_max_tokens };
    let side = from_mmproj(&input).map_err(err)?;
    if !side.text.contains(&text_family) {
        let names: Vec<&str> = side.text.iter().map(|f| f.name()).collect();
        return Err(mismatch(format!(
            "its projector type `{projector}` is {}'s, which goes with a {} text model, not {}",
            side.family,
            names.join(" or "),
            text_family.name()
        )));
    }
    if side.width != text_hidden {
        return Err(mismatch(format!(
            "its projector makes {}-wide image tokens but the text model is {text_hidden} wide",
            side.width
        )));
    }
    if side.swapped_ffn {
        swap_ffn_names(content);
    }
    let MmprojSide { family, spec, image, bidirectional_images, processor, plain_positions, .. } = side;
    let settings = ProcessorSettings { image, processor, origin: path.to_path_buf() };
    Ok(Mmproj { family, spec, settings, bidirectional_images, plain_positions })
}

/// Renames each tower block's `ffn_up.*` to `ffn_down.*` and back (llama.cpp's legacy LLaVA
/// script named `fc1` `ffn_down`).
fn swap_ffn_names(content: &mut gguf_file::Content) {
    let renamed: Vec<(String, String)> = content
        .tensor_infos
        .keys()
        .filter_map(|name| {
            let other = if name.contains(".ffn_up.") {
                name.replace(".ffn_up.", ".ffn_down.")
            } else if name.contains(".ffn_down.") {
                name.replace(".ffn_down.", ".ffn_up.")
            } else {
                return None;
            };
            name.starts_with("v.blk.").then(|| (name.clone(), other))
        })
        .collect();
    let mut moved: Vec<(String, gguf_file::TensorInfo)> =
        renamed.iter().filter_map(|(from, to)| Some((to.clone(), content.tensor_infos.remove(from)?))).collect();
    content.tensor_infos.extend(moved.drain(..));
}

/// The `mmproj*.gguf` file beside the GGUF `model`, when there is exactly one (what llama.cpp's
/// pairs are named on the Hub: `mmproj-<model>-<type>.gguf`); `None` when there is none or when
/// several leave the choice open.
pub fn beside(model: &Path) -> Option<PathBuf> {
    let dir = model.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut found = std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()).filter(|p| {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        name.starts_with("mmproj") && name.ends_with(".gguf") && p.is_file() && p.as_path() != model
    });
    let first = found.next()?;
    found.next().is_none().then_some(first)
}
