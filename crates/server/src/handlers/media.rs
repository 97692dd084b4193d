//! The images a chat request names, and where the server may get them: `data:` URLs always,
//! `http(s)` URLs only from `--allowed-media-domains` (no redirects, size-limited), local files
//! only under `--allowed-local-media`.

use std::path::{Path, PathBuf};

use tessera::RgbImage;

use crate::error::ApiError;
use crate::AppState;

/// The image a message part names: a `data:` URL; an `http(s)` URL only from a host under
/// `--allowed-media-domains`; a local path or `file://` URL only under `--allowed-local-media`
/// (resolved, so `..` and links cannot leave it).
pub(super) fn load_image(state: &AppState, src: &str) -> Result<RgbImage, ApiError> {
    let max = state.config.max_image_pixels;
    let bad = |m: String| ApiError::bad_request(m).param("messages");
    if src.starts_with("data:") {
        return tessera::load_image_source(src, max).map_err(|e| bad(e.to_string()));
    }
    if src.starts_with("http://") || src.starts_with("https://") {
        let bytes = download(state, src).map_err(|m| bad(format!("image URL {}: {m}", short(src))))?;
        return tessera::decode_image(&bytes, Path::new(&short(src)), max).map_err(|e| bad(e.to_string()));
    }
    let Some(dir) = &state.config.allowed_local_media else {
        return Err(bad(format!(
            "image {}: local files are off (start the server with --allowed-local-media DIR); send data: URLs",
            short(src)
        )));
    };
    let path = src.strip_prefix("file://").unwrap_or(src);
    let inside = resolve_inside(dir, Path::new(path))
        .ok_or_else(|| bad(format!("image {}: not a file under the allowed media folder", short(src))))?;
    tessera::load_image(&inside, max).map_err(|e| bad(e.to_string()))
}

/// How long an image download may take, all of it.
#[cfg(feature = "downloads")]
const DOWNLOAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// The bytes at `url`, if its host is one of `--allowed-media-domains` (or under one). No
/// redirects are followed (they could lead anywhere), and at most `--max-body-bytes` are read.
fn download(state: &AppState, url: &str) -> Result<Vec<u8>, String> {
    let allowed = &state.config.allowed_media_domains;
    if allowed.is_empty() {
        return Err("this server does not download images (start it with --allowed-media-domains HOST); \
                    send them as data: URLs"
            .into());
    }
    let host = url_host(url).ok_or("not a URL with a host")?;
    let permitted = allowed.iter().any(|d| {
        let d = d.trim_start_matches('.').to_ascii_lowercase();
        host == d || host.ends_with(&format!(".{d}"))
    });
    if !permitted {
        return Err(format!("host {host} is not in --allowed-media-domains"));
    }
    fetch(url, state.config.max_body_bytes)
}

/// The body of a GET of `url`, refused past `limit` bytes.
#[cfg(feature = "downloads")]
fn fetch(url: &str, limit: usize) -> Result<Vec<u8>, String> {
    let agent = ureq::AgentBuilder::new().redirects(0).timeout(DOWNLOAD_TIMEOUT).build();
    let response = match agent.get(url).call() {
        Ok(r) => r,
        Err(ureq::Error::Status(code, _)) => return Err(format!("the server answered HTTP {code}")),
        Err(e) => return Err(format!("download failed: {e}")),
    };
    if response.status() != 200 {
        return Err(format!("the server answered HTTP {} (redirects are not followed)", response.status()));
    }
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(response.into_reader(), limit as u64 + 1), &mut bytes)
        .map_err(|e| format!("download failed: {e}"))?;
    if bytes.len() > limit {
        return Err(format!("the image is larger than --max-body-bytes ({limit} bytes)"));
    }
    Ok(bytes)
}

#[cfg(not(feature = "downloads"))]
fn fetch(_url: &str, _limit: usize) -> Result<Vec<u8>, String> {
    Err("this build of tessera has no downloads (built without the `hub` feature)".into())
}

/// The lowercase host of an `http(s)` URL (no user info allowed, port dropped).
fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    if authority.contains('@') {
        return None;
    }
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    (!host.is_empty()).then(|| host.to_ascii_lowercase())
}

/// `path` (relative to `dir`, or absolute) resolved with links followed, if it lies inside `dir`.
fn resolve_inside(dir: &Path, path: &Path) -> Option<PathBuf> {
    let root = dir.canonicalize().ok()?;
    let full = if path.is_absolute() { path.to_path_buf() } else { root.join(path) };
    let real = full.canonicalize().ok()?;
    (real.starts_with(&root) && real.is_file()).then_some(real)
}

fn short(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
