#!/usr/bin/env bash
# tools/bench.sh: sets everything up (as make test does, plus the benchmark environment with
# matplotlib) and runs the fused-attention benchmark over the full grid, or with the
# arguments in LORAKV_BENCH_ARGS (for example "--quick", or "--shapes smol --agents 8").
# Results: build/bench_results/lora_attention.{csv,png}. Run it on an idle machine: any other
# load (a build, a second benchmark) changes every figure.
source "$(dirname "$0")/common.sh"

phase "system packages" bash "$LORAKV_ROOT/tools/setup_system.sh"
phase "python environment" bash "$LORAKV_ROOT/tools/setup_python.sh"
phase "benchmark python environment" bash "$LORAKV_ROOT/tools/setup_python.sh" bench
phase "build" bash "$LORAKV_ROOT/tools/build.sh"
# shellcheck disable=SC2086  # LORAKV_BENCH_ARGS is a list of options
phase "fused attention benchmark" "$LORAKV_BUILD_DIR/bench/lorakv_lora_attention_bench" ${LORAKV_BENCH_ARGS:-}
