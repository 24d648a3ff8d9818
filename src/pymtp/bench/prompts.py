"""The bench's prompts: code and prose from held-out standard-library files.

Held out means held out from the training of pymtp's heads: the files come from
``pymtp.train.data.split_files``, the one definition of that split."""

from __future__ import annotations

import ast
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

from ..train.data import read_text, split_files, stdlib_root


@dataclass
class Prompt:
    id: str
    kind: str  # "code" | "prose"
    text: str
    source: str  # "<relpath>:<line>" in the stdlib, or "builtin"


_FALLBACK_CODE = [
    'def merge_intervals(intervals):\n    """Merge overlapping [start, end] intervals; return them sorted."""\n'
    "    intervals = sorted(intervals)\n    merged = []\n",
    'def read_config(path, defaults=None):\n    """Read a key=value file into a dict."""\n'
    "    result = dict(defaults or {})\n    with open(path) as f:\n",
]
_FALLBACK_PROSE = [
    "The module provides a small set of helpers for reading and writing configuration files. "
    "Each helper takes a path and returns a dictionary whose keys",
]


def _heldout_sources(root: Path) -> list[tuple[str, str, ast.Module]]:
    """(relative path, text, syntax tree) of each held-out file that reads and parses."""
    if not root.is_dir():
        return []
    out = []
    for rel in split_files(root)[1]:
        text = read_text(rel, root)
        if text is None:
            continue
        try:
            out.append((rel, text, ast.parse(text)))
        except (SyntaxError, ValueError):
            continue
    return out


def _spread(items: list, n: int) -> list:
    """n items evenly spaced over the list (deterministic)."""
    if n >= len(items):
        return list(items)
    if n == 1:
        return [items[len(items) // 2]]
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


def _pick(cands: list[Prompt], fallback: list[str], kind: str, n: int) -> list[Prompt]:
    if not cands:
        cands = [Prompt("", kind, t, "builtin") for t in fallback]
    out = _spread(cands, n)
    for i, p in enumerate(out):
        p.id = f"{kind}{i}"
    return out


def _has_docstring(f: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    first = f.body[0] if f.body else None
    return isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str)


def code_prompts(n: int = 3, *, max_chars: int = 700, root: Path | None = None) -> list[Prompt]:
    """Function-sized snippets of held-out stdlib files: the signature, the docstring and
    the first two statements of a function of 8-40 lines, one function per file."""
    cands: list[Prompt] = []
    for rel, text, tree in _heldout_sources(root or stdlib_root()):
        lines = text.splitlines()
        funcs = sorted(
            (f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))),
            key=lambda f: f.lineno,
        )
        for f in funcs:
            n_lines = (f.end_lineno or f.lineno) - f.lineno + 1
            code = f.body[1:] if _has_docstring(f) else f.body
            if not 8 <= n_lines <= 40 or len(code) < 3 or f.decorator_list:
                continue
            end = code[1].end_lineno  # header (+ docstring) + two statements
            snippet = textwrap.dedent("\n".join(lines[f.lineno - 1 : end])) + "\n"
            if len(snippet) > max_chars or "\t" in snippet:
                continue
            cands.append(Prompt("", "code", snippet, f"{rel}:{f.lineno}"))
            break  # one function per file
    return _pick(cands, _FALLBACK_CODE, "code", n)


def prose_prompts(n: int = 3, *, max_chars: int = 320, root: Path | None = None) -> list[Prompt]:
    """Prose from docstrings of held-out stdlib files (module, class or function, at least
    200 characters and mostly words), cut at a word boundary near max_chars."""
    cands: list[Prompt] = []
    for rel, _, tree in _heldout_sources(root or stdlib_root()):
        nodes: list[ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef] = [tree] + sorted(
            (x for x in ast.walk(tree) if isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))),
            key=lambda x: x.lineno,
        )
        for node in nodes:
            doc = ast.get_docstring(node, clean=True)
            if not doc or len(doc) < 200:
                continue
            words = sum(c.isalpha() or c in " \n.,'" for c in doc) / len(doc)
            if words < 0.9 or ">>>" in doc:
                continue
            paras = [" ".join(x.split()) for x in re.split(r"\n\s*\n", doc.strip())]
            while paras and len(paras[0].split()) < 5:  # a title line, an underline
                paras.pop(0)
            text = "\n\n".join(paras)  # lines unwrapped, paragraphs kept
            if len(text) < 150:
                continue
            if len(text) > max_chars:
                cut = text.rfind(" ", 0, max_chars)
                text = text[: cut if cut > max_chars // 2 else max_chars]
            cands.append(Prompt("", "prose", text, f"{rel}:{getattr(node, 'lineno', 1)}"))
            break
    return _pick(cands, _FALLBACK_PROSE, "prose", n)
