#!/usr/bin/env bash
# Installs the Debian packages ridge needs to build and test, only those
# missing, so it is cheap to run every time.
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
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "ridge: installing ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
