#!/bin/sh
# Installs npm's node-llama-cpp (a prebuilt CPU llama.cpp) under BUILD/llamacpp,
# for the benchmarks in this folder only: it is never a dependency of ridge
# and no test uses it. Prints the folder holding libllama / libggml-base.
#   sh bench/llamacpp/install.sh [BUILD]
set -eu
build=${1:-build}
dir="$build/llamacpp"
mkdir -p "$dir"
if [ ! -d "$dir/node_modules/node-llama-cpp" ]; then
  # The postinstall step would try to fetch or build binaries: the prebuilt
  # package below already has them.
  (cd "$dir" && npm install --no-save --no-audit --no-fund --ignore-scripts \
      node-llama-cpp @node-llama-cpp/linux-x64 >&2)
fi
echo "$(cd "$dir" && pwd)/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64"
