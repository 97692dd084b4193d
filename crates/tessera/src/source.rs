//! Where a model comes from: a local folder, a local `.gguf` file, or a Hugging Face Hub
//! repository (`org/name[@revision]`) resolved through `hf-hub` with its normal cache.
//!
//! Hub resolution honours `HF_HOME` (cache location), `HF_ENDPOINT`, `HF_TOKEN` and
//! `HF_HUB_OFFLINE=1` (use only what is already cached, never touch the network). The files
//! of one revision land in one snapshot folder, which is then loaded like a local folder.

use std::path::{Path, PathBuf};

use hf_hub::{Cache, Repo, RepoType};

use crate::error::{Result, TesseraError};

/// A model located on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSource {
    /// A Hugging Face model folder (`config.json`, safetensors, tokenizer files).
    Dir(PathBuf),
    /// A GGUF file with its metadata, vocabulary and template embedded.
    Gguf(PathBuf),
}

impl ModelSource {
    pub fn path(&self) -> &Path {
        match self {
            Self::Dir(p) | Self::Gguf(p) => p,
        }
    }
}

/// Files fetched for a Hub model besides the weights; those marked optional may be absent.
const HUB_FILES: &[(&str, bool)] = &[
    ("config.json", true),
    ("generation_config.json", false),
    ("tokenizer.json", true),
    ("tokenizer_config.json", false),
    ("special_tokens_map.json", false),
    ("chat_template.jinja", false),
    ("chat_template.json", false),
    ("preprocessor_config.json", false),
    ("processor_config.json", false),
];

/// Resolves a `--model` argument: an existing path is used as is; otherwise `org/name[@rev]`
/// is looked up on the Hub (or only in the cache with `HF_HUB_OFFLINE=1`).
pub fn resolve(spec: &str) -> Result<ModelSource> {
    let path = Path::new(spec);
    if path.exists() {
        return local(spec, path);
    }
    let looks_like_repo =
        spec.split('/').count() == 2 && !spec.starts_with('.') && !spec.starts_with('/') && !spec.ends_with(".gguf");
    if !looks_like_repo {
        return Err(TesseraError::ModelNotFound {
            spec: spec.to_string(),
            reason: "no such file or folder (and not an `org/name` Hub id)".into(),
        });
    }
    let (repo_id, revision) = match spec.split_once('@') {
        Some((r, rev)) => (r.to_string(), rev.to_string()),
        None => (spec.to_string(), "main".to_string()),
    };
    let repo = Repo::with_revision(repo_id, RepoType::Model, revision);
    let dir = if offline() { from_cache(spec, &repo)? } else { download(spec, &repo)? };
    Ok(ModelSource::Dir(dir))
}

fn local(spec: &str, path: &Path) -> Result<ModelSource> {
    if path.is_dir() {
        // Every file of the folder is refused unless regular (links followed): reading a FIFO
        // would block for ever, a device would never end.
        let entries = std::fs::read_dir(path).map_err(|e| TesseraError::ModelNotFound {
            spec: spec.to_string(),
            reason: format!("cannot list the folder: {e}"),
        })?;
        for entry in entries.flatten() {
            let file = entry.path();
            if file.is_dir() {
                continue;
            }
            if let Some(why) = not_regular(&file) {
                return Err(TesseraError::ModelNotFound { spec: spec.to_string(), reason: why });
            }
        }
        return Ok(ModelSource::Dir(path.to_path_buf()));
    }
    if let Some(why) = not_regular(path) {
        return Err(TesseraError::ModelNotFound { spec: spec.to_string(), reason: why });
    }
    if path.extension().and_then(|e| e.to_str()) == Some("gguf") {
        return Ok(ModelSource::Gguf(path.to_path_buf()));
    }
    Err(TesseraError::ModelNotFound {
        spec: spec.to_string(),
        reason: "expected a model folder or a .gguf file".into(),
    })
}

/// Why `path` cannot be read as a file (it is a FIFO, socket or device, or a broken link), if so.
pub(crate) fn not_regular(path: &Path) -> Option<String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => None,
        Ok(_) => Some(format!("{} is not a regular file (a FIFO, socket or device)", path.display())),
        Err(e) => Some(format!("{}: {e}", path.display())),
    }
}

fn offline() -> bool {
    std::env::var("HF_HUB_OFFLINE").map(|v| !v.is_empty() && v != "0" && v.to_lowercase() != "false").unwrap_or(false)
}

/// The weight files a folder's safetensors index names, or `model.safetensors`.
pub fn weight_files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let index = dir.join("model.safetensors.index.json");
    if index.exists() {
        let shards = shard_names(&index)?;
        return Ok(shards.into_iter().map(|s| dir.join(s)).collect());
    }
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    Err(TesseraError::ModelNotFound {
        spec: dir.display().to_string(),
        reason: "the folder has neither model.safetensors nor model.safetensors.index.json".into(),
    })
}

fn shard_names(index: &Path) -> Result<Vec<String>> {
    let err = |reason: String| TesseraError::Config { path: index.to_path_buf(), reason };
    let json = crate::model::read_json(index)?;
    let map = json.get("weight_map").and_then(|m| m.as_object()).ok_or_else(|| err("missing `weight_map`".into()))?;
    let mut shards = Vec::new();
    for (tensor, file) in map {
        let file =
            file.as_str().ok_or_else(|| err(format!("`weight_map` maps `{tensor}` to {file}, not a file name")))?;
        // A shard is a file name in the model's folder: no paths out of it.
        let plain = Path::new(file).components().count() == 1
            && matches!(Path::new(file).components().next(), Some(std::path::Component::Normal(_)));
        if !plain {
            return Err(err(format!("`weight_map` maps `{tensor}` to `{file}`, not a file in the model's folder")));
        }
        shards.push(file.to_string());
    }
    if shards.is_empty() {
        return Err(err("`weight_map` is empty".into()));
    }
    shards.sort();
    shards.dedup();
    Ok(shards)
}

fn from_cache(spec: &str, repo: &Repo) -> Result<PathBuf> {
    let cache = Cache::from_env();
    let cached = cache.repo(repo.clone());
    let missing = |file: &str| TesseraError::ModelNotFound {
        spec: spec.to_string(),
        reason: format!(
            "`{file}` is not in the local Hugging Face cache ({}) and HF_HUB_OFFLINE is set",
            cache.path().display()
        ),
    };
    let config = cached.get("config.json").ok_or_else(|| missing("config.json"))?;
    let dir = config.parent().map(Path::to_path_buf).unwrap_or_default();
    for (file, required) in HUB_FILES {
        if *required && cached.get(file).is_none() {
            return Err(missing(file));
        }
    }
    // Every shard must be cached too.
    for f in weight_files_in(&dir)? {
        if !f.exists() {
            return Err(missing(&f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()));
        }
    }
    Ok(dir)
}

#[cfg(not(feature = "hub"))]
fn download(spec: &str, _repo: &Repo) -> Result<PathBuf> {
    Err(TesseraError::ModelNotFound {
        spec: spec.to_string(),
        reason: "this build has no Hub download support (rebuild with the `hub` feature) \
                 and HF_HUB_OFFLINE is not set"
            .into(),
    })
}

#[cfg(feature = "hub")]
fn download(spec: &str, repo: &Repo) -> Result<PathBuf> {
    use hf_hub::api::sync::ApiBuilder;
    let fail = |file: &str, e: String| TesseraError::ModelNotFound {
        spec: spec.to_string(),
        reason: format!("downloading `{file}`: {e}"),
    };
    let token = std::env::var("HF_TOKEN").ok().filter(|t| !t.is_empty());
    let mut builder = ApiBuilder::from_env().with_progress(true);
    if token.is_some() {
        builder = builder.with_token(token);
    }
    let api = builder.build().map_err(|e| fail("(api)", e.to_string()))?;
    let api = api.repo(repo.clone());
    let mut dir = None;
    for (file, required) in HUB_FILES {
        match api.get(file) {
            Ok(p) => {
                if dir.is_none() {
                    dir = p.parent().map(Path::to_path_buf);
                }
            }
            Err(e) if *required => return Err(fail(file, e.to_string())),
            Err(_) => {}
        }
    }
    let dir = dir.ok_or_else(|| fail("config.json", "no files".into()))?;
    match api.get("model.safetensors.index.json") {
        Ok(index) => {
            for shard in shard_names(&index)? {
                api.get(&shard).map_err(|e| fail(&shard, e.to_string()))?;
            }
        }
        Err(_) => {
            api.get("model.safetensors").map_err(|e| fail("model.safetensors", e.to_string()))?;
        }
    }
    Ok(dir)
}
