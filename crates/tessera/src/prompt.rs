//! A prompt as the model runs it, built once: the token ids (each image's placeholder ids where
//! the family puts them) and the images, cut into chunks — runs of text ids and runs of one
//! image's tokens — from which the sequence length, the image positions and the input
//! embeddings are derived. `generate`, the embedding calls and `explain` take a `Prompt`, so a
//! caller gives its images once.

use std::ops::Range;

use candle_core::Tensor;
use tessera_text::{Content, ContentPart, Message, RenderOptions};
use tessera_vision::RgbImage;

use crate::config::PromptStyle;
use crate::error::{Result, TesseraError};
use crate::families::ImageFeatures;
use crate::model::Model;

/// The features of a prompt's images, by image index, while its blocks run: those the caller
/// put in (a server's cache of encoded images), and those the model encoded when a block first
/// needed an image that was not there, kept for the later blocks — so an image is encoded once
/// however many blocks its tokens span.
#[derive(Debug, Clone, Default)]
pub struct ImageInputs {
    features: Vec<Option<ImageFeatures>>,
    encoded: usize,
}

impl ImageInputs {
    /// Gives image `i` of the prompt these features (encoded earlier, or kept by a cache).
    pub fn insert(&mut self, i: usize, features: ImageFeatures) {
        if self.features.len() <= i {
            self.features.resize(i + 1, None);
        }
        self.features[i] = Some(features);
    }

    /// Whether image `i` has its features.
    pub fn contains(&self, i: usize) -> bool {
        matches!(self.features.get(i), Some(Some(_)))
    }

    /// How many images the model encoded into this set (not counting those inserted).
    pub fn encoded(&self) -> usize {
        self.encoded
    }

    /// Image `i`'s features: kept ones, or `model`'s encoding of `img`, kept for the next block.
    fn get_or_encode(&mut self, model: &Model, i: usize, img: &RgbImage) -> Result<ImageFeatures> {
        if let Some(Some(f)) = self.features.get(i) {
            return Ok(f.clone());
        }
        let f = model.encode_image(img)?;
        self.encoded += 1;
        self.insert(i, f.clone());
        Ok(f)
    }
}

/// One run of the sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk {
    /// `ids[range]`, embedded as tokens.
    Text(Range<usize>),
    /// Tokens `tokens` of image `image` (one image may span several runs, e.g. Idefics3's tiles
    /// with their text markers between them).
    Image { image: usize, tokens: Range<usize> },
}

impl Chunk {
    /// Positions this chunk takes in the sequence.
    pub fn len(&self) -> usize {
        match self {
            Self::Text(r) => r.len(),
            Self::Image { tokens, .. } => tokens.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[derive(Debug, Clone)]
pub struct Prompt {
    pub(crate) ids: Vec<u32>,
    pub(crate) images: Vec<RgbImage>,
    pub(crate) chunks: Vec<Chunk>,
}

impl Prompt {
    /// The token ids (with the Hugging Face families' image placeholder ids).
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    pub fn images(&self) -> &[RgbImage] {
        &self.images
    }

    /// The sequence's runs, in order.
    pub fn chunks(&self) -> &[Chunk] {
        &self.chunks
    }

    /// Positions in the sequence (text tokens + image tokens).
    pub fn len(&self) -> usize {
        self.chunks.iter().map(Chunk::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Positions holding image tokens.
    pub fn image_positions(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut at = 0;
        for c in &self.chunks {
            if let Chunk::Image { tokens, .. } = c {
                out.extend(at..at + tokens.len());
            }
            at += c.len();
        }
        out
    }

    /// Each text token's sequence position and id.
    pub fn text_positions(&self) -> Vec<(usize, u32)> {
        let mut out = Vec::new();
        let mut at = 0;
        for c in &self.chunks {
            if let Chunk::Text(r) = c {
                out.extend(r.clone().map(|i| (at + i - r.start, self.ids[i])));
            }
            at += c.len();
        }
        out
    }

    /// The maximal runs of consecutive image positions (an image's tokens, or several images'
    /// when nothing separates them), as the reference groups them for its image masks.
    pub fn image_runs(&self) -> Vec<Range<usize>> {
        let mut runs: Vec<Range<usize>> = Vec::new();
        let mut at = 0;
        for c in &self.chunks {
            if let Chunk::Image { tokens, .. } = c {
                match runs.last_mut() {
                    Some(last) if last.end == at => last.end = at + tokens.len(),
                    _ => runs.push(at..at + tokens.len()),
                }
            }
            at += c.len();
        }
        runs
    }

    /// The chunks covering sequence positions `range`, cut at its ends.
    pub fn chunks_in(&self, range: Range<usize>) -> Vec<Chunk> {
        let mut out = Vec::new();
        let mut at = 0;
        for c in &self.chunks {
            let (lo, hi) = (range.start.max(at), range.end.min(at + c.len()));
            if lo < hi {
                let (a, b) = (lo - at, hi - at);
                out.push(match c {
                    Chunk::Text(r) => Chunk::Text(r.start + a..r.start + b),
                    Chunk::Image { image, tokens } => {
                        Chunk::Image { image: *image, tokens: tokens.start + a..tokens.start + b }
                    }
                });
            }
            at += c.len();
        }
        out
    }

    /// How many positions hold image tokens.
    pub fn image_tokens(&self) -> usize {
        self.chunks.iter().filter(|c| matches!(c, Chunk::Image { .. })).map(Chunk::len).sum()
    }
}

impl Model {
    /// The prompt for a message about `images` (none for text): its token ids and images.
    ///
    /// - `raw`: the text as is, tokenized as the reference tokenizer does (with whatever BOS its
    ///   post-processor adds); for the Hugging Face vision families the text must carry one
    ///   image placeholder (`<image>`) per image, expanded as below.
    /// - otherwise a chat: the text is the user message (content `[image, …, image, text]` with
    ///   images), after an optional system message, rendered by the model's template. For the
    ///   Hugging Face vision families each image placeholder then expands to what the reference
    ///   processor writes (Idefics3: tiles and a global view; LLaVA/PaliGemma: one image token
    ///   per feature), and the processor's rule for special tokens applies (the tokenizer adds
    ///   its own, e.g. LLaVA's BOS, unless the rendered text starts with the BOS token).
    ///   PaliGemma has no template: its processor's layout `<image>…<bos>prompt\n` is used.
    pub fn encode_prompt(&self, text: &str, system: Option<&str>, raw: bool, images: &[RgbImage]) -> Result<Prompt> {
        if !images.is_empty() {
            self.check_image_count(images.len())?;
        }
        let placeholder = self.images.as_ref().and_then(|e| e.placeholder()).map(str::to_string);
        let paligemma = self.config.prompt == PromptStyle::PrefixLm;
        let (rendered, add_special) = if paligemma && (!raw || !images.is_empty()) {
            let image = placeholder.as_deref().unwrap_or("<image>");
            let bos = self.tokenizer.special().bos_token.clone().unwrap_or_default();
            // The processor turns the tokenizer's own BOS off: it writes it into the text.
            (tessera_text::paligemma_prompt(text, images.len(), image, &bos), false)
        } else if raw {
            (text.to_string(), true)
        } else {
            // Vision-language templates read every message as a list of parts.
            let message = |role: &str, images: usize, text: &str| {
                if placeholder.is_none() && images == 0 {
                    return Message::text(role, text);
                }
                let mut parts = vec![ContentPart::Image; images];
                parts.push(ContentPart::Text { text: text.to_string() });
                Message::parts(role, parts)
            };
            let mut messages = Vec::new();
            if let Some(s) = system {
                messages.push(message("system", 0, s));
            }
            messages.push(message("user", images.len(), text));
            return self.encode_chat(&messages, images);
        };
        self.tokenize_with_images(&rendered, add_special, images)
    }

    /// The prompt of a whole conversation: `messages` rendered by the model's chat template
    /// exactly as `apply_chat_template(messages, add_generation_prompt=True)` renders them, each
    /// image part expanded into its image's tokens. `images` are the images of the image parts,
    /// in order ([`tessera_text::Conversation`] reads both from the chat JSON). A text model's
    /// messages given as lists of text parts are rendered with their text joined.
    pub fn encode_chat(&self, messages: &[Message], images: &[RgbImage]) -> Result<Prompt> {
        self.encode_chat_with(messages, images, &RenderOptions::default()).map(|(prompt, _)| prompt)
    }

    /// [`encode_chat`](Self::encode_chat) with tools and template variables (`opts`, as
    /// `apply_chat_template(tools=…, **kwargs)`); also returns the rendered text.
    pub fn encode_chat_with(
        &self,
        messages: &[Message],
        images: &[RgbImage],
        opts: &RenderOptions,
    ) -> Result<(Prompt, String)> {
        let image_parts: usize = messages
            .iter()
            .map(|m| match &m.content {
                Content::Parts(p) => p.iter().filter(|p| matches!(p, ContentPart::Image)).count(),
                Content::Text(_) | Content::Null => 0,
            })
            .sum();
        if image_parts != images.len() {
            return Err(TesseraError::InvalidInput(format!(
                "the messages have {image_parts} image part(s) but {} image(s) were given",
                images.len()
            )));
        }
        if !images.is_empty() {
            self.check_image_count(images.len())?;
        }
        if self.config.prompt == PromptStyle::PrefixLm {
            return Err(TesseraError::InvalidInput(format!(
                "{} (PaliGemma) has no chat template: give one prompt (it follows the image tokens)",
                self.info.source.path().display()
            )));
        }
        let placeholder = self.images.as_ref().and_then(|e| e.placeholder());
        let flat;
        let messages = if placeholder.is_none() {
            flat = messages
                .iter()
                .map(|m| match &m.content {
                    Content::Parts(parts) => {
                        let text: String = parts
                            .iter()
                            .filter_map(|p| match p {
                                ContentPart::Text { text } => Some(text.as_str()),
                                ContentPart::Image => None,
                            })
                            .collect();
                        m.with_content(Content::Text(text))
                    }
                    Content::Text(_) | Content::Null => m.clone(),
                })
                .collect::<Vec<_>>();
            &flat[..]
        } else {
            messages
        };
        let rendered = self.render_chat_with(messages, true, opts)?;
        // A text model's chat template carries all its special tokens; a processor adds the
        // tokenizer's unless the text already starts with BOS.
        let add = placeholder.is_some()
            && !self.tokenizer.special().bos_token.as_deref().is_some_and(|b| !b.is_empty() && rendered.starts_with(b));
        Ok((self.tokenize_with_images(&rendered, add, images)?, rendered))
    }

    /// Tokenizes `text`, each image placeholder in it first expanded into its image's tokens.
    fn tokenize_with_images(&self, text: &str, add_special: bool, images: &[RgbImage]) -> Result<Prompt> {
        let placeholder = self.images.as_ref().and_then(|e| e.placeholder());
        let expanded = match (placeholder, self.images.as_ref()) {
            (Some(p), Some(enc)) => {
                let texts: Vec<String> = images
                    .iter()
                    .enumerate()
                    .filter_map(|(i, img)| enc.placeholder_text_at(img, i).transpose())
                    .collect::<Result<_>>()?;
                tessera_text::expand_placeholders(text, p, &texts)?
            }
            _ => text.to_string(),
        };
        self.prompt(self.tokenizer.encode(&expanded, add_special)?, images)
    }

    /// The prompt `ids` and `images` make, cut into chunks: the native model's image tokens
    /// come first, then the text; the Hugging Face families' images replace the placeholder
    /// ids in `ids` (as many as the images' tokens: each placeholder expanded as the processor
    /// does).
    pub fn prompt(&self, ids: Vec<u32>, images: &[RgbImage]) -> Result<Prompt> {
        if !images.is_empty() {
            self.check_image_count(images.len())?;
        }
        let tokens: Vec<usize> = match &self.images {
            Some(e) => images.iter().map(|img| e.tokens_for(img)).collect::<Result<_>>()?,
            None => Vec::new(),
        };
        let chunks = match self.images.as_ref().and_then(|e| e.image_token_id()) {
            Some(image_id) => {
                if ids.is_empty() {
                    return Err(TesseraError::InvalidInput("empty input: no tokens".into()));
                }
                let slots = ids.iter().filter(|&&t| t == image_id).count();
                let needed: usize = tokens.iter().sum();
                if slots != needed {
                    return Err(TesseraError::InvalidInput(format!(
                        "the prompt has {slots} image-token positions but the {} image(s) give {needed} image tokens \
                         (each image needs its placeholder expanded as the processor does)",
                        images.len()
                    )));
                }
                crate::prompt::placeholder_chunks(&ids, image_id, &tokens)
            }
            None => {
                let mut chunks: Vec<Chunk> =
                    tokens.iter().enumerate().map(|(image, &n)| Chunk::Image { image, tokens: 0..n }).collect();
                if !ids.is_empty() {
                    chunks.push(Chunk::Text(0..ids.len()));
                }
                if chunks.is_empty() {
                    return Err(TesseraError::InvalidInput("empty prompt: no images and no tokens".into()));
                }
                chunks
            }
        };
        let prompt = Prompt { ids, images: images.to_vec(), chunks };
        // Before any image is encoded: the images' token counts come from their sizes alone.
        if prompt.len() > self.max_positions() {
            return Err(TesseraError::InvalidInput(format!(
                "the prompt takes {} positions ({} of them image tokens) but the model's context is {} tokens",
                prompt.len(),
                prompt.image_tokens(),
                self.max_positions()
            )));
        }
        Ok(prompt)
    }

    /// The prompt's input embeddings `(1, t, hidden)`: each image encoded once, its tokens
    /// placed where its chunks are (transformers' `masked_scatter` for the Hugging Face
    /// families), the text embedded as tokens.
    pub fn prompt_embeddings(&self, prompt: &Prompt) -> Result<Tensor> {
        Ok(self.inputs(prompt, 0..prompt.len(), &mut ImageInputs::default())?.0)
    }

    /// The decoder's inputs for sequence positions `range` of `prompt`: the embeddings
    /// `(1, t, hidden)` and, where the images' features carry them (Qwen3-VL's DeepStack), one
    /// `(1, t, hidden)` addition per early decoder layer — the images' rows at their positions,
    /// zeros elsewhere. Only the images with tokens in `range` are taken from `images` or
    /// encoded into it.
    pub(crate) fn inputs(
        &self,
        prompt: &Prompt,
        range: Range<usize>,
        images: &mut ImageInputs,
    ) -> Result<(Tensor, Vec<Tensor>)> {
        let chunks = prompt.chunks_in(range);
        let image_id = self.images.as_ref().and_then(|e| e.image_token_id());
        // A placeholder id outside the vocabulary embeds as id 0 before it is replaced.
        let vocab = self.embed.vocab_size() as u32;
        // The ids the range's text chunks span, embedded once (not the whole prompt per block).
        let span = chunks
            .iter()
            .filter_map(|c| match c {
                Chunk::Text(r) => Some(r.clone()),
                Chunk::Image { .. } => None,
            })
            .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end));
        let text = match &span {
            Some(s) => {
                let safe: Vec<u32> = prompt.ids[s.clone()]
                    .iter()
                    .map(|&t| if Some(t) == image_id && t >= vocab { 0 } else { t })
                    .collect();
                Some(self.embed_ids(&safe)?)
            }
            None => None,
        };
        let first_id = span.as_ref().map_or(0, |s| s.start);
        let dtype = (!prompt.ids.is_empty()).then(|| self.embed.dtype());
        let mut feats: Vec<Option<ImageFeatures>> = vec![None; prompt.images.len()];
        for c in &chunks {
            if let Chunk::Image { image, .. } = c {
                if feats[*image].is_none() {
                    let f = images.get_or_encode(self, *image, &prompt.images[*image])?;
                    feats[*image] = Some(match dtype {
                        Some(d) => f.to_dtype(d)?,
                        None => f,
                    });
                }
            }
        }
        let image = |i: usize| {
            feats[i].as_ref().ok_or_else(|| TesseraError::InvalidInput(format!("image {i} was not encoded")))
        };
        let layer_additions = |i: usize| feats[i].as_ref().map_or(&[][..], |f| f.layer_additions());
        let parts = chunks
            .iter()
            .map(|c| match (c, &text) {
                (Chunk::Text(r), Some(text)) => Ok(text.narrow(1, r.start - first_id, r.len())?),
                (Chunk::Image { image: i, tokens }, _) => {
                    Ok(image(*i)?.tokens().narrow(1, tokens.start, tokens.len())?)
                }
                (Chunk::Text(_), None) => Err(TesseraError::InvalidInput("a text chunk without tokens".into())),
            })
            .collect::<Result<Vec<_>>>()?;
        let embeds = Tensor::cat(&parts, 1)?;
        let levels = (0..feats.len()).map(|i| layer_additions(i).len()).max().unwrap_or(0);
        let additions = (0..levels)
            .map(|level| {
                let rows = chunks
                    .iter()
                    .map(|c| match c {
                        Chunk::Text(r) => {
                            Ok(Tensor::zeros((r.len(), embeds.dim(2)?), embeds.dtype(), embeds.device())?)
                        }
                        Chunk::Image { image, tokens } => {
                            Ok(layer_additions(*image)[level].narrow(0, tokens.start, tokens.len())?)
                        }
                    })
                    .collect::<Result<Vec<_>>>()?;
                Ok(Tensor::cat(&rows, 0)?.unsqueeze(0)?)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((embeds, additions))
    }
}

/// The chunks of `ids` for a family whose images replace placeholder ids: runs of `image_id`
/// are the images' tokens in order, `tokens_per_image[i]` each.
pub(crate) fn placeholder_chunks(ids: &[u32], image_id: u32, tokens_per_image: &[usize]) -> Vec<Chunk> {
    let mut chunks = Vec::new();
    let (mut image, mut used) = (0usize, 0usize);
    let mut i = 0;
    while i < ids.len() {
        let is_image = ids[i] == image_id;
        let run = ids[i..].iter().take_while(|&&t| (t == image_id) == is_image).count();
        if !is_image {
            chunks.push(Chunk::Text(i..i + run));
        } else {
            // A run may cover the end of one image and the start of the next.
            let mut left = run;
            while left > 0 && image < tokens_per_image.len() {
                let take = left.min(tokens_per_image[image] - used);
                chunks.push(Chunk::Image { image, tokens: used..used + take });
                used += take;
                left -= take;
                if used == tokens_per_image[image] {
                    image += 1;
                    used = 0;
                }
            }
        }
        i += run;
    }
    chunks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholder_runs_become_each_images_tokens() {
        // text, 3 tokens of image 0, text, image 0's last token and all 2 of image 1 in one run.
        let ids = [5, 9, 9, 9, 6, 9, 9, 9, 7];
        let chunks = placeholder_chunks(&ids, 9, &[4, 2]);
        assert_eq!(
            chunks,
            vec![
                Chunk::Text(0..1),
                Chunk::Image { image: 0, tokens: 0..3 },
                Chunk::Text(4..5),
                Chunk::Image { image: 0, tokens: 3..4 },
                Chunk::Image { image: 1, tokens: 0..2 },
                Chunk::Text(8..9),
            ]
        );
        let p = Prompt { ids: ids.to_vec(), images: Vec::new(), chunks };
        assert_eq!(p.len(), 9);
        assert_eq!(p.image_positions(), vec![1, 2, 3, 5, 6, 7]);
        assert_eq!(p.image_tokens(), 6);
        assert_eq!(p.image_runs(), vec![1..4, 5..8], "image 0's end and image 1 form one run");
        assert_eq!(p.text_positions(), vec![(0, 5), (4, 6), (8, 7)]);
    }
}
