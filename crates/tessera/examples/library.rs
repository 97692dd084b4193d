//! tessera as a library: load a model, ask a question about an image, and read token,
//! contextual and image embeddings. The README shows this file.
//!
//! From the repository root (defaults: the shipped `models/shapes-vlm` and one of its images):
//!
//! ```text
//! cargo run --release -p tessera --example library -- [MODEL] [IMAGE] [QUESTION]
//! ```

use std::path::Path;

use tessera::{cosine, load_image, GenerateParams, LoadOptions, Model, Pooling, DEFAULT_MAX_PIXELS};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let model_path = args.next().unwrap_or_else(|| "models/shapes-vlm".into());
    let image_path = args.next().unwrap_or_else(|| "models/shapes-vlm/examples/three_shapes.png".into());
    let question = args.next().unwrap_or_else(|| "How many shapes are there?".into());

    // A folder, a .gguf file or a Hub id. One Model is Send + Sync: threads can share it.
    let model = Model::load(&model_path, &LoadOptions::default())?;

    // The image and the question in one chat prompt; the answer streams piece by piece.
    let image = load_image(Path::new(&image_path), DEFAULT_MAX_PIXELS)?;
    let images = std::slice::from_ref(&image);
    let prompt = model.encode_prompt(&question, None, false, images)?;
    let params = GenerateParams { max_new_tokens: 32, ..Default::default() };
    print!("{question} →");
    let out = model.generate(&prompt, &params, &mut |piece| print!("{piece}"))?;
    println!("\n{} prompt positions, {} of them the image's", out.prompt_positions, out.image_tokens);

    // Token embeddings: rows of the embedding matrix, (tokens, hidden).
    let tokens = model.analysis().token_embeddings("a red circle")?;
    println!("token embeddings {:?}: {:?}", tokens.tokens, tokens.vectors.dims());

    // Contextual embeddings: hidden states at a layer (None: after the final norm), one row per
    // position, the image's rows first. The same words read differently after the image.
    let alone = model.analysis().contextual_embeddings(&[], "a red circle", None)?;
    let after_image = model.analysis().contextual_embeddings(images, "a red circle", None)?;
    let similarity = cosine(&alone.pooled(&Pooling::Last, false)?, &after_image.pooled(&Pooling::Last, false)?)?;
    println!("contextual embeddings {:?}, after the image {:?}", alone.vectors.dims(), after_image.vectors.dims());
    println!("last token without and with the image: cosine {similarity:.3}");
    let sentence = alone.pooled(&Pooling::Mean, true)?; // (1, hidden), unit length
    println!("sentence vector {:?}", sentence.dims());

    // Image embeddings: the image tokens the decoder reads, (image tokens, hidden).
    println!("image embeddings {:?}", model.analysis().image_embeddings(&image)?.dims());
    Ok(())
}
