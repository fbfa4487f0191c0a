#!/bin/sh
# ridge against llama.cpp on the same GGUF files at the same threads: the
# 1.1 B-parameter test model (`ridge testmodel --size 1b`), written in f32 and
# converted by llama.cpp's own quantizer to bf16, f16, q8_0 and q4_K_M, so
# both read a file llama.cpp wrote (llama.cpp's CPU code cannot multiply by
# bf16 norm weights, which ridge's own bf16 files have). For each: prefill of
# 512 tokens and greedy decode of 32 at batch 1, tokens/s, and the ratios
# (goals: decode >= 1.1x, prefill >= 1.5x, >= 4x on a CPU with AMX).
#   sh bench/llamacpp/compare.sh [BUILD] [THREADS]
# Needs npm (bench/llamacpp/install.sh) and about 12 GB of disk under BUILD.
# OPENBLAS_CORETYPE is unset for ridge, as for the other benchmarks.
set -eu
build=${1:-build}
threads=${2:-$(nproc)}
here=$(dirname "$0")
lib=$(sh "$here/install.sh" "$build")
# ESM resolves node-llama-cpp next to the importing script, so the script
# runs from the install folder.
cp "$here/bench.mjs" "$build/llamacpp/bench.mjs"
models="$build/llamacpp/models"
mkdir -p "$models"
if [ ! -f "$models/f32/model.gguf" ]; then
  echo "writing the 1b test model in f32 (~9 GB, a few minutes)" >&2
  "$build/ridge" testmodel --size 1b --dtype f32 --out "$models/f32" --force >&2
fi
ids=$(awk 'BEGIN { for (i = 0; i < 512; i++) printf "%s%d", (i ? "," : ""), 1 + (i * 37) % 30000 }')
short=$(echo "$ids" | cut -d, -f1-8)
printf "%-7s %12s %12s %7s %12s %12s %7s\n" type "ridge pf/s" "llama pf/s" ratio "ridge tok/s" "llama tok/s" ratio
for ft in bf16 f16 q8_0 q4_K_M; do
  g="$models/model-$ft.gguf"
  if [ ! -f "$g" ]; then
    LD_LIBRARY_PATH="$lib" python3 "$here/quantize.py" "$lib/libllama.v0.5.0.so" "$models/f32/model.gguf" "$g" "$ft" "$threads" > "$g.log" 2>&1 || {
      echo "$ft: llama.cpp's quantizer failed (see $g.log)" >&2; continue; }
  fi
  pf=$(env -u OPENBLAS_CORETYPE "$build/ridge" run --model "$g" --prompt-ids "$ids" -n 1 --threads "$threads" --temperature 0 --no-measure --json 2>/dev/null |
       sed -n 's/.*"prefill_tokens_per_s":[[:space:]]*\([0-9.e+-]*\).*/\1/p')
  dec=$(env -u OPENBLAS_CORETYPE "$build/ridge" run --model "$g" --prompt-ids "$short" -n 33 --threads "$threads" --temperature 0 --no-measure --json 2>/dev/null |
        sed -n 's/.*"decode_tokens_per_s":[[:space:]]*\([0-9.e+-]*\).*/\1/p')
  ll=$(node "$build/llamacpp/bench.mjs" "$(realpath "$g")" "$threads" 512 32 2>/dev/null | tail -1)
  lpf=$(echo "$ll" | sed -n 's/.*"prefill_tokens_per_s":\([0-9.e+-]*\).*/\1/p')
  ldec=$(echo "$ll" | sed -n 's/.*"decode_tokens_per_s":\([0-9.e+-]*\).*/\1/p')
  awk -v t="$ft" -v a="${pf:-0}" -v b="${lpf:-0}" -v c="${dec:-0}" -v d="${ldec:-0}" 'BEGIN {
    printf "%-7s %12.1f %12.1f %6.2fx %12.2f %12.2f %6.2fx\n", t, a, b, (b > 0 ? a / b : 0), c, d, (d > 0 ? c / d : 0) }'
done
