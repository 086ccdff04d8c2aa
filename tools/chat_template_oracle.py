#!/usr/bin/env python3
"""Renders the chat templates under tests/formats/data/chat_templates with transformers'
own Jinja renderer (the code behind apply_chat_template) for the conversations of
tests/formats/chat_template_test.cpp, and prints each result as a C++ string literal.
Run by hand to cross-check the expected strings written in that test.

usage: chat_template_oracle.py [TEMPLATE_DIR]
"""
import json
import os
import sys

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
from transformers.utils.chat_template_utils import render_jinja_template

# bos/eos as the models' tokenizers define them (apply_chat_template passes these).
SPECIAL = {
    "smollm2.jinja": {"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"},
    "llama3_instruct.jinja": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
}

CONVERSATIONS = {
    "user_only": [{"role": "user", "content": "What is 2+2?"}],
    "with_system": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "  Bye \n"},
    ],
    "agent_role": [{"role": "planner", "content": "Plan the trip."}],
    "empty": [],
}


def cpp(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def main() -> int:
    folder = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "formats", "data", "chat_templates")
    for file_name, special in SPECIAL.items():
        with open(os.path.join(folder, file_name), encoding="utf-8") as f:
            template = f.read()
        for name, messages in CONVERSATIONS.items():
            for gen in (False, True):
                rendered, _ = render_jinja_template([messages], chat_template=template,
                                                    add_generation_prompt=gen, **special)
                print(f"{file_name} {name} add_generation_prompt={gen}:\n  {cpp(rendered[0])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
