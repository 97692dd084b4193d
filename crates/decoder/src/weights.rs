//! Weight sources: memory-mapped safetensors (single or sharded) and GGUF files.
//!
//! Every model names its tensors the way Hugging Face checkpoints do
//! (`model.layers.0.self_attn.q_proj.weight`); a GGUF source translates those names to
//! llama.cpp's (`blk.0.attn_q.weight`) so that architectures are written once.
//! `Weights` is a cheap, clonable handle with a name prefix, like Candle's `VarBuilder`
//! (`vb.pp("layers").pp(0)`), but with errors that name the tensor and the file.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
use tessera_kernels::{QMatrix, QType};

use crate::error::{DecoderError, Result};
use crate::linear::Linear;

/// How GGUF weights are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufMode {
    /// Matmul weights stay quantized (Candle's quantized matmul); everything else is dequantized.
    Quantized,
    /// Every tensor is dequantized to the working dtype.
    Dequantized,
}

struct GgufSource {
    path: PathBuf,
    content: gguf_file::Content,
    file: Mutex<File>,
    mode: GgufMode,
}

enum Source {
    Safetensors { files: Vec<PathBuf>, st: MmapedSafetensors },
    Gguf(GgufSource),
}

/// A prefixed view into a checkpoint.
#[derive(Clone)]
pub struct Weights {
    source: Arc<Source>,
    prefix: String,
    dtype: DType,
    device: Device,
    /// Dense f32 matrices read through this handle are quantized to `Q8_0` on the CPU
    /// ([`with_q8_0_matrices`](Self::with_q8_0_matrices)).
    q8_0_matrices: bool,
}

impl Weights {
    /// Memory-maps one or more safetensors files (the shards of one checkpoint).
    pub fn from_safetensors(files: &[PathBuf], dtype: DType, device: &Device) -> Result<Self> {
        for f in files {
            check_safetensors_file(f)?;
        }
        // SAFETY: the files are memory-mapped read-only; like every mmap-based loader we rely
        // on them not being modified while the model is alive.
        let st = unsafe { MmapedSafetensors::multi(files) }.map_err(|e| DecoderError::WeightFile {
            path: files.first().cloned().unwrap_or_default(),
            reason: e.to_string(),
        })?;
        Ok(Self {
            source: Arc::new(Source::Safetensors { files: files.to_vec(), st }),
            prefix: String::new(),
            q8_0_matrices: false,
            dtype,
            device: device.clone(),
        })
    }

    /// Opens a GGUF file. `dtype` is used for dequantized tensors and activations.
    pub fn from_gguf(path: &Path, mode: GgufMode, dtype: DType, device: &Device) -> Result<Self> {
        let content = read_gguf(path)?;
        Self::from_gguf_content(path, content, mode, dtype, device)
    }

    /// Wraps an already parsed GGUF header (the caller also needs its metadata).
    pub fn from_gguf_content(
        path: &Path,
        content: gguf_file::Content,
        mode: GgufMode,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        let file = File::open(path)
            .map_err(|e| DecoderError::WeightFile { path: path.to_path_buf(), reason: e.to_string() })?;
        Ok(Self {
            source: Arc::new(Source::Gguf(GgufSource {
                path: path.to_path_buf(),
                content,
                file: Mutex::new(file),
                mode,
            })),
            prefix: String::new(),
            q8_0_matrices: false,
            dtype,
            device: device.clone(),
        })
    }

    /// A view with `name` appended to the prefix (`vb.pp("layers").pp(3)`).
    pub fn pp(&self, name: impl ToString) -> Self {
        let name = name.to_string();
        let prefix = if self.prefix.is_empty() { name } else { format!("{}.{name}", self.prefix) };
        Self {
            source: self.source.clone(),
            prefix,
            dtype: self.dtype,
            device: self.device.clone(),
            q8_0_matrices: self.q8_0_matrices,
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// A handle whose dense matrices ([`matrix`](Self::matrix), [`linear`](Self::linear)) are
    /// quantized to `Q8_0` on loading when the device is the CPU and rows are whole blocks, so
    /// their matmuls run on the int8 kernels (`tessera-kernels`); other tensors are unchanged.
    pub fn with_q8_0_matrices(&self) -> Self {
        Self { q8_0_matrices: true, ..self.clone() }
    }

    fn full_name(&self, name: &str) -> String {
        if self.prefix.is_empty() {
            name.to_string()
        } else {
            format!("{}.{name}", self.prefix)
        }
    }

    fn describe(&self) -> String {
        match &*self.source {
            Source::Safetensors { files, .. } if files.len() == 1 => files[0].display().to_string(),
            Source::Safetensors { files, .. } => {
                format!("{} ({} shards)", files[0].parent().unwrap_or(Path::new(".")).display(), files.len())
            }
            Source::Gguf(g) => g.path.display().to_string(),
        }
    }

    /// The name a tensor has in the file (GGUF translates Hugging Face names).
    fn stored_name(&self, full: &str) -> Option<String> {
        match &*self.source {
            Source::Safetensors { .. } => Some(full.to_string()),
            Source::Gguf(_) => gguf_name(full),
        }
    }

    /// Whether the checkpoint holds `name` under this prefix.
    pub fn contains(&self, name: &str) -> bool {
        let full = self.full_name(name);
        let Some(stored) = self.stored_name(&full) else {
            return false;
        };
        match &*self.source {
            Source::Safetensors { st, .. } => st.get(&stored).is_ok(),
            Source::Gguf(g) => g.content.tensor_infos.contains_key(&stored),
        }
    }

    /// Whether the checkpoint holds any tensor under this prefix.
    pub fn has_any(&self) -> bool {
        let prefix = format!("{}.", self.prefix);
        self.stored_names().iter().any(|n| n.starts_with(&prefix))
    }

    /// Every tensor name in the checkpoint, as stored.
    pub fn stored_names(&self) -> Vec<String> {
        match &*self.source {
            Source::Safetensors { st, .. } => st.tensors().into_iter().map(|(n, _)| n).collect(),
            Source::Gguf(g) => g.content.tensor_infos.keys().cloned().collect(),
        }
    }

    fn missing(&self, full: &str) -> DecoderError {
        DecoderError::MissingTensor { name: full.to_string(), source_desc: self.describe() }
    }

    fn check_shape(&self, full: &str, expected: &[usize], found: &[usize]) -> Result<()> {
        if expected != found {
            return Err(DecoderError::TensorShape {
                name: full.to_string(),
                source_desc: self.describe(),
                expected: expected.to_vec(),
                found: found.to_vec(),
            });
        }
        Ok(())
    }

    fn read_qtensor(&self, g: &GgufSource, full: &str, stored: &str) -> Result<QTensor> {
        let mut file = g.file.lock().map_err(|_| DecoderError::TensorData {
            name: full.to_string(),
            source_desc: self.describe(),
            reason: "file lock poisoned".into(),
        })?;
        g.content.tensor(&mut *file, stored, &self.device).map_err(|e| DecoderError::TensorData {
            name: format!("{full} (`{stored}` in the GGUF)"),
            source_desc: self.describe(),
            reason: e.to_string(),
        })
    }

    /// Reads a quantized matrix's blocks straight from the file for tessera's CPU kernels.
    #[allow(clippy::too_many_arguments)]
    fn read_packed(
        &self,
        g: &GgufSource,
        full: &str,
        stored: &str,
        offset: u64,
        qtype: QType,
        rows: usize,
        cols: usize,
    ) -> Result<QMatrix> {
        use std::io::{Read, Seek, SeekFrom};
        let err = |reason: String| DecoderError::TensorData {
            name: format!("{full} (`{stored}` in the GGUF)"),
            source_desc: self.describe(),
            reason,
        };
        let len = QMatrix::byte_len(qtype, rows, cols).map_err(|e| err(e.to_string()))?;
        let mut data = vec![0u8; len];
        let mut file = g.file.lock().map_err(|_| err("file lock poisoned".into()))?;
        file.seek(SeekFrom::Start(g.content.tensor_data_offset + offset))
            .and_then(|_| file.read_exact(&mut data))
            .map_err(|e| err(e.to_string()))?;
        QMatrix::new(qtype, rows, cols, data).map_err(|e| err(e.to_string()))
    }

    /// Loads a dense tensor of the given shape in the working dtype.
    pub fn get(&self, shape: &[usize], name: &str) -> Result<Tensor> {
        self.get_with_dtype(shape, name, self.dtype)
    }

    /// Loads a dense tensor of the given shape in `dtype`.
    pub fn get_with_dtype(&self, shape: &[usize], name: &str, dtype: DType) -> Result<Tensor> {
        let full = self.full_name(name);
        let stored = self.stored_name(&full).ok_or_else(|| self.missing(&full))?;
        let tensor = match &*self.source {
            Source::Safetensors { st, .. } => {
                let view = st.get(&stored).map_err(|_| self.missing(&full))?;
                self.check_shape(&full, shape, view.shape())?;
                st.load(&stored, &self.device).map_err(|e| DecoderError::TensorData {
                    name: full.clone(),
                    source_desc: self.describe(),
                    reason: e.to_string(),
                })?
            }
            Source::Gguf(g) => {
                let info = g.content.tensor_infos.get(&stored).ok_or_else(|| self.missing(&full))?;
                self.check_shape(&full, shape, info.shape.dims())?;
                let q = self.read_qtensor(g, &full, &stored)?;
                q.dequantize(&self.device)?
            }
        };
        Ok(tensor.to_dtype(dtype)?)
    }

    /// Loads a weight matrix `(out, in)` (kept quantized for quantized GGUF sources).
    pub fn matrix(&self, out_dim: usize, in_dim: usize, name: &str) -> Result<MatrixWeight> {
        if let Source::Gguf(g) = &*self.source {
            if g.mode == GgufMode::Quantized {
                let full = self.full_name(name);
                let stored = self.stored_name(&full).ok_or_else(|| self.missing(&full))?;
                let info = g.content.tensor_infos.get(&stored).ok_or_else(|| self.missing(&full))?;
                self.check_shape(&full, &[out_dim, in_dim], info.shape.dims())?;
                if let (true, Some(qtype)) = (self.device.is_cpu(), kernel_type(info.ggml_dtype)) {
                    let m = self.read_packed(g, &full, &stored, info.offset, qtype, out_dim, in_dim)?;
                    return Ok(MatrixWeight::Packed(Arc::new(m)));
                }
                let q = self.read_qtensor(g, &full, &stored)?;
                return Ok(MatrixWeight::Quantized(Arc::new(q)));
            }
        }
        if self.q8_0_matrices && self.device.is_cpu() && in_dim.is_multiple_of(32) {
            let full = self.full_name(name);
            let dense = self.get_with_dtype(&[out_dim, in_dim], name, DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
            let mut blocks = vec![0u8; dense.len() / 32 * QType::Q8_0.block_bytes()];
            tessera_kernels::blocks::quantize_q8_0_blocks(&dense, &mut blocks);
            let m = QMatrix::new(QType::Q8_0, out_dim, in_dim, blocks).map_err(|e| DecoderError::TensorData {
                name: full.clone(),
                source_desc: self.describe(),
                reason: e.to_string(),
            })?;
            return Ok(MatrixWeight::Packed(Arc::new(m)));
        }
        Ok(MatrixWeight::Dense(self.get(&[out_dim, in_dim], name)?))
    }

    /// A linear layer `in_dim → out_dim` named `name` (with `name.weight`, optionally `name.bias`).
    pub fn linear(&self, in_dim: usize, out_dim: usize, bias: bool, name: &str) -> Result<Linear> {
        let vb = self.pp(name);
        let weight = vb.matrix(out_dim, in_dim, "weight")?;
        let bias = if bias { Some(vb.get(&[out_dim], "bias")?) } else { None };
        Linear::new(weight, bias)
    }
}

/// The kernel crate's name for a GGUF block type it multiplies on the CPU.
fn kernel_type(t: GgmlDType) -> Option<QType> {
    Some(match t {
        GgmlDType::Q4_0 => QType::Q4_0,
        GgmlDType::Q4_1 => QType::Q4_1,
        GgmlDType::Q5_0 => QType::Q5_0,
        GgmlDType::Q5_1 => QType::Q5_1,
        GgmlDType::Q8_0 => QType::Q8_0,
        GgmlDType::Q4K => QType::Q4K,
        GgmlDType::Q5K => QType::Q5K,
        GgmlDType::Q6K => QType::Q6K,
        _ => return None,
    })
}

/// A weight matrix as loaded: dense, quantized blocks for tessera's CPU kernels, or
/// quantized blocks for Candle's (GPU backends, and block types the kernels lack).
#[derive(Clone)]
pub enum MatrixWeight {
    Dense(Tensor),
    Packed(Arc<QMatrix>),
    Quantized(Arc<QTensor>),
}

impl MatrixWeight {
    /// The matrix as a dense tensor in `dtype`.
    pub fn dense(&self, dtype: DType) -> Result<Tensor> {
        match self {
            Self::Dense(t) => Ok(t.to_dtype(dtype)?),
            Self::Packed(m) => {
                Ok(Tensor::from_vec(m.dequantize(), (m.rows(), m.cols()), &Device::Cpu)?.to_dtype(dtype)?)
            }
            Self::Quantized(q) => Ok(q.dequantize(&q.device())?.to_dtype(dtype)?),
        }
    }
}

/// Parses a GGUF header, naming the file on failure.
pub fn read_gguf(path: &Path) -> Result<gguf_file::Content> {
    let mut file =
        File::open(path).map_err(|e| DecoderError::WeightFile { path: path.to_path_buf(), reason: e.to_string() })?;
    let content = gguf_file::Content::read(&mut file).map_err(|e| DecoderError::WeightFile {
        path: path.to_path_buf(),
        reason: format!("not a valid GGUF file: {e}"),
    })?;
    // A truncated file parses (the header is at the start) but its tensors run past the end.
    let len = file
        .metadata()
        .map_err(|e| DecoderError::WeightFile { path: path.to_path_buf(), reason: e.to_string() })?
        .len();
    for (name, info) in &content.tensor_infos {
        let elems = info.shape.elem_count();
        let bytes = elems / info.ggml_dtype.block_size() * info.ggml_dtype.type_size();
        let end = content.tensor_data_offset + info.offset + bytes as u64;
        if end > len {
            return Err(DecoderError::WeightFile {
                path: path.to_path_buf(),
                reason: format!("truncated: tensor `{name}` ends at byte {end} but the file has {len} bytes"),
            });
        }
    }
    Ok(content)
}

/// Checks a safetensors header against the file length, so truncation is reported up front.
fn check_safetensors_file(path: &Path) -> Result<()> {
    use std::io::Read;
    let err = |reason: String| DecoderError::WeightFile { path: path.to_path_buf(), reason };
    let mut file = File::open(path).map_err(|e| err(e.to_string()))?;
    let len = file.metadata().map_err(|e| err(e.to_string()))?.len();
    let mut n = [0u8; 8];
    file.read_exact(&mut n).map_err(|_| err(format!("too short to be safetensors ({len} bytes)")))?;
    let header_len = u64::from_le_bytes(n);
    if header_len > len.saturating_sub(8) {
        return Err(err(format!("header claims {header_len} bytes but the file has {len}")));
    }
    let mut header = vec![0u8; header_len as usize];
    file.read_exact(&mut header).map_err(|e| err(e.to_string()))?;
    let header: HashMap<String, serde_json::Value> =
        serde_json::from_slice(&header).map_err(|e| err(format!("invalid safetensors header: {e}")))?;
    let data_len = len - 8 - header_len;
    for (name, entry) in header.iter().filter(|(k, _)| k.as_str() != "__metadata__") {
        let end = entry.get("data_offsets").and_then(|o| o.get(1)).and_then(|e| e.as_u64());
        if let Some(end) = end {
            if end > data_len {
                return Err(err(format!(
                    "truncated: tensor `{name}` ends at data byte {end} but only {data_len} are present"
                )));
            }
        }
    }
    Ok(())
}

/// Translates a Hugging Face tensor name to llama.cpp's GGUF name (Llama-family decoders).
pub fn gguf_name(hf: &str) -> Option<String> {
    let top = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(t) = top {
        return Some(t.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    let mapped = match module {
        "input_layernorm" => "attn_norm",
        "post_attention_layernorm" => "ffn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{mapped}.{kind}"))
}
