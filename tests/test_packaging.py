"""The distribution's name: `pymtp` on PyPI is an unrelated 2013 package (LibMTP bindings), so
pymtp ships as `pymtp-llm` (`import pymtp`), and every install hint must say so."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WRONG = re.compile(r"pip install ['\"]?pymtp(?!-llm)\b")


def test_the_distribution_name():
    if sys.version_info >= (3, 11):
        import tomllib

        name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    else:  # pragma: no cover
        name = re.search(r'^name = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert name == "pymtp-llm"


def test_install_hints_name_the_distribution():
    files = [ROOT / "README.md", ROOT / "examples" / "quickstart.ipynb", *(ROOT / "src" / "pymtp").rglob("*.py")]
    bad = [(f.relative_to(ROOT), m.group(0)) for f in files for m in WRONG.finditer(f.read_text())]
    assert not bad, bad
    assert "pip install 'pymtp-llm[server]'" in (ROOT / "src" / "pymtp" / "server" / "__init__.py").read_text()
