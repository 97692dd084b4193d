//! A prompt as the model runs it, built once: the token ids (each image's placeholder ids where
//! the family puts them) and the images, cut into chunks — runs of text ids and runs of one
//! image's tokens — from which the sequence length, the image positions and the input
//! embeddings are derived. `generate`, the embedding calls and `explain` take a `Prompt`, so a
//! caller gives its images once.

use std::ops::Range;

use tessera_vision::RgbImage;

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

    /// How many positions hold image tokens.
    pub fn image_tokens(&self) -> usize {
        self.chunks.iter().filter(|c| matches!(c, Chunk::Image { .. })).map(Chunk::len).sum()
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
        assert_eq!(p.text_positions(), vec![(0, 5), (4, 6), (8, 7)]);
    }
}
