#!/usr/bin/env bash
# Train the six role adapters in LRAgent's order (planner first; the shared-A set's actor and
# reflector reuse the planner's v_proj lora_A, frozen). Run from the repository root:
#   tools/agentic_qa/train_all.sh [qv_shared_a|all_linear|both]   (default both)
# These are the commands that made the committed adapters (each train_log.txt repeats its own).
# --threads only sets torch's CPU threads (1 ran far faster on the oversubscribed build machine);
# bfloat16 autocast results can differ in the last bits with the thread count.
set -euo pipefail
cd "$(dirname "$0")/../.."
WHICH="${1:-both}"
PY="nice -n 10 .venv/bin/python tools/agentic_qa/train_roles.py"
OUT=assets/role_adapters
COMMON="--rank 8 --alpha 16 --lr 2e-3 --batch 4 --bf16 --seed 0"
if [[ "$WHICH" == qv_shared_a || "$WHICH" == both ]]; then
  $PY --role planner   --targets q_proj,v_proj --steps 60 $COMMON --threads 2 --out $OUT/qv_shared_a/planner
  $PY --role actor     --targets q_proj,v_proj --steps 60 $COMMON --threads 2 --out $OUT/qv_shared_a/actor --shared-a-from $OUT/qv_shared_a/planner
  $PY --role reflector --targets q_proj,v_proj --steps 50 $COMMON --threads 1 --out $OUT/qv_shared_a/reflector --shared-a-from $OUT/qv_shared_a/planner
fi
if [[ "$WHICH" == all_linear || "$WHICH" == both ]]; then
  $PY --role planner   --targets all --steps 40 $COMMON --threads 1 --out $OUT/all_linear/planner
  $PY --role actor     --targets all --steps 40 $COMMON --threads 1 --out $OUT/all_linear/actor
  $PY --role reflector --targets all --steps 40 $COMMON --threads 1 --out $OUT/all_linear/reflector
fi
