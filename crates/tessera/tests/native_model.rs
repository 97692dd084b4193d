//! The shipped native image + text model (models/shapes-vlm) against its PyTorch reference
//! (scripts/shapes/make_fixtures.py → models/shapes-vlm/reference.json).

mod common;

use anyhow::{Context, Result};
use tessera::{load_image, GenerateParams, Model, DEFAULT_MAX_PIXELS};

fn model_dir() -> std::path::PathBuf {
    common::repo_root().join("models/shapes-vlm")
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

#[test]
fn logits_and_greedy_answers_match_the_pytorch_reference() -> Result<()> {
    let dir = model_dir();
    let model = Model::load(dir.to_str().context("utf-8")?, &common::load_options()?)?;
    let reference = common::read_json(&dir.join("reference.json"))?;
    let n_img = reference["num_image_tokens"].as_u64().context("num_image_tokens")? as usize;
    assert_eq!(model.image_tokens_per_image(), Some(n_img));
    let items = reference["items"].as_array().context("items")?;
    assert!(items.len() >= 3);
    for item in items {
        let name = item["image"].as_str().context("image")?;
        let image = load_image(&dir.join(name), DEFAULT_MAX_PIXELS)?;
        let question = item["question"].as_str().context("question")?;
        let prompt = model.encode_prompt(question, None, false, std::slice::from_ref(&image))?;
        assert_eq!(prompt.ids(), common::ids(&item["prompt_ids"]), "{name}: prompt ids");

        let pixels: Vec<f32> = model.pixel_values(&image)?.flatten_all()?.to_vec1()?;
        let pv = &item["pixel_values"];
        assert!(max_diff(&pixels[..16], &common::floats(&pv["first16"])) < 1e-5, "{name}: pixel values");
        let sum: f64 = pixels.iter().map(|&x| x as f64).sum();
        assert!((sum - pv["sum"].as_f64().context("sum")?).abs() < 1e-2, "{name}: pixel sum {sum}");

        let tokens: Vec<f32> = model.encode_image(&image)?.tokens().get(0)?.get(0)?.narrow(0, 0, 8)?.to_vec1()?;
        assert!(max_diff(&tokens, &common::floats(&item["image_token0_first8"])) < 1e-4, "{name}: image token 0");

        // Logits over the whole sequence: the last row in full, the top-5 at every text position.
        let embeds = model.prompt_embeddings(&prompt)?;
        let hidden = model.forward_embeds(&embeds, &[], &mut model.new_cache(), &mut tessera::Trace::default())?;
        let logits: Vec<Vec<f32>> = model.logits(&hidden)?.to_vec2()?;
        let last = logits.last().context("rows")?;
        let d = max_diff(last, &common::floats(&item["last_logits"]));
        assert!(d < 1e-4, "{name}: last-position logits differ by {d}");
        for (k, top5) in item["text_top5"].as_array().context("text_top5")?.iter().enumerate() {
            let row = &logits[n_img + k];
            for pair in top5.as_array().context("pairs")? {
                let id = pair[0].as_u64().context("id")? as usize;
                let want = pair[1].as_f64().context("logit")? as f32;
                assert!((row[id] - want).abs() < 1e-4, "{name}: text position {k}, token {id}");
            }
        }

        let expected = common::ids(&item["greedy_ids"]);
        let params = GenerateParams { max_new_tokens: 32, ..Default::default() };
        let out = model.generate(&prompt, &params, &mut |_| {})?;
        let mut ours = out.generated_tokens.clone();
        if out.finish_reason == tessera::FinishReason::Eos {
            ours.extend(model.eos_ids().first());
        }
        assert_eq!(ours, expected, "{name}: greedy answer ids");
        assert_eq!(out.text.trim(), item["answer"].as_str().context("answer")?, "{name}: answer text");
    }
    Ok(())
}

#[test]
fn images_beyond_what_the_model_takes_are_refused() -> Result<()> {
    let dir = model_dir();
    let model = Model::load(dir.to_str().context("utf-8")?, &common::load_options()?)?;
    let image = load_image(&dir.join("examples/two_circles.png"), DEFAULT_MAX_PIXELS)?;
    let two = [image.clone(), image];
    let err = model.encode_prompt("How many circles are there?", None, false, &two).unwrap_err().to_string();
    assert!(err.contains("2 images") && err.contains("at most 1"), "{err}");
    let prompt = model.encode_prompt("How many circles are there?", None, false, &two[..1])?;
    let err = model.prompt(prompt.ids().to_vec(), &two).unwrap_err().to_string();
    assert!(err.contains("2 images") && err.contains("at most 1"), "{err}");
    Ok(())
}
