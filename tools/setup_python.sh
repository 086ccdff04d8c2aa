#!/usr/bin/env bash
# tools/setup_python.sh [test|bench|kvpress]: a Python environment from a pinned lock file.
#   test    (default) the pinned libtorch and the test oracles: tools/requirements.lock, .venv
#   bench   what the benchmarks need besides it (matplotlib for their plots, llama-cpp-python
#           compiled for this CPU with GGML_NATIVE=ON): tools/requirements-bench.lock,
#           .venv-bench. Its cache key includes the CPU's model and flags, since the native
#           build runs only on CPUs like the one it was built on.
#   kvpress the kvpress oracle's packages (tools/requirements-kvpress.lock), layered on the
#           test environment instead of a venv of its own, so as not to fetch a second torch:
#           a folder installed with pip --target --no-deps that goes first on PYTHONPATH for
#           .venv's python (its transformers shadows the test one there only), linked as
#           .kvpress-site. Needs the test environment; its cache key includes that lock too.
# Each lives in a cache outside the clone, keyed by its lock file, the Python version and the
# machine, so fresh clones reuse it; the link in the repo is git-ignored. A lock file
# serialises clones that set it up at the same time, and the completion marker is written
# only after the environment imports what it is for.
source "$(dirname "$0")/common.sh"

profile="${1:-test}"
case "$profile" in
  test)
    LOCK="$LORAKV_ROOT/tools/requirements.lock"
    link="$LORAKV_VENV"
    imports="torch, transformers, gguf, peft, safetensors, llama_cpp, openai"
    # Portable llama.cpp: the test environment only tokenises and serves as an oracle.
    cmake_args="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
    machine_id=""
    ;;
  bench)
    LOCK="$LORAKV_ROOT/tools/requirements-bench.lock"
    link="$LORAKV_ROOT/.venv-bench"
    imports="matplotlib, llama_cpp"
    # The benchmark races the best llama.cpp this CPU can run: -march=native, except on CPUs
    # with AMX, where ggml's AMX matmul (0.3.36) dies of SIGILL at its first tile load on
    # these machines; there every other extension the CPU lists is turned on by name.
    cmake_args="-DGGML_NATIVE=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
    cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null | cut -d: -f2) "
    if [[ "$cpu_flags" == *" amx_int8 "* ]]; then
      cmake_args="-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
      for pair in avx:AVX avx2:AVX2 fma:FMA f16c:F16C avx_vnni:AVX_VNNI avx512f:AVX512 avx512vbmi:AVX512_VBMI \
                  avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16 bmi2:BMI2; do
        if [[ "$cpu_flags" == *" ${pair%%:*} "* ]]; then cmake_args+=" -DGGML_${pair##*:}=ON"; fi
      done
    fi
    machine_id="$(grep -m2 -E '^(model name|flags)' /proc/cpuinfo 2>/dev/null || true) $cmake_args"
    ;;
  kvpress)
    LOCK="$LORAKV_ROOT/tools/requirements-kvpress.lock"
    link="$LORAKV_ROOT/.kvpress-site"
    imports="kvpress, transformers"
    # Keyed by the test lock too: it supplies torch and whatever this lock does not list.
    machine_id="$(cat "$LORAKV_ROOT/tools/requirements.lock")"
    [ -x "$LORAKV_VENV/bin/python" ] && "$LORAKV_VENV/bin/python" -c 'import torch' 2>/dev/null \
      || die "the kvpress environment builds on the test one: run tools/setup_python.sh first"
    ;;
  *) die "unknown environment '$profile' (use: test, bench or kvpress)" ;;
esac
command -v python3 >/dev/null || die "python3 not found; run tools/setup_system.sh first"
python3 -c 'import venv, ensurepip' 2>/dev/null \
  || die "python3 cannot create environments with pip (Debian: apt-get install python3-venv)"
py_id=$(python3 -c 'import sys, platform; print(sys.version.split()[0], platform.machine())')
key=$( { cat "$LOCK"; echo "$py_id"; [ -z "$machine_id" ] || echo "$machine_id"; } | sha256sum | cut -c1-16)
prefix=venv
[ "$profile" = test ] || prefix="venv-$profile"
[ "$profile" != kvpress ] || prefix="site-kvpress"
target="$LORAKV_CACHE_DIR/$prefix-$key"
mkdir -p "$LORAKV_CACHE_DIR"

check_env() {
  if [ "$profile" = kvpress ]; then
    # Its transformers, not the test environment's, must be the one imported.
    PYTHONPATH="$target" "$LORAKV_VENV/bin/python" -c "import $imports, sys
sys.exit(not transformers.__file__.startswith('$target/'))" 2>/dev/null
  else
    "$target/bin/python" -c "import $imports" 2>/dev/null
  fi
}

# One setup at a time per environment: a second clone waits here instead of deleting a
# half-made environment under the first.
exec 9>"$target.lock"
if ! flock -n 9; then
  echo "another lorakv setup is creating $target; waiting for it"
  flock 9
fi
if [ ! -f "$target/.lorakv-complete" ] || ! check_env; then
  size="up to ~3 GB and several minutes"
  [ "$profile" != kvpress ] || size="about 80 MB to download, 380 MB on disk, under a minute"
  echo "creating the Python environment in $target (python $py_id; first time: downloads its packages, $size)"
  rm -rf "$target"
  if [ "$profile" = kvpress ]; then
    # --no-deps: the lock lists exactly what the test environment lacks or must shadow.
    "$LORAKV_VENV/bin/python" -m pip install -q --no-deps --target "$target" -r "$LOCK" \
      || die "pip install --target $target -r tools/$(basename "$LOCK") failed (see pip's message above; rerun to retry)"
  else
    python3 -m venv "$target"
    "$target/bin/python" -m pip install -q --upgrade pip \
      || die "pip could not upgrade itself in $target; is the Python package index reachable? (rerun to retry)"
    # llama-cpp-python compiles llama.cpp (several minutes). --no-cache-dir: pip would
    # otherwise reuse a wheel it built earlier with the other profile's flags.
    CMAKE_ARGS="$cmake_args" \
      "$target/bin/python" -m pip install -q --no-cache-dir -r "$LOCK" \
      || die "pip install -r tools/$(basename "$LOCK") failed in $target (see pip's message above; rerun to retry)"
  fi
  check_env || die "the new environment in $target cannot import $imports"
  touch "$target/.lorakv-complete"
fi
flock -u 9
ln -sfn "$target" "$link"
echo "python env ($profile) ok: $imports at $target"
