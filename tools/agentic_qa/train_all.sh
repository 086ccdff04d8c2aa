#!/usr/bin/env bash
# Train the six role adapters in LRAgent's order (planner first; the shared-A set's actor and
# reflector reuse the planner's v_proj lora_A, frozen). Run from the repository root:
#   tools/agentic_qa/train_all.sh [qv_shared_a|all_linear|both|alora] [ROLE...]   (default both, all roles)
# Naming roles (planner, actor, reflector) trains only those; the shared-A actor and reflector
# need their set's planner already trained.
# `alora` trains activated LoRA roles (all-linear, rank 8, invoked by the role's turn header;
# train_roles.py --alora) into assets/role_adapters/alora.
# These are the commands that made the committed adapters (each train_log.txt repeats its own).
# --threads only sets torch's CPU threads; bfloat16 autocast results can differ in the last bits
# with the thread count. Run on an otherwise idle machine: 2 threads under a parallel build
# collapse to a few tokens per second.
set -euo pipefail
cd "$(dirname "$0")/../.."
WHICH="${1:-both}"
shift || true
ROLES="${*:-planner actor reflector}"
PY="nice -n 10 .venv/bin/python tools/agentic_qa/train_roles.py"
train() {  # train ROLE ARGS...: runs the trainer for ROLE unless roles were named without it
  local role="$1"; shift
  [[ " $ROLES " == *" $role "* ]] || return 0
  $PY --role "$role" "$@"
}
OUT=assets/role_adapters
# 400 steps x 4 trajectories is about one epoch of the 1,800 training trajectories. The
# reflector's right/wrong token weighs 8 in its loss (see train_roles.py --verdict-weight).
COMMON="--steps 400 --rank 8 --alpha 16 --lr 2e-3 --batch 4 --bf16 --seed 0 --threads 2 --val-n 64"
REFLECT="--verdict-weight 8 --eval-every 100"
if [[ "$WHICH" == qv_shared_a || "$WHICH" == both ]]; then
  train planner --targets q_proj,v_proj $COMMON --out $OUT/qv_shared_a/planner
  train actor --targets q_proj,v_proj $COMMON --out $OUT/qv_shared_a/actor --shared-a-from $OUT/qv_shared_a/planner
  train reflector --targets q_proj,v_proj $COMMON $REFLECT --out $OUT/qv_shared_a/reflector --shared-a-from $OUT/qv_shared_a/planner
fi
if [[ "$WHICH" == all_linear || "$WHICH" == both ]]; then
  train planner --targets all $COMMON --out $OUT/all_linear/planner
  train actor --targets all $COMMON --out $OUT/all_linear/actor
  train reflector --targets all $COMMON $REFLECT --out $OUT/all_linear/reflector
fi
if [[ "$WHICH" == alora ]]; then
  train planner --targets all --alora $COMMON --out $OUT/alora/planner
  train actor --targets all --alora $COMMON --out $OUT/alora/actor
  train reflector --targets all --alora $COMMON $REFLECT --out $OUT/alora/reflector
fi
