//! From image to patch tokens: decoding, preprocessing, patchify, vision towers and
//! connectors. Knows nothing about tokens or caches.
//!
//! - [`image_io`]: decode PNG/JPEG/WebP/GIF/BMP to 8-bit RGB as PIL's `convert("RGB")` does,
//!   with EXIF orientation and a pixel budget checked before decoding;
//! - [`resize`]: Pillow's resampling filters, bit for bit;
//! - [`preprocess`]: the `preprocessor_config.json` pipeline (resize, crop, rescale, normalize);
//! - [`patchify`]: patches by unfold + linear and by Conv2d (Dosovitskiy et al. 2020);
//! - [`native`]: the patch encoder of tessera's native single-stream model;
//! - [`tower`]: SigLIP and CLIP vision transformers;
//! - [`connector`]: from tower features to language-model tokens (pixel shuffle, MLP, linear);
//! - [`tiling`]: Idefics3/SmolVLM's image splitting into tiles plus a global view;
//! - [`crop_to_patches`]: InternVL's aspect-ratio tile grid plus a thumbnail;
//! - [`intern_vit`]: InternVL's vision tower (CLS token, layer scale);
//! - [`gemma4`]: Gemma 4's tower (learned 2-D positions, 2-D RoPE per half head, k×k pooling);
//! - [`pixtral`]: Mistral 3's Pixtral tower (native resolution, 2-D RoPE) and its patch-merger projector;
//! - [`rope2d`]: the axial 2-D RoPE angles Qwen2-VL's and Pixtral's towers share.

pub mod connector;
pub mod crop_to_patches;
pub mod error;
pub mod gemma4;
pub mod heatmap;
pub mod image_io;
pub mod intern_vit;
pub mod minicpm;
pub mod minicpm_slice;
pub mod native;
pub mod pan_and_scan;
pub mod patchify;
pub mod pixtral;
pub mod preprocess;
pub mod qwen2_vl;
pub mod resize;
pub mod rope2d;
pub mod tiling;
pub mod tower;

pub use connector::Connector;
pub use crop_to_patches::CropToPatches;
pub use error::{Result, VisionError};
pub use gemma4::{Gemma4Embedder, Gemma4Vision, Gemma4VisionConfig};
pub use heatmap::{patch_intensities, render_heatmap};
pub use image_io::{decode_image, encode_png, load_image, load_image_source, save_png, RgbImage, DEFAULT_MAX_PIXELS};
pub use intern_vit::{InternVit, InternVitConfig};
pub use minicpm::{MiniCpmVision, MiniCpmVisionConfig};
pub use minicpm_slice::{MiniCpmSlicing, SliceLayout};
pub use native::{NativePatchEncoder, NativeVisionConfig};
pub use pan_and_scan::PanAndScan;
pub use patchify::{patchify, PatchEmbedding};
pub use pixtral::{PixtralProjector, PixtralVision, PixtralVisionConfig};
pub use preprocess::{preprocess, PreprocessConfig, Size};
pub use qwen2_vl::{Qwen2VisionConfig, Qwen2VisionTower};
pub use resize::Filter;
pub use tiling::{split_image, Tiles, TilingConfig};
pub use tower::{drop_class_token, FeatureLayer, TowerKind, VisionTower, VisionTowerConfig};
