#!/usr/bin/env bash
# tools/tsan.sh: a ThreadSanitizer build in its own folder (build-tsan/) of the tests of the
# torch-free layers (common, formats), of the cache, of the adapter registry, of the
# sessions' engine thread (agents/scheduler.h against a fake engine, no libtorch), and of
# the sessions and request handles on the real engine (16 sessions from 4 threads, request
# handles: cancel, pause and stall, a handle outliving its runtime; libtorch on one
# thread), then runs them under TSan. Any TSan report fails the run (TSan's exit code 66), as does any failed
# test. Only libtorch's own frames may be suppressed (tools/tsan.supp): libtorch and its
# OpenMP runtime are not instrumented, lorakv and the tests are.
#
# Same toolchain settings as tools/build.sh (it does the configure and the build), plus
# -fsanitize=thread; CUDA off (TSan does not see device code). Run it as `make tsan`. Sets
# up what it needs first, as `make test` does: the Python environment (libtorch, the
# formats tests' two oracles) and the model (the registry race generates on it).
source "$(dirname "$0")/common.sh"

phase "system packages" bash "$LORAKV_ROOT/tools/setup_system.sh"
phase "python environment" bash "$LORAKV_ROOT/tools/setup_python.sh"
phase "model" bash "$LORAKV_ROOT/tools/fetch_model.sh"

export LORAKV_BUILD_DIR="${LORAKV_TSAN_BUILD_DIR:-$LORAKV_ROOT/build-tsan}"
export LORAKV_BUILD_TYPE="${LORAKV_TSAN_BUILD_TYPE:-RelWithDebInfo}"
export LORAKV_CUDA=OFF
export LORAKV_CMAKE_ARGS="-DLORAKV_OPENMP=OFF -DCMAKE_C_FLAGS=-fsanitize=thread -DCMAKE_CXX_FLAGS=-fsanitize=thread
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread"

# Test binaries: the torch-free layers' (those that exist), the cache's, the adapters'.
binaries=()
for layer in common formats cache adapters; do
  if [ -f "$LORAKV_ROOT/tests/$layer/CMakeLists.txt" ]; then binaries+=("lorakv_${layer}_tests"); fi
done
if [ -f "$LORAKV_ROOT/tests/agents/CMakeLists.txt" ]; then binaries+=(lorakv_agents_core_tests lorakv_agents_tests); fi
export LORAKV_BUILD_TARGETS="${binaries[*]}"

# The build shares the machine's cores with every other build: one at a time.
lock="${LORAKV_BUILD_LOCK:-${TMPDIR:-/tmp}/lorakv-build.lock}"
phase "tsan build (${binaries[*]})" flock "$lock" bash "$LORAKV_ROOT/tools/build.sh"

# The formats tests read two oracle outputs; CTest makes them (skipped when up to date).
phase "tsan oracles" ctest --test-dir "$LORAKV_BUILD_DIR" --no-tests=error --output-on-failure \
  -R '^oracle\.(tokenizer_oracle|safetensors_fixture)$'

# libtorch on one thread: its OpenMP runtime is not instrumented, so with more threads its
# own parallel loops (index_select's) show as races inside libtorch. The threads under test
# are lorakv's: the engine thread, callers, the registry's readers.
export OMP_NUM_THREADS=1
export TSAN_OPTIONS="suppressions=$LORAKV_ROOT/tools/tsan.supp halt_on_error=0 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
failed=()
# Runs one test binary; a failed test or a TSan report (exit code 66) marks it failed. Not
# through phase(): errexit is off inside an `if`, so phase would return its printf's status.
run_under_tsan() {  # BINARY [gtest args...]
  local binary="$1"; shift
  local path rc=0
  path=$(find "$LORAKV_BUILD_DIR/tests" -name "$binary" -type f -perm -u+x | head -n 1)
  [ -n "$path" ] || die "no $binary in $LORAKV_BUILD_DIR/tests"
  echo "==> tsan: $binary $*"
  "$path" "$@" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "==> tsan: $binary exited with $rc (66: ThreadSanitizer reported a race)"
    failed+=("$binary")
  fi
}
for binary in "${binaries[@]}"; do
  if [ "$binary" = lorakv_adapters_tests ]; then
    # Only the registry's tests: the PEFT parity tests are single-threaded and slow.
    run_under_tsan "$binary" --gtest_filter='AdapterRegistry.*'
  elif [ "$binary" = lorakv_agents_tests ]; then
    # The concurrent ones: the others are single-threaded callers of the same code.
    run_under_tsan "$binary" \
      --gtest_filter='SessionConcurrency.*:Requests.*:RequestLifetime.*:SessionAdmission.AFlood*'
  else
    run_under_tsan "$binary"
  fi
done
[ ${#failed[@]} -eq 0 ] || die "under ThreadSanitizer: ${failed[*]} failed or reported a race (see above)"
echo "tsan: ${binaries[*]} passed with no ThreadSanitizer report"
