//! `tessera serve`: the OpenAI-compatible HTTP server (`tessera-server`) over one model, its
//! limits and caches from the flags.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::Args;

use crate::common::{load, ModelArgs};

#[derive(Args)]
pub struct ServeArgs {
    #[command(flatten)]
    model: ModelArgs,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port to listen on (0: any free port, printed on start).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// The model's id in /v1/models and responses. Default: the model folder's or file's name.
    #[arg(long)]
    served_model_name: Option<String>,
    /// Sequences decoded together in one step, 1 to 1024.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1024))]
    max_batch: u64,
    /// Requests that may wait for the batch; more get 429 with Retry-After.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_queue: u64,
    /// Largest request body in bytes (images come inside it as data: URLs).
    #[arg(long, default_value_t = 32 << 20, value_parser = clap::value_parser!(u64).range(1024..=(1 << 32)))]
    max_body_bytes: u64,
    /// max_tokens when a request gives none.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    default_max_tokens: u64,
    /// Images per request.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(0..=1024))]
    max_images: u64,
    /// Largest image in pixels (width × height), checked from the image's header before decoding.
    #[arg(long, default_value_t = tessera::DEFAULT_MAX_PIXELS)]
    max_image_pixels: u64,
    /// Let requests name local image files (paths or file:// URLs), only inside this folder.
    #[arg(long)]
    allowed_local_media: Option<PathBuf>,
    /// Download http(s) image URLs from this host and its subdomains (repeatable, or
    /// comma-separated); off by default. Redirects are not followed.
    #[arg(long, value_delimiter = ',')]
    allowed_media_domains: Vec<String>,
    /// Bytes of encoded image features kept for reuse (a chat resends its images every turn;
    /// the same image is then not encoded again); 0 turns the cache off.
    #[arg(long, default_value_t = 256 << 20, value_parser = clap::value_parser!(u64).range(0..=(1u64 << 40)))]
    image_cache_bytes: u64,
    /// Bytes of finished requests' KV caches kept for prompts that start the same way (a chat's
    /// next turn resends the history: only what is new since the last turn's prompt is run);
    /// least recently used out; 0 turns the cache off.
    #[arg(long, default_value_t = 1 << 30, value_parser = clap::value_parser!(u64).range(0..=(1u64 << 40)))]
    kv_cache_bytes: u64,
    /// Connections served at once (streams, waiting and idle keep-alive connections included);
    /// past it a new connection is answered 503 with Retry-After and closed. Each takes a file
    /// descriptor: keep it under `ulimit -n`.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: u64,
    /// Seconds a connection may take to send a request's head (from its opening, or from its last
    /// response when kept alive); then it is closed. Bounds half-open and idle connections.
    #[arg(long, default_value = "10", value_name = "SECONDS", value_parser = seconds)]
    header_timeout: Duration,
    /// Seconds SIGTERM or Ctrl-C waits for running requests to finish (new ones get 503 in the
    /// meantime) before closing their connections and exiting.
    #[arg(long, default_value = "120", value_name = "SECONDS", value_parser = seconds)]
    drain_timeout: Duration,
}

/// A duration in seconds (decimals allowed), from a millisecond to a day.
fn seconds(s: &str) -> std::result::Result<Duration, String> {
    let v: f64 = s.parse().map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(0.001..=86_400.0).contains(&v) {
        return Err(format!("{s} s is out of range (0.001 to 86400)"));
    }
    Ok(Duration::from_secs_f64(v))
}

/// Loads the model and serves it until SIGTERM or Ctrl-C.
pub fn run(args: ServeArgs) -> Result<()> {
    let (model, load_s) = load(&args.model)?;
    let name = args.served_model_name.clone().unwrap_or_else(|| {
        let path = model.info().source.path();
        path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "tessera".into())
    });
    let config = tessera_server::ServerConfig {
        model_name: name.clone(),
        max_body_bytes: args.max_body_bytes as usize,
        default_max_tokens: args.default_max_tokens as usize,
        max_images: args.max_images as usize,
        max_image_pixels: args.max_image_pixels,
        allowed_local_media: args.allowed_local_media.clone(),
        allowed_media_domains: args.allowed_media_domains.clone(),
        max_connections: args.max_connections as usize,
        header_timeout: args.header_timeout,
        drain_timeout: args.drain_timeout,
        engine: tessera::EngineConfig {
            max_batch: args.max_batch as usize,
            max_queue: args.max_queue as usize,
            image_cache_bytes: args.image_cache_bytes as usize,
            kv_cache_bytes: args.kv_cache_bytes as usize,
        },
    };
    let _logs = crate::init_logging()?;
    let state = tessera_server::AppState::new(std::sync::Arc::new(model), config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let addr = format!("{}:{}", args.host, args.port);
        let listener =
            tokio::net::TcpListener::bind(&addr).await.with_context(|| format!("cannot listen on {addr}"))?;
        let local = listener.local_addr()?;
        eprintln!("serving {name} (loaded in {load_s:.2} s) on http://{local}  (OpenAI API under /v1)");
        tessera_server::serve(listener, state, tessera_server::shutdown_signal()).await?;
        Ok(())
    })
}
