#!/usr/bin/env bash
# tools/build.sh: configures and builds lorakv with ninja against the venv's libtorch.
# The configuration (torch folder, -Werror, build type, CUDA choice) is passed explicitly
# on every configure and remembered in the build folder: when any of it changes, the old
# CMake cache is dropped, so a reused build folder never keeps a stale torch path or flag.
source "$(dirname "$0")/common.sh"

[ -x "$LORAKV_VENV/bin/python" ] || die "no Python environment at $LORAKV_VENV; run tools/setup_python.sh"
read -r torch_dir torch_abi < <("$LORAKV_VENV/bin/python" -c \
  'import os, torch; print(os.path.dirname(torch.__file__), int(torch.compiled_with_cxx11_abi()))') \
  || die "the Python environment at $LORAKV_VENV cannot import torch; rerun tools/setup_python.sh"
export PATH="$PATH:/usr/local/cuda/bin"
werror=OFF
if [ "${CI:-}" = "true" ] || [ "${LORAKV_WERROR:-OFF}" = "ON" ]; then werror=ON; fi
# Only Hopper is targeted by lorakv's CUDA code; this also stops libtorch probing every arch.
export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-9.0}"
config=(
  -DCMAKE_BUILD_TYPE="${LORAKV_BUILD_TYPE:-RelWithDebInfo}"
  -DLORAKV_TORCH_DIR="$torch_dir"
  -DLORAKV_TORCH_CXX11_ABI="$torch_abi"
  -DLORAKV_CUDA="${LORAKV_CUDA:-AUTO}"
  -DLORAKV_WERROR="$werror"
  -DLORAKV_PYTHON="$LORAKV_VENV/bin/python"
  -DLORAKV_MODEL_FILE="$LORAKV_MODEL_FILE"
  ${LORAKV_CMAKE_ARGS:-}
)
signature=$(printf '%s\n' "${config[@]}" "nvcc=$(command -v nvcc || true)")
stamp="$LORAKV_BUILD_DIR/.lorakv-configure"
if [ ! -f "$LORAKV_BUILD_DIR/build.ninja" ] || [ "$(cat "$stamp" 2>/dev/null)" != "$signature" ]; then
  if [ -f "$LORAKV_BUILD_DIR/CMakeCache.txt" ]; then
    echo "build configuration changed: reconfiguring $LORAKV_BUILD_DIR from scratch"
    rm -rf "$LORAKV_BUILD_DIR/CMakeCache.txt" "$LORAKV_BUILD_DIR/CMakeFiles"
  fi
  rm -f "$stamp"
  cmake -S "$LORAKV_ROOT" -B "$LORAKV_BUILD_DIR" -G Ninja "${config[@]}"
  printf '%s' "$signature" > "$stamp"
fi
# ccache caches the files that include the precompiled ATen header (cmake/LorakvPch.cmake)
# only when told that the header's macros and __TIME__ need not be checked.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros}"
# Two cores and ~1 GB per libtorch translation unit: never more than the cores.
cmake --build "$LORAKV_BUILD_DIR" -j "${LORAKV_JOBS:-$(nproc)}" ${LORAKV_BUILD_TARGETS:+--target $LORAKV_BUILD_TARGETS}
