#!/usr/bin/env bash
# tools/build.sh: configures (once) and builds lorakv with ninja against the venv's libtorch.
source "$(dirname "$0")/common.sh"

[ -x "$LORAKV_VENV/bin/python" ] || die "no Python environment at $LORAKV_VENV; run tools/setup_python.sh"
if [ ! -f "$LORAKV_BUILD_DIR/build.ninja" ]; then
  torch_prefix=$("$LORAKV_VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)')
  export PATH="$PATH:/usr/local/cuda/bin"
  # Only Hopper is targeted by lorakv's CUDA code; this also stops libtorch probing every arch.
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
  cmake -S "$LORAKV_ROOT" -B "$LORAKV_BUILD_DIR" -G Ninja \
    -DCMAKE_BUILD_TYPE="${LORAKV_BUILD_TYPE:-RelWithDebInfo}" \
    -DCMAKE_PREFIX_PATH="$torch_prefix" \
    -DLORAKV_PYTHON="$LORAKV_VENV/bin/python" \
    -DLORAKV_MODEL_FILE="$LORAKV_MODEL_FILE"
fi
# Two cores and ~1 GB per libtorch translation unit: never more than the cores.
cmake --build "$LORAKV_BUILD_DIR" -j "${LORAKV_JOBS:-$(nproc)}"
