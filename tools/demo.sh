#!/usr/bin/env bash
# tools/demo.sh: sets everything up and runs lorakv's main job on the real model.
source "$(dirname "$0")/common.sh"

phase "system packages" bash "$LORAKV_ROOT/tools/setup_system.sh"
phase "python environment" bash "$LORAKV_ROOT/tools/setup_python.sh"
phase "model" bash "$LORAKV_ROOT/tools/fetch_model.sh"
phase "build" bash "$LORAKV_ROOT/tools/build.sh"
phase "demo: chat generation" "$LORAKV_BUILD_DIR/agents/lorakv" generate --model "$LORAKV_MODEL_FILE" --chat \
  --max-tokens 96 --prompt "${LORAKV_DEMO_PROMPT:-What is the capital of France? Answer in one sentence.}"
