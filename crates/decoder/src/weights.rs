//! Weight sources: memory-mapped safetensors (single or sharded) and GGUF files.
//!
//! Every model names its tensors the way Hugging Face checkpoints do
//! (`model.layers.0.self_attn.q_proj.weight`); a GGUF source translates those names to
//! llama.cpp's (`blk.0.attn_q.weight`) so that architectures are written once.
//! `Weights` is a cheap, clonable handle with a name prefix, like Candle's `VarBuilder`
//! (`vb.pp("layers").pp(0)`), but with errors that name the tensor and the file.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use tessera_kernels::{QMatrix, QType};

use crate::error::{DecoderError, Result};
pub use crate::gguf_names::{gguf_name, gguf_sandwich_name, gguf_vision_name};
use crate::linear::Linear;
use crate::quant::QuantPlan;
use crate::weight_file::{Float, Safetensors, WeightFile};

/// How GGUF weights are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GgufMode {
    /// Matmul weights of block types stay quantized (tessera's int8 kernels on the CPU, Candle's
    /// quantized matmul elsewhere); f32/f16 matrices are dense on the CPU; everything else is
    /// dequantized.
    Quantized,
    /// Every tensor is dequantized to the working dtype.
    Dequantized,
}

struct GgufSource {
    path: PathBuf,
    content: gguf_file::Content,
    file: WeightFile,
    mode: GgufMode,
    /// The layers' norms are named as Gemma 2/3's four ([`gguf_sandwich_name`]).
    sandwich: bool,
}

enum Source {
    Safetensors(Safetensors),
    Gguf(GgufSource),
}

/// A prefixed view into a checkpoint.
#[derive(Clone)]
pub struct Weights {
    source: Arc<Source>,
    prefix: String,
    dtype: DType,
    device: Device,
    /// Dense matrices read through this handle are quantized on the CPU by this plan
    /// ([`with_quantization`](Self::with_quantization)).
    quant: Option<Arc<QuantPlan>>,
}

impl Weights {
    /// Opens one or more safetensors files (the shards of one checkpoint) and checks their
    /// headers; tensors are read from them on demand (`read`, not a memory map:
    /// [`crate::weight_file`]).
    pub fn from_safetensors(files: &[PathBuf], dtype: DType, device: &Device) -> Result<Self> {
        Ok(Self {
            source: Arc::new(Source::Safetensors(Safetensors::open(files)?)),
            prefix: String::new(),
            quant: None,
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
        let file = WeightFile::open(path)?;
        let sandwich = ["blk.0.post_ffw_norm.weight", "blk.0.post_attention_norm.weight"]
            .iter()
            .any(|n| content.tensor_infos.contains_key(*n));
        Ok(Self {
            source: Arc::new(Source::Gguf(GgufSource { path: path.to_path_buf(), content, file, mode, sandwich })),
            prefix: String::new(),
            quant: None,
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
            quant: self.quant.clone(),
        }
    }

    pub fn dtype(&self) -> DType {
        self.dtype
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    /// Fails, naming the file, if a file of this checkpoint changed since it was opened (shrunk,
    /// grew, rewritten, or its path now names another file): call it once everything is loaded.
    /// What this can and cannot see is in [`crate::weight_file`].
    pub fn check_unchanged(&self) -> Result<()> {
        match &*self.source {
            Source::Safetensors(st) => st.files.iter().try_for_each(WeightFile::check_unchanged),
            Source::Gguf(g) => g.file.check_unchanged(),
        }
    }

    /// A handle whose dense matrices ([`matrix`](Self::matrix), [`linear`](Self::linear)) are
    /// quantized on loading, each to the type `plan` gives it (llama-quantize's choice), when
    /// the device is the CPU with tessera's kernels, so their matmuls run on the int8 kernels;
    /// other tensors, and matrices the plan keeps, are unchanged.
    pub fn with_quantization(&self, plan: Arc<QuantPlan>) -> Self {
        Self { quant: Some(plan), ..self.clone() }
    }

    /// The prefix this handle reads under (`model.text_model`).
    pub fn prefix(&self) -> &str {
        &self.prefix
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
            Source::Safetensors(st) => match st.files.as_slice() {
                [one] => one.path.display().to_string(),
                [first, ..] => {
                    format!("{} ({} shards)", first.path.parent().unwrap_or(Path::new(".")).display(), st.files.len())
                }
                [] => "an empty checkpoint".into(),
            },
            Source::Gguf(g) => g.path.display().to_string(),
        }
    }

    /// The name a tensor has in the file (GGUF translates Hugging Face names).
    fn stored_name(&self, full: &str) -> Option<String> {
        match &*self.source {
            Source::Safetensors(_) => Some(full.to_string()),
            Source::Gguf(g) if g.sandwich => gguf_sandwich_name(full).or_else(|| gguf_vision_name(full)),
            Source::Gguf(_) => gguf_name(full).or_else(|| gguf_vision_name(full)),
        }
    }

    /// Whether the checkpoint holds `name` under this prefix.
    pub fn contains(&self, name: &str) -> bool {
        let full = self.full_name(name);
        let Some(stored) = self.stored_name(&full) else {
            return false;
        };
        match &*self.source {
            Source::Safetensors(st) => st.get(&stored).is_some(),
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
            Source::Safetensors(st) => st.names().cloned().collect(),
            Source::Gguf(g) => g.content.tensor_infos.keys().cloned().collect(),
        }
    }

    /// The shape of the tensor stored as `stored` (a name [`stored_names`](Self::stored_names)
    /// lists), row-major.
    pub fn stored_shape(&self, stored: &str) -> Option<Vec<usize>> {
        match &*self.source {
            Source::Safetensors(st) => st.get(stored).map(|t| t.shape.clone()),
            Source::Gguf(g) => g.content.tensor_infos.get(stored).map(|t| t.shape.dims().to_vec()),
        }
    }

    /// `full` as errors name it: with its name in the file where that differs (GGUF).
    fn error_name(&self, full: &str) -> String {
        match (&*self.source, self.stored_name(full)) {
            (Source::Gguf(_), Some(stored)) => format!("{full} (`{stored}` in the GGUF)"),
            _ => full.to_string(),
        }
    }

    fn missing(&self, full: &str) -> DecoderError {
        DecoderError::MissingTensor { name: self.error_name(full), source_desc: self.describe() }
    }

    fn check_shape(&self, full: &str, expected: &[usize], found: &[usize]) -> Result<()> {
        if expected != found {
            return Err(DecoderError::TensorShape {
                name: self.error_name(full),
                source_desc: self.describe(),
                expected: expected.to_vec(),
                found: found.to_vec(),
            });
        }
        Ok(())
    }

    fn read_qtensor(&self, g: &GgufSource, full: &str, stored: &str) -> Result<QTensor> {
        let mut file = g.file.lock().map_err(|e| DecoderError::TensorData {
            name: full.to_string(),
            source_desc: self.describe(),
            reason: e.to_string(),
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
        rows: std::ops::Range<usize>,
        cols: usize,
    ) -> Result<QMatrix> {
        let err = |reason: String| DecoderError::TensorData {
            name: format!("{full} (`{stored}` in the GGUF)"),
            source_desc: self.describe(),
            reason,
        };
        // Rows are whole blocks, stored one after another: a range of rows is a range of bytes.
        let bytes = |r0: usize, count: usize| -> std::result::Result<Vec<u8>, String> {
            let skip = QMatrix::byte_len(qtype, rows.start + r0, cols).map_err(|e| e.to_string())?;
            let len = QMatrix::byte_len(qtype, count, cols).map_err(|e| e.to_string())?;
            let mut data = vec![0u8; len];
            g.file.read_at(g.content.tensor_data_offset + offset + skip as u64, &mut data)?;
            Ok(data)
        };
        QMatrix::from_row_blocks(qtype, rows.len(), cols, |r0, count| bytes(r0, count).map_err(Reason))
            .map_err(|Reason(reason)| err(reason))
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
            Source::Safetensors(st) => {
                let stored = st.get(&stored).ok_or_else(|| self.missing(&full))?;
                self.check_shape(&full, shape, &stored.shape)?;
                if dtype.is_float() && !matches!(stored.dtype.as_str(), "F16" | "BF16" | "F32" | "F64") {
                    return Err(DecoderError::TensorData {
                        name: full.clone(),
                        source_desc: self.describe(),
                        reason: format!("stored as {}, not floating point: not a weight", stored.dtype),
                    });
                }
                let widened = (dtype == DType::F32 && self.device.is_cpu()).then(|| st.load_f32(stored, &self.device));
                widened.flatten().unwrap_or_else(|| st.load(stored, &self.device)).map_err(|reason| {
                    DecoderError::TensorData { name: full.clone(), source_desc: self.describe(), reason }
                })?
            }
            Source::Gguf(g) => {
                let info = g.content.tensor_infos.get(&stored).ok_or_else(|| self.missing(&full))?;
                // Shapes equal as ggml keeps them (`(1, 1, d)` written as `(d)`) are the same.
                if crate::gguf_write::ggml_dims(shape) != crate::gguf_write::ggml_dims(info.shape.dims()) {
                    self.check_shape(&full, shape, info.shape.dims())?;
                }
                let tensor =
                    match Float::of_ggml(info.ggml_dtype).filter(|_| dtype == DType::F32 && self.device.is_cpu()) {
                        Some(kind) => g
                            .file
                            .read_f32(
                                g.content.tensor_data_offset.saturating_add(info.offset),
                                kind,
                                info.shape.dims(),
                                &self.device,
                            )
                            .map_err(|reason| DecoderError::TensorData {
                                name: format!("{full} (`{stored}` in the GGUF)"),
                                source_desc: self.describe(),
                                reason,
                            })?,
                        None => self.read_qtensor(g, &full, &stored)?.dequantize(&self.device)?,
                    };
                tensor.reshape(shape)?
            }
        };
        Ok(tensor.to_dtype(dtype)?)
    }

    /// Loads a weight matrix `(out, in)` (kept quantized for quantized GGUF sources).
    pub fn matrix(&self, out_dim: usize, in_dim: usize, name: &str) -> Result<MatrixWeight> {
        self.matrix_rows(out_dim, in_dim, name, 0..out_dim, name)
    }

    /// Rows `rows` of the matrix `name` `(out_dim, in_dim)` as a matrix of their own: from a
    /// quantized GGUF, the stored rows in their type (a block type the CPU's kernels run, their
    /// blocks as stored: a fused `qkv` an mmproj keeps whole, Qwen3-VL's, runs as quantized as
    /// the file has it); else dense, quantized as the plan (if any) quantizes a matrix named
    /// `as_name` (rounded to f16 where the plan has no block type for its rows, as
    /// llama-quantize stores it): a fused matrix the model splits (Qwen2-VL's `qkv` into `q`,
    /// `k`, `v`) is quantized part by part, as llama.cpp's converter splits it before
    /// llama-quantize sees it.
    pub fn matrix_rows(
        &self,
        out_dim: usize,
        in_dim: usize,
        name: &str,
        rows: std::ops::Range<usize>,
        as_name: &str,
    ) -> Result<MatrixWeight> {
        if let Source::Gguf(g) = &*self.source {
            if g.mode == GgufMode::Quantized {
                let full = self.full_name(name);
                let stored = self.stored_name(&full).ok_or_else(|| self.missing(&full))?;
                let info = g.content.tensor_infos.get(&stored).ok_or_else(|| self.missing(&full))?;
                self.check_shape(&full, &[out_dim, in_dim], info.shape.dims())?;
                if rows.start > rows.end || rows.end > out_dim {
                    return Err(DecoderError::TensorData {
                        name: full,
                        source_desc: self.describe(),
                        reason: format!("rows {rows:?} of a matrix of {out_dim}"),
                    });
                }
                if let (true, Some(qtype)) = (crate::cpu_op::kernels_run_on(&self.device), kernel_type(info.ggml_dtype))
                {
                    let m = self.read_packed(g, &full, &stored, info.offset, qtype, rows, in_dim)?;
                    return Ok(MatrixWeight::Packed(Arc::new(m)));
                }
                // Float matrices (an f32 or f16 mmproj, say) load as a folder's do: dense on the
                // CPU's kernels, or into a quantization plan when there is one (below).
                let float = Float::of_ggml(info.ggml_dtype).is_some();
                let whole = rows == (0..out_dim);
                if whole && (!float || (self.quant.is_none() && !crate::cpu_op::kernels_run_on(&self.device))) {
                    let q = self.read_qtensor(g, &full, &stored)?;
                    return Ok(MatrixWeight::Quantized(Arc::new(q)));
                }
            }
        }
        let n = rows.len();
        if let (Some(plan), true) = (&self.quant, crate::cpu_op::kernels_run_on(&self.device)) {
            let full = self.full_name(as_name);
            if let Some(qtype) = plan.type_for(&full, in_dim) {
                let dense = self.get_with_dtype(&[out_dim, in_dim], name, DType::F32)?;
                let dense = dense.narrow(0, rows.start, n)?.flatten_all()?.to_vec1::<f32>()?;
                let err = |e: tessera_kernels::KernelError| DecoderError::TensorData {
                    name: full.clone(),
                    source_desc: self.describe(),
                    reason: e.to_string(),
                };
                let pool = tessera_kernels::ThreadPool::global();
                let blocks = tessera_kernels::quantize::quantize_rows(pool, qtype, &dense, n, in_dim).map_err(err)?;
                let m = QMatrix::new(qtype, n, in_dim, blocks).map_err(err)?;
                return Ok(MatrixWeight::Packed(Arc::new(m)));
            }
            if crate::quant::role_of(&full) != crate::quant::Role::Kept {
                // A matrix whose rows no block type tiles: llama-quantize stores it in f16.
                let dense = self.get_with_dtype(&[out_dim, in_dim], name, DType::F16)?;
                return Ok(MatrixWeight::Dense(dense.narrow(0, rows.start, n)?.contiguous()?.to_dtype(self.dtype)?));
            }
        }
        if let Some(packed) = self.packed_f16(out_dim, in_dim, name, &rows)? {
            return Ok(MatrixWeight::DensePacked(Arc::new(packed)));
        }
        let dense = self.get(&[out_dim, in_dim], name)?;
        Ok(MatrixWeight::Dense(if n == out_dim { dense } else { dense.narrow(0, rows.start, n)?.contiguous()? }))
    }

    /// Rows `rows` of an f16 matrix (an f16 mmproj or checkpoint) for the CPU's f32 GEMM: packed
    /// as stored, half the memory of f32, widened exactly as the GEMM reads them (the products
    /// are the f32 path's). None where the f32 path does not pack ([`Linear::new`]), for other
    /// stored types, and for the token embeddings (read by rows, not multiplied).
    fn packed_f16(
        &self,
        out_dim: usize,
        in_dim: usize,
        name: &str,
        rows: &std::ops::Range<usize>,
    ) -> Result<Option<tessera_kernels::PackedF32>> {
        let full = self.full_name(name);
        let packs = self.dtype == DType::F32
            && crate::cpu_op::kernels_run_on(&self.device)
            && tessera_kernels::dense::packs_weights()
            && crate::quant::role_of(&full) != crate::quant::Role::TokenEmbd;
        let Some(stored) = self.stored_name(&full).filter(|_| packs) else {
            return Ok(None);
        };
        // Rows `r0 .. r0 + count` of the block `rows`, as stored.
        let read: Box<dyn Fn(usize, usize) -> std::result::Result<Vec<half::f16>, Reason> + Sync> = match &*self.source
        {
            Source::Safetensors(st) => {
                let Some(t) = st.get(&stored).filter(|t| Float::of_safetensors(&t.dtype) == Some(Float::F16)) else {
                    return Ok(None);
                };
                self.check_shape(&full, &[out_dim, in_dim], &t.shape)?;
                Box::new(move |r0, count| {
                    let start = (rows.start + r0) * in_dim;
                    st.read_f16(t, start, count * in_dim).map_err(Reason)
                })
            }
            Source::Gguf(g) => {
                let Some(info) = g.content.tensor_infos.get(&stored) else { return Ok(None) };
                self.check_shape(&full, &[out_dim, in_dim], info.shape.dims())?;
                if Float::of_ggml(info.ggml_dtype) != Some(Float::F16) {
                    return Ok(None);
                }
                let data = g.content.tensor_data_offset.saturating_add(info.offset);
                Box::new(move |r0, count| {
                    let at = data.saturating_add(2 * ((rows.start + r0) * in_dim) as u64);
                    g.file.read_f16(at, count * in_dim).map_err(Reason)
                })
            }
        };
        let packed = tessera_kernels::PackedF32::from_f16_blocks(rows.len(), in_dim, read);
        packed.map(Some).map_err(|Reason(reason)| DecoderError::TensorData {
            name: full.clone(),
            source_desc: self.describe(),
            reason,
        })
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
    /// Packed for tessera's f32 GEMM as stored (f16: [`tessera_kernels::PackedF32::from_f16`]).
    DensePacked(Arc<tessera_kernels::PackedF32>),
    Packed(Arc<QMatrix>),
    Quantized(Arc<QTensor>),
}

impl MatrixWeight {
    /// The matrix as a dense tensor in `dtype`.
    pub fn dense(&self, dtype: DType) -> Result<Tensor> {
        match self {
            Self::Dense(t) => Ok(t.to_dtype(dtype)?),
            Self::DensePacked(p) => {
                Ok(Tensor::from_vec(p.unpack(), (p.rows(), p.cols()), &Device::Cpu)?.to_dtype(dtype)?)
            }
            Self::Packed(m) => {
                Ok(Tensor::from_vec(m.dequantize(), (m.rows(), m.cols()), &Device::Cpu)?.to_dtype(dtype)?)
            }
            Self::Quantized(q) => Ok(q.dequantize(&q.device())?.to_dtype(dtype)?),
        }
    }
}

/// Parses a GGUF header, naming the file on failure; the layout is checked first
/// ([`check_gguf_layout`](crate::gguf_layout::check_gguf_layout)).
pub fn read_gguf(path: &Path) -> Result<gguf_file::Content> {
    crate::gguf_layout::check_gguf_layout(path)?;
    let mut file =
        File::open(path).map_err(|e| DecoderError::WeightFile { path: path.to_path_buf(), reason: e.to_string() })?;
    gguf_file::Content::read(&mut file).map_err(|e| DecoderError::WeightFile {
        path: path.to_path_buf(),
        reason: format!("not a valid GGUF file: {e}"),
    })
}

/// [`parse_safetensors_header`](crate::weight_file::parse_safetensors_header)'s checks over any
/// reader of a `len`-byte file; the error says what is wrong without the file's name.
pub fn check_safetensors_header(file: impl std::io::Read, len: u64) -> std::result::Result<(), String> {
    crate::weight_file::parse_safetensors_header(file, len).map(|_| ())
}

/// Why a block of an f16 matrix could not be read or packed ([`Weights::packed_f16`]).
struct Reason(String);

impl From<tessera_kernels::KernelError> for Reason {
    fn from(e: tessera_kernels::KernelError) -> Self {
        Self(e.to_string())
    }
}
