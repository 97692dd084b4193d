//! llama.cpp's `mmproj` GGUF: the vision tower and projector of a vision-language model, written
//! by `convert_hf_to_gguf.py --mmproj` to sit beside the text model's GGUF (the pairs llama.cpp's
//! `tools/mtmd` loads). Its `clip.*` metadata states the projector type, the tower's sizes and
//! the processor's normalization; its tensors (`v.blk.N.attn_q.weight`, `mm.model.fc.weight`)
//! are read under their Hugging Face names through
//! [`gguf_vision_name`](tessera_decoder::weights::gguf_vision_name). Each projector type maps to
//! the family that implements it, whose image side then loads from these weights and settings as
//! it would from a checkpoint folder. Key names: gguf-py's `constants.py` (`Keys.Clip`), llama.cpp
//! 0c1e57098 as llama-cpp-python 0.3.36 vendors it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::gguf_file;
use tessera_text::Tokenizer;

use super::image::{ImageSpec, ProcessorSettings};
use crate::config::{gguf_f64, gguf_usize};
use crate::error::{Result, TesseraError};

/// The projector types (`clip.projector_type`) this engine reads, with the family each maps to.
pub const PROJECTOR_TYPES: &[&str] = &["idefics3", "qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger"];

/// An `mmproj` file's image side: the family's spec and the processor settings its metadata
/// gives.
pub struct Mmproj {
    /// The family the projector type belongs to (`ModelConfig::family`).
    pub family: &'static str,
    pub spec: Arc<dyn ImageSpec>,
    pub settings: ProcessorSettings,
}

/// Typed access to an `mmproj` GGUF's `clip.*` metadata; errors name the key.
pub(crate) struct ClipMetadata<'a> {
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

/// Reads the image side of the `mmproj` GGUF at `path` (its parsed header `content`) for a text
/// model of width `text_hidden` whose tokenizer is `tokenizer`.
pub fn read(content: &gguf_file::Content, path: &Path, tokenizer: &Tokenizer, text_hidden: usize) -> Result<Mmproj> {
    let err = |reason: String| TesseraError::Config { path: path.to_path_buf(), reason };
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
    };
    if let Some(dim) = clip.usize_opt("clip.vision.projection_dim").map_err(err)? {
        if dim != text_hidden {
            return Err(err(format!(
                "the projector makes {dim}-wide image tokens (`clip.vision.projection_dim`) but the text model is \
                 {text_hidden} wide: this mmproj belongs to another model"
            )));
        }
    }
    let (family, spec, image): (_, Arc<dyn ImageSpec>, _) = match projector {
        "idefics3" => {
            let id = tokenizer.token_to_id("<image>").ok_or_else(|| {
                err("projector type `idefics3` needs the text model's `<image>` token, which its vocabulary lacks"
                    .into())
            })?;
            let (spec, image) = super::idefics3::from_mmproj(&clip, id).map_err(err)?;
            ("idefics3", Arc::new(spec), image)
        }
        "qwen2vl_merger" | "qwen2.5vl_merger" | "qwen3vl_merger" => {
            let (family, spec, image) =
                super::qwen2_vl::from_mmproj(&clip, projector, tokenizer, &content.tensor_infos).map_err(err)?;
            (family, Arc::new(spec), image)
        }
        other => {
            return Err(err(format!(
                "projector type `{other}` is not supported (supported: {})",
                PROJECTOR_TYPES.join(", ")
            )))
        }
    };
    let processor = serde_json::Value::Object(Default::default());
    Ok(Mmproj { family, spec, settings: ProcessorSettings { image, processor, origin: path.to_path_buf() } })
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
