#!/usr/bin/env bash
# Second command of the README: the whole test suite, built with
# AddressSanitizer and UndefinedBehaviorSanitizer, then a short libFuzzer run
# of each fuzz target. The last line counts passed, failed and skipped.
set -uo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh || exit 1
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0
# LeakSanitizer's tracer in Debian 12's toolchain crashes reading the dynamic
# TLS of the LLVM libraries PoCL loads (DTLS ranges glibc 2.36 lays out
# differently). Without TLS among its roots LSan can only report more, never
# hide a leak, so the check stays as strict.
# scripts/lsan.supp names the one root that hides: glibc's thread-local
# dlerror() message (print_suppressions=0 keeps the tally out of the output
# of the ridge processes tests read).
export LSAN_OPTIONS=use_tls=0:suppressions=$PWD/scripts/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DRIDGE_SANITIZE=ON \
         -DCMAKE_C_COMPILER=clang -DRIDGE_FUZZ=ON >/dev/null &&
       cmake --build build-test -j"$(nproc)"; } >"$log" 2>&1; then
  cat "$log"
  echo "build failed"
  echo "0 passed, 1 failed, 0 skipped"
  exit 1
fi
# The README's first command builds with the system compiler and no
# sanitizers, where other warnings fire; that build must stay clean too.
if [ $# -eq 0 ]; then
  if { cmake -S . -B build-release-check -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
       cmake --build build-release-check -j"$(nproc)"; } >"$log" 2>&1; then
    echo "ok   release build (system compiler, -Werror)"
    release_ok=1
  else
    grep -E "error|warning" "$log" | head -20
    echo "FAIL release build (system compiler, -Werror)"
    release_ok=0
  fi
fi
build-test/ridge_tests "$@" | tee "$log"
status=${PIPESTATUS[0]}
counts=$(grep -E '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' "$log" | tail -n 1)
read -r passed _ failed _ skipped _ <<<"$(echo "${counts:-0 passed, 0 failed, 0 skipped}" | tr -d ',')"
# A runner that passed every test and still exits non-zero failed after
# them (LeakSanitizer's report at exit, a crash in teardown): one failure.
if [ "$status" -ne 0 ] && [ "${failed:-0}" -eq 0 ]; then
  echo "FAIL ridge_tests exited $status after its tests (LeakSanitizer at exit, or a crash in teardown: see above)"
  failed=1
fi
# shm moves messages over 4 KiB and RMA writes by CMA (process_vm_readv)
# where the kernel lets it, else through its shared buffers (SAR), as in
# containers without ptrace rights; there it takes one RMA write at a time
# per peer and refuses sends meanwhile. The shm cases run again on that path.
if [ $# -eq 0 ]; then
  if FI_SHM_DISABLE_CMA=1 build-test/ridge_tests transport_shm >"$log.sar" 2>&1 &&
     sar=$(grep -E '^[0-9]+ passed, 0 failed' "$log.sar" | tail -n 1) && [ -n "$sar" ]; then
    echo "ok   transport_shm_* again without CMA, FI_SHM_DISABLE_CMA=1 ($sar)"
    passed=$((passed + 1))
  else
    grep -v '^ok' "$log.sar" | tail -n 30
    echo "FAIL transport_shm_* again without CMA, FI_SHM_DISABLE_CMA=1"
    failed=$((failed + 1))
    status=1
  fi
  rm -f "$log.sar"
fi
case "${release_ok:-}" in
  1) passed=$((passed + 1)) ;;
  0) failed=$((failed + 1)); status=1 ;;
esac
# Each fuzz target runs briefly over its seed corpus; a crash is a failure.
if [ $# -eq 0 ]; then
  for f in build-test/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    corpus=tests/fuzz/corpus/${name#fuzz_}
    work=$(mktemp -d)
    [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
    cp tests/fuzz/regressions/* "$work"/ 2>/dev/null
    mkdir -p build-test/fuzz-crashes
    if "$f" -max_total_time="${RIDGE_FUZZ_SECONDS:-20}" -rss_limit_mb=2048 -timeout=10 \
        -artifact_prefix=build-test/fuzz-crashes/ "$work" >"$log.fuzz" 2>&1; then
      echo "ok   $name ($(grep -o 'Done [0-9]* runs' "$log.fuzz" | tail -1))"
      passed=$((passed + 1))
    else
      tail -n 40 "$log.fuzz"
      echo "FAIL $name"
      failed=$((failed + 1))
      status=1
    fi
    rm -rf "$work" "$log.fuzz"
  done
fi
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
