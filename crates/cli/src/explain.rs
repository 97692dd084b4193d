//! `tessera explain`: an answer about an image, and per generated token (or averaged over them)
//! a heatmap of where its attention fell on the image, with attention.json beside the pictures.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use tessera::GenerateParams;

use crate::common::{load, out, ModelArgs};
use crate::output::write_file;

#[derive(Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// The image.
    #[arg(long)]
    image: PathBuf,
    /// The question.
    #[arg(long, short = 'p')]
    prompt: String,
    /// Folder for the PNG heatmaps and attention.json.
    #[arg(long, default_value = "explain")]
    out: PathBuf,
    /// One picture averaged over the answer's tokens instead of one per token.
    #[arg(long)]
    average: bool,
    #[arg(long, default_value_t = 32)]
    max_new_tokens: usize,
    /// Upscaling of the model's view of the image in the pictures (1 to 32).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=32))]
    scale: u32,
}

/// Answers the question, writes the pictures and attention.json, then prints the table.
pub fn run(args: ExplainArgs) -> Result<()> {
    let (model, _) = load(&args.model)?;
    if model.max_images() == 0 {
        bail!("{}; explain needs a vision-language model", model.no_images_reason());
    }
    let image = tessera::load_image(&args.image, tessera::DEFAULT_MAX_PIXELS)?;
    let (view, rows, cols) = model.model_view(&image)?;
    let prompt = model.encode_prompt(&args.prompt, None, false, std::slice::from_ref(&image))?;
    let params = GenerateParams { max_new_tokens: args.max_new_tokens, capture_attention: true, ..Default::default() };
    let out = model.generate(&prompt, &params, &mut |_| {})?;
    let attention = out.attention.clone().unwrap_or_default();
    std::fs::create_dir_all(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    // Sequence positions of the image's tokens and of the prompt's text tokens.
    let image_pos = prompt.image_positions();
    let n_img = image_pos.len();
    let text = prompt.text_positions();
    let prompt_tokens = model.analysis().token_strings(&text.iter().map(|&(_, id)| id).collect::<Vec<_>>())?;
    let save = |name: &str, weights: &[f32]| -> Result<PathBuf> {
        let pic = tessera::render_heatmap(&view, weights, rows, cols, args.scale as usize)?;
        let path = args.out.join(name);
        write_file(&path, &tessera::encode_png(&pic)?)?;
        Ok(path)
    };
    // The table is printed once the files are written (a closed stdout must not lose them).
    let mut table = vec![
        format!("answer: {:?}", out.text.trim()),
        "| # | token | on image | top prompt tokens |".to_string(),
        "| --- | --- | --- | --- |".to_string(),
    ];
    let mut records = Vec::new();
    let mut mean_image = vec![0f32; n_img];
    for (k, (id, row)) in out.generated_tokens.iter().zip(&attention).enumerate() {
        let token = model.analysis().token_strings(&[*id])?.remove(0);
        let image_part: Vec<f32> = image_pos.iter().map(|&p| row.get(p).copied().unwrap_or(0.0)).collect();
        let text_part: Vec<f32> = text.iter().map(|&(p, _)| row.get(p).copied().unwrap_or(0.0)).collect();
        for (m, w) in mean_image.iter_mut().zip(&image_part) {
            *m += w / attention.len() as f32;
        }
        let mut top: Vec<(usize, f32)> = text_part.iter().copied().enumerate().collect();
        top.sort_by(|a, b| b.1.total_cmp(&a.1));
        let top_str: Vec<String> =
            top.iter().take(3).map(|(i, w)| format!("{:?} {:.3}", prompt_tokens[*i], w)).collect();
        let image_share: f32 = image_part.iter().sum();
        table.push(format!("| {k} | {token:?} | {image_share:.3} | {} |", top_str.join(", ")));
        let picture = if args.average { None } else { Some(save(&format!("token_{k:02}.png"), &image_part)?) };
        records.push(serde_json::json!({
            "index": k, "id": id, "token": token, "image_share": image_share,
            "image_attention": image_part, "prompt_attention": text_part, "picture": picture,
        }));
    }
    let average = if args.average { Some(save("average.png", &mean_image)?) } else { None };
    let json = serde_json::json!({
        "answer": out.text.trim(), "prompt_tokens": prompt_tokens, "grid": [rows, cols],
        "tokens": records, "average_picture": average,
    });
    let path = args.out.join("attention.json");
    write_file(&path, serde_json::to_string_pretty(&json)?.as_bytes())?;
    eprintln!(
        "wrote pictures and {} to {}",
        path.file_name().unwrap_or_default().to_string_lossy(),
        args.out.display()
    );
    for line in table {
        out!("{line}");
    }
    Ok(())
}
