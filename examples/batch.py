"""A batch of prompts: generated together in batched speculative steps.

    python examples/batch.py

A list of prompts makes pymtp.generate run them side by side: every step drafts for all of
them in one decode per draft position and verifies all of them in one target decode. Each
result is what its prompt gives alone with the same settings (greedy here, so token for
token), in the order of the prompts.
"""

import time

import pymtp

PROMPTS = [
    "def is_prime(n):",
    "The three primary colours are",
    "SELECT name, email FROM users WHERE",
    "Once upon a time, in a quiet village,",
    "import json\n\ndef load_config(path):",
]

session = pymtp.load()  # the default model (SmolLM2-135M-Instruct + pymtp's MTP head)

t0 = time.perf_counter()
results = pymtp.generate(PROMPTS, session, max_tokens=48)
elapsed = time.perf_counter() - t0

for prompt, result in zip(PROMPTS, results):
    stats = result.stats
    print(
        f"--- {prompt!r}: {len(result.tokens)} tokens ({result.finish_reason}), "
        f"{stats.acceptance_rate:.0%} of drafts accepted, {stats.tokens_per_step:.2f} tokens/step"
    )
    print(result.text.strip())

n_tokens = sum(len(r.tokens) for r in results)
print(f"\n{len(PROMPTS)} prompts, {n_tokens} tokens in {elapsed:.1f} s ({n_tokens / elapsed:.0f} tokens/s in all)")
session.close()
