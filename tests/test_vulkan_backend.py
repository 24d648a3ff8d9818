"""On a library built with llama.cpp's Vulkan backend (tools/test_vulkan.sh), the fixtures' layers
really run on the Vulkan device: the load log names it and every layer is offloaded. Skipped on
CPU builds (the CI's), where there is no device to check."""

from __future__ import annotations

import logging

import pytest

import pymtp
from pymtp._native import build_info

pytestmark = pytest.mark.skipif("VULKAN" not in build_info(),
                                reason="this library has no Vulkan backend (tools/test_vulkan.sh builds one)")


@pytest.mark.parametrize("family", ["glm4moe", "qwen35", "step35"])
def test_the_layers_are_on_the_vulkan_device(gguf, family, caplog, same_greedy):
    pymtp.set_log_level("info")
    try:
        with caplog.at_level(logging.INFO, logger="pymtp.llama"):
            s = pymtp.load(gguf(family), n_ctx=256)
    finally:
        pymtp.set_log_level(None)          # the default: llama.cpp silent
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "Vulkan0" in text, text[-2000:]
    assert "offloaded" in text and "layers to GPU" in text, text[-2000:]
    with s:
        prompt = s.tokenize("def parse(line):\n    ")
        spec = pymtp.generate(prompt, s, max_tokens=12, ignore_eos=True, speculative=True)
        plain = pymtp.generate(prompt, s, max_tokens=12, ignore_eos=True, speculative=False)
        assert spec.stats.n_drafted > 0
        same_greedy(s, prompt, spec.tokens, plain.tokens)
