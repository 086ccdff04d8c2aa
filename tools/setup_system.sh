#!/usr/bin/env bash
# tools/setup_system.sh: installs the Debian packages lorakv builds with. Idempotent: when
# every package is present it only checks and returns. No CUDA toolkit is needed: without
# nvcc the build links libtorch's CPU libraries and leaves the CUDA kernels out.
source "$(dirname "$0")/common.sh"

PACKAGES=(build-essential cmake ninja-build ccache bc unzip git ca-certificates
          python3 python3-venv python3-dev libssl-dev
          libspdlog-dev libfmt-dev libyaml-cpp-dev libgtest-dev libgmock-dev
          libcpp-httplib-dev nlohmann-json3-dev pkg-config)
# Extra packages a caller asks for (make fuzz: clang; make tsan needs none).
PACKAGES+=(${LORAKV_EXTRA_PACKAGES:-})
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "system packages ok (CUDA toolkit found: CUDA kernels will be built)"
else
  echo "system packages ok (no CUDA toolkit: CPU-only build)"
fi
