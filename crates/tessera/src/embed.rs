//! The embedding and analysis API, [`Analysis`] ([`Model::analysis`]): token embeddings (rows
//! of the embedding matrix), contextual embeddings (hidden states at any layer, pooled or per
//! token), image embeddings, embedding arithmetic with cosine nearest neighbours, and attention
//! weights you can inspect — what a model offers beside generation, kept off [`Model`]'s own
//! interface.
//!
//! Layer indices follow transformers' `output_hidden_states`: `0` is the token embeddings,
//! `L` (1 ≤ L < N) the output of block `L`, and `N` (the number of blocks) the output of the
//! last block after the final norm.

use candle_core::{DType, Tensor, D};
use serde::Serialize;
use tessera_decoder::Trace;
use tessera_vision::RgbImage;

use crate::error::{Result, TesseraError};
use crate::model::Model;
use crate::prompt::{ImageInputs, Prompt};

/// How per-token vectors become one vector.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pooling {
    /// Keep one vector per token.
    None,
    /// The mean over tokens.
    Mean,
    /// The last token's vector (what a causal model has read everything by).
    Last,
    /// The vector of the first token whose text (trimmed) equals this string.
    Token(String),
}

/// Hidden states for one input.
#[derive(Debug, Clone)]
pub struct Embeddings {
    /// Token ids of the text part.
    pub ids: Vec<u32>,
    /// The token strings, as the tokenizer decodes each id alone.
    pub tokens: Vec<String>,
    /// Positions the images take before the text — their tokens, and the markers around them
    /// where the family writes any (Idefics3's tile markers, Gemma 3's `<start_of_image>` …
    /// `<end_of_image>`); their rows come first in `vectors`.
    pub image_tokens: usize,
    /// The layer these vectors come from.
    pub layer: usize,
    /// `(positions, hidden)` f32, or `(1, hidden)` once pooled.
    pub vectors: Tensor,
}

/// A token with its cosine similarity to a query.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Neighbour {
    pub id: u32,
    pub token: String,
    pub similarity: f32,
}

/// A model's embedding and analysis calls (see the module docs); `model.analysis()`.
#[derive(Clone, Copy)]
pub struct Analysis<'m> {
    model: &'m Model,
}

impl Model {
    /// The embedding and analysis calls over this model.
    pub fn analysis(&self) -> Analysis<'_> {
        Analysis { model: self }
    }
}

/// Analysis runs the model's own calls (its forward, tokenizer, image side) as they are.
impl std::ops::Deref for Analysis<'_> {
    type Target = Model;

    fn deref(&self) -> &Model {
        self.model
    }
}

impl Analysis<'_> {
    /// Number of hidden-state layers: `num_hidden_layers + 1` (embeddings included).
    pub fn num_hidden_states(&self) -> usize {
        self.config().decoder.num_hidden_layers + 1
    }

    fn check_layer(&self, layer: usize) -> Result<()> {
        let n = self.config().decoder.num_hidden_layers;
        if layer > n {
            return Err(TesseraError::InvalidInput(format!(
                "layer {layer} is out of range: this model has layers 0 (embeddings) to {n} (final norm)"
            )));
        }
        Ok(())
    }

    /// The base embedding of one token `(hidden,)`: the same wherever the token appears (scaled
    /// as the model scales its inputs, so it equals layer 0 of the hidden states).
    pub fn token_embedding(&self, id: u32) -> Result<Tensor> {
        Ok(self.embed_ids(&[id])?.flatten_all()?.to_dtype(DType::F32)?)
    }

    /// Tokenizes `text` (no special tokens) and returns its ids, token strings and base embeddings.
    ///
    /// ```
    /// # let model = tessera::Model::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/shapes-vlm"), &Default::default())?;
    /// let e = model.analysis().token_embeddings("a red circle")?;
    /// assert_eq!(e.vectors.dims(), &[e.ids.len(), model.config().decoder.hidden_size]);
    /// // The base embedding of a token is the same wherever it appears.
    /// let again = model.analysis().token_embeddings("two blue circle")?;
    /// let circle = tessera::Pooling::Token("circle".into());
    /// let (a, b) = (e.pooled(&circle, false)?, again.pooled(&circle, false)?);
    /// assert_eq!(a.to_vec2::<f32>()?, b.to_vec2::<f32>()?);
    /// # Ok::<(), tessera::TesseraError>(())
    /// ```
    pub fn token_embeddings(&self, text: &str) -> Result<Embeddings> {
        let ids = self.encode_for_embedding(text)?;
        let vectors = self.embed_ids(&ids)?.squeeze(0)?.to_dtype(DType::F32)?;
        Ok(Embeddings { tokens: self.token_strings(&ids)?, ids, image_tokens: 0, layer: 0, vectors })
    }

    fn encode_for_embedding(&self, text: &str) -> Result<Vec<u32>> {
        if text.is_empty() {
            return Err(TesseraError::InvalidInput("empty text: nothing to embed".into()));
        }
        let ids = self.tokenizer().encode(text, true)?;
        if ids.is_empty() {
            return Err(TesseraError::InvalidInput(format!("{text:?} tokenizes to no tokens")));
        }
        Ok(ids)
    }

    /// Every id decoded alone.
    pub fn token_strings(&self, ids: &[u32]) -> Result<Vec<String>> {
        ids.iter().map(|&i| Ok(self.tokenizer().decode(&[i], false)?)).collect()
    }

    /// All hidden states (`num_hidden_states()` tensors of `(positions, hidden)`, f32) for
    /// `prompt`, indexed as transformers' `output_hidden_states`.
    pub fn hidden_states(&self, prompt: &Prompt) -> Result<Vec<Tensor>> {
        let mut trace = Trace { capture_hidden: true, ..Default::default() };
        let last = self.forward(prompt, .., &mut self.new_cache(), &mut ImageInputs::default(), &mut trace)?;
        let mut states = trace.hidden_states;
        // Replace the last block's raw output with the final-normed one, as transformers does.
        states.pop();
        states.push(last);
        states.into_iter().map(|t| Ok(t.squeeze(0)?.to_dtype(DType::F32)?)).collect()
    }

    /// Contextual embeddings of `text` (after `images`) at `layer` (default: the final norm).
    ///
    /// ```
    /// # let model = tessera::Model::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/shapes-vlm"), &Default::default())?;
    /// use tessera::{cosine, Pooling};
    /// let a = model.analysis().contextual_embeddings(&[], "a red circle", None)?;
    /// let b = model.analysis().contextual_embeddings(&[], "a blue circle", Some(2))?;
    /// assert_eq!(b.layer, 2);
    /// // The same token in two contexts: different vectors.
    /// let (ca, cb) = (a.pooled(&Pooling::Token("circle".into()), false)?, b.pooled(&Pooling::Token("circle".into()), false)?);
    /// assert!(cosine(&ca, &cb)? < 0.999);
    /// // A sentence vector: the mean over tokens, unit length.
    /// let v = a.pooled(&Pooling::Mean, true)?;
    /// assert!((v.sqr()?.sum_all()?.to_scalar::<f32>()? - 1.0).abs() < 1e-5);
    /// # Ok::<(), tessera::TesseraError>(())
    /// ```
    pub fn contextual_embeddings(&self, images: &[RgbImage], text: &str, layer: Option<usize>) -> Result<Embeddings> {
        let layer = layer.unwrap_or(self.config().decoder.num_hidden_layers);
        self.check_layer(layer)?;
        let ids = self.encode_for_embedding(text)?;
        let (sequence, image_tokens) = self.with_image_prefix(images, &ids)?;
        let mut states = self.hidden_states(&self.prompt(sequence, images)?)?;
        let vectors = states.swap_remove(layer);
        Ok(Embeddings { tokens: self.token_strings(&ids)?, ids, image_tokens, layer, vectors })
    }

    /// The ids to run for `images` then the text `ids`, and how many positions come before the
    /// text: the native model's image tokens go first by themselves; the Hugging Face families
    /// need each image's placeholder text, tokenized, before the text.
    fn with_image_prefix(&self, images: &[RgbImage], ids: &[u32]) -> Result<(Vec<u32>, usize)> {
        let mut prefix = Vec::new();
        let mut native_tokens = 0;
        for (i, img) in images.iter().enumerate() {
            match self.image_placeholder_text(img, i)? {
                Some(text) => prefix.extend(self.tokenizer().encode(&text, false)?),
                None => native_tokens += self.image_tokens(img)?,
            }
        }
        let before = prefix.len() + native_tokens;
        prefix.extend_from_slice(ids);
        Ok((prefix, before))
    }

    /// Contextual embeddings of several texts in one batched forward (right-padded; under the
    /// causal mask padding never changes earlier positions). Equal to one-by-one calls.
    ///
    /// ```
    /// # let model = tessera::Model::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/shapes-vlm"), &Default::default())?;
    /// let batch = model.analysis().contextual_embeddings_batch(&["a red circle", "two blue squares and a cross"], None)?;
    /// let single = model.analysis().contextual_embeddings(&[], "a red circle", None)?;
    /// let diff = (&batch[0].vectors - &single.vectors)?.abs()?.max_all()?.to_scalar::<f32>()?;
    /// assert!(diff < 1e-4);
    /// # Ok::<(), tessera::TesseraError>(())
    /// ```
    pub fn contextual_embeddings_batch(&self, texts: &[&str], layer: Option<usize>) -> Result<Vec<Embeddings>> {
        let layer = layer.unwrap_or(self.config().decoder.num_hidden_layers);
        self.check_layer(layer)?;
        if self.config().prompt == crate::PromptStyle::PrefixLm {
            // A prefix-LM prompt attends both ways: padding would be seen, so run one by one.
            return texts.iter().map(|t| self.contextual_embeddings(&[], t, Some(layer))).collect();
        }
        let all: Vec<Vec<u32>> = texts.iter().map(|t| self.encode_for_embedding(t)).collect::<Result<_>>()?;
        let longest = all.iter().map(Vec::len).max().unwrap_or(0);
        let pad = self.tokenizer().special().pad.or(self.eos_ids().first().copied()).unwrap_or(0);
        let mut flat = Vec::with_capacity(all.len() * longest);
        for ids in &all {
            flat.extend(ids.iter().copied());
            flat.extend(std::iter::repeat_n(pad, longest - ids.len()));
        }
        let mut trace = Trace { capture_hidden: true, ..Default::default() };
        let last = self.forward_ids(&flat, (all.len(), longest), &mut self.new_cache(), &mut trace)?;
        let states = trace.hidden_states;
        let chosen = if layer == self.config().decoder.num_hidden_layers { last } else { states[layer].clone() };
        all.into_iter()
            .enumerate()
            .map(|(i, ids)| {
                let vectors = chosen.get(i)?.narrow(0, 0, ids.len())?.to_dtype(DType::F32)?;
                Ok(Embeddings { tokens: self.token_strings(&ids)?, ids, image_tokens: 0, layer, vectors })
            })
            .collect()
    }

    /// Image embeddings `(N, hidden)` f32: the image tokens the decoder reads for `image`.
    ///
    /// ```
    /// # let model = tessera::Model::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/shapes-vlm"), &Default::default())?;
    /// # let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/shapes-vlm"));
    /// let image = tessera::load_image(&dir.join("examples/three_shapes.png"), tessera::DEFAULT_MAX_PIXELS)?;
    /// let tokens = model.analysis().image_embeddings(&image)?;
    /// assert_eq!(Some(tokens.dim(0)?), model.image_tokens_per_image());
    /// assert_eq!(tokens.dim(1)?, model.config().decoder.hidden_size);
    /// # Ok::<(), tessera::TesseraError>(())
    /// ```
    pub fn image_embeddings(&self, image: &RgbImage) -> Result<Tensor> {
        Ok(self.encode_image(image)?.tokens().squeeze(0)?.to_dtype(DType::F32)?)
    }

    /// The vision tower's patch features for `image`, f32 `(views, patches, tower_width)`: what
    /// the connector reads (LLaVA: the chosen layer, class token dropped with the `default`
    /// strategy; Idefics3: one view per tile plus the global view). The native model has no
    /// tower: its image tokens are returned, `(1, N, hidden)`.
    ///
    /// ```
    /// # let dir = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/vlm/llava-tiny"));
    /// let model = tessera::Model::load(&dir.to_string_lossy(), &Default::default())?;
    /// # let photo = dir.join("../../images/chelsea.png");
    /// let image = tessera::load_image(&photo, tessera::DEFAULT_MAX_PIXELS)?;
    /// let patches = model.analysis().image_patch_features(&image)?; // CLIP: 5×5 patches of width 32
    /// assert_eq!(patches.dims(), &[1, 25, 32]);
    /// let tokens = model.analysis().image_embeddings(&image)?; // projected to the decoder's width
    /// assert_eq!(tokens.dims(), &[25, model.config().decoder.hidden_size]);
    /// # Ok::<(), tessera::TesseraError>(())
    /// ```
    pub fn image_patch_features(&self, image: &RgbImage) -> Result<Tensor> {
        Ok(self.vision_for(image)?.tower_features(image, self.device())?.to_dtype(DType::F32)?)
    }

    /// The single token a word stands for: `" word"` (its in-sentence form) or `"word"`.
    pub fn word_token(&self, word: &str) -> Result<u32> {
        if word.trim().is_empty() {
            return Err(TesseraError::InvalidInput(format!("the word {word:?} is empty: give a word")));
        }
        for form in [format!(" {word}"), word.to_string()] {
            if let [id] = self.tokenizer().encode(&form, false)?.as_slice() {
                return Ok(*id);
            }
        }
        let pieces = self.token_strings(&self.tokenizer().encode(word, false)?)?;
        Err(TesseraError::InvalidInput(format!(
            "{word:?} is not a single token of this vocabulary (it splits into {pieces:?})"
        )))
    }

    /// The `k` tokens whose embeddings are most cosine-similar to `vector` `(hidden,)`,
    /// skipping `exclude`.
    pub fn nearest_tokens(&self, vector: &Tensor, k: usize, exclude: &[u32]) -> Result<Vec<Neighbour>> {
        let table = self.token_embedding_table().weight()?.to_dtype(DType::F32)?; // (vocab, hidden)
        let norms = table.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?; // (vocab, 1)
        let v = vector.to_dtype(DType::F32)?.flatten_all()?;
        let v = (&v / v.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()? as f64)?;
        let sims = table.matmul(&v.unsqueeze(1)?)?.broadcast_div(&norms)?.squeeze(1)?; // (vocab,)
        let sims: Vec<f32> = sims.to_vec1()?;
        let mut order: Vec<usize> = (0..sims.len()).filter(|i| !exclude.contains(&(*i as u32))).collect();
        order.sort_by(|&a, &b| sims[b].total_cmp(&sims[a]));
        order
            .into_iter()
            .take(k)
            .map(|i| {
                Ok(Neighbour { id: i as u32, token: self.tokenizer().decode(&[i as u32], false)?, similarity: sims[i] })
            })
            .collect()
    }

    /// `a − b + c` over the token embedding matrix; the top `k` tokens by cosine similarity,
    /// excluding the three inputs (e.g. king − man + woman).
    ///
    /// ```
    /// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf");
    /// let model = tessera::Model::load(path, &Default::default())?;
    /// let best = model.analysis().analogy("king", "man", "woman", 5)?;
    /// assert_eq!(best[0].token, " queen");
    /// # Ok::<(), tessera::TesseraError>(())
    /// ```
    pub fn analogy(&self, a: &str, b: &str, c: &str, k: usize) -> Result<Vec<Neighbour>> {
        let (ia, ib, ic) = (self.word_token(a)?, self.word_token(b)?, self.word_token(c)?);
        let v = ((self.token_embedding(ia)? - self.token_embedding(ib)?)? + self.token_embedding(ic)?)?;
        self.nearest_tokens(&v, k, &[ia, ib, ic])
    }

    /// Attention weights of `layers` for `prompt`: per layer `(heads, t, t)` f32.
    ///
    /// ```
    /// # let model = tessera::Model::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../../models/shapes-vlm"), &Default::default())?;
    /// let prompt = model.encode_prompt("Describe the image.", None, true, &[])?;
    /// let layers = model.analysis().attention_weights(&prompt, &[0, 1])?;
    /// let (layer, w) = &layers[1];
    /// let t = prompt.len();
    /// assert_eq!((*layer, w.dims()), (1, &[model.config().decoder.num_attention_heads, t, t][..]));
    /// // Every row is a distribution over the positions it may see.
    /// let sums: Vec<f32> = w.sum(2)?.flatten_all()?.to_vec1()?;
    /// assert!(sums.iter().all(|s| (s - 1.0).abs() < 1e-5));
    /// # Ok::<(), tessera::TesseraError>(())
    /// ```
    pub fn attention_weights(&self, prompt: &Prompt, layers: &[usize]) -> Result<Vec<(usize, Tensor)>> {
        let n = self.config().decoder.num_hidden_layers;
        if let Some(bad) = layers.iter().find(|&&l| l >= n) {
            return Err(TesseraError::InvalidInput(format!(
                "attention layer {bad} is out of range: this model has blocks 0 to {}",
                n - 1
            )));
        }
        let mut trace = Trace { attention_layers: layers.to_vec(), ..Default::default() };
        self.forward(prompt, .., &mut self.new_cache(), &mut ImageInputs::default(), &mut trace)?;
        trace.attentions.into_iter().map(|(l, w)| Ok((l, w.squeeze(0)?))).collect()
    }
}

impl Embeddings {
    /// Pools the vectors; `normalize` scales each resulting vector to unit L2 norm.
    pub fn pooled(&self, pooling: &Pooling, normalize: bool) -> Result<Tensor> {
        let v = &self.vectors;
        let out = match pooling {
            Pooling::None => v.clone(),
            Pooling::Mean => v.mean_keepdim(0)?,
            Pooling::Last => v.narrow(0, v.dim(0)? - 1, 1)?,
            Pooling::Token(tok) => {
                let i = self.tokens.iter().position(|t| t.trim() == tok.trim()).ok_or_else(|| {
                    TesseraError::InvalidInput(format!("token {tok:?} is not among {:?}", self.tokens))
                })?;
                v.narrow(0, self.image_tokens + i, 1)?
            }
        };
        Ok(if normalize { out.broadcast_div(&out.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?)? } else { out })
    }
}

/// Cosine similarity of two vectors of any shape with the same number of elements.
pub fn cosine(a: &Tensor, b: &Tensor) -> Result<f32> {
    let (a, b) = (a.flatten_all()?.to_dtype(DType::F32)?, b.flatten_all()?.to_dtype(DType::F32)?);
    let dot = (&a * &b)?.sum_all()?.to_scalar::<f32>()?;
    let na = a.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()?;
    let nb = b.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()?;
    Ok(dot / (na * nb))
}
