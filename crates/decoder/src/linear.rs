//! A linear layer whose weight is a dense tensor or quantized GGUF blocks. On the CPU,
//! quantized weights go through tessera's own kernels (`tessera-kernels`: SIMD int8 dot
//! products for decode, a tiled GEMM for prefill); on GPUs through Candle's quantized matmul.
//! An f32 weight on a CPU whose kernels multiply packed weights (AVX2, AVX-512) is packed once, as
//! the layer is made, into `tessera_kernels::PackedF32` (same memory; the tensor is dropped).

use std::sync::Arc;

use candle_core::quantized::QMatMul;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, Layout, Module, Shape, Tensor};
use tessera_kernels::dense::{DenseWeight, Epilogue};
use tessera_kernels::{PackedF32, QMatrix};

use crate::activation::Activation;
use crate::cpu_op::kernels_take;
use crate::error::{DecoderError, Result};
use crate::weights::MatrixWeight;

/// `y = x Wᵀ + b` over the last dimension; `W` is `(out, in)`.
#[derive(Clone, Debug)]
pub struct Linear {
    weight: LinearWeight,
    bias: Option<Tensor>,
    out_dim: usize,
}

#[derive(Clone, Debug)]
enum LinearWeight {
    Dense(candle_nn::Linear),
    /// An f32 weight on the CPU, packed for tessera's GEMM.
    DensePacked(Arc<PackedF32>),
    Packed(PackedMatMul),
    Quantized(QMatMul),
}

impl Linear {
    pub fn new(weight: MatrixWeight, bias: Option<Tensor>) -> Result<Self> {
        if let MatrixWeight::Dense(w) = &weight {
            if kernels_take(w) && tessera_kernels::dense::packs_weights() {
                let (n, k) = w.dims2()?;
                let packed = {
                    let w = w.contiguous()?;
                    let (s, l) = w.storage_and_layout();
                    PackedF32::new(crate::cpu_op::storage_f32(&s, l, "linear weight")?, n, k)
                        .map_err(|e| DecoderError::Config(e.to_string()))?
                };
                return Ok(Self { weight: LinearWeight::DensePacked(Arc::new(packed)), bias, out_dim: n });
            }
        }
        Self::unpacked(weight, bias)
    }

    /// A layer whose weight is shared with another user (a head tied to the token
    /// embeddings): kept as it is, never packed (a packed copy would double its memory).
    pub fn shared(weight: MatrixWeight, bias: Option<Tensor>) -> Result<Self> {
        Self::unpacked(weight, bias)
    }

    fn unpacked(weight: MatrixWeight, bias: Option<Tensor>) -> Result<Self> {
        let (weight, out_dim) = match weight {
            MatrixWeight::Dense(w) => {
                let out = w.dim(0)?;
                (LinearWeight::Dense(candle_nn::Linear::new(w, None)), out)
            }
            MatrixWeight::DensePacked(p) => {
                let out = p.rows();
                (LinearWeight::DensePacked(p), out)
            }
            MatrixWeight::Packed(m) => {
                let out = m.rows();
                (LinearWeight::Packed(PackedMatMul(m)), out)
            }
            MatrixWeight::Quantized(q) => {
                let out = q.shape().dims()[0];
                (LinearWeight::Quantized(QMatMul::from_arc(q)?), out)
            }
        };
        Ok(Self { weight, bias, out_dim })
    }

    pub fn out_dim(&self) -> usize {
        self.out_dim
    }

    /// `x`: `(..., in)` → `(..., out)`, in the dtype of `x`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if let Some(y) = self.dense_cpu(x, None, Epilogue::None)? {
            return Ok(y);
        }
        self.unfused(x)
    }

    /// `x Wᵢᵀ + bᵢ` for layers that read the same input (q/k/v, gate/up). Where every weight is
    /// quantized and on the CPU (tessera's kernels), one call quantizes `x` once and runs the
    /// matrices together, each output the bits [`forward`](Self::forward) gives; otherwise each
    /// layer's `forward`.
    pub fn forward_shared<const N: usize>(layers: [&Linear; N], x: &Tensor) -> Result<[Tensor; N]> {
        let packed: Option<Vec<&QMatrix>> = layers
            .iter()
            .map(|l| match &l.weight {
                LinearWeight::Packed(p) => Some(&*p.0),
                LinearWeight::Dense(_) | LinearWeight::DensePacked(_) | LinearWeight::Quantized(_) => None,
            })
            .collect();
        let outs = match packed {
            Some(mats) if crate::cpu_op::kernels_run_on(x.device()) => {
                let dtype = x.dtype();
                let xf = x.to_dtype(DType::F32)?.contiguous()?;
                let ys = shared_qmatmul(&mats, &xf)?;
                let mut outs = Vec::with_capacity(N);
                for (l, y) in layers.iter().zip(ys) {
                    outs.push(l.with_bias(y.to_dtype(dtype)?)?);
                }
                outs
            }
            _ => layers.iter().map(|l| l.forward(x)).collect::<Result<Vec<_>>>()?,
        };
        outs.try_into().map_err(|_| DecoderError::Config("a shared linear lost an output".into()))
    }

    /// `residual + x Wᵀ + b` (the residual `(..., out)`), in one pass on the CPU in f32.
    pub fn forward_add(&self, x: &Tensor, residual: Option<&Tensor>) -> Result<Tensor> {
        let Some(residual) = residual else { return self.forward(x) };
        if let Some(y) = self.dense_cpu(x, Some(residual), Epilogue::None)? {
            return Ok(y);
        }
        if let LinearWeight::Packed(p) = &self.weight {
            if self.bias.is_none() && kernels_take(x) && kernels_take(residual) {
                // The kernels add the residual as they write each output.
                return Ok(x.contiguous()?.apply_op2_no_bwd(&residual.contiguous()?, p)?);
            }
        }
        Ok((residual + self.unfused(x)?)?)
    }

    /// `act(x Wᵀ + b)`, the activation applied inside the matmul's pass where the kernels
    /// have it (the tanh GELU on the CPU in f32).
    pub fn forward_act(&self, x: &Tensor, act: Activation) -> Result<Tensor> {
        if act == Activation::GeluTanh {
            if let Some(y) = self.dense_cpu(x, None, Epilogue::GeluTanh)? {
                return Ok(y);
            }
        }
        act.apply(&self.forward(x)?)
    }

    /// The dense f32 CPU path (`tessera_kernels::dense::linear`): bias, residual and epilogue
    /// in the matmul's pass. `None` where it does not apply (other devices, dtypes, weights).
    fn dense_cpu(&self, x: &Tensor, residual: Option<&Tensor>, epilogue: Epilogue) -> Result<Option<Tensor>> {
        let w = match &self.weight {
            LinearWeight::Dense(l) if kernels_take(l.weight()) => DenseW::Rows(l.weight()),
            LinearWeight::DensePacked(p) => DenseW::Packed(p),
            _ => return Ok(None),
        };
        if !kernels_take(x) || !self.bias.as_ref().is_none_or(kernels_take) || !residual.is_none_or(kernels_take) {
            return Ok(None);
        }
        let op = DenseLinear { w, bias: self.bias.as_ref(), epilogue };
        let x = x.contiguous()?;
        Ok(Some(match residual {
            Some(r) => x.apply_op2_no_bwd(&r.contiguous()?, &op)?,
            None => x.apply_op1_no_bwd(&op)?,
        }))
    }

    fn unfused(&self, x: &Tensor) -> Result<Tensor> {
        let y = match &self.weight {
            LinearWeight::Dense(l) => l.forward(x)?,
            LinearWeight::DensePacked(p) => {
                // The packed kernels take f32 activations on the CPU (where the weight is).
                let dtype = x.dtype();
                let op = DenseLinear { w: DenseW::Packed(p), bias: None, epilogue: Epilogue::None };
                let xf = x.to_dtype(DType::F32)?.to_device(&candle_core::Device::Cpu)?.contiguous()?;
                xf.apply_op1_no_bwd(&op)?.to_dtype(dtype)?.to_device(x.device())?
            }
            LinearWeight::Packed(p) => {
                // The kernels take f32 activations.
                let dtype = x.dtype();
                let y = x.to_dtype(DType::F32)?.contiguous()?.apply_op1_no_bwd(p)?;
                y.to_dtype(dtype)?
            }
            LinearWeight::Quantized(q) => {
                // Candle's quantized matmul takes f32 activations.
                let dtype = x.dtype();
                let y = q.forward(&x.to_dtype(DType::F32)?)?;
                y.to_dtype(dtype)?
            }
        };
        self.with_bias(y)
    }

    fn with_bias(&self, y: Tensor) -> Result<Tensor> {
        Ok(match &self.bias {
            Some(b) => y.broadcast_add(&b.to_dtype(y.dtype())?)?,
            None => y,
        })
    }
}

/// `dims` with its last entry (a row's width) replaced by `n`: a linear layer's output shape.
fn with_last(dims: &[usize], n: usize) -> Vec<usize> {
    let mut out = dims.to_vec();
    if let Some(last) = out.last_mut() {
        *last = n;
    }
    out
}

/// The two inputs of a `residual + x Wᵀ` CPU op (`op` names it in errors): `x` `(..., in)` and
/// the residual, which must be `(..., out)`.
fn with_residual<'a>(
    op: &str,
    out: usize,
    (s1, l1): (&'a CpuStorage, &'a Layout),
    (s2, l2): (&'a CpuStorage, &'a Layout),
) -> candle_core::Result<(&'a [f32], &'a [f32])> {
    let x = crate::cpu_op::contiguous_f32(s1, l1, op)?;
    let residual = crate::cpu_op::contiguous_f32(s2, l2, &format!("{op} residual"))?;
    let want = with_last(l1.shape().dims(), out);
    if l2.shape().dims() != want {
        candle_core::bail!("{op}: residual {:?}, the output is {want:?}", l2.shape().dims());
    }
    Ok((x, residual))
}

/// `x Wᵢᵀ` for each quantized `Wᵢ`, by [`QMatrix::matmul_shared_uninit`]: `x` `(..., in)`,
/// contiguous f32 on the CPU → `(..., outᵢ)`.
fn shared_qmatmul(mats: &[&QMatrix], x: &Tensor) -> Result<Vec<Tensor>> {
    let dims = x.dims().to_vec();
    let k = dims.last().copied().unwrap_or(0);
    if let Some(w) = mats.iter().find(|w| w.cols() != k) {
        return Err(DecoderError::Config(format!(
            "quantized matmul: input width {k}, the weight takes {} ({w:?})",
            w.cols()
        )));
    }
    let m = x.elem_count() / k.max(1);
    let lens: Vec<usize> = mats.iter().map(|w| m * w.rows()).collect();
    let ys = {
        let (s, l) = x.storage_and_layout();
        let xs = crate::cpu_op::storage_f32(&s, l, "quantized matmul input")?;
        // SAFETY: `matmul_shared_uninit` writes every element of every output when it returns Ok.
        unsafe { crate::cpu_op::all_written_by(&lens, |outs| QMatrix::matmul_shared_uninit(mats, xs, m, outs))? }
    };
    let mut out = Vec::with_capacity(mats.len());
    for (y, w) in ys.into_iter().zip(mats) {
        out.push(Tensor::from_vec(y, with_last(&dims, w.rows()), x.device())?);
    }
    Ok(out)
}

/// A dense layer's weight as the CPU op reads it: a tensor `(out, in)`, or packed.
#[derive(Clone, Copy)]
enum DenseW<'a> {
    Rows(&'a Tensor),
    Packed(&'a PackedF32),
}

impl DenseW<'_> {
    /// `(out, in)`.
    fn dims(&self) -> candle_core::Result<(usize, usize)> {
        match self {
            Self::Rows(w) => w.dims2(),
            Self::Packed(p) => Ok((p.rows(), p.cols())),
        }
    }
}

/// `epilogue([residual +] x Wᵀ + b)` by `tessera_kernels::dense` as a Candle CPU op: `x`
/// `(..., in)` and the residual `(..., out)` are the op's inputs, the weight and bias are read
/// from where the layer holds them.
struct DenseLinear<'a> {
    w: DenseW<'a>,
    bias: Option<&'a Tensor>,
    epilogue: Epilogue,
}

impl DenseLinear<'_> {
    fn run(&self, x: &[f32], dims: &[usize], residual: Option<&[f32]>) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, k) = self.w.dims()?;
        if dims.last() != Some(&k) {
            candle_core::bail!("linear: input {dims:?}, the weight takes {k} values per row");
        }
        let m = x.len() / k.max(1);
        let storage;
        let w = match self.w {
            DenseW::Rows(w) => {
                storage = w.storage_and_layout();
                DenseWeight::Rows(crate::cpu_op::storage_f32(&storage.0, storage.1, "linear weight")?)
            }
            DenseW::Packed(p) => DenseWeight::Packed(p),
        };
        let bias = self.bias.map(|b| b.storage_and_layout());
        let bias = match &bias {
            Some((bs, bl)) => Some(crate::cpu_op::storage_f32(bs, bl, "linear bias")?),
            None => None,
        };
        let mut out = vec![0f32; m * n];
        let args = tessera_kernels::dense::LinearArgs { x, m, k, w, n, bias, residual, epilogue: self.epilogue };
        tessera_kernels::dense::linear(tessera_kernels::ThreadPool::global(), args, &mut out)
            .map_err(candle_core::Error::wrap)?;
        Ok((CpuStorage::F32(out), Shape::from(with_last(dims, n))))
    }
}

impl CustomOp1 for DenseLinear<'_> {
    fn name(&self) -> &'static str {
        "tessera-linear"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = crate::cpu_op::contiguous_f32(storage, layout, "linear")?;
        self.run(x, layout.shape().dims(), None)
    }
}

impl CustomOp2 for DenseLinear<'_> {
    fn name(&self) -> &'static str {
        "tessera-linear-add"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, residual) = with_residual("linear", self.w.dims()?.0, (s1, l1), (s2, l2))?;
        self.run(x, l1.shape().dims(), Some(residual))
    }
}

/// `[residual +] x Wᵀ` by `tessera-kernels` as a Candle CPU op (`x`, and the residual
/// `(..., out)` for the two-input form).
#[derive(Clone, Debug)]
struct PackedMatMul(Arc<QMatrix>);

impl PackedMatMul {
    fn run(&self, x: &[f32], dims: &[usize], residual: Option<&[f32]>) -> candle_core::Result<(CpuStorage, Shape)> {
        let w = &self.0;
        let k = dims.last().copied().unwrap_or(0);
        if k != w.cols() {
            candle_core::bail!("quantized matmul: input width {k}, the weight takes {} ({:?})", w.cols(), w);
        }
        let m = x.len() / k.max(1);
        // SAFETY: `matmul_uninit` and `matmul_add_uninit` write every element of their output
        // when they return Ok.
        let out = unsafe {
            crate::cpu_op::written_by(m * w.rows(), |o| match residual {
                Some(r) => w.matmul_add_uninit(x, m, r, o),
                None => w.matmul_uninit(x, m, o),
            })?
        };
        Ok((CpuStorage::F32(out), Shape::from(with_last(dims, w.rows()))))
    }
}

impl CustomOp1 for PackedMatMul {
    fn name(&self) -> &'static str {
        "tessera-qmatmul"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let x = crate::cpu_op::contiguous_f32(storage, layout, "quantized matmul")?;
        self.run(x, layout.shape().dims(), None)
    }
}

impl CustomOp2 for PackedMatMul {
    fn name(&self) -> &'static str {
        "tessera-qmatmul-add"
    }

    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let (x, residual) = with_residual("quantized matmul", self.0.rows(), (s1, l1), (s2, l2))?;
        self.run(x, l1.shape().dims(), Some(residual))
    }
}
