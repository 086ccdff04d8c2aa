#!/usr/bin/env bash
# tools/setup_python.sh: the Python virtual environment with the pinned libtorch and the
# test oracles. It lives in a cache outside the clone, keyed by the lock file's hash, so
# a fresh clone reuses it; .venv in the repo is a git-ignored link to it.
source "$(dirname "$0")/common.sh"

LOCK="$LORAKV_ROOT/tools/requirements.lock"
key=$(sha256sum "$LOCK" | cut -c1-16)
target="$LORAKV_CACHE_DIR/venv-$key"
if [ ! -f "$target/.lorakv-complete" ]; then
  echo "creating the Python environment in $target (first time: ~3 GB download, several minutes)"
  rm -rf "$target"
  mkdir -p "$LORAKV_CACHE_DIR"
  python3 -m venv "$target"
  "$target/bin/python" -m pip install -q --upgrade pip
  # llama-cpp-python compiles llama.cpp; portable flags, no tests or examples.
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    "$target/bin/python" -m pip install -q -r "$LOCK" \
    || die "pip install failed; is the package index reachable? (rerun to retry)"
  touch "$target/.lorakv-complete"
fi
ln -sfn "$target" "$LORAKV_VENV"
"$LORAKV_VENV/bin/python" -c "import torch, transformers, gguf, llama_cpp; print('python env ok: torch', torch.__version__)"
