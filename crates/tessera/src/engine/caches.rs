//! The engine's two caches: encoded images by content, and finished sequences' KV caches by
//! the identity of their positions (text ids, image content), each bounded in bytes with the
//! least recently used entry out first.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use tessera_decoder::KvCache;
use tessera_vision::RgbImage;

use super::EngineStats;
use crate::error::Result;
use crate::families::ImageFeatures;
use crate::model::Model;
use crate::prompt::{Chunk, Prompt};

/// An image's width, height and two independent 64-bit hashes of its pixels.
pub(super) type ImageKey = (usize, usize, u64, u64);

/// A cached image: its features, their bytes, and when it was last used.
struct CachedImage {
    features: ImageFeatures,
    bytes: usize,
    used: u64,
}

/// Encoded images by content (size and pixels), bounded in bytes, least recently used out.
pub(super) struct ImageCache {
    max_bytes: usize,
    bytes: usize,
    clock: u64,
    entries: HashMap<ImageKey, CachedImage>,
}

impl ImageCache {
    pub(super) fn new(max_bytes: usize) -> Self {
        Self { max_bytes, bytes: 0, clock: 0, entries: HashMap::new() }
    }

    /// Two independent 64-bit hashes of the pixels, with the size.
    pub(super) fn key(img: &RgbImage) -> ImageKey {
        use std::hash::{Hash, Hasher};
        let hash = |salt: u8| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            salt.hash(&mut h);
            img.data.hash(&mut h);
            h.finish()
        };
        (img.width, img.height, hash(0), hash(1))
    }

    /// `img`'s features (`key`: its [`key`](Self::key)), from the cache or encoded by `model`
    /// (and kept when they fit).
    pub(super) fn features(
        &mut self,
        model: &Model,
        img: &RgbImage,
        key: ImageKey,
        stats: &EngineStats,
    ) -> Result<ImageFeatures> {
        self.clock += 1;
        if let Some(hit) = self.entries.get_mut(&key) {
            hit.used = self.clock;
            stats.image_cache_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(hit.features.clone());
        }
        stats.image_cache_misses.fetch_add(1, Ordering::Relaxed);
        let features = model.encode_image(img)?;
        let size = features.bytes();
        if size <= self.max_bytes {
            while self.bytes + size > self.max_bytes {
                let Some((&oldest, _)) = self.entries.iter().min_by_key(|(_, c)| c.used) else { break };
                if let Some(evicted) = self.entries.remove(&oldest) {
                    self.bytes -= evicted.bytes;
                }
            }
            self.entries.insert(key, CachedImage { features: features.clone(), bytes: size, used: self.clock });
            self.bytes += size;
        }
        stats.image_cache_bytes.store(self.bytes, Ordering::Relaxed);
        Ok(features)
    }
}

/// Each position's identity for prefix matching: a text token's id, or (top bit set) a hash
/// of an image's content and the token's index in it.
/// `images`: the prompt's images' [`ImageCache::key`]s.
pub(super) fn position_keys(prompt: &Prompt, images: &[ImageKey]) -> Vec<u64> {
    use std::hash::{Hash, Hasher};
    let mut keys = Vec::with_capacity(prompt.len());
    for chunk in prompt.chunks() {
        match chunk {
            Chunk::Text(r) => keys.extend(prompt.ids()[r.clone()].iter().map(|&id| u64::from(id))),
            Chunk::Image { image, tokens } => keys.extend(tokens.clone().map(|k| {
                let mut h = std::collections::hash_map::DefaultHasher::new();
                (images[*image], k).hash(&mut h);
                h.finish() | 1 << 63
            })),
        }
    }
    keys
}

/// A finished sequence's KV cache, kept for prompts that start the same way.
struct CachedPrefix {
    /// The identity of every cached position (the prompt's, then the generated tokens').
    keys: Vec<u64>,
    /// The prompt's block ends: where a later prompt may continue from.
    ends: Vec<usize>,
    cache: KvCache,
    bytes: usize,
    used: u64,
}

/// Finished sequences' KV caches, bounded in bytes, least recently used out.
pub(super) struct PrefixCache {
    pub(super) max_bytes: usize,
    bytes: usize,
    clock: u64,
    entries: Vec<CachedPrefix>,
}

impl PrefixCache {
    pub(super) fn new(max_bytes: usize) -> Self {
        Self { max_bytes, bytes: 0, clock: 0, entries: Vec::new() }
    }

    /// A cache of its own holding the longest cached prefix of a prompt whose positions are
    /// `keys` and whose blocks end at `ends`: the prefix ends on a block end that both
    /// prompts share (with every end before it), before the prompt's last position (whose
    /// logits are needed); an entry holding linear-attention states only at its whole length.
    /// `None` when no prefix is reusable.
    pub(super) fn lookup(&mut self, keys: &[u64], ends: &[usize], stats: &EngineStats) -> Result<Option<KvCache>> {
        let limit = keys.len().saturating_sub(1);
        let reusable = |e: &CachedPrefix| {
            let common = e.keys.iter().zip(keys).take_while(|(a, b)| a == b).count().min(limit);
            let len = e
                .ends
                .iter()
                .zip(ends)
                .take_while(|&(a, b)| a == b && *b <= common)
                .map(|(_, &b)| b)
                .last()
                .unwrap_or(0);
            if e.cache.is_recurrent() && len != e.cache.len() {
                0
            } else {
                len
            }
        };
        let best = self.entries.iter().enumerate().map(|(i, e)| (reusable(e), i)).max();
        let Some((len, i)) = best.filter(|&(len, _)| len > 0) else {
            stats.prefix_cache_misses.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        };
        self.clock += 1;
        self.entries[i].used = self.clock;
        stats.prefix_cache_hits.fetch_add(1, Ordering::Relaxed);
        stats.prefix_reused_positions.fetch_add(len as u64, Ordering::Relaxed);
        Ok(Some(self.entries[i].cache.resume_from(len)?))
    }

    /// Keeps `cache` (positions `keys`, prompt blocks ending at `ends`) when it fits, evicting
    /// the least recently used; an entry whose positions `keys` begins with is dropped (this
    /// one serves every prompt it would), and `cache` is not kept if an entry begins with it.
    /// A cache holding linear-attention states (Qwen3.5's Gated DeltaNet layers) sums every
    /// position it has seen and cannot be cut back: it is offered at a block end, and is
    /// reused only whole.
    pub(super) fn store(
        &mut self,
        keys: Vec<u64>,
        ends: Vec<usize>,
        cache: &KvCache,
        stats: &EngineStats,
    ) -> Result<()> {
        // A recurrent entry serves only prompts that continue from its whole length, so one does
        // not stand in for another that it begins or that begins it.
        let recurrent = cache.is_recurrent();
        let covered = |e: &CachedPrefix| if recurrent { e.keys == keys } else { e.keys.starts_with(&keys) };
        if cache.is_empty() || self.entries.iter().any(covered) {
            return Ok(());
        }
        let cache = cache.copy_prefix(cache.len())?; // exactly as long as it is
        let bytes = cache.bytes();
        if bytes > self.max_bytes {
            return Ok(());
        }
        if !recurrent {
            self.entries.retain(|e| !keys.starts_with(&e.keys));
        }
        self.bytes = self.entries.iter().map(|e| e.bytes).sum();
        while self.bytes + bytes > self.max_bytes {
            let Some(oldest) = self.entries.iter().enumerate().min_by_key(|(_, e)| e.used).map(|(i, _)| i) else {
                break;
            };
            self.bytes -= self.entries.swap_remove(oldest).bytes;
        }
        self.clock += 1;
        self.entries.push(CachedPrefix { keys, ends, cache, bytes, used: self.clock });
        self.bytes += bytes;
        stats.prefix_cache_bytes.store(self.bytes, Ordering::Relaxed);
        stats.prefix_cache_entries.store(self.entries.len(), Ordering::Relaxed);
        Ok(())
    }
}
