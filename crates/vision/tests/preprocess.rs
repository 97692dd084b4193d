//! Preprocessing against transformers' PIL-backed processors on real photos
//! (scripts/reference_preprocess.py), and decoding against PIL's `convert("RGB")`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use tessera_vision::{
    decode_image, encode_png, load_image, load_image_source, preprocess, PreprocessConfig, RgbImage, VisionError,
    DEFAULT_MAX_PIXELS,
};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn max_abs_diff(a: &Tensor, b: &Tensor) -> Result<f32> {
    Ok((a - b)?.abs()?.flatten_all()?.max(0)?.to_scalar::<f32>()?)
}

#[test]
fn pixel_values_match_transformers_within_1e5() -> Result<()> {
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("preprocess_reference.json"))?)?;
    let reference = candle_core::safetensors::load(fixtures().join("preprocess_reference.safetensors"), &Device::Cpu)?;
    let mut checked = 0;
    for (case, body) in spec["cases"].as_object().context("cases")? {
        let cfg: PreprocessConfig = serde_json::from_value(body["config"].clone())?;
        for image in body["images"].as_array().context("images")? {
            let image = image.as_str().context("name")?;
            let img = load_image(&fixtures().join("images").join(format!("{image}.png")), DEFAULT_MAX_PIXELS)?;
            let ours = preprocess(&img, &cfg, &Device::Cpu)?;
            let want = reference.get(&format!("{case}/{image}")).context("reference tensor")?;
            assert_eq!(ours.dims(), want.dims(), "{case}/{image}: shape");
            let diff = max_abs_diff(&ours, want)?;
            assert!(diff <= 1e-5, "{case}/{image}: max |diff| = {diff}");
            checked += 1;
        }
    }
    assert_eq!(checked, 10);
    Ok(())
}

#[test]
fn decoding_converts_modes_like_pil() -> Result<()> {
    let reference = candle_core::safetensors::load(fixtures().join("decode_reference.safetensors"), &Device::Cpu)?;
    for (name, file) in [
        ("grey", "mode_grey.png"),
        ("grey_alpha", "mode_grey_alpha.png"),
        ("rgba", "mode_rgba.png"),
        ("palette", "mode_palette.png"),
        ("rgb16", "mode_rgb16.png"),
        ("grey16", "mode_grey16.png"),
        ("exif_orientation6", "exif_orientation6.png"),
    ] {
        let img = load_image(&fixtures().join("images").join(file), DEFAULT_MAX_PIXELS)?;
        let want = &reference[name];
        let (h, w, c) = want.dims3()?;
        assert_eq!((img.height, img.width, c), (h, w, 3), "{name}: size");
        let want: Vec<u8> = want.flatten_all()?.to_vec1()?;
        let mismatches = img.data.iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(mismatches, 0, "{name}: {mismatches} of {} values differ", want.len());
    }
    Ok(())
}

fn png_claiming(width: u32, height: u32) -> Vec<u8> {
    // A PNG signature and an IHDR chunk declaring the size; no pixel data follows.
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&width.to_be_bytes());
    ihdr.extend_from_slice(&height.to_be_bytes());
    ihdr.extend_from_slice(&[8, 2, 0, 0, 0]);
    let mut chunk = b"IHDR".to_vec();
    chunk.extend_from_slice(&ihdr);
    let crc = crc32(&chunk);
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    out.extend_from_slice(&13u32.to_be_bytes());
    out.extend_from_slice(&chunk);
    out.extend_from_slice(&crc.to_be_bytes());
    // A tiny IDAT (an empty zlib stream) and IEND: a few dozen bytes claiming gigapixels.
    for (kind, body) in [(&b"IDAT"[..], &b"x\x9c\x03\x00\x00\x00\x00\x01"[..]), (&b"IEND"[..], &b""[..])] {
        let mut chunk = kind.to_vec();
        chunk.extend_from_slice(body);
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&chunk);
        out.extend_from_slice(&crc32(&chunk).to_be_bytes());
    }
    out
}

fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn bad_images_are_refused_with_clear_errors() -> Result<()> {
    let p = PathBuf::from("in-memory.png");
    // A decompression bomb: refused from the header, before any allocation.
    let err = decode_image(&png_claiming(100_000, 100_000), &p, DEFAULT_MAX_PIXELS).unwrap_err();
    assert!(matches!(err, VisionError::TooLarge { width: 100_000, height: 100_000, .. }), "{err}");
    assert!(err.to_string().contains("100000×100000"), "{err}");
    // Zero-sized.
    let err = decode_image(&png_claiming(0, 10), &p, DEFAULT_MAX_PIXELS).unwrap_err();
    assert!(err.to_string().contains("0×10") || err.to_string().contains("in-memory.png"), "{err}");
    // Not an image.
    let err = decode_image(b"hello, I am text", &p, DEFAULT_MAX_PIXELS).unwrap_err();
    assert!(matches!(err, VisionError::NotAnImage { .. }), "{err}");
    // Truncated: a real PNG cut in half.
    let bytes = std::fs::read(fixtures().join("images/chelsea.png"))?;
    let err = decode_image(&bytes[..bytes.len() / 2], &p, DEFAULT_MAX_PIXELS).unwrap_err();
    assert!(matches!(err, VisionError::Decode { .. }), "{err}");
    // Missing file.
    let err = load_image(&PathBuf::from("/no/such/image.png"), DEFAULT_MAX_PIXELS).unwrap_err();
    assert!(err.to_string().contains("/no/such/image.png"), "{err}");
    // A budget smaller than the image.
    let err = load_image(&fixtures().join("images/chelsea.png"), 1000).unwrap_err();
    assert!(matches!(err, VisionError::TooLarge { .. }), "{err}");
    Ok(())
}

/// A chat message's image by path, `file://` URL and base64 `data:` URL: the same pixels; bad
/// references are errors that quote them.
#[test]
fn image_sources_load_the_same_pixels_or_say_why_not() -> Result<()> {
    use base64::Engine as _;
    let path = fixtures().join("images/chelsea.png");
    let want = load_image(&path, DEFAULT_MAX_PIXELS)?;
    let abs = std::fs::canonicalize(&path)?;
    let data = base64::engine::general_purpose::STANDARD.encode(std::fs::read(&path)?);
    for src in [abs.display().to_string(), format!("file://{}", abs.display()), format!("data:image/png;base64,{data}")]
    {
        let got = load_image_source(&src, DEFAULT_MAX_PIXELS)?;
        assert_eq!((got.width, got.height), (want.width, want.height));
        assert!(got.data == want.data, "{}", &src[..40.min(src.len())]);
    }
    let err = |src: &str| load_image_source(src, DEFAULT_MAX_PIXELS).unwrap_err().to_string();
    assert!(err("https://example.com/cat.png").contains("not downloaded"));
    assert!(err("data:image/png,rawbytes").contains("base64"));
    assert!(err("data:image/png;base64,@@@").contains("invalid base64"));
    assert!(err("file://relative/x.png").contains("absolute"));
    assert!(err("/no/such/image.png").contains("/no/such/image.png"));
    let e = err(&format!("data:image/png;base64,{}", &data[..64]));
    assert!(e.contains("data:image/png;base64,") && e.contains('…'), "{e}");
    // A data: URL too large for the pixel budget is refused from its header.
    let e = load_image_source(&format!("data:image/png;base64,{data}"), 1000).unwrap_err();
    assert!(matches!(e, VisionError::TooLarge { .. }), "{e}");
    Ok(())
}

/// Settings outside their domain are refused before any image is touched, naming the field.
#[test]
fn preprocessor_settings_outside_their_domain_are_refused() -> Result<()> {
    let good: PreprocessConfig = serde_json::from_value(serde_json::json!({
        "size": {"height": 32, "width": 32}, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]
    }))?;
    good.validate()?;
    let img = load_image(&fixtures().join("images/chelsea.png"), DEFAULT_MAX_PIXELS)?;
    for (patch, needle) in [
        (serde_json::json!({"size": {"height": 0, "width": 0}}), "`size` of 0"),
        (serde_json::json!({"size": {"shortest_edge": 100000}}), "`size` of 100000"),
        (serde_json::json!({"crop_size": {"height": 0, "width": 4}}), "`crop_size` of 0"),
        (serde_json::json!({"image_std": [0.5, 0.0, 0.5]}), "`image_std`"),
        (serde_json::json!({"image_mean": [0.5, 0.5]}), "`image_mean` needs 3"),
        (serde_json::json!({"rescale_factor": -1.0}), "`rescale_factor`"),
    ] {
        let mut v = serde_json::to_value(serde_json::json!({
            "size": {"height": 32, "width": 32}, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]
        }))?;
        for (k, x) in patch.as_object().context("object")? {
            v[k] = x.clone();
        }
        let cfg: PreprocessConfig = serde_json::from_value(v)?;
        let err = cfg.validate().unwrap_err().to_string();
        assert!(err.contains(needle), "{needle}: {err}");
        // The pipeline checks too, before allocating anything from the sizes.
        assert!(preprocess(&img, &cfg, &Device::Cpu).is_err(), "{needle}");
    }
    // A shortest edge within bounds scales the long side by the aspect ratio: 15845 on a 7×5
    // image would be 22183×15845 (found by the config_json fuzz target: 2.5 GB, 19 s).
    let cfg: PreprocessConfig = serde_json::from_value(serde_json::json!({
        "size": {"shortest_edge": 15845}, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]
    }))?;
    cfg.validate()?;
    let small = tessera_vision::RgbImage::new(7, 5, vec![128; 7 * 5 * 3]);
    let err = preprocess(&small, &cfg, &Device::Cpu).unwrap_err().to_string();
    assert!(err.contains("7×5") && err.contains("22183×15845") && err.contains("16384"), "{err}");
    Ok(())
}

/// `encode_png` gives a PNG that decodes to the same pixels.
#[test]
fn encoded_png_decodes_to_the_same_pixels() -> Result<()> {
    let (w, h) = (7, 5);
    let data: Vec<u8> = (0..w * h * 3).map(|i| (i * 37 % 256) as u8).collect();
    let img = RgbImage::new(w, h, data);
    let bytes = encode_png(&img)?;
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(decode_image(&bytes, std::path::Path::new("encoded.png"), DEFAULT_MAX_PIXELS)?, img);
    Ok(())
}
