//! `tessera quantize`: a safetensors checkpoint written as the quantized GGUF llama.cpp runs —
//! the text model and, for a vision-language model, its `mmproj` GGUF (vision tower and
//! projector) — so that a model is quantized once and both engines load the files.
//!
//! Each file is what llama.cpp's converter (`convert_hf_to_gguf.py --outtype f32`, and again
//! with `--mmproj`) followed by `llama-quantize FILE OUT TYPE` would write, llama.cpp 0c1e57098
//! as llama-cpp-python 0.3.36 vendors it: the converter's metadata keys for the architecture
//! (the family says which: [`TextFamily::gguf_text`](crate::families::TextFamily::gguf_text),
//! [`ImageSpec::mmproj_metadata`](crate::families::ImageSpec::mmproj_metadata)), its tensor
//! names and row order (Llama's q/k rows permuted for interleaved RoPE), and each matrix in
//! the type llama-quantize gives it ([`QuantPlan`], the rule `--quantize` uses at load time)
//! with the same blocks (ggml's reference quantizers); norms, biases and the patch and position
//! embeddings stay f32, a matrix whose rows no block type tiles becomes f16, as llama-quantize
//! does. Tensors are ordered as llama-quantize orders them, so the tensor infos and the data
//! section equal llama-quantize's byte for byte (tests/quantize_export.rs); the metadata differs
//! only in `general.name` / `size_label` (the converter's guesses from the folder name and the
//! parameter count, not written here); the pre-tokenizer is named from the tokenizer
//! ([`vocab`]) where the converter hashes it.

mod vocab;

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use tessera_decoder::gguf_write::{self, GgufFile, MetaValue, TensorEntry, TensorType};
use tessera_decoder::quant::Role;
use tessera_decoder::weights::{gguf_name, gguf_sandwich_name, gguf_vision_name};
use tessera_decoder::{QuantMix, QuantPlan, RopeScaling, RopeStyle, Weights};

use crate::config::ModelConfig;
use crate::error::{Result, TesseraError};
use crate::families::image::{processor_files, Part, ProcessorSettings};
use crate::families::text::{GgufText, TensorChange};
use crate::source::{self, ModelSource};

/// What to quantize, and where the files go.
#[derive(Debug, Clone)]
pub struct QuantizeJob {
    /// A checkpoint folder or Hub id (safetensors).
    pub model: String,
    /// The text model's GGUF.
    pub out: PathBuf,
    /// The mmproj GGUF: required for a vision-language model, refused for a text model.
    pub mmproj_out: Option<PathBuf>,
    pub mix: QuantMix,
}

/// One file written.
#[derive(Debug, Clone)]
pub struct WrittenFile {
    pub path: PathBuf,
    pub bytes: u64,
    pub tensors: usize,
    /// The tensors' types: `Q4_K ×10, Q6_K ×4, F32 ×5`.
    pub types: String,
}

/// What the writer reports as it goes (for a progress bar).
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// A file is started: its tensors and their values in all.
    File { path: &'a Path, tensors: usize, values: u64 },
    /// A tensor of `values` values is written.
    Tensor { name: &'a str, values: u64 },
}

/// One tensor to write: where it comes from and what it becomes.
struct Planned {
    entry: TensorEntry,
    /// The checkpoint's name for it.
    stored: String,
    /// Heads whose rows are permuted for interleaved RoPE (Llama's q/k), if any.
    permute_heads: Option<usize>,
    /// The part of the stored tensor it holds (a tensor the converter splits), if not all.
    part: Option<Part>,
    /// Only its first rows (Gemma 3's token embedding cut to the tokenizer), if not all.
    rows: Option<usize>,
    /// The family's change of the values ([`TensorChange`]), if any.
    change: Option<TensorChange>,
    /// The values themselves, for a tensor the converter generates (`stored` unread).
    generated: Option<Vec<f32>>,
}

/// A file to write: its metadata, tensors and target.
struct PlannedFile {
    path: PathBuf,
    gguf: GgufFile,
    tensors: Vec<Planned>,
}

/// Quantizes the checkpoint `job.model` to `job.mix` into `job.out` (and `job.mmproj_out`).
/// Everything is checked before any file is written; each file appears whole or not at all.
pub fn quantize_to_gguf(job: &QuantizeJob, progress: &mut dyn FnMut(Progress<'_>)) -> Result<Vec<WrittenFile>> {
    let dir = match source::resolve(&job.model)? {
        ModelSource::Dir(dir) => dir,
        ModelSource::Gguf(path) => {
            return Err(TesseraError::InvalidInput(format!(
                "{} is a GGUF file, already stored in its own types: tessera quantize reads safetensors checkpoints \
                 (llama-quantize requantizes GGUF files)",
                path.display()
            )))
        }
    };
    let config_path = dir.join("config.json");
    let config = ModelConfig::from_config_file(&config_path)?;
    let files = plan(&dir, &config, job)?;
    let mut written = Vec::new();
    for file in &files {
        written.push(write(file, &dir, progress)?);
    }
    Ok(written)
}

/// The files `job` writes from the folder `dir` of config `config`, fully planned.
fn plan(dir: &Path, config: &ModelConfig, job: &QuantizeJob) -> Result<Vec<PlannedFile>> {
    let config_path = dir.join("config.json");
    let err = |reason: String| TesseraError::Config { path: config_path.clone(), reason };
    let text = config.text_family.gguf_text().ok_or_else(|| {
        err(format!(
            "tessera quantize writes llama (and mistral3), qwen2, qwen2vl, qwen3vl, qwen35, gemma3 and gemma4 text models; \
             this checkpoint's text model is {}",
            config.text_family.name()
        ))
    })?;
    // Where the image side names the text model's architecture (Mistral 3's `mistral3`).
    let text = match config.vision.as_ref().and_then(|s| s.text_gguf_arch()) {
        Some(arch) => GgufText { arch, ..text },
        None => text,
    };
    let d = &config.decoder;
    // A family that states its layers itself (Gemma 4) checks them as it writes its keys.
    let layout = text.writer.and_then(|w| w.layout);
    let window = match layout {
        Some(_) => None,
        None => common_layout(config, text).map_err(err)?,
    };
    match (&config.vision, &job.mmproj_out) {
        (Some(_), None) => {
            return Err(TesseraError::InvalidInput(format!(
                "{} is a vision-language model ({}): give --mmproj-out FILE for its vision tower and projector",
                dir.display(),
                config.family
            )))
        }
        (None, Some(mmproj)) => {
            return Err(TesseraError::InvalidInput(format!(
                "{} is a text model: it has no vision tower to write to {}",
                dir.display(),
                mmproj.display()
            )))
        }
        _ => {}
    }
    if job.mmproj_out.as_deref() == Some(job.out.as_path()) {
        return Err(TesseraError::InvalidInput(format!(
            "the model and the mmproj would both be written to {}",
            job.out.display()
        )));
    }
    let vb = Weights::from_safetensors(&source::weight_files_in(dir)?, DType::F32, &Device::Cpu)?;
    let (lm, head) = crate::model::text_roots(&vb);
    let head = format!("{head}.weight");
    let lm_prefix = format!("{}.", lm.prefix());
    let tied = config.tie_word_embeddings || !vb.contains(&head);
    let mut text_plan = QuantPlan::text(job.mix, d.num_hidden_layers, tied);
    let permute = config.text_family.gguf_rope_style() == RopeStyle::Interleaved;
    let text_name = if d.sandwich_norms || text.sandwich_names { gguf_sandwich_name } else { gguf_name };
    let embedding_rows = match text.embedding_to_tokenizer {
        true => Some(vocab::tokenizer_entries(dir)?),
        false => None,
    };
    let mut names = vb.stored_names();
    names.sort();

    let mut text_file = GgufFile::new();
    let dir_name = dir.file_name().and_then(|n| n.to_str()).unwrap_or("model");
    let image_keys = config.vision.as_ref().map(|spec| spec.text_gguf_metadata(text.arch)).unwrap_or_default();
    for (k, v) in text_metadata(config, text, window, dir_name)?.into_iter().chain(image_keys) {
        text_file.set(k, v);
    }
    let vocab = match text.writer.and_then(|w| w.hf_vocab) {
        Some(how) => vocab::llama_hf_vocab_metadata(dir, config.vocab_size, how)?,
        None => vocab::vocab_metadata(dir, config.vocab_size)?,
    };
    for (k, v) in vocab {
        text_file.set(k, v);
    }
    // llama-quantize counts the `attn_v`-like matrices present (KV-shared layers have none).
    let attn_v = names
        .iter()
        .filter_map(|n| n.strip_prefix(&lm_prefix).and_then(|rest| text_name(&format!("model.{rest}"))))
        .filter(|g| g.ends_with("attn_v.weight") || g.ends_with("attn_qkv.weight"))
        .count();
    if attn_v > 0 {
        text_plan.n_attn_v = attn_v;
    }
    let mut text_tensors = Vec::new();
    let mut image_names = Vec::new();
    for stored in names.iter().filter(|n| !text.dropped.iter().any(|p| n.starts_with(p))) {
        let hf = match stored.strip_prefix(&lm_prefix) {
            Some(rest) => format!("model.{rest}"),
            None if *stored == head => {
                if tied {
                    continue;
                }
                "lm_head.weight".to_string()
            }
            None => {
                image_names.push(stored.clone());
                continue;
            }
        };
        let gguf = text_name(&hf).ok_or_else(|| unmapped(dir, stored, text.arch))?;
        let mut dims = shape(&vb, dir, stored)?;
        let change = match text.writer.and_then(|w| (w.tensor)(d, &hf, &dims)) {
            None if text.norm_plus_one && hf.ends_with("norm.weight") => Some(TensorChange::plus_one(&dims)),
            change => change,
        };
        if let Some(c) = &change {
            dims = c.dims.clone();
        }
        let rows = embedding_rows.filter(|&n| hf == "model.embed_tokens.weight" && n < dims[0]);
        if let Some(n) = rows {
            dims[0] = n;
        }
        let heads = match gguf.rsplit('.').nth(1) {
            Some("attn_q") if permute => Some(d.num_attention_heads),
            Some("attn_k") if permute => Some(d.num_key_value_heads),
            _ => None,
        };
        let ty = storage_type(&text_plan, &hf, &dims);
        text_tensors.push(Planned {
            entry: TensorEntry { name: gguf, dims, ty },
            stored: stored.clone(),
            permute_heads: heads,
            part: None,
            rows,
            change,
            generated: None,
        });
    }
    if let Some(w) = text.writer {
        for g in (w.generated)(config) {
            text_tensors.push(Planned {
                entry: TensorEntry { name: g.name, dims: g.dims, ty: TensorType::F32 },
                stored: String::new(),
                permute_heads: None,
                part: None,
                rows: None,
                change: None,
                generated: Some(g.values),
            });
        }
    }
    finish(&mut text_file, job.mix);
    let mut files = vec![PlannedFile { path: job.out.clone(), gguf: text_file, tensors: text_tensors }];

    if let (Some(spec), Some(mmproj_out)) = (&config.vision, &job.mmproj_out) {
        if image_names.is_empty() {
            return Err(err(format!("no vision tower tensors beside the text model's in {}", dir.display())));
        }
        let (image, processor, origin) = processor_files(dir)?;
        let settings = ProcessorSettings { image, processor, origin };
        let config_json = crate::model::read_json(&config_path)?;
        let metadata = spec
            .mmproj_metadata(&settings, &config_json, d.hidden_size)
            .ok_or_else(|| {
                TesseraError::InvalidInput(format!(
                    "tessera quantize does not write {}'s mmproj yet (it writes idefics3's, llava's, qwen2vl's, \
                     qwen2.5vl's, qwen3vl's, gemma3's, gemma4v's, internvl's, pixtral's and minicpmv4_6's)",
                    config.family
                ))
            })?
            .map_err(|reason| TesseraError::Config { path: settings.origin.clone(), reason })?;
        let mut pieces = Vec::new();
        for stored in &image_names {
            for piece in spec.mmproj_tensors(stored, &shape(&vb, dir, stored)?) {
                pieces.push((stored, piece));
            }
        }
        let vision_plan =
            QuantPlan::vision(job.mix, pieces.iter().map(|(_, p)| (p.name.clone(), gguf_vision_name(&p.name))));
        let mut gguf = GgufFile::new();
        for (k, v) in metadata {
            gguf.set(k, v);
        }
        finish(&mut gguf, job.mix);
        let mut tensors = Vec::new();
        for (stored, piece) in pieces {
            let name = gguf_vision_name(&piece.name).ok_or_else(|| unmapped(dir, stored, "clip"))?;
            let ty = storage_type(&vision_plan, &piece.name, &piece.dims);
            tensors.push(Planned {
                entry: TensorEntry { name, dims: piece.dims, ty },
                stored: stored.clone(),
                permute_heads: piece.permute_heads,
                part: piece.part,
                rows: None,
                change: piece.change,
                generated: None,
            });
        }
        tensors.extend(embedding_rows_for_mmproj(dir, &vb, &lm_prefix, spec.mmproj_embedding_rows())?);
        files.push(PlannedFile { path: mmproj_out.clone(), gguf, tensors });
    }
    // llama-quantize's order, so that the data section is laid out as it lays it out, and its
    // shapes: ggml drops a tensor's trailing dimensions of 1 (InternVL's `(1, 1, d)` CLS token
    // is written `(d)`).
    for f in &mut files {
        f.tensors.sort_by(|a, b| {
            gguf_write::llama_cpp_order(&a.entry.name).cmp(&gguf_write::llama_cpp_order(&b.entry.name))
        });
        for t in &mut f.tensors {
            t.entry.dims = gguf_write::ggml_dims(&t.entry.dims).to_vec();
        }
        for t in &f.tensors {
            f.gguf.add_tensor(t.entry.clone());
        }
    }
    Ok(files)
}

/// The token embedding's rows an mmproj carries (`rows`: GGUF name and token,
/// [`ImageSpec::mmproj_embedding_rows`](crate::families::ImageSpec::mmproj_embedding_rows)), f32.
/// llama.cpp's converter means to write Pixtral's `[IMG_BREAK]` row (`LlavaVisionModel`) but
/// drops the text tensors first for a Hugging Face checkpoint, and its `clip.cpp` then refuses
/// the mmproj; tessera writes the row.
fn embedding_rows_for_mmproj(dir: &Path, vb: &Weights, lm_prefix: &str, rows: &[(&str, &str)]) -> Result<Vec<Planned>> {
    if rows.is_empty() {
        return Ok(Vec::new());
    }
    let tokenizer_path = dir.join("tokenizer.json");
    let tokenizer = tessera_text::Tokenizer::from_file(&tokenizer_path)?;
    let embed = format!("{lm_prefix}embed_tokens.weight");
    let (vocab, width) = match shape(vb, dir, &embed)?.as_slice() {
        [v, w] => (*v, *w),
        other => {
            return Err(TesseraError::Config { path: dir.to_path_buf(), reason: format!("`{embed}` is {other:?}") })
        }
    };
    rows.iter()
        .map(|(name, token)| {
            let id = tokenizer.token_to_id(token).map(|i| i as usize).filter(|&i| i < vocab).ok_or_else(|| {
                TesseraError::Config {
                    path: tokenizer_path.clone(),
                    reason: format!(
                        "the mmproj carries `{token}`'s embedding row, which the tokenizer or `{embed}` lacks"
                    ),
                }
            })?;
            Ok(Planned {
                entry: TensorEntry { name: name.to_string(), dims: vec![width], ty: TensorType::F32 },
                stored: embed.clone(),
                permute_heads: None,
                part: Some(Part { outer: 1, parts: vocab, index: id }),
                rows: None,
                change: None,
                generated: None,
            })
        })
        .collect()
}

/// The checks of a text model whose GGUF keys are the common ones: its RoPE, sliding windows,
/// scales and soft-capping as llama.cpp's architecture lays them out; the sliding window and the
/// local layers' RoPE base ([`sliding_window`]), else why not.
fn common_layout(config: &ModelConfig, text: GgufText) -> std::result::Result<Option<(usize, f64)>, String> {
    let d = &config.decoder;
    let scaling = match d.rope.scaling {
        RopeScaling::Default => true,
        RopeScaling::Linear { .. } => text.linear_rope_scaling,
        _ => false,
    };
    if !scaling || d.rope.mrope.is_some_and(|m| m.interleaved != config.text_family.gguf_mrope_interleaved()) {
        return Err(format!(
            "its RoPE ({:?}, {:?}) is not written to GGUF by tessera yet",
            d.rope.scaling, d.rope.mrope
        ));
    }
    let window = sliding_window(config, text)?;
    let rules = config.text_family.gguf_rules();
    let scalar = rules.query_pre_attn_scalar(d.num_hidden_layers, d.hidden_size, d.num_attention_heads, d.head_dim);
    if d.query_pre_attn_scalar != scalar || config.embed_scale.is_some() != rules.embed_scaled {
        return Err(format!(
            "its query scale {:?} or embedding scale {:?} is not what llama.cpp's `{}` applies",
            d.query_pre_attn_scalar, config.embed_scale, text.arch
        ));
    }
    if config.final_logit_softcapping.is_some() || d.attn_logit_softcapping.is_some() {
        return Err("logit soft-capping is not written to GGUF by tessera yet".into());
    }
    Ok(window)
}

/// A sliding-window decoder's window and its local layers' RoPE base, where the family's GGUF
/// states them ([`GgufText::sliding_window`]) and its layers are laid out as llama.cpp's
/// architecture lays them (`GgufRules::swa_pattern`: every layer but each `n`-th local, one
/// window, the local layers' RoPE unscaled); else why not.
fn sliding_window(config: &ModelConfig, text: GgufText) -> std::result::Result<Option<(usize, f64)>, String> {
    let d = &config.decoder;
    let windowed: Vec<bool> = config.layer_windows.iter().map(Option::is_some).collect();
    let n = match config.text_family.gguf_rules().swa_pattern.filter(|_| text.sliding_window) {
        None if windowed.contains(&true) => {
            return Err("sliding-window layers are not written to GGUF by tessera yet".into())
        }
        None => return Ok(None),
        Some(n) => n,
    };
    let pattern: Vec<bool> = (0..d.num_hidden_layers).map(|i| i % n < n - 1).collect();
    let mut sizes: Vec<usize> = config.layer_windows.iter().flatten().copied().collect();
    sizes.dedup();
    let local = d.local_rope.as_ref();
    let local_ok = local.is_none_or(|l| l.layers == pattern && l.rope.scaling == RopeScaling::Default);
    match sizes.as_slice() {
        [window] if windowed == pattern && local_ok => {
            Ok(Some((*window, local.map_or(d.rope.theta, |l| l.rope.theta))))
        }
        _ => Err(format!(
            "its sliding-window layers ({:?}) are not llama.cpp's `{}` layout: every layer but each {n}-th local, \
             one window, the local RoPE unscaled",
            config.layer_windows, text.arch
        )),
    }
}

/// The converter's `{arch}.*` keys for the text model (`TextModel.set_gguf_parameters`, and
/// what the family's class adds, as `text` says), in its order; `window`: the sliding window
/// and the local layers' RoPE base.
fn text_metadata(
    config: &ModelConfig,
    text: GgufText,
    window: Option<(usize, f64)>,
    name: &str,
) -> Result<Vec<(String, MetaValue)>> {
    let (d, arch) = (&config.decoder, text.arch);
    let u = |v: usize| {
        u32::try_from(v)
            .map(MetaValue::U32)
            .map_err(|_| TesseraError::InvalidInput(format!("{v} does not fit a GGUF u32")))
    };
    let mut md = vec![
        ("general.architecture".to_string(), MetaValue::Str(arch.into())),
        ("general.type".into(), MetaValue::Str("model".into())),
        ("general.name".into(), MetaValue::Str(name.into())),
        (format!("{arch}.block_count"), u(d.num_hidden_layers)?),
        (format!("{arch}.context_length"), u(d.max_position_embeddings)?),
        (format!("{arch}.embedding_length"), u(d.hidden_size)?),
        (format!("{arch}.feed_forward_length"), u(d.intermediate_size)?),
        (format!("{arch}.attention.head_count"), u(d.num_attention_heads)?),
        (format!("{arch}.attention.head_count_kv"), u(d.num_key_value_heads)?),
    ];
    if let RopeScaling::Linear { factor } = d.rope.scaling {
        md.push((format!("{arch}.rope.scaling.type"), MetaValue::Str("linear".into())));
        md.push((format!("{arch}.rope.scaling.factor"), MetaValue::F32(factor as f32)));
    }
    if let Some(m) = d.rope.mrope {
        // Qwen2-VL's `mrope_section` (time, height, width), padded to llama.cpp's four.
        let sections = [m.section[0], m.section[1], m.section[2], 0].map(|v| i32::try_from(v).unwrap_or(i32::MAX));
        md.push((format!("{arch}.rope.dimension_sections"), MetaValue::I32s(sections.to_vec())));
    }
    md.push((format!("{arch}.rope.freq_base"), MetaValue::F32(d.rope.theta as f32)));
    if let Some((_, local_theta)) = window {
        md.push((format!("{arch}.rope.freq_base_swa"), MetaValue::F32(local_theta as f32)));
    }
    md.push((format!("{arch}.attention.layer_norm_rms_epsilon"), MetaValue::F32(d.rms_norm_eps as f32)));
    if text.llama_keys || text.head_dim_keys {
        md.push((format!("{arch}.attention.key_length"), u(d.head_dim)?));
        md.push((format!("{arch}.attention.value_length"), u(d.head_dim)?));
    }
    if text.llama_keys {
        md.push((format!("{arch}.vocab_size"), u(config.vocab_size)?));
        md.push((format!("{arch}.rope.dimension_count"), u(d.head_dim)?));
    }
    if let Some((size, _)) = window {
        md.push((format!("{arch}.attention.sliding_window"), u(size)?));
    }
    if let Some(w) = text.writer {
        md.extend((w.keys)(d, arch).map_err(TesseraError::InvalidInput)?);
        if let Some(layout) = w.layout {
            // The family's keys, some overwriting the common ones as the converter's do.
            for (k, v) in layout(config).map_err(TesseraError::InvalidInput)? {
                match md.iter_mut().find(|(key, _)| *key == k) {
                    Some(slot) => slot.1 = v,
                    None => md.push((k, v)),
                }
            }
        }
    }
    Ok(md)
}

/// The keys llama-quantize adds to what it writes.
fn finish(gguf: &mut GgufFile, mix: QuantMix) {
    gguf.set("general.quantization_version", MetaValue::U32(2));
    gguf.set("general.file_type", MetaValue::U32(mix.file_type()));
}

/// The type llama-quantize stores a tensor of `dims` in: a matrix as the plan says (f16 where
/// no block type tiles its rows), everything else (norms, biases, patch and position
/// embeddings) as the f32 conversion has it.
fn storage_type(plan: &QuantPlan, hf: &str, dims: &[usize]) -> TensorType {
    if dims.len() != 2 || plan.role(hf) == Role::Kept {
        return TensorType::F32;
    }
    plan.type_for(hf, dims[1]).map_or(TensorType::F16, TensorType::Quant)
}

fn shape(vb: &Weights, dir: &Path, stored: &str) -> Result<Vec<usize>> {
    vb.stored_shape(stored).ok_or_else(|| TesseraError::Config {
        path: dir.to_path_buf(),
        reason: format!("tensor `{stored}` has no shape"),
    })
}

fn unmapped(dir: &Path, stored: &str, arch: &str) -> TesseraError {
    TesseraError::Config {
        path: dir.to_path_buf(),
        reason: format!(
            "tensor `{stored}` has no name in llama.cpp's `{arch}` GGUF (tessera does not know where it goes)"
        ),
    }
}

/// Writes one planned file, reading and encoding one tensor at a time.
fn write(file: &PlannedFile, dir: &Path, progress: &mut dyn FnMut(Progress<'_>)) -> Result<WrittenFile> {
    let vb = Weights::from_safetensors(&source::weight_files_in(dir)?, DType::F32, &Device::Cpu)?;
    let values = |e: &TensorEntry| e.dims.iter().product::<usize>() as u64;
    let total = file.tensors.iter().map(|t| values(&t.entry)).sum();
    progress(Progress::File { path: &file.path, tensors: file.tensors.len(), values: total });
    let bytes = file.gguf.write(&file.path, &mut |i, entry| {
        let t = &file.tensors[i];
        if let Some(values) = &t.generated {
            let data = gguf_write::encode(entry.ty, values, &entry.dims).map_err(|reason| {
                tessera_decoder::DecoderError::TensorData {
                    name: entry.name.clone(),
                    source_desc: "generated".into(),
                    reason,
                }
            })?;
            progress(Progress::Tensor { name: &entry.name, values: values.len() as u64 });
            return Ok(data);
        }
        let whole = vb.stored_shape(&t.stored).unwrap_or_else(|| entry.dims.clone());
        let tensor = vb.get_with_dtype(&whole, &t.stored, DType::F32)?;
        let mut x = tensor.flatten_all()?.to_vec1::<f32>()?;
        if let Some(part) = t.part {
            x = part.take(&x);
        }
        if let Some(rows) = t.rows {
            x.truncate(rows * entry.dims[1..].iter().product::<usize>());
        }
        if let Some(change) = &t.change {
            x = (change.values)(x);
        }
        if let Some(heads) = t.permute_heads {
            let rows = entry.dims[0];
            x = gguf_write::permute_for_interleaved_rope(&x, rows, x.len() / rows.max(1), heads);
        }
        let data = gguf_write::encode(entry.ty, &x, &entry.dims).map_err(|reason| {
            tessera_decoder::DecoderError::TensorData {
                name: t.stored.clone(),
                source_desc: dir.display().to_string(),
                reason,
            }
        })?;
        progress(Progress::Tensor { name: &entry.name, values: values(entry) });
        Ok(data)
    })?;
    vb.check_unchanged()?;
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for t in file.gguf.tensors() {
        match counts.iter_mut().find(|(n, _)| *n == t.ty.name()) {
            Some(c) => c.1 += 1,
            None => counts.push((t.ty.name(), 1)),
        }
    }
    let types = counts.iter().map(|(n, c)| format!("{n} ×{c}")).collect::<Vec<_>>().join(", ");
    Ok(WrittenFile { path: file.path.clone(), bytes, tensors: file.tensors.len(), types })
}
