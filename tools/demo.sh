#!/usr/bin/env bash
# tools/demo.sh: sets everything up and runs lorakv's main job on the real model.
source "$(dirname "$0")/common.sh"

phase "system packages" bash "$LORAKV_ROOT/tools/setup_system.sh"
phase "python environment" bash "$LORAKV_ROOT/tools/setup_python.sh"
phase "model" bash "$LORAKV_ROOT/tools/fetch_model.sh"
phase "build" bash "$LORAKV_ROOT/tools/build.sh"
# The main job: three role agents (planner, actor, reflector adapters) answer a held-out
# agentic QA question with tools on one shared base_lr_shared cache (configs/react_qa.yaml),
# each turn streamed, then the summary: tokens, time to first token, decode speed, KV bytes
# against three full caches.
# LORAKV_DEMO_QUESTION asks another question (the test split's people and cities are in
# assets/agentic_qa/kb_test.jsonl); the default is the config's own (test-00094).
phase "demo: a react session (lorakv run configs/react_qa_alora.yaml)" "$LORAKV_BUILD_DIR/cli/lorakv" run \
  "$LORAKV_ROOT/configs/react_qa_alora.yaml" ${LORAKV_DEMO_QUESTION:+--input "$LORAKV_DEMO_QUESTION"}
# The second example: plain chat generation with the base model.
phase "demo: chat generation" "$LORAKV_BUILD_DIR/cli/lorakv" generate --model "$LORAKV_MODEL_FILE" --chat \
  --max-tokens 96 --prompt "${LORAKV_DEMO_PROMPT:-What is the capital of France? Answer in one sentence.}"
