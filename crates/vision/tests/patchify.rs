//! Patchify's two forms agree, on the design notes' worked example.

use anyhow::Result;
use candle_core::{Device, Tensor};
use tessera_vision::{patchify, PatchEmbedding};

#[test]
fn worked_example_224_by_14_gives_256_patches_of_588() -> Result<()> {
    let dev = Device::Cpu;
    let image = Tensor::rand(0f32, 1f32, (1, 3, 224, 224), &dev)?;
    let patches = patchify(&image, 14)?;
    assert_eq!(patches.dims(), &[1, 256, 588]);
    // Patch (row 1, col 2) is number 1·16 + 2 = 18; its first values are channel 0's first row.
    let expect: Vec<f32> = image.get(0)?.get(0)?.get(14)?.narrow(0, 28, 14)?.to_vec1()?;
    let got: Vec<f32> = patches.get(0)?.get(18)?.narrow(0, 0, 14)?.to_vec1()?;
    assert_eq!(expect, got);

    let d_model = 64;
    let weight = Tensor::randn(0f32, 0.05, (d_model, 3, 14, 14), &dev)?;
    let bias = Tensor::randn(0f32, 0.05, d_model, &dev)?;
    let embed = PatchEmbedding::new(weight, Some(bias))?;
    let a = embed.forward_unfold(&image)?;
    let b = embed.forward_conv(&image)?;
    assert_eq!(a.dims(), &[1, 256, d_model]);
    let diff = (a - b)?.abs()?.max_all()?.to_scalar::<f32>()?;
    assert!(diff < 1e-5, "unfold and conv2d differ by {diff}");
    Ok(())
}

#[test]
fn images_that_are_not_whole_patches_are_refused() -> Result<()> {
    let image = Tensor::zeros((1, 3, 30, 28), candle_core::DType::F32, &Device::Cpu)?;
    let err = patchify(&image, 14).unwrap_err().to_string();
    assert!(err.contains("30×28"), "{err}");
    Ok(())
}
