"""The README and the documentation site stay true to the code.

The README's Python runs on the default model (and its server snippet against `pymtp serve`),
every Python block in the docs at least compiles, the README keeps the test command CI reads
from it, and install hints name the distribution (`pymtp-llm`). The site itself is built by
`mkdocs build --strict` in CI (a broken link, anchor, page or API reference fails it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import pymtp

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").rglob("*.md"))
WRONG_INSTALL = re.compile(r"pip install ['\"]?pymtp(?!-llm)\b")


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def test_readme_keeps_the_test_command_ci_runs():
    assert "pip install '.[test]' && python -m pytest -q" in README.read_text()


def test_install_hints_name_the_distribution():
    files = [README, ROOT / "mkdocs.yml", *DOCS, *(ROOT / "examples").glob("*.py")]
    bad = [(f.relative_to(ROOT), m.group(0)) for f in files for m in WRONG_INSTALL.finditer(f.read_text())]
    assert not bad, bad


@pytest.mark.parametrize("page", DOCS + [README], ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_compile(page):
    for i, block in enumerate(python_blocks(page)):
        compile(block, f"{page.name}, python block {i}", "exec")


def test_readme_python_runs(monkeypatch, capsys):
    monkeypatch.delenv("PYMTP_MODEL", raising=False)
    blocks = [b for b in python_blocks(README) if "OpenAI(" not in b]
    assert len(blocks) >= 2
    scope: dict = {}
    try:
        for block in blocks:
            exec(compile(block, "README.md", "exec"), scope)
        assert isinstance(scope["model"], pymtp.Session)
        assert scope["result"].finish_reason in ("stop", "length") and scope["result"].tokens
        assert scope["stream"].result.stats.n_emitted == len(scope["stream"].result.tokens) > 0
        assert scope["reply"].text.strip()
        assert [r.prompt_tokens for r in scope["results"]] == [
            scope["model"].tokenize(p) for p in ("def add(a, b):", "The capital of France is", "SELECT")
        ]
        out = capsys.readouterr().out
        assert scope["result"].text in out and "of drafts accepted" in out
    finally:
        if "model" in scope:
            scope["model"].close()


def test_readme_server_snippet_runs(monkeypatch, capsys):
    from pymtp_testing.server_load import start_server

    (block,) = [b for b in python_blocks(README) if "OpenAI(" in b]
    served = re.search(r"--model-name (\S+)", README.read_text()).group(1)
    assert f'model="{served}"' in block  # the snippet names the id the command serves
    with start_server(["--model-name", served]) as server:
        block = block.replace("http://127.0.0.1:8000", server.url)
        exec(compile(block, "README.md", "exec"), {})
    lines = capsys.readouterr().out.strip().splitlines()
    assert 0.0 <= float(lines[-1]) <= 1.0  # the acceptance rate from the "pymtp" field
