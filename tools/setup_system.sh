#!/usr/bin/env bash
# tools/setup_system.sh: installs the Debian packages lorakv builds with. Idempotent: when
# every package is present it only checks and returns.
source "$(dirname "$0")/common.sh"

PACKAGES=(build-essential cmake ninja-build ccache bc unzip git python3 python3-venv python3-dev
          libspdlog-dev libfmt-dev libyaml-cpp-dev libgtest-dev libgmock-dev)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
# The pinned torch is a CUDA 13.0 build whose CMake config needs the CUDA toolkit (nvcc)
# at configure time, even for a CPU-only run.
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  die "the CUDA toolkit (nvcc) was not found: libtorch's CMake config needs it at configure time. Install CUDA 13.0 (see README)."
fi
echo "system packages ok"
