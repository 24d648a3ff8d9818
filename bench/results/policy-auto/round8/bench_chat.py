"""`pymtp bench` on chat prompts: the bench's own runs (variants interleaved, medians), its prose
set replaced by user questions in the model's chat template (token ids, so that the template's
markers are special tokens). Run with --prompts prose; the table's "all" row is the chat set.

    python bench_chat.py --model default --prompts prose --n-prompts 2 --sampling greedy,qwen ...
"""

from __future__ import annotations

import sys

import pymtp
from pymtp.bench import cli
from pymtp.bench.models import resolve_model
from pymtp.bench.prompts import Prompt
from pymtp.chat import chat_prompt, chat_prompt_tokens

QUESTIONS = [
    "Explain what a hash table is and when a list is a better choice.",
    "How do I read a CSV file in Python and sum one of its columns?",
    "Write a short email asking a colleague to review my pull request.",
    "What are the main differences between TCP and UDP?",
]


def main() -> int:
    argv = sys.argv[1:]
    model = argv[argv.index("--model") + 1]
    with pymtp.load(str(resolve_model(model)), n_ctx=512) as s:
        toks = [chat_prompt_tokens(s.model, chat_prompt(s.model, [{"role": "user", "content": q}])) for q in QUESTIONS]

    def chat_prompts(n: int = 3, **_: object) -> list[Prompt]:
        return [Prompt(f"chat{i}", "chat", t, "round8/bench_chat.py") for i, t in enumerate(toks[:n])]  # type: ignore[arg-type]

    cli.prose_prompts = chat_prompts  # type: ignore[assignment]
    return cli.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
