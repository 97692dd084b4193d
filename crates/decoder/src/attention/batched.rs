//! A batched decode step: `x` `(1, n, hidden)`, row `i` the next token of the sequence whose
//! cache is `caches[i]`. The projections see every row at once; each row attends over its own
//! cache and computes what it would alone. On the CPU kernels in f32
//! ([`Path::BatchedRows`](super::Path::BatchedRows)) the rows stay in the projections' token-major
//! layout, their keys and values go into the caches from the kernels' pool threads, and one kernel
//! call attends every row; elsewhere ([`Path::EachRow`](super::Path::EachRow)) each row runs the
//! generic path's attention in turn.

use candle_core::Tensor;

use super::fused::kv_layout;
use super::{several_caches, Attention, Projected};
use crate::error::{DecoderError, Result};
use crate::kv_cache::KvCache;
use crate::mask::AttentionMask;

/// Row `i` of `k`, `v` `(1, kv_heads, n, d)` appended to `caches[i]`, the caches shared out
/// among the kernels' pool threads (one contiguous share each): every write lands in a
/// different sequence's buffer, a cache miss apiece, which the threads then overlap.
fn append_rows_in_parallel(caches: &mut [KvCache], layer: usize, k: &Tensor, v: &Tensor) -> Result<()> {
    use std::sync::Mutex;
    let pool = tessera_kernels::ThreadPool::global();
    let per = caches.len().div_ceil(pool.threads()).max(1);
    let shares: Vec<Mutex<&mut [KvCache]>> = caches.chunks_mut(per).map(Mutex::new).collect();
    let failed: Mutex<Option<DecoderError>> = Mutex::new(None);
    pool.run(&|part| {
        let Some(share) = shares.get(part) else { return };
        let mut share = share.lock().unwrap_or_else(|e| e.into_inner());
        for (j, cache) in share.iter_mut().enumerate() {
            if let Err(e) = cache.append_row(layer, k, v, part * per + j) {
                failed.lock().unwrap_or_else(|e| e.into_inner()).get_or_insert(e);
                return;
            }
        }
    })
    .map_err(|e| DecoderError::Config(format!("KV cache writes: {e}")))?;
    match failed.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A KV cache element type the kernels read (f32, f16), taken out of Candle's CPU storage.
trait CpuKv: tessera_kernels::attention::KvValue {
    /// The storage's values when it is a CPU storage of this type.
    fn values(s: &candle_core::Storage) -> Option<&[Self]>;
}

impl CpuKv for f32 {
    fn values(s: &candle_core::Storage) -> Option<&[f32]> {
        match s {
            candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)) => Some(v),
            _ => None,
        }
    }
}

impl CpuKv for half::f16 {
    fn values(s: &candle_core::Storage) -> Option<&[half::f16]> {
        match s {
            candle_core::Storage::Cpu(candle_core::CpuStorage::F16(v)) => Some(v),
            _ => None,
        }
    }
}

impl Attention {
    /// [`Path::BatchedRows`](super::Path::BatchedRows): from the projections `q`, `k`, `v`
    /// `(1, n, ·)` of its `n` rows, row `i` at the next position of `caches[i]`: q/k norms and
    /// RoPE in the projections' own layout (one token after another: no copies into heads), each
    /// row's keys and values into its cache, attention → `(1, n, heads·d)`. Each row computes what
    /// the one-sequence path computes for it alone.
    pub(super) fn batched_rows(&self, call: Projected<'_>) -> Result<Tensor> {
        let (caches, layer) = several_caches(call.cache)?;
        let (q, k, v, rope) = (call.q, call.k, call.v, call.rope);
        let (n, d) = (caches.len(), self.head_dim);
        let q = q.reshape((1, n, self.num_heads, d))?;
        let k = k.reshape((1, n, self.num_kv_heads, d))?;
        let v = v.reshape((1, n, self.num_kv_heads, d))?;
        let v = match &self.v_norm {
            Some(norm) => norm.forward(&v)?,
            None => v,
        };
        let (q, k) = match &self.qk_norm {
            Some((qn, kn)) => (qn.forward(&q)?, kn.forward(&k)?),
            None => (q, k),
        };
        let (q, k) = match rope {
            Some(rope) => (rope.apply_token_major(&q)?, rope.apply_token_major(&k)?),
            None => (q, k),
        };
        // (1, kv_heads, n, d) views; the cache's write reads any strides.
        let (k, v) = (k.transpose(1, 2)?, v.transpose(1, 2)?);
        append_rows_in_parallel(caches, layer, &k, &v)?;
        self.attend_rows(&q, caches, layer, call.mask)
    }

    /// A batched decode step's attention on the CPU: row `i` of `q` `(1, n, heads, d)` over
    /// layer `layer` of its own cache `caches[i]` (f32 or f16), all rows in one kernel call
    /// (one pool fork/join per layer, not one per row) → `(1, n, heads·d)`. Each row computes
    /// what the fused kernel computes for it alone.
    fn attend_rows(&self, q: &Tensor, caches: &[KvCache], layer: usize, mask: &AttentionMask) -> Result<Tensor> {
        use candle_core::{CpuStorage, Storage};
        let (n, d) = (caches.len(), self.head_dim);
        let q = q.contiguous()?;
        let (qs, ql) = q.storage_and_layout();
        let q = crate::cpu_op::storage_f32(&qs, ql, "batched attention's queries")?; // (n, heads, d)
        let mut guards = Vec::with_capacity(n);
        for cache in caches {
            let (k, v, len) = cache
                .layer(layer)
                .ok_or_else(|| DecoderError::Config(format!("a batched step's cache has no layer {layer}")))?;
            guards.push((k.storage_and_layout(), v.storage_and_layout(), len));
        }
        let stores: Vec<_> =
            guards.iter().map(|((ks, kl), (vs, vl), len)| ((&**ks, *kl), (&**vs, *vl), *len)).collect();
        let mut out = vec![0f32; n * self.num_heads * d];
        match stores.first().map(|((ks, _), _, _)| ks) {
            Some(Storage::Cpu(CpuStorage::F16(_))) => self.attend_rows_in::<half::f16>(q, &stores, mask, &mut out),
            Some(Storage::Cpu(CpuStorage::F32(_))) | None => self.attend_rows_in::<f32>(q, &stores, mask, &mut out),
            Some(_) => Err(DecoderError::Config("batched attention takes f32 or f16 CPU caches".into())),
        }?;
        drop(stores);
        drop(guards); // the caches' read locks
        Ok(Tensor::from_vec(out, (1, n, self.num_heads * d), &candle_core::Device::Cpu)?)
    }

    /// [`attend_rows`](Self::attend_rows) over caches whose values are `E` (every cache of a
    /// model holds one dtype): `q` `(n, heads, d)`, each row's key and value storage.
    #[allow(clippy::type_complexity)]
    fn attend_rows_in<E: CpuKv>(
        &self,
        q: &[f32],
        stores: &[(
            (&candle_core::Storage, &candle_core::Layout),
            (&candle_core::Storage, &candle_core::Layout),
            usize,
        )],
        mask: &AttentionMask,
        out: &mut [f32],
    ) -> Result<()> {
        let (heads, d) = (self.num_heads, self.head_dim);
        let mut rows = Vec::with_capacity(stores.len());
        for (i, &((ks, kl), (vs, vl), tk)) in stores.iter().enumerate() {
            let (Some(k), Some(v)) = (E::values(ks), E::values(vs)) else {
                return Err(DecoderError::Config("a batched step's caches hold different dtypes".into()));
            };
            rows.push(tessera_kernels::attention::RowAttention {
                q: &q[i * heads * d..][..heads * d],
                k,
                kl: kv_layout(kl, "k")?,
                v,
                vl: kv_layout(vl, "v")?,
                tk,
                visible: mask.visible_keys(tk - 1, tk),
            });
        }
        let pool = tessera_kernels::ThreadPool::global();
        tessera_kernels::attention::attend_rows(pool, &rows, heads, self.num_kv_heads, d, self.scale as f32, out)
            .map_err(|e| DecoderError::Config(format!("batched attention: {e}")))
    }

    /// [`Path::EachRow`](super::Path::EachRow): the heads of the `n` rows, each row's keys and
    /// values into its own cache, then each row's query over its cache through
    /// [`attend`](Self::attend) (bias built per row) → `(1, n, heads·d)`.
    pub(super) fn each_row(&self, call: Projected<'_>) -> Result<Tensor> {
        let (caches, layer) = several_caches(call.cache)?;
        let (q, k, v) = self.heads(call.q, call.k, call.v, call.rope, false)?;
        let t = q.dim(2)?;
        let mut kvs = Vec::with_capacity(t);
        for (i, cache) in caches.iter_mut().enumerate() {
            kvs.push(cache.append(layer, &k.narrow(2, i, 1)?, &v.narrow(2, i, 1)?)?);
        }
        let mut outs = Vec::with_capacity(t);
        for (i, (kc, vc)) in kvs.iter().enumerate() {
            outs.push(self.attend(&q.narrow(2, i, 1)?.contiguous()?, kc, vc, call.mask, None)?);
        }
        Ok(Tensor::cat(&outs, 1)?)
    }
}
