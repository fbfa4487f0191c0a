#!/usr/bin/env bash
# First command of the README: install what is missing, build ridge, and run
# its main job on the built-in defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
echo "ridge: building into build/ ..." >&2
if ! { cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo &&
       cmake --build build -j"$(nproc)"; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "ridge: the build failed (output above)" >&2
  exit 1
fi
echo "ridge: built build/ridge; running it on its defaults" >&2
exec build/ridge "$@"
