"""Shared test fixtures: random-weight GGUFs of every MTP family, made at test time."""

from __future__ import annotations

import pytest

import pymtp
from pymtp import fixtures

CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


@pytest.fixture(scope="session")
def fixture_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("gguf")


@pytest.fixture(scope="session")
def gguf(fixture_dir):
    """gguf(family, **overrides) -> path of a seeded random-weight model."""

    def make(family: str, **overrides):
        return fixtures.fixture_path(family, cache_dir=fixture_dir, **overrides)

    return make


@pytest.fixture(scope="session")
def models(gguf):
    """models(family) -> a Model shared by the session's tests (do not close it)."""
    cache: dict[str, pymtp.Model] = {}

    def get(family: str) -> pymtp.Model:
        if family not in cache:
            cache[family] = pymtp.load(gguf(family), n_ctx=512)
        return cache[family]

    yield get
    for m in cache.values():
        m.close()
