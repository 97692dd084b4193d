#!/usr/bin/env bash
# Builds `llama-mtmd-logits` (issue 39, proof point 2): llama.cpp's own `llama-mtmd-cli` (the pinned
# source's tools/mtmd/mtmd-cli.cpp, patched here at build time) that also writes what it computed
# as JSON lines to $MTMD_LOGITS_FILE: the prompt's chunks as llama.cpp tokenized them
# ({"text": [ids]}, {"media": image tokens}) and per generated token its top-5 logits, the
# top-1/top-2 margin and the chosen id ({"top": [[id, logit]…], "margin": m, "chosen": id}).
# Nothing else changes: the same prompt handling, image encoding, batching and greedy sampler as
# llama-mtmd-cli, so the steps are those the CLI takes. Linked against the shared libraries of
# scripts/peers/build_llamacpp.sh's build (LLAMACPP_TARGETS="llama-quantize llama-mtmd-cli").
# Prints the binary's path. Not run in CI.
set -euo pipefail
source "$(cd "$(dirname "$0")" && pwd)/llamacpp_source.sh"
vendor="$src/vendor/llama.cpp"
lib="$src/build/bin"
out="$lib/llama-mtmd-logits"
[ -f "$lib/libmtmd.so" ] && [ -f "$lib/libllama-common.so" ] \
  || { echo "no $lib/libmtmd.so: build llama-mtmd-cli first (see the header)" >&2; exit 1; }
work="$cache/mtmd-logits"
mkdir -p "$work"
python3 - "$vendor/tools/mtmd/mtmd-cli.cpp" "$work/mtmd-logits.cpp" <<'EOF'
import sys
s = open(sys.argv[1]).read()
helpers = r'''
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <string>

// What llama.cpp computed, as JSON lines to $MTMD_LOGITS_FILE (build_mtmd_logits.sh).
static FILE * logits_file() {
    static FILE * f = nullptr;
    static bool opened = false;
    if (!opened) {
        opened = true;
        const char * path = std::getenv("MTMD_LOGITS_FILE");
        f = path ? std::fopen(path, "w") : nullptr;
    }
    return f;
}

static void logits_text_chunk(const llama_token * toks, size_t n) {
    FILE * f = logits_file();
    if (!f) return;
    std::fprintf(f, "{\"text\": [");
    for (size_t i = 0; i < n; i++) std::fprintf(f, "%s%d", i ? ", " : "", toks[i]);
    std::fprintf(f, "]}\n");
    std::fflush(f);
}

static void logits_media_chunk(size_t n) {
    FILE * f = logits_file();
    if (!f) return;
    std::fprintf(f, "{\"media\": %zu}\n", n);
    std::fflush(f);
}

static void logits_step(llama_context * lctx, const llama_vocab * vocab, llama_token chosen) {
    FILE * f = logits_file();
    if (!f) return;
    const float * logits = llama_get_logits_ith(lctx, -1);
    const int n = llama_vocab_n_tokens(vocab);
    std::vector<int> ids(n);
    for (int i = 0; i < n; i++) ids[i] = i;
    const int k = std::min(5, n);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int a, int b) {
        return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    std::fprintf(f, "{\"top\": [");
    for (int i = 0; i < k; i++) std::fprintf(f, "%s[%d, %.9g]", i ? ", " : "", ids[i], logits[ids[i]]);
    const double margin = k > 1 ? (double) logits[ids[0]] - (double) logits[ids[1]] : 0.0;
    std::fprintf(f, "], \"margin\": %.9g, \"chosen\": %d}\n", margin, chosen);
    std::fflush(f);
}
'''
def sub(old, new):
    global s
    if s.count(old) != 1:
        sys.exit(f"mtmd-cli.cpp changed: {old!r} found {s.count(old)} times")
    s = s.replace(old, new)
sub('#include "mtmd-helper.h"\n', '#include "mtmd-helper.h"\n' + helpers)
sub('        llama_token token_id = common_sampler_sample(ctx.smpl, ctx.lctx, -1);\n',
    '        llama_token token_id = common_sampler_sample(ctx.smpl, ctx.lctx, -1);\n'
    '        logits_step(ctx.lctx, ctx.vocab, token_id);\n')
sub('        if (chunk_type == MTMD_INPUT_CHUNK_TYPE_TEXT) {\n',
    '        if (chunk_type == MTMD_INPUT_CHUNK_TYPE_TEXT) {\n'
    '            { size_t n_text = 0; const llama_token * toks = mtmd_input_chunk_get_tokens_text(chunk, &n_text);\n'
    '              logits_text_chunk(toks, n_text); }\n')
sub('            // media chunk: try to get embd from existing batch, or create a new batch\n',
    '            // media chunk: try to get embd from existing batch, or create a new batch\n'
    '            logits_media_chunk(mtmd_input_chunk_get_n_tokens(chunk));\n')
open(sys.argv[2], 'w').write(s)
EOF
inc=(-I"$vendor/include" -I"$vendor/ggml/include" -I"$vendor/common" -I"$vendor/tools/mtmd" -I"$vendor/vendor")
nice -n 10 g++ -std=c++17 -O2 "${inc[@]}" "$work/mtmd-logits.cpp" -o "$out" \
  -L"$lib" -lmtmd -lllama-common -lllama -lggml -lggml-base -lpthread -Wl,-rpath,"$lib"
echo "$out"
