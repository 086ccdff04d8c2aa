"""Shared pieces of the agentic QA task: the ChatML layout, tokenization, model loading.

Everything that decides token ids lives here, so the generator, the trainer, the
evaluator and the episode runner (and lorakv's C++ sessions, via README.md) agree
token for token. Tokenization uses llama.cpp's GGUF tokenizer (vocab only), the
tokenizer lorakv's C++ side matches exactly.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

REPO = Path(__file__).resolve().parents[2]
MODEL_DIR = REPO / "models"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DATA_DIR = REPO / "assets" / "agentic_qa"
ADAPTER_DIR = REPO / "assets" / "role_adapters"

IM_START_ID = 1  # <|im_start|>
IM_END_ID = 2  # <|im_end|>
ROLES = ("planner", "actor", "reflector")

SYSTEM_PROMPT = "Answer with tools: Lookup[name], Calculate[a - b], Finish[answer]."
ACTIONS = ("Lookup", "Calculate", "Finish")
VERDICTS = ("right", "wrong")


@dataclass
class Turn:
    """One ChatML turn: role name (system, user, planner, actor, tool, reflector) and text.

    `train` is False for a role turn that must not be learned (an actor's deliberately
    wrong Finish); the reflector after it is still learned.
    """

    role: str
    text: str
    train: bool = True


@dataclass
class Segment:
    """A tokenized piece of a trajectory. `role` is set for the content of a role turn."""

    ids: list[int]
    role: str | None = None
    turn_index: int = -1
    train: bool = True


def header(role: str) -> str:
    """The text that opens a turn; an agent generates right after it."""
    return f"<|im_start|>{role}\n"


TURN_END = "<|im_end|>\n"


def render(turns: list[Turn]) -> str:
    """The whole trajectory as text: every turn is header + text + <|im_end|> + newline."""
    return "".join(header(t.role) + t.text + TURN_END for t in turns)


class Tokenizer:
    """llama.cpp's tokenizer for the GGUF (vocab only), with special tokens parsed."""

    def __init__(self, model_path: Path | None = None) -> None:
        import llama_cpp

        path = model_path or (MODEL_DIR / GGUF_NAME)
        self._llama = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)

    def encode(self, text: str) -> list[int]:
        """Token ids for text, no BOS, special tokens (<|im_start|>, <|im_end|>) parsed."""
        return list(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def decode(self, ids: list[int]) -> str:
        """Text for ids (special tokens rendered as their text)."""
        return self._llama.detokenize(ids, special=True).decode("utf-8", errors="replace")


def tokenize_turns(tok: Tokenizer, turns: list[Turn]) -> list[Segment]:
    """Tokenize a trajectory turn by turn, exactly as a session builds it.

    Per turn: encode(header), encode(text), [<|im_end|>], encode("\\n"). For a role turn the
    content segment is text + <|im_end|> (what the agent generates, stop token included);
    the header and the trailing newline are appended by the runtime.
    """
    segs: list[Segment] = []
    nl = tok.encode("\n")
    for i, t in enumerate(turns):
        segs.append(Segment(tok.encode(header(t.role))))
        body = tok.encode(t.text) + [IM_END_ID]
        if t.role in ROLES:
            segs.append(Segment(body, role=t.role, turn_index=i, train=t.train))
        else:
            segs.append(Segment(body))
        segs.append(Segment(list(nl)))
    return segs


def flatten(segs: list[Segment]) -> list[int]:
    """All ids of a segment list, in order."""
    return [i for s in segs for i in s.ids]


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """Records of a jsonl file."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def turns_of(rec: dict[str, Any]) -> list[Turn]:
    """The Turn list of a dataset record."""
    return [Turn(t["role"], t["text"], t.get("train", True)) for t in rec["turns"]]


def load_base_model(dtype: Any = None) -> Any:
    """SmolLM2-135M-Instruct from the GGUF (transformers dequantises it), float32, eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(MODEL_DIR), gguf_file=GGUF_NAME, dtype=dtype or torch.float32
    )
    model.eval()
    return model


ACTION_RE = re.compile(r"^(Lookup|Calculate|Finish)\[(.*)\]$", re.S)


def parse_action(text: str) -> tuple[str, str] | None:
    """(action, argument) of an actor turn like `Lookup[Tovar Quenn]`, or None."""
    m = ACTION_RE.match(text.strip())
    return (m.group(1), m.group(2)) if m else None


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval for k successes out of n."""
    if n == 0:
        return (0.0, 1.0)
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / d
    return (max(0.0, c - h), min(1.0, c + h))
