"""PEFT's activated LoRA (aLoRA) when the decoder is called directly.

PEFT applies an aLoRA adapter only from the last occurrence of its invocation tokens on, and
it finds that occurrence in `PeftModel.forward` / `generate`. The task's tools call the
decoder (`base_model.model`) directly, for logits at chosen positions and for their own KV
caches; there no offsets reach the LoRA layers, and PEFT 0.21.2's aLoRA layer then adapts
nothing. These helpers hand the offsets over the way PEFT's forward does:

- `offsets_hooks`: each row's offset found as PEFT finds it (last whole occurrence of the
  invocation), for a forward over whole sequences (training, teacher-forced scoring);
- `adapt_last_hooks`: the last `n` positions of every row adapted, for a forward over new tokens
  on top of a KV cache whose rows hold the base model's K/V (free-running episodes).
"""
from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch


def invocation_tokens(peft_model: Any, adapter_name: str) -> list[int] | None:
    """The adapter's invocation token ids, or None for a standard LoRA."""
    tokens = getattr(peft_model.peft_config[adapter_name], "alora_invocation_tokens", None)
    return list(tokens) if tokens else None


def offsets_hooks(peft_model: Any | None, input_ids: torch.Tensor) -> AbstractContextManager:
    """Activate the active aLoRA adapter from its last invocation in each row of input_ids [B, T].

    A row without the invocation would silently run the base model: refused, since every caller
    here builds rows that contain it. No model (the base alone) or a standard LoRA needs no hooks.
    """
    if peft_model is None:
        return nullcontext()
    name = peft_model.active_adapter
    if invocation_tokens(peft_model, name) is None:
        return nullcontext()
    from peft.tuners.lora.variants import calculate_alora_offsets

    offsets = calculate_alora_offsets(peft_model.peft_config, name, input_ids)
    if any(o is None for o in offsets):
        raise ValueError(f"a row lacks the invocation tokens of aLoRA adapter {name!r}")
    return peft_model.base_model._enable_peft_forward_hooks(alora_offsets=offsets)


def adapt_last_hooks(peft_model: Any | None, rows: int, n: int) -> AbstractContextManager:
    """Adapt the last n positions of each of `rows` rows with the active adapter (aLoRA only)."""
    if peft_model is None or invocation_tokens(peft_model, peft_model.active_adapter) is None:
        return nullcontext()
    return peft_model.base_model._enable_peft_forward_hooks(alora_offsets=[n] * rows)
