//! Decoding images into 8-bit RGB the way the reference processors see them: PIL's
//! `Image.open(...)` followed by `convert("RGB")`, with the EXIF orientation applied
//! (`ImageOps.exif_transpose`). The image size is checked against a pixel budget from the
//! header, before any pixel buffer is allocated, so a decompression bomb is refused cheaply.

use std::io::Cursor;
use std::path::Path;

use image::{DynamicImage, ImageDecoder, ImageReader, Limits};

use crate::error::{Result, VisionError};

/// An interleaved 8-bit RGB image, row-major.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RgbImage {
    pub width: usize,
    pub height: usize,
    pub data: Vec<u8>,
}

impl RgbImage {
    pub fn new(width: usize, height: usize, data: Vec<u8>) -> Self {
        debug_assert_eq!(data.len(), width * height * 3);
        Self { width, height, data }
    }

    pub fn pixel(&self, x: usize, y: usize) -> [u8; 3] {
        let i = (y * self.width + x) * 3;
        [self.data[i], self.data[i + 1], self.data[i + 2]]
    }
}

/// The largest image accepted, in pixels (width × height).
pub const DEFAULT_MAX_PIXELS: u64 = 50_000_000;

/// Reads and decodes an image file; `max_pixels` bounds width × height.
pub fn load_image(path: &Path, max_pixels: u64) -> Result<RgbImage> {
    let io = |reason: String| VisionError::Io { path: path.into(), reason };
    // A FIFO would block the read for ever, a device would never end.
    let meta = std::fs::metadata(path).map_err(|e| io(e.to_string()))?;
    if !meta.is_file() {
        return Err(io("not a regular file (a FIFO, socket, device or folder)".into()));
    }
    let bytes = std::fs::read(path).map_err(|e| io(e.to_string()))?;
    decode_image(&bytes, path, max_pixels)
}

/// Loads the image a chat message's image part names: a file path, a `file://` URL or a
/// `data:` URL with base64 bytes (`data:image/png;base64,…`). Remote URLs are refused: tessera
/// does not download.
pub fn load_image_source(src: &str, max_pixels: u64) -> Result<RgbImage> {
    use base64::Engine as _;
    let bad = |reason: &str| VisionError::Source { source_ref: abbreviate(src), reason: reason.into() };
    if let Some(rest) = src.strip_prefix("data:") {
        let (meta, payload) = rest.split_once(',').ok_or_else(|| bad("a data: URL needs a `,` before its data"))?;
        if !meta.ends_with(";base64") {
            return Err(bad("only base64 data: URLs are read (`data:image/png;base64,…`)"));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(payload.trim())
            .map_err(|e| bad(&format!("invalid base64: {e}")))?;
        return decode_image(&bytes, Path::new(&abbreviate(src)), max_pixels);
    }
    if let Some(path) = src.strip_prefix("file://") {
        if !path.starts_with('/') {
            return Err(bad("a file:// URL must name an absolute path (file:///…)"));
        }
        return load_image(Path::new(path), max_pixels);
    }
    if src.starts_with("http://") || src.starts_with("https://") {
        return Err(bad("images are not downloaded; save it and give its path"));
    }
    if src.is_empty() {
        return Err(bad("empty path"));
    }
    load_image(Path::new(src), max_pixels)
}

/// `src` cut to a readable length for messages (data: URLs are long).
fn abbreviate(src: &str) -> String {
    match src.char_indices().nth(48) {
        Some((i, _)) => format!("{}…", &src[..i]),
        None => src.to_string(),
    }
}

/// Decodes image bytes; `origin` names them in errors. Decoders are third-party code: a panic
/// in one (the `png` crate's on a palette of partial entries, found by fuzzing) becomes an
/// error for this image, not the end of the process (a server's engine thread).
pub fn decode_image(bytes: &[u8], origin: &Path, max_pixels: u64) -> Result<RgbImage> {
    check_png_palette(bytes, origin)?;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decode_checked(bytes, origin, max_pixels))).unwrap_or_else(
        |_| {
            Err(VisionError::Decode {
                path: origin.into(),
                reason: "the image decoder failed on malformed data".into(),
            })
        },
    )
}

/// A PNG's palette (`PLTE`) must hold whole RGB entries, at most 256: png 0.18.1 panics on a
/// partial one (slicing 3 bytes past its end), so it is refused here first.
fn check_png_palette(bytes: &[u8], origin: &Path) -> Result<()> {
    const SIGNATURE: &[u8] = b"\x89PNG\r\n\x1a\n";
    if !bytes.starts_with(SIGNATURE) {
        return Ok(());
    }
    let mut at = SIGNATURE.len();
    // Chunks: length (4, big-endian), type (4), data, CRC (4); the palette precedes the data.
    while let (Some(len), Some(kind)) = (bytes.get(at..at + 4), bytes.get(at + 4..at + 8)) {
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        match kind {
            b"PLTE" if !len.is_multiple_of(3) || len > 3 * 256 => {
                return Err(VisionError::Decode {
                    path: origin.into(),
                    reason: format!("PNG palette (PLTE) of {len} bytes is not 1 to 256 RGB entries"),
                });
            }
            b"IDAT" | b"IEND" => break,
            _ => at = at.saturating_add(12).saturating_add(len),
        }
    }
    Ok(())
}

fn decode_checked(bytes: &[u8], origin: &Path, max_pixels: u64) -> Result<RgbImage> {
    let reader = || -> Result<ImageReader<Cursor<&[u8]>>> {
        let r = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| VisionError::Io { path: origin.into(), reason: e.to_string() })?;
        if r.format().is_none() {
            return Err(VisionError::NotAnImage { path: origin.into(), reason: "unrecognised file signature".into() });
        }
        Ok(r)
    };
    // The header alone gives the size: refuse huge or empty images before decoding.
    let (width, height) = reader()?.into_dimensions().map_err(|e| decode_err(origin, e))?;
    let pixels = width as u64 * height as u64;
    if width == 0 || height == 0 {
        return Err(VisionError::ZeroSize { path: origin.into(), width, height });
    }
    if pixels > max_pixels {
        return Err(VisionError::TooLarge { path: origin.into(), width, height, pixels, limit: max_pixels });
    }
    let mut r = reader()?;
    let mut limits = Limits::default();
    limits.max_alloc = Some(pixels.saturating_mul(8).saturating_add(1 << 20)); // 16-bit RGBA at most
    r.limits(limits);
    let mut decoder = r.into_decoder().map_err(|e| decode_err(origin, e))?;
    // The decoded buffer and its RGB copy are sized by the header: where the memory is not
    // there (the pixel limit lifted, a 100k × 100k header), fail here, not abort in `alloc`.
    let needed = decoder.total_bytes().saturating_add(pixels.saturating_mul(3));
    check_allocatable(needed).map_err(|reason| VisionError::Decode {
        path: origin.into(),
        reason: format!("a {width}×{height} image needs {needed} bytes to decode: {reason}"),
    })?;
    let orientation = decoder.orientation().map_err(|e| decode_err(origin, e))?;
    let mut img = DynamicImage::from_decoder(decoder).map_err(|e| decode_err(origin, e))?;
    img.apply_orientation(orientation);
    Ok(to_rgb_like_pil(img))
}

/// Whether `bytes` can be allocated now: within the memory the system reports available
/// (`MemAvailable`, on Linux) and granted by the allocator (a reservation, released at once).
fn check_allocatable(bytes: u64) -> std::result::Result<(), String> {
    if let Some(available) = available_memory() {
        if bytes > available {
            return Err(format!("more than the {available} bytes of memory available"));
        }
    }
    let n = usize::try_from(bytes).map_err(|_| "more than this machine can address".to_string())?;
    Vec::<u8>::new().try_reserve_exact(n).map_err(|_| "the allocation was refused".to_string())
}

/// `MemAvailable` from `/proc/meminfo`, in bytes (`None` where there is no such file).
fn available_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

fn decode_err(path: &Path, e: image::ImageError) -> VisionError {
    match e {
        image::ImageError::Unsupported(u) => VisionError::NotAnImage { path: path.into(), reason: u.to_string() },
        other => VisionError::Decode { path: path.into(), reason: other.to_string() },
    }
}

/// PIL's `convert("RGB")`: alpha is dropped (not composited), grey is replicated, 16-bit
/// colour keeps the high byte (PIL decodes 16-bit PNGs that way), and 16-bit grey is clipped
/// at 255 (PIL's `I;16` → `RGB`).
pub fn to_rgb_like_pil(img: DynamicImage) -> RgbImage {
    let (w, h) = (img.width() as usize, img.height() as usize);
    let data: Vec<u8> = match img {
        DynamicImage::ImageRgb8(b) => b.into_raw(),
        DynamicImage::ImageRgba8(b) => b.into_raw().chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]]).collect(),
        DynamicImage::ImageLuma8(b) => b.into_raw().into_iter().flat_map(|v| [v, v, v]).collect(),
        DynamicImage::ImageLumaA8(b) => b.into_raw().chunks_exact(2).flat_map(|p| [p[0], p[0], p[0]]).collect(),
        DynamicImage::ImageRgb16(b) => b.into_raw().into_iter().map(|v| (v >> 8) as u8).collect(),
        DynamicImage::ImageRgba16(b) => {
            b.into_raw().chunks_exact(4).flat_map(|p| [p[0], p[1], p[2]].map(|v| (v >> 8) as u8)).collect()
        }
        DynamicImage::ImageLuma16(b) => b.into_raw().into_iter().flat_map(|v| [v.min(255) as u8; 3]).collect(),
        DynamicImage::ImageLumaA16(b) => b.into_raw().chunks_exact(2).flat_map(|p| [p[0].min(255) as u8; 3]).collect(),
        other => other.to_rgb8().into_raw(),
    };
    RgbImage::new(w, h, data)
}

/// An RGB image as the bytes of a PNG file (the CLI writes them with its one file writer).
pub fn encode_png(img: &RgbImage) -> Result<Vec<u8>> {
    use image::ImageEncoder as _;
    let (w, h) = (u32::try_from(img.width), u32::try_from(img.height));
    let (Ok(w), Ok(h)) = (w, h) else {
        return Err(VisionError::Encode(format!("{}×{} is too large for PNG", img.width, img.height)));
    };
    let mut bytes = Vec::new();
    image::codecs::png::PngEncoder::new(&mut bytes)
        .write_image(&img.data, w, h, image::ExtendedColorType::Rgb8)
        .map_err(|e| VisionError::Encode(e.to_string()))?;
    Ok(bytes)
}

/// Writes an RGB image as PNG (a plain write: see [`encode_png`]).
pub fn save_png(img: &RgbImage, path: &Path) -> Result<()> {
    std::fs::write(path, encode_png(img)?).map_err(|e| VisionError::Io { path: path.into(), reason: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PNG chunk with its CRC (the png crate checks it).
    fn chunk(kind: &[u8; 4], data: &[u8]) -> Vec<u8> {
        let mut crc = !0u32;
        for &b in kind.iter().chain(data) {
            crc ^= b as u32;
            for _ in 0..8 {
                crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
            }
        }
        let mut out = (data.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(kind);
        out.extend_from_slice(data);
        out.extend_from_slice(&(!crc).to_be_bytes());
        out
    }

    #[test]
    fn a_header_asking_for_more_memory_than_there_is_fails_as_an_error() {
        // 100k × 100k RGB: 30 GB decoded, beyond any memory this test runs with.
        let mut ihdr = 100_000u32.to_be_bytes().to_vec();
        ihdr.extend_from_slice(&100_000u32.to_be_bytes());
        ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.extend(chunk(b"IHDR", &ihdr));
        png.extend(chunk(b"IDAT", &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01]));
        png.extend(chunk(b"IEND", &[]));
        let err = decode_image(&png, Path::new("bomb.png"), u64::MAX).err().map(|e| e.to_string());
        let err = err.unwrap_or_default();
        assert!(err.contains("bomb.png") && err.contains("bytes"), "{err}");
    }
}
