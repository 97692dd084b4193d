//! The image side of a [`Model`](crate::Model): how many tokens an image takes, its placeholder
//! text, pixel values and encodings — each a question to the family's
//! [`ImageSide`](crate::families::ImageSide), with the checks every family shares (image counts,
//! token budgets, the context).

use candle_core::Tensor;
use tessera_vision::RgbImage;

use crate::error::{Result, TesseraError};
use crate::families::{ImageFeatures, ImageSide};

/// The image side of a [`Model`]: how many tokens an image takes, its placeholder text, pixel
/// values and encodings.
impl crate::model::Model {
    /// Refuses more images than the model takes, naming the model.
    pub(crate) fn check_image_count(&self, n: usize) -> Result<()> {
        let max = self.max_images();
        if max == 0 {
            self.vision()?;
        }
        if n > max {
            return Err(TesseraError::InvalidInput(format!(
                "{n} images given but model `{}` accepts at most {max}",
                self.info.source.path().display()
            )));
        }
        Ok(())
    }

    /// Image tokens per image, for models where that does not depend on the image (`None` for
    /// text models and for Idefics3, whose tile count depends on the image's size).
    pub fn image_tokens_per_image(&self) -> Option<usize> {
        self.images.as_ref()?.fixed_tokens()
    }

    /// Image tokens `image` becomes in the sequence.
    pub fn image_tokens(&self, image: &RgbImage) -> Result<usize> {
        self.vision()?.tokens_for(image)
    }

    /// What a raw prompt writes for each image, before the processor's expansion (`<image>`;
    /// Gemma 3's `<start_of_image>`); `None` for text models and the native model.
    pub fn image_placeholder(&self) -> Option<&str> {
        self.images.as_ref()?.placeholder()
    }

    /// The prompt text that stands for `image` as the prompt's `index`-th image (Hugging Face
    /// families; `None` for the native model, whose image tokens go before the text).
    pub fn image_placeholder_text(&self, image: &RgbImage, index: usize) -> Result<Option<String>> {
        self.vision()?.placeholder_text_at(image, index)
    }

    /// Refuses an image that would take more than `max_tokens` image tokens.
    pub fn check_image_budget(&self, image: &RgbImage, max_tokens: usize, name: &str) -> Result<()> {
        let n = self.image_tokens(image)?;
        if n > max_tokens {
            return Err(TesseraError::InvalidInput(format!(
                "image {name} ({}×{}) takes {n} image tokens, over the budget of {max_tokens} per image",
                image.width, image.height
            )));
        }
        Ok(())
    }

    /// The most images one prompt may carry (0 for text-only models).
    pub fn max_images(&self) -> usize {
        self.images.as_ref().map(|e| e.max_images()).unwrap_or(0)
    }

    /// A description of the image side for `tessera info`.
    pub fn vision_description(&self) -> Option<String> {
        self.images.as_ref().map(|e| e.describe())
    }

    /// The preprocessed pixel values the model sees for `image`: `(3, H, W)` for the native
    /// model, `(views, 3, H, W)` for the Hugging Face families (Idefics3: tiles + global view).
    pub fn pixel_values(&self, image: &RgbImage) -> Result<Tensor> {
        self.vision_for(image)?.pixel_values(image, &self.device)
    }

    /// The image as the model sees it (resized, not normalized) and its patch grid `(rows, cols)`.
    pub fn model_view(&self, image: &RgbImage) -> Result<(RgbImage, usize, usize)> {
        self.vision_for(image)?.model_view(image)
    }

    /// `image` encoded: its image tokens `(1, N, hidden)` in the decoder's width (and whatever
    /// else the family feeds the decoder), as a prompt places them.
    pub fn encode_image(&self, image: &RgbImage) -> Result<ImageFeatures> {
        self.vision_for(image)?.encode(image, &self.device)
    }

    /// The image encoder, once `image` is known to fit the model's context: an image's views
    /// are counted from its size alone, so one that could never be in a prompt (a thin strip
    /// that pan-and-scan cuts into thousands of crops, say) is refused before any pixel work.
    pub(crate) fn vision_for(&self, image: &RgbImage) -> Result<&dyn ImageSide> {
        let vision = self.vision()?;
        let tokens = vision.tokens_for(image)?;
        if tokens > self.max_positions() {
            return Err(TesseraError::InvalidInput(format!(
                "the {}×{} image takes {tokens} image tokens, more than the model's context of {} tokens",
                image.width,
                image.height,
                self.max_positions()
            )));
        }
        Ok(vision)
    }

    pub(crate) fn vision(&self) -> Result<&dyn ImageSide> {
        self.images.as_deref().ok_or_else(|| TesseraError::InvalidInput(self.no_images_reason()))
    }

    /// Why this model takes no images, in one line: a text model, or a GGUF text model loaded
    /// without its vision-language pair's `mmproj` file.
    pub fn no_images_reason(&self) -> String {
        let path = self.info.source.path().display();
        match &self.info.source {
            crate::source::ModelSource::Gguf(_) => format!(
                "model `{path}` ({}) takes no images: a GGUF holds only the text model, and no mmproj file (the \
                 vision tower and projector) was given with --mmproj or found beside it",
                self.config.family
            ),
            _ => format!("model `{path}` ({}) takes no images", self.config.family),
        }
    }
}
