//! Token embeddings: the lookup from token ids to rows of the `(vocab, hidden)` matrix.

use candle_core::Tensor;

use crate::error::{Result, TextError};

#[derive(Clone, Debug)]
pub struct TokenEmbedding {
    weight: Tensor,
}

impl TokenEmbedding {
    /// `weight`: `(vocab, hidden)`.
    pub fn new(weight: Tensor) -> Result<Self> {
        weight.dims2()?;
        Ok(Self { weight })
    }

    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    pub fn vocab_size(&self) -> usize {
        self.weight.dims()[0]
    }

    pub fn hidden_size(&self) -> usize {
        self.weight.dims()[1]
    }

    /// `ids`: `(b, t)` u32 → `(b, t, hidden)`. Every id is checked against the vocabulary.
    pub fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let flat = ids.flatten_all()?;
        let vocab = self.vocab_size();
        if let Some(&bad) = flat.to_vec1::<u32>()?.iter().find(|&&i| i as usize >= vocab) {
            return Err(TextError::TokenOutOfRange { id: bad, vocab_size: vocab });
        }
        let rows = self.weight.index_select(&flat, 0)?;
        Ok(rows.reshape((b, t, self.hidden_size()))?)
    }
}
