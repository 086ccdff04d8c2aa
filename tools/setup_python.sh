#!/usr/bin/env bash
# tools/setup_python.sh: the Python virtual environment with the pinned libtorch and the
# test oracles. It lives in a cache outside the clone, keyed by the lock file, the Python
# version and the machine, so fresh clones reuse it; .venv in the repo is a git-ignored
# link to it. A lock file serialises clones that set it up at the same time, and the
# completion marker is written only after the environment imports what lorakv needs.
source "$(dirname "$0")/common.sh"

LOCK="$LORAKV_ROOT/tools/requirements.lock"
command -v python3 >/dev/null || die "python3 not found; run tools/setup_system.sh first"
python3 -c 'import venv, ensurepip' 2>/dev/null \
  || die "python3 cannot create environments with pip (Debian: apt-get install python3-venv)"
py_id=$(python3 -c 'import sys, platform; print(sys.version.split()[0], platform.machine())')
key=$( { cat "$LOCK"; echo "$py_id"; } | sha256sum | cut -c1-16)
target="$LORAKV_CACHE_DIR/venv-$key"
mkdir -p "$LORAKV_CACHE_DIR"

check_env() {
  "$target/bin/python" -c "import torch, transformers, gguf, peft, safetensors, llama_cpp" 2>/dev/null
}

# One setup at a time per environment: a second clone waits here instead of deleting a
# half-made environment under the first.
exec 9>"$target.lock"
if ! flock -n 9; then
  echo "another lorakv setup is creating $target; waiting for it"
  flock 9
fi
if [ ! -f "$target/.lorakv-complete" ] || ! check_env; then
  echo "creating the Python environment in $target (python $py_id; first time: ~3 GB download, several minutes)"
  rm -rf "$target"
  python3 -m venv "$target"
  "$target/bin/python" -m pip install -q --upgrade pip \
    || die "pip could not upgrade itself in $target; is the Python package index reachable? (rerun to retry)"
  # llama-cpp-python compiles llama.cpp; portable flags, no tests or examples.
  CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
    "$target/bin/python" -m pip install -q -r "$LOCK" \
    || die "pip install -r tools/requirements.lock failed in $target (see pip's message above; rerun to retry)"
  check_env || die "the new environment in $target cannot import torch, transformers, gguf, peft, safetensors and llama_cpp"
  touch "$target/.lorakv-complete"
fi
flock -u 9
ln -sfn "$target" "$LORAKV_VENV"
"$LORAKV_VENV/bin/python" -c "import torch; print('python env ok: torch', torch.__version__, 'at $target')"
