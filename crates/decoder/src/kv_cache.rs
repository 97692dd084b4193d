//! The key/value cache: one owner, written once for every model.
//!
//! Each layer keeps preallocated buffers `(b, kv_heads, capacity, head_dim)`; new positions
//! are written in place (`slice_set`), and attention reads a narrowed view of the filled part,
//! so a decode step copies only the new token's keys and values. Capacity grows by doubling
//! up to the model's context, so short prompts do not reserve the whole context; a caller that
//! knows how long the sequence can get ([`KvCache::reserve`]: the prompt + the tokens it may
//! generate) gets buffers of that size at the first write instead, and no regrowth (a new
//! buffer beside the old one, and a copy of every cached position) on the way.
//!
//! The buffers hold the keys and values in the dtype they come in, or in the one the cache was
//! made with ([`KvCache::with_dtype`]): an f16 cache under f32 activations (llama.cpp's default)
//! halves the memory and what a decode step reads; the attention kernels convert on load.
//!
//! A linear-attention layer (Gated DeltaNet) keeps no keys or values: its slot holds the
//! sequence's fixed-size recurrent state ([`DeltaState`]) instead, counted in
//! [`KvCache::bytes`]. Such a state sums every position it has seen, so it cannot be cut back to
//! a shorter prefix: [`KvCache::copy_prefix`] of a cache that holds one copies it whole or not at
//! all.

use candle_core::{DType, Tensor};

use crate::error::{DecoderError, Result};
use crate::gated_delta::DeltaState;

const INITIAL_CAPACITY: usize = 256;

#[derive(Debug, Clone, Default)]
pub struct LayerKv {
    k: Option<Tensor>,
    v: Option<Tensor>,
    len: usize,
    /// A linear-attention layer's recurrent state (then `k` and `v` stay empty).
    delta: Option<DeltaState>,
}

impl LayerKv {
    /// Appends `k`, `v`: `(b, kv_heads, t, head_dim)`, returns views over every cached position.
    fn append(&mut self, k: &Tensor, v: &Tensor, room: Room) -> Result<(Tensor, Tensor)> {
        self.write(k, v, 0..k.dim(2)?, room)?;
        let (kb, vb) = self.buffers()?;
        Ok((kb.narrow(2, 0, self.len)?, vb.narrow(2, 0, self.len)?))
    }

    fn buffers(&self) -> Result<(&Tensor, &Tensor)> {
        match (&self.k, &self.v) {
            (Some(kb), Some(vb)) => Ok((kb, vb)),
            _ => Err(DecoderError::Config("KV cache buffers missing after growth".into())),
        }
    }

    /// Appends positions `ts` (along dim 2) of `k`, `v` `(b, kv_heads, t, head_dim)`.
    fn write(&mut self, k: &Tensor, v: &Tensor, ts: std::ops::Range<usize>, room: Room) -> Result<()> {
        let Room { max_len, reserve, dtype } = room;
        let store = dtype.unwrap_or(k.dtype());
        let t = ts.len();
        if ts.end > k.dim(2)? || ts.end > v.dim(2)? {
            return Err(DecoderError::Config(format!(
                "positions {ts:?} of {:?} keys and {:?} values",
                k.dims(),
                v.dims()
            )));
        }
        let needed = self.len + t;
        if needed > max_len {
            return Err(DecoderError::ContextOverflow { requested: needed, max: max_len });
        }
        let capacity = self.k.as_ref().map(|b| b.dim(2)).transpose()?.unwrap_or(0);
        if needed > capacity {
            let new_cap = grown_capacity(needed.max(reserve), capacity, max_len);
            self.k = Some(grow(self.k.take(), k, store, new_cap, self.len)?);
            self.v = Some(grow(self.v.take(), v, store, new_cap, self.len)?);
        }
        let (kb, vb) = self.buffers()?;
        write_at(kb, k, ts.clone(), self.len)?;
        write_at(vb, v, ts, self.len)?;
        self.len = needed;
        Ok(())
    }
}

/// What a layer's write may allocate: up to the context `max_len`, at least `reserve` positions
/// when it allocates, in `dtype` (`None`: as the keys and values come).
#[derive(Debug, Clone, Copy)]
struct Room {
    max_len: usize,
    reserve: usize,
    dtype: Option<DType>,
}

/// The capacity a buffer of `capacity` positions grows to when it must hold `needed`: at least
/// double, at least [`INITIAL_CAPACITY`], at most the context `max_len`.
fn grown_capacity(needed: usize, capacity: usize, max_len: usize) -> usize {
    needed.max(capacity * 2).max(INITIAL_CAPACITY.min(max_len)).min(max_len)
}

/// Allocates a `dtype` buffer with room for `capacity` positions, keeping the first `len` of `old`.
fn grow(old: Option<Tensor>, like: &Tensor, dtype: DType, capacity: usize, len: usize) -> Result<Tensor> {
    let (b, h, _, d) = like.dims4()?;
    let buf = Tensor::zeros((b, h, capacity, d), dtype, like.device())?;
    if let Some(old) = old {
        if len > 0 {
            buf.slice_set(&old.narrow(2, 0, len)?.contiguous()?, 2, 0)?;
        }
    }
    Ok(buf)
}

/// Writes positions `ts` of `src` `(b, h, t, d)` into `buf` `(b, h, capacity, d)` from position
/// `at` (dim 2), in `buf`'s dtype. On the CPU one pass reads `src` in whatever strides it has
/// and rounds as `to_dtype` does; elsewhere Candle converts, copies and `slice_set`s.
fn write_at(buf: &Tensor, src: &Tensor, ts: std::ops::Range<usize>, at: usize) -> Result<()> {
    if crate::cpu_op::kernels_run_on(buf.device()) && WriteAt::converts(src.dtype(), buf.dtype()) {
        return Ok(buf.inplace_op2(src, &WriteAt { ts, at })?);
    }
    let src = src.narrow(2, ts.start, ts.len())?;
    let src = if src.dtype() == buf.dtype() { src } else { src.to_dtype(buf.dtype())? };
    Ok(buf.slice_set(&src.contiguous()?, 2, at)?)
}

/// The CPU write of [`write_at`]: one op per tensor instead of a conversion, a copy to
/// contiguous and a `slice_set` (a batched decode step appends every row of every layer).
struct WriteAt {
    /// The source positions written.
    ts: std::ops::Range<usize>,
    at: usize,
}

impl WriteAt {
    /// The `(from, to)` pairs [`cpu_fwd`](candle_core::InplaceOp2::cpu_fwd) has arms for.
    fn converts(from: DType, to: DType) -> bool {
        use DType::{BF16, F16, F32};
        matches!((from, to), (F32, F32 | F16 | BF16) | (F16, F16) | (BF16, BF16))
    }
}

impl candle_core::InplaceOp2 for WriteAt {
    fn name(&self) -> &'static str {
        "kv-cache-write"
    }

    fn cpu_fwd(
        &self,
        dst: &mut candle_core::CpuStorage,
        dl: &candle_core::Layout,
        src: &candle_core::CpuStorage,
        sl: &candle_core::Layout,
    ) -> candle_core::Result<()> {
        use candle_core::CpuStorage as S;
        use half::slice::HalfFloatSliceExt;
        let (ts, at) = (self.ts.clone(), self.at);
        fn copy<T: Copy>(y: &mut [T], x: &[T]) -> candle_core::Result<()> {
            y.copy_from_slice(x);
            Ok(())
        }
        // Whole rows at a time, with F16C where the CPU has it, rounding as half's one-value
        // `from_f32` (and Candle's `to_dtype`) does; one call per value cost 7 ns in a batched
        // step's profile, half's slice conversion about half as much.
        match (dst, src) {
            (S::F32(d), S::F32(s)) => copy_rows(d, dl, s, sl, ts.clone(), at, copy),
            (S::F16(d), S::F32(s)) => copy_rows(d, dl, s, sl, ts.clone(), at, |y, x| {
                tessera_kernels::ops::f32_to_f16(x, y).map_err(|e| candle_core::Error::Msg(e.to_string()))
            }),
            (S::F16(d), S::F16(s)) => copy_rows(d, dl, s, sl, ts.clone(), at, copy),
            (S::BF16(d), S::F32(s)) => copy_rows(d, dl, s, sl, ts.clone(), at, |y, x| {
                y.convert_from_f32_slice(x);
                Ok(())
            }),
            (S::BF16(d), S::BF16(s)) => copy_rows(d, dl, s, sl, ts.clone(), at, copy),
            _ => Err(candle_core::Error::Msg("a KV cache write between dtypes it does not convert".into())),
        }
    }
}

/// `dst[b, h, at + i, :] = conv(src[b, h, ts.start + i, :])` for each position `i` of `ts`
/// (`conv` writes a row converted), for a contiguous `dst` `(b, h, cap, d)` and a `src`
/// `(b, h, t, d)` of any strides.
fn copy_rows<S: Copy, D>(
    dst: &mut [D],
    dl: &candle_core::Layout,
    src: &[S],
    sl: &candle_core::Layout,
    ts: std::ops::Range<usize>,
    at: usize,
    conv: impl Fn(&mut [D], &[S]) -> candle_core::Result<()>,
) -> candle_core::Result<()> {
    let (b, h, st, d) = sl.shape().dims4()?;
    let (db, dh, cap, dd) = dl.shape().dims4()?;
    let t = ts.len();
    if (db, dh, dd) != (b, h, d) || at + t > cap || ts.end > st || !dl.is_contiguous() {
        return Err(candle_core::Error::Msg(format!(
            "cannot write {:?} keys or values at position {at} of a {:?} cache buffer",
            sl.dims(),
            dl.dims()
        )));
    }
    let ss = sl.stride();
    let short = || candle_core::Error::Msg("a KV cache write ran past its storage".into());
    // A row of a strided `src` is gathered here first.
    let mut row = Vec::new();
    for bi in 0..b {
        for hi in 0..h {
            for ti in 0..t {
                let so = sl.start_offset() + bi * ss[0] + hi * ss[1] + (ts.start + ti) * ss[2];
                let o = dl.start_offset() + ((bi * h + hi) * cap + at + ti) * d;
                let out = dst.get_mut(o..o + d).ok_or_else(short)?;
                if ss[3] == 1 {
                    conv(out, src.get(so..so + d).ok_or_else(short)?)?;
                } else {
                    row.clear();
                    for j in 0..d {
                        row.push(*src.get(so + j * ss[3]).ok_or_else(short)?);
                    }
                    conv(out, &row)?;
                }
            }
        }
    }
    Ok(())
}

/// The cache of every layer of one sequence (or one batch of equal-length sequences).
#[derive(Debug, Clone)]
pub struct KvCache {
    layers: Vec<LayerKv>,
    max_len: usize,
    /// RoPE position of the next token minus [`len`](Self::len): 0, except after a prompt
    /// whose M-RoPE positions advance slower than its length (Qwen2-VL's images).
    position_delta: i64,
    /// The dtype keys and values are stored in; `None`: as they come.
    dtype: Option<DType>,
    /// Positions a buffer holds at least when it is allocated (see [`reserve`](Self::reserve)).
    reserve: usize,
}

impl KvCache {
    pub fn new(num_layers: usize, max_len: usize) -> Self {
        Self { layers: vec![LayerKv::default(); num_layers], max_len, position_delta: 0, dtype: None, reserve: 0 }
    }

    /// Makes the buffers allocated from now on hold at least `positions` (at most the context):
    /// a sequence that will hold its prompt and up to N generated tokens reserves their sum
    /// before its prompt runs, and its buffers are made once, at the prompt's first write.
    /// Buffers already larger are kept; smaller ones grow to it at their next growth.
    pub fn reserve(&mut self, positions: usize) {
        self.reserve = positions.min(self.max_len);
    }

    fn room(&self) -> Room {
        Room { max_len: self.max_len, reserve: self.reserve, dtype: self.dtype }
    }

    /// The same cache storing its keys and values as `dtype` (`None`: as they come).
    pub fn with_dtype(mut self, dtype: Option<DType>) -> Self {
        self.dtype = dtype;
        self
    }

    /// The dtype keys and values are stored in, if the cache converts them.
    pub fn dtype(&self) -> Option<DType> {
        self.dtype
    }

    /// RoPE position of the next token minus the positions cached (see `set_position_delta`).
    pub fn position_delta(&self) -> i64 {
        self.position_delta
    }

    /// Records that the next token's RoPE position is `len() + delta` (M-RoPE: the prompt's
    /// largest position + 1 − its length).
    pub fn set_position_delta(&mut self, delta: i64) {
        self.position_delta = delta;
    }

    /// Positions cached so far (the RoPE offset of the next token).
    pub fn len(&self) -> usize {
        self.layers.first().map(|l| l.len).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn max_len(&self) -> usize {
        self.max_len
    }

    pub fn num_layers(&self) -> usize {
        self.layers.len()
    }

    /// Forgets every position, keeping the buffers for reuse.
    pub fn clear(&mut self) {
        for l in &mut self.layers {
            l.len = 0;
            l.delta = None;
        }
        self.position_delta = 0;
    }

    /// A cache of its own (new buffers, exactly `len` positions long) holding this one's
    /// first `len` positions: what a later sequence that shares them continues from, while
    /// this one stays as it is.
    pub fn copy_prefix(&self, len: usize) -> Result<KvCache> {
        self.copy_prefix_with_capacity(len, len)
    }

    /// [`copy_prefix`](Self::copy_prefix) with room to append: buffers as large as appending to
    /// an exact copy would grow them, so the sequence that continues from it does not
    /// reallocate and copy every layer's buffers on its first step.
    pub fn resume_from(&self, len: usize) -> Result<KvCache> {
        self.copy_prefix_with_capacity(len, grown_capacity(len + 1, len, self.max_len))
    }

    fn copy_prefix_with_capacity(&self, len: usize, capacity: usize) -> Result<KvCache> {
        if len > self.len() {
            return Err(DecoderError::Config(format!(
                "cannot copy {len} positions of a KV cache holding {}",
                self.len()
            )));
        }
        if len < self.len() && self.is_recurrent() {
            return Err(DecoderError::Config(format!(
                "cannot copy the first {len} of {} positions: a linear-attention layer's state holds \
                 every position it has seen and cannot be cut",
                self.len()
            )));
        }
        let layers = self
            .layers
            .iter()
            .map(|l| {
                let copy = |b: &Option<Tensor>| match b {
                    Some(b) if len > 0 => {
                        Ok::<_, DecoderError>(Some(grow(Some(b.clone()), b, b.dtype(), capacity.max(len), len)?))
                    }
                    _ => Ok(None),
                };
                Ok(LayerKv { k: copy(&l.k)?, v: copy(&l.v)?, len, delta: l.delta.clone() })
            })
            .collect::<Result<Vec<_>>>()?;
        // The reserve belongs to the sequence that set it, not to the one continuing from here.
        let (max_len, position_delta, dtype) = (self.max_len, self.position_delta, self.dtype);
        Ok(KvCache { layers, max_len, position_delta, dtype, reserve: 0 })
    }

    /// Bytes the buffers take (their capacity, not only the filled part).
    pub fn bytes(&self) -> usize {
        let size = |b: &Option<Tensor>| b.as_ref().map(|t| t.elem_count() * t.dtype().size_in_bytes()).unwrap_or(0);
        let delta = |d: &Option<DeltaState>| d.as_ref().map(DeltaState::bytes).unwrap_or(0);
        self.layers.iter().map(|l| size(&l.k) + size(&l.v) + delta(&l.delta)).sum()
    }

    /// Whether a layer holds a linear-attention state (which [`copy_prefix`](Self::copy_prefix)
    /// copies only whole).
    pub fn is_recurrent(&self) -> bool {
        self.layers.iter().any(|l| l.delta.is_some())
    }

    /// Layer `layer`'s linear-attention state (`new()` for a sequence that has none yet), its
    /// position count advanced by the `t` positions the caller is about to run through it.
    pub fn delta_state(&mut self, layer: usize, t: usize, new: impl FnOnce() -> DeltaState) -> Result<&mut DeltaState> {
        let max_len = self.max_len;
        let l = self.layer_mut(layer)?;
        if l.k.is_some() {
            return Err(DecoderError::Config(format!(
                "KV cache layer {layer} holds keys, not a linear-attention state"
            )));
        }
        let needed = l.len + t;
        if needed > max_len {
            return Err(DecoderError::ContextOverflow { requested: needed, max: max_len });
        }
        l.len = needed;
        Ok(l.delta.get_or_insert_with(new))
    }

    /// Appends position `row` of `k`, `v` `(b, kv_heads, t, head_dim)` to layer `layer` (a
    /// batched step's row for this sequence), without making views; [`layer`](Self::layer)
    /// gives the buffers.
    pub fn append_row(&mut self, layer: usize, k: &Tensor, v: &Tensor, row: usize) -> Result<()> {
        let room = self.room();
        let l = self.layer_mut(layer)?;
        l.write(k, v, row..row + 1, room)?;
        Ok(())
    }

    fn layer_mut(&mut self, layer: usize) -> Result<&mut LayerKv> {
        self.layers.get_mut(layer).ok_or_else(|| DecoderError::Config(format!("KV cache has no layer {layer}")))
    }

    /// Layer `layer`'s key and value buffers `(b, kv_heads, capacity, head_dim)`, whose first
    /// `len` positions are cached, and `len`; `None` before anything is appended.
    pub fn layer(&self, layer: usize) -> Option<(&Tensor, &Tensor, usize)> {
        let l = self.layers.get(layer)?;
        Some((l.k.as_ref()?, l.v.as_ref()?, l.len))
    }

    /// Appends to layer `layer`; see [`LayerKv::append`].
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let room = self.room();
        let l = self.layer_mut(layer)?;
        l.append(k, v, room)
    }
}
