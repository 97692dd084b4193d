//! The key/value cache: one owner, written once for every model.
//!
//! Each layer keeps preallocated buffers `(b, kv_heads, capacity, head_dim)`; new positions
//! are written in place (`slice_set`), and attention reads a narrowed view of the filled part,
//! so a decode step copies only the new token's keys and values. Capacity grows by doubling
//! up to the model's context, so short prompts do not reserve the whole context.
//!
//! The buffers hold the keys and values in the dtype they come in, or in the one the cache was
//! made with ([`KvCache::with_dtype`]): an f16 cache under f32 activations (llama.cpp's default)
//! halves the memory and what a decode step reads; the attention kernels convert on load.

use candle_core::{DType, Tensor};

use crate::error::{DecoderError, Result};

const INITIAL_CAPACITY: usize = 256;

#[derive(Debug, Clone, Default)]
pub struct LayerKv {
    k: Option<Tensor>,
    v: Option<Tensor>,
    len: usize,
}

impl LayerKv {
    /// Appends `k`, `v`: `(b, kv_heads, t, head_dim)`, returns views over every cached position.
    fn append(&mut self, k: &Tensor, v: &Tensor, max_len: usize, dtype: Option<DType>) -> Result<(Tensor, Tensor)> {
        let (k, v) = match dtype {
            Some(dt) if dt != k.dtype() => (&k.to_dtype(dt)?, &v.to_dtype(dt)?),
            _ => (k, v),
        };
        let t = k.dim(2)?;
        let needed = self.len + t;
        if needed > max_len {
            return Err(DecoderError::ContextOverflow { requested: needed, max: max_len });
        }
        let capacity = self.k.as_ref().map(|b| b.dim(2)).transpose()?.unwrap_or(0);
        if needed > capacity {
            let new_cap = needed.max(capacity * 2).max(INITIAL_CAPACITY.min(max_len)).min(max_len);
            self.k = Some(grow(self.k.take(), k, new_cap, self.len)?);
            self.v = Some(grow(self.v.take(), v, new_cap, self.len)?);
        }
        let (kb, vb) = match (&self.k, &self.v) {
            (Some(kb), Some(vb)) => (kb, vb),
            _ => return Err(DecoderError::Config("KV cache buffers missing after growth".into())),
        };
        kb.slice_set(&k.contiguous()?, 2, self.len)?;
        vb.slice_set(&v.contiguous()?, 2, self.len)?;
        self.len = needed;
        Ok((kb.narrow(2, 0, self.len)?, vb.narrow(2, 0, self.len)?))
    }
}

/// Allocates a buffer with room for `capacity` positions, keeping the first `len` of `old`.
fn grow(old: Option<Tensor>, like: &Tensor, capacity: usize, len: usize) -> Result<Tensor> {
    let (b, h, _, d) = like.dims4()?;
    let buf = Tensor::zeros((b, h, capacity, d), like.dtype(), like.device())?;
    if let Some(old) = old {
        if len > 0 {
            buf.slice_set(&old.narrow(2, 0, len)?.contiguous()?, 2, 0)?;
        }
    }
    Ok(buf)
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
}

impl KvCache {
    pub fn new(num_layers: usize, max_len: usize) -> Self {
        Self { layers: vec![LayerKv::default(); num_layers], max_len, position_delta: 0, dtype: None }
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
        }
        self.position_delta = 0;
    }

    /// A cache of its own (new buffers, exactly `len` positions long) holding this one's
    /// first `len` positions: what a later sequence that shares them continues from, while
    /// this one stays as it is.
    pub fn copy_prefix(&self, len: usize) -> Result<KvCache> {
        if len > self.len() {
            return Err(DecoderError::Config(format!(
                "cannot copy {len} positions of a KV cache holding {}",
                self.len()
            )));
        }
        let layers = self
            .layers
            .iter()
            .map(|l| {
                let copy = |b: &Option<Tensor>| match b {
                    Some(b) if len > 0 => Ok::<_, DecoderError>(Some(grow(Some(b.clone()), b, len, len)?)),
                    _ => Ok(None),
                };
                Ok(LayerKv { k: copy(&l.k)?, v: copy(&l.v)?, len })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(KvCache { layers, max_len: self.max_len, position_delta: self.position_delta, dtype: self.dtype })
    }

    /// Bytes the buffers take (their capacity, not only the filled part).
    pub fn bytes(&self) -> usize {
        let size = |b: &Option<Tensor>| b.as_ref().map(|t| t.elem_count() * t.dtype().size_in_bytes()).unwrap_or(0);
        self.layers.iter().map(|l| size(&l.k) + size(&l.v)).sum()
    }

    /// Appends to layer `layer`; see [`LayerKv::append`].
    pub fn append(&mut self, layer: usize, k: &Tensor, v: &Tensor) -> Result<(Tensor, Tensor)> {
        let (max_len, dtype) = (self.max_len, self.dtype);
        let l =
            self.layers.get_mut(layer).ok_or_else(|| DecoderError::Config(format!("KV cache has no layer {layer}")))?;
        l.append(k, v, max_len, dtype)
    }
}
