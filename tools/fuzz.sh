#!/usr/bin/env bash
# tools/fuzz.sh (make fuzz): builds lorakv's libFuzzer targets (fuzz/: GGUF, safetensors,
# JSON, PEFT adapter_config.json, session config YAML, OpenAI request bodies) with clang,
# ASan and UBSan in build-fuzz/, and runs each for LORAKV_FUZZ_SECONDS (default 600; 0 only
# replays the seeds).
# New inputs collect in a persistent corpus (build-fuzz/corpus/<target>), so each run starts
# where the last one stopped. Prints executions and findings per target; exits non-zero on
# any finding (a crash, sanitizer report, untyped exception, hang or memory blow-up), whose
# input is kept in build-fuzz/findings/<target>/.
#   LORAKV_FUZZ_SECONDS=60 LORAKV_FUZZ_TARGETS="gguf json" make fuzz
source "$(dirname "$0")/common.sh"

FUZZ_BUILD="${LORAKV_FUZZ_BUILD_DIR:-$LORAKV_ROOT/build-fuzz}"
FUZZ_SECONDS="${LORAKV_FUZZ_SECONDS:-600}"
read -r -a TARGETS <<<"${LORAKV_FUZZ_TARGETS:-gguf safetensors json peft_config session_config openai_request}"

install_tools() {
  LORAKV_EXTRA_PACKAGES="clang libclang-rt-14-dev" bash "$LORAKV_ROOT/tools/setup_system.sh"
}

build_fuzzers() {
  if [ ! -f "$FUZZ_BUILD/build.ninja" ]; then
    cmake -S "$LORAKV_ROOT/fuzz" -B "$FUZZ_BUILD" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
      -DCMAKE_BUILD_TYPE=RelWithDebInfo
  fi
  cmake --build "$FUZZ_BUILD" -j2
  "$FUZZ_BUILD/make_fuzz_seeds" "$FUZZ_BUILD/seeds"
}

# Seed folders of one target: the committed ones (fuzz/corpus/<target>, with any past
# finding kept there as a regression input) and the builders' files.
seed_dirs() {
  local target="$1" dirs=()
  case "$target" in
    peft_config) dirs=("$LORAKV_ROOT/fuzz/corpus/peft_config" "$LORAKV_ROOT/fuzz/corpus/json") ;;
    *) dirs=("$LORAKV_ROOT/fuzz/corpus/$target") ;;
  esac
  [ -d "$FUZZ_BUILD/seeds/$target" ] && dirs+=("$FUZZ_BUILD/seeds/$target")
  for d in "${dirs[@]}"; do [ -d "$d" ] && echo "$d"; done
}

dict_for() {
  case "$1" in
    peft_config) echo "$LORAKV_ROOT/fuzz/peft_config.dict" ;;
    *) echo "$LORAKV_ROOT/fuzz/$1.dict" ;;
  esac
}

# run_target NAME: fuzzes one target; appends its summary line to $SUMMARY and sets
# failed=1 on a finding (a status would be lost inside phase).
run_target() {
  local target="$1"
  local corpus="$FUZZ_BUILD/corpus/$target" findings="$FUZZ_BUILD/findings/$target"
  local log="$FUZZ_BUILD/logs/$target.log"
  mkdir -p "$corpus" "$FUZZ_BUILD/logs"
  rm -rf "$findings" && mkdir -p "$findings"
  local limit=(-max_total_time="$FUZZ_SECONDS")
  [ "$FUZZ_SECONDS" -eq 0 ] && limit=(-runs=0)
  local seeds
  mapfile -t seeds < <(seed_dirs "$target")
  local rc=0
  # -timeout: one input running 10 s is a hang; -rss_limit_mb: memory beyond 2 GiB
  # (a single allocation too) is a finding; the first corpus folder receives new inputs.
  "$FUZZ_BUILD/fuzz_$target" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -dict="$(dict_for "$target")" -artifact_prefix="$findings/" "$corpus" "${seeds[@]}" >"$log" 2>&1 || rc=$?
  local execs crashes
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | tail -1 | grep -o '[0-9]*$' || true)
  crashes=$(find "$findings" -type f | wc -l)
  if [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; then crashes=1; fi  # died without leaving an input
  printf '%-12s %12s executions  %3d findings  corpus %5d inputs  log %s\n' "$target" "${execs:-?}" "$crashes" \
    "$(find "$corpus" -type f | wc -l)" "${log#"$LORAKV_ROOT"/}" >>"$SUMMARY"
  if [ "$crashes" -gt 0 ]; then
    grep -m5 -E 'ERROR: |FINDING|SUMMARY: |runtime error' "$log" >>"$SUMMARY" || true
    for f in "$findings"/*; do
      [ -f "$f" ] && echo "    reproduce: $FUZZ_BUILD/fuzz_$target $f" >>"$SUMMARY"
    done
    failed=1
  fi
}

phase "fuzz tools (clang, libFuzzer)" install_tools
phase "build fuzz targets" build_fuzzers
SUMMARY="$FUZZ_BUILD/logs/summary.txt"
mkdir -p "$FUZZ_BUILD/logs" && : >"$SUMMARY"
failed=0
for t in "${TARGETS[@]}"; do
  [ -x "$FUZZ_BUILD/fuzz_$t" ] || die "unknown fuzz target '$t' (have: gguf safetensors json peft_config session_config openai_request)"
  phase "fuzz $t for ${FUZZ_SECONDS} s" run_target "$t"
done
echo "==> fuzz summary (${FUZZ_SECONDS} s per target)"
cat "$SUMMARY"
if [ "$failed" -ne 0 ]; then
  echo "fuzzing found problems: see the findings above" >&2
  exit 1
fi
echo "no findings"
