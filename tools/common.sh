# tools/common.sh: shared helpers for lorakv's setup, build, test and demo scripts.
# Sourced, not run. Every phase prints its wall time.
set -euo pipefail

LORAKV_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LORAKV_CACHE_DIR="${LORAKV_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/lorakv}"
LORAKV_BUILD_DIR="${LORAKV_BUILD_DIR:-$LORAKV_ROOT/build}"
LORAKV_VENV="$LORAKV_ROOT/.venv"
LORAKV_MODEL_FILE="$LORAKV_ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf"

# phase NAME COMMAND...: runs a command and prints how long it took.
phase() {
  local name="$1"; shift
  local start elapsed_ms
  start=$(date +%s%N)
  echo "==> $name"
  "$@"
  # Integer arithmetic only: this runs before any package (bc, say) is installed.
  elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
  printf '==> %s done in %d.%01d s\n' "$name" $((elapsed_ms / 1000)) $(((elapsed_ms % 1000) / 100))
}

die() {
  echo "error: $*" >&2
  exit 1
}

# Runs a command as root: directly when we are root, else through sudo.
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}
