# Sourced by compare_quantized_pairs.sh and make_mtmd_logits_references.sh: the like-for-like
# settings of each tiny quantized pair (tests/fixtures/quant/<name>-<type>/), why each is so in
# compare_quantized_pairs.sh's header.
#
# mtmd_pair_args NAME: sets `args` to the image both engines preprocess alike, the template's
# image marker, then llama-mtmd-cli's extra flags; status 1 for a name without settings.
mtmd_pair_args() {
  local images
  images="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tests/fixtures/vlm/images"
  case "$1" in
    llava-tiny) args=("$images/chelsea_square_30.png" '<image>') ;;
    llava-interleave-tiny) args=("$images/chelsea_square_28.png" '<image>') ;;
    qwen2-vl-tiny) args=("$images/chelsea_square_32.png" '<|vision_start|><|image_pad|><|vision_end|>') ;;
    qwen2.5-vl-tiny)
      args=("$images/chelsea_square_16.png" '<|vision_start|><|image_pad|><|vision_end|>'
        --image-min-tokens 4 --image-max-tokens 4)
      ;;
    # The tiny Gemma 3 tower's image size is 32, so neither side resizes chelsea_square_32.png;
    # for the tiny Qwen3-VL (8-pixel merge) it is 16 tokens, within both budgets. tessera's
    # `tessera quantize` pairs of these folders equal these files' tensor infos and data
    # (tests/quantize_export.rs), and tessera generates the same texts from both.
    # Run 2026-11-28 (THREADS=1): Qwen3-VL Q4_K_M the same 16 tokens; Gemma 3 Q8_0 / Q4_K_M part
    # at near ties (tessera's margin 0.64 at token 3 / 0.15 at token 0); Qwen3-VL Q8_0 parts at
    # token 2. Settled 2026-11-29 with llama.cpp's logits (make_mtmd_logits_references.sh,
    # tests/quantized_pairs.rs): its own margins at tokens 1 and 2 are 0.055 and 0.44, near ties,
    # and tessera meets the criterion on every step. Gemma 3 is not like for like: libmtmd wraps
    # the image without the processor's "\n\n", and clip.cpp transposes the quantized
    # mm.input_projection.weight in its graph (siglip.cpp), which moves its image features by 6.5
    # (of ≤ 5.3) from its f32 pair's; tessera's move by 0.11, and on f32 both agree to 0.002.
    gemma3-tiny) args=("$images/chelsea_square_32.png" '<start_of_image>') ;;
    qwen3-vl-tiny) args=("$images/chelsea_square_32.png" '<|vision_start|><|image_pad|><|vision_end|>') ;;
    # Qwen3.5's tower is Qwen3-VL's (8-pixel merge): 16 tokens for the 32-pixel square.
    qwen3.5-tiny) args=("$images/chelsea_square_32.png" '<|vision_start|><|image_pad|><|vision_end|>') ;;
    # One 28-pixel tile (the tower's size): no tiling and no thumbnail on either side; the same
    # prompt ids, but llama.cpp's logits leave tessera's (= transformers') after the first step
    # (tests/quantized_pairs.rs says by how much), so its steps are not committed.
    internvl-tiny) args=("$images/chelsea_square_28.png" '<IMG_CONTEXT>') ;;
    *) return 1 ;;
  esac
}
