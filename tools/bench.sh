#!/usr/bin/env bash
# tools/bench.sh: sets everything up (as make test does, plus the benchmark environment with
# matplotlib and llama.cpp built for this CPU) and runs one benchmark, chosen by LORAKV_BENCH:
#   attention (default)  the fused attention over the full grid -> lora_attention.{csv,png}
#   generate             prefill/decode of every weight form vs llama.cpp and transformers
#                        -> generate_cpu.{csv,png}
#   quant                one projection from 4/8-bit blocks vs dense -> quant_matmul.csv
#   memory               `lorakv bench memory`: N agents on one shared trajectory in every
#                        sharing mode -> memory/{memory,fidelity,latency}.csv, memory.png
#   sessions             `lorakv bench sessions`: S concurrent sessions through the sessions
#                        API's scheduler vs sequential vs the driver -> sessions/sessions.{csv,png}
#   serve                `lorakv serve` under 1, 8, 32 and 64 streaming clients
#                        (tools/bench_serve.py) -> serve/serve.{csv,png}
# with the arguments in LORAKV_BENCH_ARGS (for example "--quick" for attention, "--reps 3"
# for generate). Results go to build/bench_results/. Run it on an idle machine: any other
# load (a build, a second benchmark) changes every figure.
source "$(dirname "$0")/common.sh"

phase "system packages" bash "$LORAKV_ROOT/tools/setup_system.sh"
phase "python environment" bash "$LORAKV_ROOT/tools/setup_python.sh"
phase "benchmark python environment" bash "$LORAKV_ROOT/tools/setup_python.sh" bench
phase "build" bash "$LORAKV_ROOT/tools/build.sh"
# shellcheck disable=SC2086  # LORAKV_BENCH_ARGS is a list of options
case "${LORAKV_BENCH:-attention}" in
  attention)
    phase "fused attention benchmark" "$LORAKV_BUILD_DIR/bench/lorakv_lora_attention_bench" ${LORAKV_BENCH_ARGS:-} ;;
  generate)
    phase "generate benchmark" "$LORAKV_BUILD_DIR/bench/generate_bench" --model "$LORAKV_MODEL_FILE" \
      --python "$LORAKV_VENV/bin/python" --llama-python "$LORAKV_ROOT/.venv-bench/bin/python" --threads 2 \
      ${LORAKV_BENCH_ARGS:-} ;;
  quant)
    phase "quantised projection benchmark" "$LORAKV_BUILD_DIR/bench/lorakv_quant_matmul_bench" \
      --python "$LORAKV_ROOT/.venv-bench/bin/python" ${LORAKV_BENCH_ARGS:-} ;;
  memory)
    phase "shared-cache memory benchmark" "$LORAKV_BUILD_DIR/cli/lorakv" bench memory --model "$LORAKV_MODEL_FILE" \
      --assets "$LORAKV_ROOT/assets" --python "$LORAKV_ROOT/.venv-bench/bin/python" \
      --out "$LORAKV_BUILD_DIR/bench_results/memory" ${LORAKV_BENCH_ARGS:-} ;;
  sessions)
    phase "sessions benchmark" "$LORAKV_BUILD_DIR/cli/lorakv" bench sessions --model "$LORAKV_MODEL_FILE" \
      --assets "$LORAKV_ROOT/assets" --python "$LORAKV_ROOT/.venv-bench/bin/python" \
      --out "$LORAKV_BUILD_DIR/bench_results/sessions" ${LORAKV_BENCH_ARGS:-} ;;
  serve)
    phase "server load benchmark" "$LORAKV_ROOT/.venv-bench/bin/python" "$LORAKV_ROOT/tools/bench_serve.py" \
      --lorakv "$LORAKV_BUILD_DIR/cli/lorakv" --model "$LORAKV_MODEL_FILE" \
      --adapter planner="$LORAKV_ROOT/assets/role_adapters/all_linear/planner" \
      --adapter actor="$LORAKV_ROOT/assets/role_adapters/all_linear/actor" \
      --out "$LORAKV_BUILD_DIR/bench_results/serve" ${LORAKV_BENCH_ARGS:-} ;;
  *) die "unknown LORAKV_BENCH '${LORAKV_BENCH}' (use: attention, generate, quant, memory, sessions or serve)" ;;
esac
