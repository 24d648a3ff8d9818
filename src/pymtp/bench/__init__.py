"""pymtp bench: tokens/s of pymtp's MTP speculative decoding against plain decoding
and against llama.cpp's own MTP driver, on the same GGUF.

    pymtp bench                         # deep variant + default model, code and prose prompts
    pymtp bench --model m.gguf --temps 0 --drafts 1,2,3 --repeats 5 --out bench/out
    pymtp bench --smoke --out /tmp/b    # seconds: the tiny bundled model, no llama.cpp tools
    python -m pymtp.bench ...

What runs, per model, temperature, repeat and prompt, interleaved in this order:

  (a) ``plain``         pymtp, speculative=False
  (b) ``mtp-K``         pymtp, SpecConfig(n_draft=K, adaptive=False), for each K in --drafts
      ``mtp-adaptive``  pymtp, the adaptive policy up to the longest K in --drafts
      ``mtp-auto``      pymtp, the auto policy (pymtp.policy; k in 0..the longest K)
  (c) ``llama-mtp-K``   llama.cpp's ``llama-speculative-simple --spec-type draft-mtp``
  (d) ``llama-plain``   llama.cpp's ``llama-completion`` (no speculation)

(c) and (d) are built from the pinned llama.cpp tree pymtp itself is built from,
into ``$PYMTP_CACHE_DIR/llama-tools`` (default ``~/.cache/pymtp/llama-tools``).
All runs use the same thread count, context size, n_predict and sampling
(by default top-k/top-p/min-p off, no repetition penalty; ``--sampling greedy,qwen`` gives
named settings instead: ``sampling``), end-of-generation ignored.

Throughput (``tps``) is generated tokens over decode wall time, prompt excluded:
for pymtp the wall time of ``generate()`` minus its prefill (so detokenizing and
streaming are included), for llama-speculative-simple its own "decoded N tokens
in X seconds" (the whole draft/verify loop), for llama-completion its eval plus
sampling time. Each summary row is the median over prompts x repeats. pymtp's runs
also get ``tps_wall`` (tokens over the whole generate() call, prefill included) and
their rows ``vs_plain_wall``: the prefill is where a variant's own start work would hide
from ``tps`` (an MTP start used to re-decode the cached prompt's last position to hand
the head its row, one trunk decode a generation that plain decoding does not make).

Output: ``bench.json`` (settings, machine, every raw run, the summary and the
Python-overhead profile), ``bench.png`` (needs matplotlib: ``pip install
'pymtp[plot]'``) and a table on stdout.

Per pymtp variant and setting, one more pass with every native call timed (not part of
tok/s) gives the step costs: sampling ms per step (the native sampler's calls), Python ms
per step (step wall time minus native calls) and their share of the step.

One module per job: ``prompts`` (held-out stdlib code and prose), ``models`` (--model
values), ``llama_build`` (llama.cpp's tools), ``llama_log`` (their logs), ``runners``
(one run of a variant), ``sampling`` (the settings), ``overhead`` (Python time per step, through
``pymtp._native.instrument``), ``report`` (summary, table, plot), ``cli`` (main); the
benchmark models it can build: ``deep`` (a deep, wide variant of a small model), ``vocab``
(a padded vocabulary), ``echo`` / ``echo_weights`` (known text, chosen head agreement, any
size) and ``byte_vocab`` (their tokenizer).
"""

from .base import N_CTX, SCHEMA, SMOKE_TOKENS, BenchError
from .cli import build_parser, main
from .llama_build import LLAMA_TOOLS, cmake_configure_command, ensure_llama_tools, find_llama_source
from .llama_log import parse_llama_output
from .models import default_models, resolve_model
from .overhead import profile_python_overhead
from .prompts import Prompt, code_prompts, prose_prompts
from .report import format_table, plot, summarize
from .runners import Variant, llama_command, make_variants, run_llama, run_pymtp
from .sampling import PRESETS, SamplingSetting

__all__ = [
    "main",
    "build_parser",
    "parse_llama_output",
    "code_prompts",
    "prose_prompts",
    "Prompt",
    "ensure_llama_tools",
    "find_llama_source",
    "cmake_configure_command",
    "LLAMA_TOOLS",
    "resolve_model",
    "default_models",
    "Variant",
    "make_variants",
    "llama_command",
    "run_pymtp",
    "run_llama",
    "profile_python_overhead",
    "summarize",
    "format_table",
    "plot",
    "BenchError",
    "N_CTX",
    "SCHEMA",
    "SMOKE_TOKENS",
    "PRESETS",
    "SamplingSetting",
]
