//! Token embeddings: the lookup from token ids to rows of the `(vocab, hidden)` matrix, kept
//! dense or — for GGUF checkpoints on the CPU — in its quantized blocks, dequantizing only the
//! rows a prompt uses (the same blocks then serve as the tied LM head: one copy in memory).

use std::sync::Arc;

use candle_core::{DType, Device, Tensor};
use tessera_kernels::QMatrix;

use crate::error::{Result, TextError};

#[derive(Clone, Debug)]
pub struct TokenEmbedding {
    table: Table,
}

#[derive(Clone, Debug)]
enum Table {
    Dense(Tensor),
    /// Quantized rows; looked-up rows come out in `dtype` on `device`.
    Packed {
        weight: Arc<QMatrix>,
        dtype: DType,
        device: Device,
    },
}

impl TokenEmbedding {
    /// `weight`: `(vocab, hidden)`.
    pub fn new(weight: Tensor) -> Result<Self> {
        weight.dims2()?;
        Ok(Self { table: Table::Dense(weight) })
    }

    /// A quantized `(vocab, hidden)` table whose rows are dequantized to `dtype` on lookup.
    pub fn packed(weight: Arc<QMatrix>, dtype: DType, device: &Device) -> Self {
        Self { table: Table::Packed { weight, dtype, device: device.clone() } }
    }

    /// The whole table `(vocab, hidden)` (dequantized when it is kept quantized).
    pub fn weight(&self) -> Result<Tensor> {
        Ok(match &self.table {
            Table::Dense(w) => w.clone(),
            Table::Packed { weight, dtype, device } => {
                Tensor::from_vec(weight.dequantize(), (weight.rows(), weight.cols()), device)?.to_dtype(*dtype)?
            }
        })
    }

    /// The dtype looked-up rows come out in.
    pub fn dtype(&self) -> DType {
        match &self.table {
            Table::Dense(w) => w.dtype(),
            Table::Packed { dtype, .. } => *dtype,
        }
    }

    pub fn vocab_size(&self) -> usize {
        match &self.table {
            Table::Dense(w) => w.dims()[0],
            Table::Packed { weight, .. } => weight.rows(),
        }
    }

    pub fn hidden_size(&self) -> usize {
        match &self.table {
            Table::Dense(w) => w.dims()[1],
            Table::Packed { weight, .. } => weight.cols(),
        }
    }

    /// `ids`: `b` rows of `t` ids, row after row, on the host → `(b, t, hidden)` on the table's
    /// device. Every id is checked against the vocabulary here, before anything is sent: a
    /// decode step sends its one id and reads nothing back.
    pub fn lookup(&self, ids: &[u32], (b, t): (usize, usize)) -> Result<Tensor> {
        if ids.len() != b * t {
            return Err(candle_core::Error::Msg(format!("{} token ids for a ({b}, {t}) lookup", ids.len())).into());
        }
        let vocab = self.vocab_size();
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= vocab) {
            return Err(TextError::TokenOutOfRange { id: bad, vocab_size: vocab });
        }
        let h = self.hidden_size();
        let rows = match &self.table {
            Table::Dense(w) => w.index_select(&Tensor::from_slice(ids, ids.len(), w.device())?, 0)?,
            Table::Packed { weight, dtype, device } => {
                let mut out = vec![0f32; ids.len() * h];
                for (&id, row) in ids.iter().zip(out.chunks_exact_mut(h)) {
                    weight.dequantize_rows(id as usize, id as usize + 1, row);
                }
                Tensor::from_vec(out, (ids.len(), h), device)?.to_dtype(*dtype)?
            }
        };
        Ok(rows.reshape((b, t, h))?)
    }
}
