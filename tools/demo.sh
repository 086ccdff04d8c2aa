#!/usr/bin/env bash
# tools/demo.sh: sets everything up and runs lorakv's main job on the real model.
source "$(dirname "$0")/common.sh"

phase "system packages" bash "$LORAKV_ROOT/tools/setup_system.sh"
phase "python environment" bash "$LORAKV_ROOT/tools/setup_python.sh"
phase "model" bash "$LORAKV_ROOT/tools/fetch_model.sh"
phase "build" bash "$LORAKV_ROOT/tools/build.sh"
phase "demo: chat generation" "$LORAKV_BUILD_DIR/cli/lorakv" generate --model "$LORAKV_MODEL_FILE" --chat \
  --max-tokens 96 --prompt "${LORAKV_DEMO_PROMPT:-What is the capital of France? Answer in one sentence.}"
# The planner, actor and reflector adapters (assets/role_adapters) each take their turn of a
# held-out agentic QA trajectory, as one batch with an adapter per prompt.
role_demo() {
  cd "$LORAKV_ROOT"
  "$LORAKV_VENV/bin/python" tools/agentic_qa/demo_prompts.py --id "${LORAKV_DEMO_TRAJECTORY:-test-00001}" |
    xargs -0 "$LORAKV_BUILD_DIR/cli/lorakv" generate --model "$LORAKV_MODEL_FILE" --max-tokens 40
}
phase "demo: three role adapters, one batch" role_demo
