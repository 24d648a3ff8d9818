"""On a library built with llama.cpp's CUDA or Vulkan backend (tools/test_gpu.sh), the fixtures'
layers really run on the GPU device: the load log names it and every layer is offloaded, and
speculative decoding there stays lossless. Skipped on CPU builds (the CI's), where there is no
device to check."""

from __future__ import annotations

import logging

import pytest

import pymtp
from pymtp._native import build_info

# the name llama.cpp gives the first device of the backend this library was built with
DEVICE = "CUDA0" if "CUDA" in build_info() else "Vulkan0" if "VULKAN" in build_info() else None
pytestmark = pytest.mark.skipif(DEVICE is None, reason="this library has no GPU backend (tools/test_gpu.sh builds one)")


@pytest.mark.parametrize("family", ["glm4moe", "qwen35", "step35"])
def test_the_layers_are_on_the_gpu_device(gguf, family, caplog, same_greedy):
    pymtp.set_log_level("info")
    try:
        with caplog.at_level(logging.INFO, logger="pymtp.llama"):
            s = pymtp.load(gguf(family), n_ctx=256)
    finally:
        pymtp.set_log_level(None)  # the default: llama.cpp silent
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert DEVICE in text, text[-2000:]
    assert "offloaded" in text and "layers to GPU" in text, text[-2000:]
    with s:
        prompt = s.tokenize("def parse(line):\n    ")
        spec = pymtp.generate(prompt, s, max_tokens=12, ignore_eos=True, speculative=True)
        plain = pymtp.generate(prompt, s, max_tokens=12, ignore_eos=True, speculative=False)
        assert spec.stats.n_drafted > 0
        same_greedy(s, prompt, spec.tokens, plain.tokens)
