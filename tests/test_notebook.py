"""examples/quickstart.ipynb runs top to bottom (nbclient, a real IPython kernel).

On the default model (SmolLM2-135M + pymtp's head; its trunk comes from PyPI on first use)
when its head file is in the checkout, else on a random-weight fixture through PYMTP_MODEL
(the notebook calls pymtp.load() with no path)."""

from __future__ import annotations

import os
from pathlib import Path

import ipykernel  # noqa: F401 - the kernel the notebook runs on
import nbclient
import nbformat

import pymtp

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "quickstart.ipynb"
DEFAULT_HEAD = Path(pymtp.__file__).resolve().parent / "models" / "smollm2-135m-nextn.gguf"


def test_quickstart_notebook_runs(gguf, monkeypatch, tmp_path):
    if DEFAULT_HEAD.is_file():
        monkeypatch.delenv("PYMTP_MODEL", raising=False)
    else:
        monkeypatch.setenv("PYMTP_MODEL", str(gguf("glm4moe")))
    # The kernel is a subprocess: make it import this checkout of pymtp.
    src = str(Path(pymtp.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    html = "\n".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "pymtp-result" in html and "pymtp-stats" in html and "pymtp-compare" in html
    texts = "\n".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    assert "acceptance" in texts and "No module named" not in texts
    assert any("image/png" in o.get("data", {}) for o in outputs)  # matplotlib is a test extra
