//! Rotary position embeddings (Su et al. 2021, "RoFormer"), with the frequency variants
//! transformers implements in `modeling_rope_utils.py` (default, linear, llama3).
//!
//! Two memory layouts rotate the same pairs differently:
//! - [`RopeStyle::Half`]: Hugging Face's `rotate_half`, pairing dimension `i` with `i + d/2`;
//! - [`RopeStyle::Interleaved`]: GPT-J / llama.cpp, pairing `2i` with `2i+1`. llama.cpp's
//!   converter permutes the rows of `attn_q`/`attn_k` so that interleaved rotation of the
//!   permuted weights gives exactly the same attention scores as `rotate_half` on the originals.

use candle_core::{DType, Device, Tensor};

use crate::error::{DecoderError, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RopeStyle {
    #[default]
    Half,
    Interleaved,
}

/// How the inverse frequencies are derived from `theta`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum RopeScaling {
    #[default]
    Default,
    /// Position interpolation: every frequency divided by `factor`.
    Linear { factor: f64 },
    /// Llama 3.1's wavelength-dependent scaling.
    Llama3 { factor: f64, low_freq_factor: f64, high_freq_factor: f64, original_max_position_embeddings: usize },
    /// Gemma 4's full-attention layers (`proportional`): the first `⌊fraction·dim/2⌋`
    /// frequencies as default RoPE over the whole `dim`, the rest zero (those dimensions do not
    /// rotate), every one divided by `factor`.
    Proportional { fraction: f64, factor: f64 },
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeConfig {
    pub theta: f64,
    pub scaling: RopeScaling,
    pub style: RopeStyle,
    /// Multimodal RoPE: the frequencies read three position streams.
    pub mrope: Option<MRope>,
}

impl Default for RopeConfig {
    fn default() -> Self {
        Self { theta: 10_000.0, scaling: RopeScaling::Default, style: RopeStyle::Half, mrope: None }
    }
}

/// Multimodal RoPE (Qwen2-VL onwards): each of the `head_dim/2` frequencies rotates by one of
/// three position streams — temporal, height, width — so an image token's angle encodes its
/// grid cell while text tokens (all three streams equal) rotate as plain RoPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MRope {
    /// Frequencies per stream (`mrope_section`), summing to `head_dim/2`.
    pub section: [usize; 3],
    /// Qwen3-VL's layout: frequency `i` reads height when `i % 3 == 1` and `i < 3·section[1]`,
    /// width when `i % 3 == 2` and `i < 3·section[2]`, time otherwise. Otherwise (Qwen2-VL)
    /// the sections are consecutive blocks: time, then height, then width.
    pub interleaved: bool,
}

impl MRope {
    /// The stream (0 time, 1 height, 2 width) each of the `half` frequencies reads.
    pub fn streams(&self, half: usize) -> Result<Vec<usize>> {
        let [t, h, w] = self.section;
        if t + h + w != half {
            return Err(DecoderError::Config(format!(
                "mrope_section {:?} sums to {}, not head_dim/2 = {half}",
                self.section,
                t + h + w
            )));
        }
        Ok((0..half)
            .map(|i| match self.interleaved {
                true if i % 3 == 1 && i < 3 * h => 1,
                true if i % 3 == 2 && i < 3 * w => 2,
                true => 0,
                false if i < t => 0,
                false if i < t + h => 1,
                false => 2,
            })
            .collect())
    }
}

impl RopeConfig {
    /// The `dim/2` inverse frequencies, computed in f32 as transformers does.
    pub fn inv_freq(&self, dim: usize) -> Vec<f32> {
        let base = self.theta as f32;
        let inv: Vec<f32> = (0..dim).step_by(2).map(|i| 1.0 / base.powf(i as f32 / dim as f32)).collect();
        match self.scaling {
            RopeScaling::Default => inv,
            RopeScaling::Linear { factor } => inv.into_iter().map(|f| f / factor as f32).collect(),
            RopeScaling::Proportional { fraction, factor } => {
                // transformers: `int(partial_rotary_factor * head_dim // 2)` angles rotate.
                let rotated = (fraction * dim as f64 / 2.0).floor() as usize;
                inv.into_iter().enumerate().map(|(i, f)| if i < rotated { f / factor as f32 } else { 0.0 }).collect()
            }
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                let old = original_max_position_embeddings as f32;
                let (factor, low, high) = (factor as f32, low_freq_factor as f32, high_freq_factor as f32);
                let low_freq_wavelen = old / low;
                let high_freq_wavelen = old / high;
                inv.into_iter()
                    .map(|f| {
                        let wavelen = 2.0 * std::f32::consts::PI / f;
                        let scaled = if wavelen > low_freq_wavelen { f / factor } else { f };
                        let medium = (high_freq_wavelen..=low_freq_wavelen).contains(&wavelen);
                        if medium {
                            let smooth = (old / wavelen - low) / (high - low);
                            (1.0 - smooth) * scaled / factor + smooth * scaled
                        } else {
                            scaled
                        }
                    })
                    .collect()
            }
        }
    }
}

/// A rotary embedding: its inverse frequencies, turned into the rotation angles of the
/// positions each forward runs ([`at`](Self::at)). No table is sized by the declared context:
/// the angles are computed for the positions a forward uses, once, and shared by every layer.
#[derive(Clone, Debug)]
pub struct RotaryEmbedding {
    /// `(1, head_dim/2)`, f32.
    inv_freq: Tensor,
    /// M-RoPE: `(3, 1, head_dim/2)` one-hot over the streams, f32 — which stream each
    /// frequency reads.
    streams: Option<Tensor>,
    style: RopeStyle,
    /// The dimensions rotated: the first of each head.
    head_dim: usize,
    /// The dimensions after them, passed through unrotated (partial rotary).
    pass: usize,
    dtype: DType,
}

impl RotaryEmbedding {
    pub fn new(cfg: &RopeConfig, head_dim: usize, dtype: DType, device: &Device) -> Result<Self> {
        Self::partial(cfg, head_dim, head_dim, dtype, device)
    }

    /// A rotary embedding that rotates the first `rotary_dim` dimensions of each `head_dim`-wide
    /// head and passes the rest through (transformers' `partial_rotary_factor`: Qwen3.5 rotates
    /// a quarter); its frequencies are those of a `rotary_dim`-wide head.
    pub fn partial(
        cfg: &RopeConfig,
        head_dim: usize,
        rotary_dim: usize,
        dtype: DType,
        device: &Device,
    ) -> Result<Self> {
        if !rotary_dim.is_multiple_of(2) || rotary_dim == 0 || rotary_dim > head_dim {
            return Err(DecoderError::Config(format!(
                "RoPE needs an even rotary dimension of at most head_dim {head_dim}, got {rotary_dim}"
            )));
        }
        let pass = head_dim - rotary_dim;
        let head_dim = rotary_dim;
        let inv_freq = cfg.inv_freq(head_dim);
        let half = inv_freq.len();
        let streams = match cfg.mrope {
            Some(m) => {
                let of = m.streams(half)?;
                let one_hot: Vec<f32> =
                    (0..3).flat_map(|s| of.iter().map(move |&o| f32::from(u8::from(o == s)))).collect();
                Some(Tensor::from_vec(one_hot, (3, 1, half), device)?)
            }
            None => None,
        };
        Ok(Self {
            inv_freq: Tensor::from_vec(inv_freq, (1, half), device)?,
            streams,
            style: cfg.style,
            head_dim,
            pass,
            dtype,
        })
    }

    /// The angles of `positions` (u32 or any integer/float dtype), `position × inv_freq` in f32
    /// as transformers computes them: `(t,)` — one stream — or, for M-RoPE, `(3, t)`: the
    /// temporal, height and width positions (one stream is all three equal).
    pub fn at(&self, positions: &Tensor) -> Result<RopeAngles> {
        let angles = match (positions.rank(), &self.streams) {
            (1, _) => {
                let t = positions.dims1()?;
                positions.to_dtype(DType::F32)?.reshape((t, 1))?.broadcast_mul(&self.inv_freq)?
            }
            (2, Some(one_hot)) => {
                let (n, t) = positions.dims2()?;
                if n != 3 {
                    return Err(DecoderError::Config(format!("M-RoPE takes 3 position streams, got {n}")));
                }
                // (3, t, half) angles of every stream, then each frequency's own stream (the
                // others multiplied by 0 and added: exact).
                let all = positions.to_dtype(DType::F32)?.reshape((3, t, 1))?.broadcast_mul(&self.inv_freq)?;
                all.broadcast_mul(one_hot)?.sum(0)?
            }
            _ => {
                return Err(DecoderError::Config(format!(
                    "RoPE positions must be (t,){}, got {:?}",
                    if self.streams.is_some() { " or (3, t)" } else { "" },
                    positions.dims()
                )))
            }
        };
        Ok(RopeAngles {
            cos: angles.cos()?.to_dtype(self.dtype)?,
            sin: angles.sin()?.to_dtype(self.dtype)?,
            style: self.style,
            head_dim: self.head_dim,
            pass: self.pass,
        })
    }

    /// [`at`](Self::at) the `t` consecutive positions from `start`.
    pub fn at_offset(&self, start: usize, t: usize) -> Result<RopeAngles> {
        let end = u32::try_from(start.saturating_add(t))
            .map_err(|_| DecoderError::Config(format!("position {} is beyond RoPE's u32 positions", start + t)))?;
        self.at(&Tensor::arange(start as u32, end, self.inv_freq.device())?)
    }
}

/// Up to this many positions a CPU f32 rotation runs on the calling thread (a decode step, a
/// batched step's rows): Candle's op hands more than one position to rayon, whose threads
/// wake for microseconds of work and then spin beside the kernels' pool.
const SERIAL_MAX_ROWS: usize = 64;

/// Candle's CPU `rope`/`rope_i` for `(b, h, t, d)` f32 (or `(b, t, h, d)`, `token_major`) and
/// `(t, d/2)` angles, element for element the same arithmetic, in one thread.
struct SerialRope {
    style: RopeStyle,
    token_major: bool,
}

impl candle_core::CustomOp3 for SerialRope {
    fn name(&self) -> &'static str {
        "serial-rope"
    }

    fn cpu_fwd(
        &self,
        s1: &candle_core::CpuStorage,
        l1: &candle_core::Layout,
        s2: &candle_core::CpuStorage,
        l2: &candle_core::Layout,
        s3: &candle_core::CpuStorage,
        l3: &candle_core::Layout,
    ) -> candle_core::Result<(candle_core::CpuStorage, candle_core::Shape)> {
        use candle_core::CpuStorage::F32;
        let (src, cos, sin) = (f32_slice(s1, l1, "input")?, f32_slice(s2, l2, "cos")?, f32_slice(s3, l3, "sin")?);
        let (b, h, t, d) = match (l1.shape().dims4()?, self.token_major) {
            ((b, t, h, d), true) | ((b, h, t, d), false) => (b, h, t, d),
        };
        let half = d / 2;
        if l2.dims() != [t, half] || l3.dims() != [t, half] || src.len() != b * h * t * d {
            return Err(candle_core::Error::Msg(format!("rope: angles {:?} for input {:?}", l2.dims(), l1.dims())));
        }
        let mut dst = vec![0f32; src.len()];
        if dst.is_empty() {
            return Ok((F32(dst), l1.shape().clone())); // no positions (chunks of 0 would panic)
        }
        for (r, (x, y)) in src.chunks_exact(d).zip(dst.chunks_exact_mut(d)).enumerate() {
            // Row r of d values is position i_t of some head.
            let i_t = if self.token_major { r / h % t } else { r % t };
            let (c, s) = (&cos[i_t * half..][..half], &sin[i_t * half..][..half]);
            // Candle's pairing and its exact expressions (no fused multiply-add), as iterators
            // over whole slices so that they vectorise.
            let angles = c.iter().zip(s);
            match self.style {
                RopeStyle::Half => {
                    let ((x0, x1), (y0, y1)) = (x.split_at(half), y.split_at_mut(half));
                    for (((y0, y1), (&a, &b)), (&c, &s)) in y0.iter_mut().zip(y1).zip(x0.iter().zip(x1)).zip(angles) {
                        *y0 = a * c - b * s;
                        *y1 = a * s + b * c;
                    }
                }
                RopeStyle::Interleaved => {
                    for ((yp, xp), (&c, &s)) in y.chunks_exact_mut(2).zip(x.chunks_exact(2)).zip(angles) {
                        let (a, b) = (xp[0], xp[1]);
                        yp[0] = a * c - b * s;
                        yp[1] = a * s + b * c;
                    }
                }
            }
        }
        Ok((F32(dst), l1.shape().clone()))
    }
}

/// The contiguous f32 values a CPU storage holds under `layout`.
fn f32_slice<'a>(
    storage: &'a candle_core::CpuStorage,
    layout: &candle_core::Layout,
    what: &str,
) -> candle_core::Result<&'a [f32]> {
    match (storage, layout.contiguous_offsets()) {
        (candle_core::CpuStorage::F32(v), Some((a, b))) => {
            v.get(a..b).ok_or_else(|| candle_core::Error::Msg(format!("rope: the {what} is short of its layout")))
        }
        _ => Err(candle_core::Error::Msg(format!("rope: the {what} must be contiguous f32"))),
    }
}

/// The `cos`/`sin` of one forward's positions, `(t, head_dim/2)`.
#[derive(Clone, Debug)]
pub struct RopeAngles {
    cos: Tensor,
    sin: Tensor,
    style: RopeStyle,
    /// The dimensions rotated, the first of each head.
    head_dim: usize,
    /// The head's dimensions after them, left as they are (partial rotary).
    pass: usize,
}

impl RopeAngles {
    /// Angles computed elsewhere: `(t, head_dim/2)` f32 (Qwen2-VL's vision RoPE: each patch's
    /// row and column angles side by side).
    pub fn from_angles(angles: &Tensor, style: RopeStyle, head_dim: usize, dtype: DType) -> Result<Self> {
        let (_, half) = angles.dims2()?;
        if half * 2 != head_dim {
            return Err(DecoderError::Config(format!("{half} angles per position for head_dim {head_dim}")));
        }
        Ok(Self { cos: angles.cos()?.to_dtype(dtype)?, sin: angles.sin()?.to_dtype(dtype)?, style, head_dim, pass: 0 })
    }

    /// How many positions these angles rotate.
    pub fn len(&self) -> usize {
        self.cos.dims()[0]
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `rotate` applied to the first `head_dim` dimensions of `x` (last axis), the rest
    /// appended unrotated (partial rotary); `rotate` itself when every dimension rotates.
    fn partially(&self, x: &Tensor, rotate: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
        if self.pass == 0 {
            return rotate(x);
        }
        let last = x.rank() - 1;
        let rotated = rotate(&x.narrow(last, 0, self.head_dim)?.contiguous()?)?;
        Ok(Tensor::cat(&[&rotated, &x.narrow(last, self.head_dim, self.pass)?.contiguous()?], last)?)
    }

    /// Rotates `x`: `(b, heads, t, head_dim)`, row `i` at the `i`-th position.
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        self.partially(x, |x| self.apply_whole(x))
    }

    fn apply_whole(&self, x: &Tensor) -> Result<Tensor> {
        let (cos, sin) = self.check(x)?;
        let x = x.contiguous()?;
        if crate::cpu_op::kernels_take(&x) && x.dims()[2] <= SERIAL_MAX_ROWS {
            return Ok(x.apply_op3_no_bwd(&cos, &sin, &SerialRope { style: self.style, token_major: false })?);
        }
        Ok(match self.style {
            RopeStyle::Half => candle_nn::rotary_emb::rope(&x, &cos, &sin)?,
            RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i(&x, &cos, &sin)?,
        })
    }

    /// [`apply`](Self::apply) to `x` laid out `(b, t, heads, head_dim)` (a projection's own
    /// layout, one token after another), → the same layout, contiguous; each value the bits
    /// `apply` gives it.
    pub fn apply_token_major(&self, x: &Tensor) -> Result<Tensor> {
        self.partially(x, |x| self.apply_token_major_whole(x))
    }

    fn apply_token_major_whole(&self, x: &Tensor) -> Result<Tensor> {
        if crate::cpu_op::kernels_take(x) && x.dims().get(1).is_some_and(|&t| t <= SERIAL_MAX_ROWS) {
            let (cos, sin) = self.check(&x.transpose(1, 2)?)?;
            let op = SerialRope { style: self.style, token_major: true };
            return Ok(x.contiguous()?.apply_op3_no_bwd(&cos, &sin, &op)?);
        }
        Ok(self.apply_whole(&x.transpose(1, 2)?)?.transpose(1, 2)?.contiguous()?)
    }

    /// The obviously-correct twin of [`apply`](Self::apply), for tests.
    pub fn apply_slow(&self, x: &Tensor) -> Result<Tensor> {
        self.partially(x, |x| {
            let (cos, sin) = self.check(x)?;
            Ok(match self.style {
                RopeStyle::Half => candle_nn::rotary_emb::rope_slow(x, &cos, &sin)?,
                RopeStyle::Interleaved => candle_nn::rotary_emb::rope_i_slow(x, &cos, &sin)?,
            })
        })
    }

    fn check(&self, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let (_, _, t, d) = x.dims4()?;
        if d != self.head_dim {
            return Err(DecoderError::Config(format!("RoPE built for head_dim {} got {d}", self.head_dim)));
        }
        if t != self.len() {
            return Err(DecoderError::Config(format!("RoPE angles for {} positions, the input has {t}", self.len())));
        }
        Ok((self.cos.to_dtype(x.dtype())?, self.sin.to_dtype(x.dtype())?))
    }
}
