//! From image to patch tokens: preprocessing, patchify, vision towers and connectors.
//! Knows nothing about tokens or caches.
//!
//! So far: patchify, the first step of every ViT-style tower (Dosovitskiy et al. 2020,
//! "An Image is Worth 16x16 Words"), in its two equivalent forms.

pub mod patchify;

pub use patchify::{patchify, PatchEmbedding};
