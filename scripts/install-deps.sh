#!/usr/bin/env bash
# Installs the Debian packages ridge needs to build and test, only those
# missing, so it is cheap to run every time.
set -euo pipefail
pkgs=(build-essential cmake ninja-build pkg-config libyaml-dev libcjson-dev libglpk-dev libpcre2-dev
      libopenblas-dev clang libclang-rt-dev python3 python3-numpy)
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
