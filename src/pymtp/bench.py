"""pymtp bench: tokens/s of pymtp's MTP speculative decoding against plain decoding
and against llama.cpp's own MTP driver, on the same GGUF.

    pymtp bench                         # deep variant + default model, code and prose prompts
    pymtp bench --model m.gguf --temps 0 --drafts 1,2,3 --repeats 5 --out bench/out
    pymtp bench --smoke --out /tmp/b    # seconds: tiny fixture, no llama.cpp tools
    python -m pymtp.bench ...

What runs, per model, temperature, repeat and prompt, interleaved in this order:

  (a) ``plain``         pymtp, speculative=False
  (b) ``mtp-K``         pymtp, SpecConfig(n_draft=K, adaptive=False), for each K in --drafts
      ``mtp-adaptive``  pymtp, the adaptive policy up to the longest K in --drafts
  (c) ``llama-mtp-K``   llama.cpp's ``llama-speculative-simple --spec-type draft-mtp``
  (d) ``llama-plain``   llama.cpp's ``llama-completion`` (no speculation)

(c) and (d) are built from the pinned llama.cpp tree pymtp itself is built from,
into ``$PYMTP_CACHE_DIR/llama-tools`` (default ``~/.cache/pymtp/llama-tools``).
All runs use the same thread count, context size, n_predict and sampling
(top-k/top-p/min-p off, no repetition penalty, end-of-generation ignored).

Throughput (``tps``) is generated tokens over decode wall time, prompt excluded:
for pymtp the wall time of ``generate()`` minus its prefill (so detokenizing and
streaming are included), for llama-speculative-simple its own "decoded N tokens
in X seconds" (the whole draft/verify loop), for llama-completion its eval plus
sampling time. Each summary row is the median over prompts x repeats.

Output: ``bench.json`` (settings, machine, every raw run, the summary and the
Python-overhead profile), ``bench.png`` (needs matplotlib: ``pip install
'pymtp[plot]'``) and a table on stdout.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import textwrap
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from .cache import cache_dir
from .errors import PymtpError

SCHEMA = "pymtp-bench/1"
N_CTX = 2048
SMOKE_TOKENS = 8
LLAMA_TOOLS = ("llama-speculative-simple", "llama-completion")

__all__ = ["main", "parse_llama_output", "code_prompts", "prose_prompts", "ensure_llama_tools"]


class BenchError(RuntimeError):
    """A benchmark setup problem with an actionable message."""


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# prompts: held-out standard-library files (same split rule as pymtp.train.data)
# ---------------------------------------------------------------------------------------------

HELDOUT_MOD = 20
_EXCLUDED_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}


@dataclass
class Prompt:
    id: str
    kind: str            # "code" | "prose"
    text: str
    source: str          # "<relpath>:<line>" in the stdlib, or "builtin"


def _stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _heldout_files(root: Path) -> list[str]:
    """Held-out stdlib files: pymtp.train.data's split when importable, else the same rule."""
    try:
        from .train.data import split_files

        return split_files(root)[1]
    except Exception:
        pass
    out = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _EXCLUDED_DIRS and not d.startswith("lib-dynload"))
        for f in files:
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
                if int(hashlib.sha256(rel.encode()).hexdigest()[:8], 16) % HELDOUT_MOD == 0:
                    out.append(rel)
    return sorted(out)


def _parse(root: Path, rel: str) -> tuple[str, ast.AST] | None:
    try:
        text = (root / rel).read_bytes().decode("utf-8")
        return text, ast.parse(text)
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


def _spread(items: list, n: int) -> list:
    """n items evenly spaced over the list (deterministic)."""
    if n >= len(items):
        return list(items)
    if n == 1:
        return [items[len(items) // 2]]
    return [items[round(i * (len(items) - 1) / (n - 1))] for i in range(n)]


_FALLBACK_CODE = [
    'def merge_intervals(intervals):\n    """Merge overlapping [start, end] intervals; return them sorted."""\n'
    "    intervals = sorted(intervals)\n    merged = []\n",
    "def read_config(path, defaults=None):\n    \"\"\"Read a key=value file into a dict.\"\"\"\n"
    "    result = dict(defaults or {})\n    with open(path) as f:\n",
]
_FALLBACK_PROSE = [
    "The module provides a small set of helpers for reading and writing configuration files. "
    "Each helper takes a path and returns a dictionary whose keys",
]


def code_prompts(n: int = 3, *, max_chars: int = 700, root: Path | None = None) -> list[Prompt]:
    """Function-sized snippets of held-out stdlib files: the signature, the docstring and
    the first two statements of a function of 8-40 lines, one function per file."""
    root = root or _stdlib_root()
    cands: list[Prompt] = []
    for rel in _heldout_files(root) if root.is_dir() else []:
        parsed = _parse(root, rel)
        if parsed is None:
            continue
        text, tree = parsed
        lines = text.splitlines()
        funcs = sorted((f for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))),
                       key=lambda f: f.lineno)
        for f in funcs:
            n_lines = f.end_lineno - f.lineno + 1
            body = f.body
            has_doc = bool(body) and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None),
                                                                                  ast.Constant) \
                and isinstance(body[0].value.value, str)
            code = body[1:] if has_doc else body
            if not 8 <= n_lines <= 40 or len(code) < 3 or f.decorator_list:
                continue
            end = code[1].end_lineno            # header (+ docstring) + two statements
            snippet = textwrap.dedent("\n".join(lines[f.lineno - 1:end])) + "\n"
            if len(snippet) > max_chars or "\t" in snippet:
                continue
            cands.append(Prompt("", "code", snippet, f"{rel}:{f.lineno}"))
            break                                 # one function per file
    if not cands:
        cands = [Prompt("", "code", t, "builtin") for t in _FALLBACK_CODE]
    out = _spread(cands, n)
    for i, p in enumerate(out):
        p.id = f"code{i}"
    return out


def prose_prompts(n: int = 3, *, max_chars: int = 320, root: Path | None = None) -> list[Prompt]:
    """Prose from docstrings of held-out stdlib files (module, class or function, at least
    200 characters and mostly words), cut at a word boundary near max_chars."""
    root = root or _stdlib_root()
    cands: list[Prompt] = []
    for rel in _heldout_files(root) if root.is_dir() else []:
        parsed = _parse(root, rel)
        if parsed is None:
            continue
        _, tree = parsed
        nodes = [tree] + sorted((x for x in ast.walk(tree)
                                 if isinstance(x, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))),
                                key=lambda x: x.lineno)
        for node in nodes:
            doc = ast.get_docstring(node, clean=True)
            if not doc or len(doc) < 200:
                continue
            words = sum(c.isalpha() or c in " \n.,'" for c in doc) / len(doc)
            if words < 0.9 or ">>>" in doc:
                continue
            paras = [" ".join(x.split()) for x in re.split(r"\n\s*\n", doc.strip())]
            while paras and len(paras[0].split()) < 5:      # a title line, an underline
                paras.pop(0)
            text = "\n\n".join(paras)                      # lines unwrapped, paragraphs kept
            if len(text) < 150:
                continue
            if len(text) > max_chars:
                cut = text.rfind(" ", 0, max_chars)
                text = text[:cut if cut > max_chars // 2 else max_chars]
            line = getattr(node, "lineno", 1)
            cands.append(Prompt("", "prose", text, f"{rel}:{line}"))
            break
    if not cands:
        cands = [Prompt("", "prose", t, "builtin") for t in _FALLBACK_PROSE]
    out = _spread(cands, n)
    for i, p in enumerate(out):
        p.id = f"prose{i}"
    return out


# ---------------------------------------------------------------------------------------------
# models
# ---------------------------------------------------------------------------------------------


def _parse_value(v: str) -> Any:
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    return v


def resolve_model(spec: str) -> Path:
    """A GGUF path from a --model value: a path, ``default`` (the default model, assembled
    on first use), ``tiny`` (the small bundled model), ``deep`` (tiny's deep benchmark
    variant), ``fixture:FAMILY[:key=value,...]`` or ``deep:SPEC`` (the deep variant of another spec, e.g. ``deep:fixture:glm4moe``)."""
    from . import default_model

    if spec in default_model.ALIASES:
        try:
            return default_model.resolve(spec)
        except (FileNotFoundError, PymtpError) as e:
            raise BenchError(f"{e}; or pass --model PATH") from None
    if spec == "deep":
        try:
            from .testing.deep import deep_variant_path
        except ImportError as e:
            raise BenchError(f"the deep benchmark variant needs pymtp.testing.deep ({e}); pass --model PATH") from None
        try:
            return deep_variant_path()
        except FileNotFoundError as e:
            raise BenchError(f"cannot make the deep variant: {e}. Pass --model PATH") from None
    if spec.startswith("deep:"):
        from .testing.deep import deep_variant_path

        return deep_variant_path(resolve_model(spec[5:]))
    if spec.startswith("fixture:"):
        from .testing.fixtures import fixture_path

        parts = spec.split(":", 2)
        over = {}
        if len(parts) == 3 and parts[2]:
            for kv in parts[2].split(","):
                k, _, v = kv.partition("=")
                over[k.strip()] = _parse_value(v.strip())
        return fixture_path(parts[1], **over)
    path = Path(spec).expanduser()
    if not path.is_file():
        raise BenchError(f"model file not found: {path}")
    return path


def default_models() -> list[Path]:
    """The deep variant and the default model, those that can be had (clear error if none)."""
    found, errors = [], []
    for spec in ("deep", "default"):
        try:
            found.append(resolve_model(spec))
        except BenchError as e:
            errors.append(f"{spec}: {e}")
    if not found:
        raise BenchError("no default benchmark model is available:\n  " + "\n  ".join(errors))
    for e in errors:
        _log(f"bench: skipping {e}")
    return found


# ---------------------------------------------------------------------------------------------
# llama.cpp tools: locate the pinned tree, build the two examples into the cache
# ---------------------------------------------------------------------------------------------


def _repo_root() -> Path | None:
    here = Path(__file__).resolve().parents[2]
    return here if (here / "native" / "cmake" / "LlamaSource.cmake").is_file() else None


def _pinned_commit() -> str | None:
    repo = _repo_root()
    if repo is not None:
        m = re.search(r'PYMTP_LLAMA_COMMIT\s+"([0-9a-f]{40})"',
                      (repo / "native" / "cmake" / "LlamaSource.cmake").read_text())
        if m:
            return m.group(1)
    try:
        from ._native import build_info

        m = re.search(r"\b([0-9a-f]{40})\b", build_info())
        return m.group(1) if m else None
    except Exception:
        return None


def find_llama_source(explicit: str | os.PathLike | None = None) -> Path:
    """The llama.cpp tree pymtp is built from (same rules as native/cmake/LlamaSource.cmake)."""
    cand = explicit or os.environ.get("PYMTP_LLAMA_SOURCE_DIR")
    if cand:
        p = Path(cand).expanduser()
        if not (p / "CMakeLists.txt").is_file():
            raise BenchError(f"not a llama.cpp tree: {p}")
        return p
    repo = _repo_root()
    if repo is not None and (repo / "native" / "llama.cpp" / "CMakeLists.txt").is_file():
        return repo / "native" / "llama.cpp"
    commit = _pinned_commit()
    cache = cache_dir()
    if commit:
        short = commit[:12]
        if repo is not None:
            patches = sorted((repo / "native" / "patches").glob("*.patch"))
            h = hashlib.sha256("".join(p.read_text() for p in patches).encode()).hexdigest()[:12]
            tree = cache / f"llama.cpp-{short}-p{h}"
            if (tree / ".pymtp-ready").is_file():
                return tree
        trees = sorted(cache.glob(f"llama.cpp-{short}-p*/.pymtp-ready"), key=lambda p: p.stat().st_mtime)
        if trees:
            return trees[-1].parent
    raise BenchError(
        f"no pinned llama.cpp tree found (commit {commit or 'unknown'}; looked in {cache} and the "
        "native/llama.cpp submodule). Build pymtp once (pip install .), which fetches it, or set "
        "PYMTP_LLAMA_SOURCE_DIR / --llama-src, or pass --no-llama-cpp.")


def _tools_dir(src: Path) -> Path:
    return cache_dir() / "llama-tools" / src.name / "build"


def cmake_configure_command(src: Path, build: Path) -> list[str]:
    cmd = [shutil.which("cmake") or "cmake", "-S", str(src), "-B", str(build)]
    if shutil.which("ninja"):
        cmd += ["-G", "Ninja"]
    cmd += ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DGGML_NATIVE=ON",
            "-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_BUILD_TESTS=OFF",
            "-DLLAMA_BUILD_SERVER=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
            f"-DGGML_CCACHE={'ON' if shutil.which('ccache') else 'OFF'}"]
    return cmd


@contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    """Serialize builds of the same tools directory between processes (POSIX)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            _log(f"bench: waiting for another build of the llama.cpp tools ({path})")
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def ensure_llama_tools(src: Path | None = None, *, bin_dir: str | os.PathLike | None = None,
                       jobs: int | None = None) -> dict[str, Any]:
    """Paths of llama-speculative-simple and llama-completion, building them when needed.

    bin_dir: use prebuilt binaries from there instead."""
    if bin_dir is not None:
        bins = {t: Path(bin_dir) / t for t in LLAMA_TOOLS}
        missing = [str(p) for p in bins.values() if not p.is_file()]
        if missing:
            raise BenchError(f"llama.cpp tools missing: {', '.join(missing)}")
        return {"source": None, "build_dir": None, "bins": {k: str(v) for k, v in bins.items()}, "built": False}
    src = find_llama_source(src)
    build = _tools_dir(src)
    bins = {t: build / "bin" / t for t in LLAMA_TOOLS}
    log = build.parent / "build.log"
    build.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with _build_lock(build.parent / ".lock"), open(log, "a") as f:
        if not (build / "CMakeCache.txt").is_file():
            _log(f"bench: configuring llama.cpp tools in {build} (log: {log})")
            r = subprocess.run(cmake_configure_command(src, build), stdout=f, stderr=subprocess.STDOUT)
            if r.returncode != 0:
                raise BenchError(f"configuring llama.cpp tools failed; see {log}")
        if not all(p.is_file() for p in bins.values()):
            _log(f"bench: building {', '.join(LLAMA_TOOLS)} from {src} (several minutes; log: {log})")
        cmd = [shutil.which("cmake") or "cmake", "--build", str(build), "--target", *LLAMA_TOOLS,
               "-j", str(jobs or os.cpu_count() or 2)]
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
        if r.returncode != 0:
            raise BenchError(f"building llama.cpp tools failed; see {log}")
    return {"source": str(src), "build_dir": str(build), "bins": {k: str(v) for k, v in bins.items()},
            "build_s": round(time.perf_counter() - t0, 1), "configure": cmake_configure_command(src, build)}


# ---------------------------------------------------------------------------------------------
# llama.cpp output parsing
# ---------------------------------------------------------------------------------------------

_NUM = r"([-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|inf)"
_RE = {
    "encoded": re.compile(rf"encoded\s+(\d+) tokens in\s+{_NUM} seconds, speed:\s+{_NUM} t/s"),
    "decoded": re.compile(rf"decoded\s+(\d+) tokens in\s+{_NUM} seconds, speed:\s+{_NUM} t/s"),
    "n_draft": re.compile(r"\bn_draft\s+=\s+(\d+)"),
    "n_predict": re.compile(r"\bn_predict\s+=\s+(\d+)"),
    "n_drafted": re.compile(r"\bn_drafted\s+=\s+(\d+)"),
    "n_accept": re.compile(r"\bn_accept\s+=\s+(\d+)"),
    "accept": re.compile(rf"(?<![\w])accept\s+=\s+{_NUM}%"),
    "stats": re.compile(
        r"statistics\s+(\S+):\s+#calls\(b,g,a\)\s+=\s+(\d+)\s+(\d+)\s+(\d+),\s+#gen drafts\s+=\s+(\d+),"
        r"\s+#acc drafts\s+=\s+(\d+),\s+#gen tokens\s+=\s+(\d+),\s+#acc tokens\s+=\s+(\d+)(.*)"),
    "stats_dur": re.compile(rf"dur\(b,g,a\)\s+=\s+{_NUM},\s+{_NUM},\s+{_NUM} ms"),
    "stats_acc": re.compile(rf"#mean acc len\s+=\s+{_NUM},\s+#acc rate/pos\s+=\s+\(([^)]*)\)"),
    "sampling": re.compile(rf"sampling time\s+=\s+{_NUM} ms"),
    "p_eval": re.compile(rf"prompt eval time\s+=\s+{_NUM} ms /\s+(\d+) tokens"),
    "eval": re.compile(rf"(?<!prompt )eval time\s+=\s+{_NUM} ms /\s+(\d+) runs"),
    "load": re.compile(rf"\bload time\s+=\s+{_NUM} ms"),
}


def parse_llama_output(text: str) -> dict[str, Any]:
    """Timings and acceptance from the log of llama-speculative-simple or llama-completion.

    Keys present only when found: encoded / decoded ({n, s, tps}), n_draft, n_predict,
    n_drafted, n_accept, accept_pct, spec ({type, calls_begin/draft/accept, gen_drafts,
    acc_drafts, gen_tokens, acc_tokens, mean_acc_len, acc_rate_pos[, dur_ms]}),
    sampling_ms, prompt_eval ({ms, n}), eval ({ms, n, tps}), load_ms. For
    llama-speculative-simple the ``target`` perf block comes last; the last match wins."""
    out: dict[str, Any] = {}

    def last(key):
        ms = list(_RE[key].finditer(text))
        return ms[-1] if ms else None

    for key in ("encoded", "decoded"):
        m = last(key)
        if m:
            out[key] = {"n": int(m.group(1)), "s": float(m.group(2)), "tps": float(m.group(3))}
    for key in ("n_draft", "n_predict", "n_drafted", "n_accept"):
        m = last(key)
        if m:
            out[key] = int(m.group(1))
    m = last("accept")
    if m:
        out["accept_pct"] = float(m.group(1))
    m = last("stats")
    if m:
        g = m.groups()
        spec = {"type": g[0], "calls_begin": int(g[1]), "calls_draft": int(g[2]), "calls_accept": int(g[3]),
                "gen_drafts": int(g[4]), "acc_drafts": int(g[5]), "gen_tokens": int(g[6]), "acc_tokens": int(g[7])}
        rest = g[8]                      # the optional parts, in either order
        d = _RE["stats_dur"].search(rest)
        if d:
            spec["dur_ms"] = {"begin": float(d.group(1)), "draft": float(d.group(2)), "accept": float(d.group(3))}
        a = _RE["stats_acc"].search(rest)
        if a:
            spec["mean_acc_len"] = float(a.group(1))
            spec["acc_rate_pos"] = [float(x) for x in a.group(2).split(",") if x.strip()]
        out["spec"] = spec
    m = last("sampling")
    if m:
        out["sampling_ms"] = float(m.group(1))
    m = last("p_eval")
    if m:
        out["prompt_eval"] = {"ms": float(m.group(1)), "n": int(m.group(2))}
    m = last("eval")
    if m:
        ms, n = float(m.group(1)), int(m.group(2))
        out["eval"] = {"ms": ms, "n": n, "tps": n / (ms / 1e3) if ms > 0 else 0.0}
    m = last("load")
    if m:
        out["load_ms"] = float(m.group(1))
    return out


# ---------------------------------------------------------------------------------------------
# variants and single runs
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    name: str
    engine: str            # "pymtp" | "llama.cpp"
    n_draft: int | None    # None: plain decoding
    adaptive: bool = False

    @property
    def speculative(self) -> bool:
        return self.n_draft is not None


def make_variants(drafts: Sequence[int], llama_cpp: bool) -> list[Variant]:
    from .config import SpecConfig

    vs = [Variant("plain", "pymtp", None)]
    vs += [Variant(f"mtp-{k}", "pymtp", k) for k in drafts]
    vs.append(Variant("mtp-adaptive", "pymtp", max(drafts, default=SpecConfig().n_draft), adaptive=True))
    if llama_cpp:
        vs += [Variant(f"llama-mtp-{k}", "llama.cpp", k) for k in drafts]
        vs.append(Variant("llama-plain", "llama.cpp", None))
    return vs


def _spec_arg(v: Variant):
    from .config import SpecConfig

    if not v.speculative:
        return False
    return SpecConfig(n_draft=v.n_draft, adaptive=v.adaptive)


def run_pymtp(model, v: Variant, prompt: str, temp: float, seed: int, max_tokens: int) -> dict[str, Any]:
    from . import generate

    t0 = time.perf_counter()
    r = generate(prompt, model, max_tokens=max_tokens, temperature=temp, seed=seed, ignore_eos=True,
                 speculative=_spec_arg(v))
    wall = time.perf_counter() - t0
    st = r.stats
    n = len(r.tokens)
    t_dec = max(wall - st.t_prefill, 1e-9)
    return {
        "n_tokens": n, "n_prompt": st.n_prompt, "wall_s": wall, "t_prefill": st.t_prefill, "t_decode": t_dec,
        "tps": n / t_dec, "tps_steps": st.tokens_per_second,
        "n_steps": st.n_steps, "n_drafted": st.n_drafted, "n_accepted": st.n_accepted, "n_emitted": st.n_emitted,
        "drafted_at": list(st.drafted_at), "accepted_at": list(st.accepted_at),
        "t_draft": st.t_draft, "t_verify": st.t_verify, "t_python": st.t_python, "t_total": st.t_total,
        "acceptance_rate": st.acceptance_rate, "mean_accepted": st.mean_accepted,
        "tokens_per_step": st.tokens_per_step, "finish_reason": r.finish_reason,
    }


def llama_command(bins: dict[str, str], v: Variant, model: Path, prompt: str, temp: float, seed: int,
                  max_tokens: int, threads: int, n_ctx: int = N_CTX) -> list[str]:
    common = ["-m", str(model), "-p", prompt, "-n", str(max_tokens), "-c", str(n_ctx),
              "-t", str(threads), "-tb", str(threads), "--temp", f"{temp:g}", "--seed", str(seed),
              "--top-k", "0", "--top-p", "1.0", "--min-p", "0.0", "--repeat-penalty", "1.0", "--ignore-eos"]
    if v.speculative:
        return [bins["llama-speculative-simple"], *common, "--spec-type", "draft-mtp",
                "--spec-draft-n-max", str(v.n_draft), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0",
                "-lv", "4"]
    return [bins["llama-completion"], *common, "-no-cnv", "--no-display-prompt", "-lv", "4"]


def run_llama(bins: dict[str, str], v: Variant, model: Path, prompt: str, temp: float, seed: int,
              max_tokens: int, threads: int, timeout: float = 600) -> dict[str, Any]:
    cmd = llama_command(bins, v, model, prompt, temp, seed, max_tokens, threads)
    # llama.cpp logs from a worker thread; once in a while the tail of the log (the timings)
    # is lost at exit although the run succeeded: run it again once.
    for attempt in range(2):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                           timeout=timeout)
        wall = time.perf_counter() - t0
        log = p.stderr + "\n" + p.stdout
        parsed = parse_llama_output(log)
        if p.returncode != 0:
            raise BenchError(f"{Path(cmd[0]).name} exited with {p.returncode}: {p.stderr[-2000:]}")
        if ("decoded" if v.speculative else "eval") in parsed:
            break
    rec: dict[str, Any] = {"wall_s": wall, "returncode": p.returncode, "llama": parsed, "attempts": attempt + 1}
    if v.speculative:
        dec = parsed.get("decoded")
        if not dec:
            raise BenchError(f"no 'decoded N tokens' line in the llama-speculative-simple log: {p.stderr[-2000:]}")
        rec.update(n_tokens=dec["n"], t_decode=dec["s"], tps=dec["tps"])
        if "encoded" in parsed:
            rec.update(n_prompt=parsed["encoded"]["n"], t_prefill=parsed["encoded"]["s"])
        n_drafted, n_acc = parsed.get("n_drafted", 0), parsed.get("n_accept", 0)
        spec = parsed.get("spec", {})
        steps = spec.get("calls_accept") or 0
        rec.update(n_drafted=n_drafted, n_accepted=n_acc, n_steps=steps,
                   acceptance_rate=n_acc / n_drafted if n_drafted else 0.0,
                   mean_accepted=n_acc / steps if steps else 0.0,
                   tokens_per_step=spec.get("mean_acc_len", 1 + n_acc / steps if steps else 0.0),
                   acc_rate_pos=spec.get("acc_rate_pos", []))
    else:
        ev = parsed.get("eval")
        if not ev:
            raise BenchError(f"no 'eval time' line in the llama-completion log: {p.stderr[-2000:]}")
        t = (ev["ms"] + parsed.get("sampling_ms", 0.0)) / 1e3
        rec.update(n_tokens=ev["n"], t_decode=t, tps=ev["n"] / t if t > 0 else 0.0, tps_eval_only=ev["tps"])
        if "prompt_eval" in parsed:
            rec.update(n_prompt=parsed["prompt_eval"]["n"], t_prefill=parsed["prompt_eval"]["ms"] / 1e3)
    return rec


# ---------------------------------------------------------------------------------------------
# Python overhead: time inside lib.pymtp_* calls vs step wall time
# ---------------------------------------------------------------------------------------------


class _TimedLib:
    """Stands in for the cffi lib: times every pymtp_* call."""

    def __init__(self, lib, acc: dict[str, float], counts: dict[str, int]) -> None:
        self._lib, self._acc, self._counts = lib, acc, counts

    def __getattr__(self, name: str):
        f = getattr(self._lib, name)
        if not name.startswith("pymtp_") or not callable(f):
            return f
        acc, counts, pc = self._acc, self._counts, time.perf_counter

        def timed(*args):
            t = pc()
            try:
                return f(*args)
            finally:
                acc[name] += pc() - t
                counts[name] += 1

        self.__dict__[name] = timed
        return timed


@contextmanager
def native_timer() -> Iterator[tuple[dict[str, float], dict[str, int]]]:
    """Within the block, calls into libpymtp from pymtp.model / pymtp.drafter are timed."""
    from . import _native, drafter, model

    acc: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    timed = _TimedLib(_native.lib, acc, counts)
    mods = [m for m in (model, drafter) if getattr(m, "lib", None) is _native.lib]
    for m in mods:
        m.lib = timed
    try:
        yield acc, counts
    finally:
        for m in mods:
            m.lib = _native.lib


def _wrapper_cost(n: int = 20000) -> float:
    """Extra seconds per call that the timing wrapper itself adds (counted as Python time)."""
    from ._native import lib

    acc, counts = defaultdict(float), defaultdict(int)
    timed = _TimedLib(lib, acc, counts)
    f, g = lib.pymtp_last_error, timed.pymtp_last_error
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(n):
            f()
        t1 = time.perf_counter()
        for _ in range(n):
            g()
        t2 = time.perf_counter()
        best = min(best, ((t2 - t1) - (t1 - t0)) / n)
    return max(best, 0.0)


def profile_python_overhead(model, prompt: str, *, max_tokens: int, threads: int, temp: float = 0.0,
                            seed: int = 0, n_ctx: int = N_CTX, adaptive: bool = True, n_draft: int = 3,
                            cprofile: bool = True) -> dict[str, Any]:
    """Run one speculative generation step by step (MTPSpeculator directly) and split its
    step time into native calls (libpymtp: decodes, logits/hidden views, seq_rm) and the
    rest (Python and numpy: drafting logic, sampling/verification, hand-off copies)."""
    from .config import SamplingConfig, SpecConfig
    from .model import DraftContext, TargetContext
    from .speculator import MTPSpeculator

    target = TargetContext(model, n_ctx=n_ctx, n_batch=512, n_threads=threads)
    draft = DraftContext(target, n_threads=threads) if model.mtp_loaded else None
    spec = SpecConfig() if adaptive else SpecConfig(n_draft=n_draft, adaptive=False)
    toks = model.tokenize(prompt)
    sampling = SamplingConfig(temperature=temp, seed=seed)

    def generate_steps(s: MTPSpeculator) -> float:
        t0 = time.perf_counter()
        n = 0
        while n < max_tokens and s.room() > 1:
            n += len(s.step(max_new=max_tokens - n).emitted)
        return time.perf_counter() - t0

    try:
        # warm-up, then the timed run
        s = MTPSpeculator(target, draft, sampling, spec)
        s.start(toks)
        generate_steps(s)
        s = MTPSpeculator(target, draft, sampling, spec)
        s.start(toks)
        with native_timer() as (acc, counts):
            wall = generate_steps(s)
        native = sum(acc.values())
        n_calls = sum(counts.values())
        cost = _wrapper_cost()
        st = s.stats
        py_raw = wall - native
        py = max(py_raw - n_calls * cost, 0.0)
        out: dict[str, Any] = {
            "model": model.path.name, "temperature": temp, "spec": spec.model_dump(),
            "n_tokens": st.n_emitted, "n_steps": st.n_steps, "step_wall_s": wall, "native_s": native,
            "native_calls": n_calls, "wrapper_cost_us": cost * 1e6,
            "python_s": py, "python_fraction": py / wall if wall > 0 else 0.0,
            "python_fraction_raw": py_raw / wall if wall > 0 else 0.0,
            "python_us_per_step": py / st.n_steps * 1e6 if st.n_steps else 0.0,
            "step_us": wall / st.n_steps * 1e6 if st.n_steps else 0.0,
            "specstats_python_fraction": st.t_python / st.t_total if st.t_total > 0 else 0.0,
            "specstats_split": {"draft": st.t_draft, "verify": st.t_verify, "python": st.t_python,
                                "total": st.t_total},
            "native_by_call": {k: {"s": acc[k], "calls": counts[k], "us_per_call": acc[k] / counts[k] * 1e6}
                               for k in sorted(acc, key=acc.get, reverse=True)},
            "tokens_per_step": st.tokens_per_step,
        }
        if cprofile:
            out["cprofile_top"] = _cprofile_steps(target, draft, sampling, spec, toks, generate_steps)
        return out
    finally:
        if draft is not None:
            draft.close()
        target.close()


def _cprofile_steps(target, draft, sampling, spec, toks, generate_steps, top: int = 15) -> list[dict]:
    import cProfile
    import pstats

    from .speculator import MTPSpeculator

    s = MTPSpeculator(target, draft, sampling, spec)
    s.start(toks)
    prof = cProfile.Profile()
    prof.enable()
    generate_steps(s)
    prof.disable()
    st = pstats.Stats(prof)
    rows = []
    for (fname, line, func), (cc, nc, tt, ct, _) in st.stats.items():  # type: ignore[attr-defined]
        rows.append({"function": f"{Path(fname).name}:{line}({func})" if line else func,
                     "calls": nc, "tottime_s": tt, "cumtime_s": ct})
    rows.sort(key=lambda r: r["tottime_s"], reverse=True)
    return rows[:top]


# ---------------------------------------------------------------------------------------------
# summary
# ---------------------------------------------------------------------------------------------


def _median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else 0.0


def summarize(runs: list[dict[str, Any]], variants: list[Variant]) -> list[dict[str, Any]]:
    """One row per (model, temperature, prompt set, variant): medians and ratios."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in runs:
        if r.get("ok") and not r.get("warmup"):
            for kind in (r["kind"], "all"):
                groups[(r["model"], r["temperature"], kind, r["variant"])].append(r)
    order = {v.name: i for i, v in enumerate(variants)}
    vmap = {v.name: v for v in variants}
    med = {key: _median([r["tps"] for r in rs]) for key, rs in groups.items()}
    rows = []
    for key in sorted(groups, key=lambda k: (k[0], k[1], k[2] != "all", k[2], order.get(k[3], 99))):
        model, temp, kind, name = key
        rs = groups[key]
        v = vmap.get(name)
        tps = [r["tps"] for r in rs]
        row: dict[str, Any] = {
            "model": model, "temperature": temp, "prompts": kind, "variant": name,
            "engine": rs[0]["engine"], "n_draft": rs[0]["n_draft"], "adaptive": rs[0]["adaptive"],
            "n_runs": len(rs), "tps_median": med[key], "tps_min": min(tps), "tps_max": max(tps),
            "n_tokens_median": _median([r["n_tokens"] for r in rs]),
        }
        plain = med.get((model, temp, kind, "plain"))
        row["vs_plain"] = row["tps_median"] / plain if plain else None
        ref = None
        if v is not None and v.speculative:
            ref = f"llama-mtp-{v.n_draft}"
        elif v is not None:
            ref = "llama-plain"
        lm = med.get((model, temp, kind, ref)) if ref else None
        row["vs_llama"] = row["tps_median"] / lm if lm else None
        row["vs_llama_ref"] = ref if lm else None
        if v is not None and v.speculative:
            n_steps = sum(r.get("n_steps", 0) for r in rs)
            n_acc = sum(r.get("n_accepted", 0) for r in rs)
            n_drafted = sum(r.get("n_drafted", 0) for r in rs)
            row["mean_accepted"] = n_acc / n_steps if n_steps else 0.0
            row["tokens_per_step"] = 1 + row["mean_accepted"] if n_steps else 0.0
            row["acceptance_rate"] = n_acc / n_drafted if n_drafted else 0.0
            if v.engine == "pymtp":
                L = max((len(r["drafted_at"]) for r in rs), default=0)
                d = [sum(r["drafted_at"][i] for r in rs if i < len(r["drafted_at"])) for i in range(L)]
                a = [sum(r["accepted_at"][i] for r in rs if i < len(r["accepted_at"])) for i in range(L)]
                row["acceptance_by_position"] = [ai / di if di else 0.0 for ai, di in zip(a, d)]
                # llama.cpp's definition: accepted at position i per drafting step
                row["accepted_per_step_by_position"] = [ai / d[0] if d and d[0] else 0.0 for ai in a]
                tot = sum(r["t_total"] for r in rs)
                row["time_split"] = {k: sum(r[f"t_{k}"] for r in rs) / tot if tot else 0.0
                                     for k in ("draft", "verify", "python")}
            else:
                # llama.cpp prints, per position, accepted tokens per accept call
                w = [(r.get("acc_rate_pos") or [], r.get("n_steps", 0)) for r in rs]
                L = max((len(p) for p, _ in w), default=0)
                tot = sum(n for _, n in w)
                row["accepted_per_step_by_position"] = [
                    sum(p[i] * n for p, n in w if i < len(p)) / tot if tot else 0.0 for i in range(L)]
        elif v is not None and v.engine == "pymtp":
            tot = sum(r["t_total"] for r in rs)
            row["time_split"] = {k: sum(r[f"t_{k}"] for r in rs) / tot if tot else 0.0
                                 for k in ("draft", "verify", "python")}
        rows.append(row)
    return rows


def _fmt_ratio(x: float | None) -> str:
    return f"{x:.2f}" if x is not None else "-"


def format_table(summary: list[dict[str, Any]], *, kinds: Sequence[str] = ("all",)) -> str:
    hdr = ["model", "T", "set", "variant", "tok/s", "min-max", "x plain", "x llama", "tok/step", "acc/pos",
           "draft/verify/py %"]
    lines = []
    for r in summary:
        if r["prompts"] not in kinds:
            continue
        accp = r.get("accepted_per_step_by_position")
        split = r.get("time_split")
        lines.append([
            r["model"][:34], f"{r['temperature']:g}", r["prompts"], r["variant"],
            f"{r['tps_median']:.1f}", f"{r['tps_min']:.0f}-{r['tps_max']:.0f}",
            _fmt_ratio(r.get("vs_plain")), _fmt_ratio(r.get("vs_llama")),
            f"{r['tokens_per_step']:.2f}" if r.get("tokens_per_step") else "-",
            " ".join(f"{x:.2f}" for x in accp) if accp else "-",
            "/".join(f"{100 * split[k]:.0f}" for k in ("draft", "verify", "python")) if split else "-",
        ])
    widths = [max(len(h), *(len(l[i]) for l in lines)) if lines else len(h) for i, h in enumerate(hdr)]
    out = ["  ".join(h.ljust(w) for h, w in zip(hdr, widths)), "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(l, widths)) for l in lines]
    return "\n".join(out)


def plot(result: dict[str, Any], path: Path) -> Path | None:
    """Bars of median tok/s per variant (one panel per model x temperature) and acceptance
    per position. Returns None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _log("bench: matplotlib is missing (pip install 'pymtp[plot]'): no plot")
        return None
    rows = [r for r in result["summary"] if r["prompts"] == "all"]
    panels = sorted({(r["model"], r["temperature"]) for r in rows})
    if not panels:
        return None
    fig, axes = plt.subplots(2, len(panels), figsize=(max(6, 5 * len(panels)), 8), squeeze=False)
    for j, (m, t) in enumerate(panels):
        rs = [r for r in rows if r["model"] == m and r["temperature"] == t]
        ax = axes[0][j]
        colors = ["tab:gray" if r["engine"] == "pymtp" and r["n_draft"] is None else
                  "tab:blue" if r["engine"] == "pymtp" else
                  "tab:olive" if r["n_draft"] is None else "tab:orange" for r in rs]
        ax.bar(range(len(rs)), [r["tps_median"] for r in rs], color=colors,
               yerr=[[r["tps_median"] - r["tps_min"] for r in rs], [r["tps_max"] - r["tps_median"] for r in rs]],
               capsize=2)
        ax.set_xticks(range(len(rs)), [r["variant"] for r in rs], rotation=45, ha="right", fontsize=8)
        ax.set_ylabel("tokens/s (median)")
        ax.set_title(f"{m[:40]}\nT={t:g}", fontsize=9)
        ax2 = axes[1][j]
        for r in rs:
            acc = r.get("accepted_per_step_by_position")
            if acc:
                ax2.plot(range(1, len(acc) + 1), acc, marker="o",
                         ls="-" if r["engine"] == "pymtp" else "--", label=r["variant"])
        ax2.set_xlabel("draft position")
        ax2.set_ylabel("accepted per drafting step")
        ax2.set_ylim(0, 1.05)
        ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------


def _csv(conv: Callable[[str], Any]) -> Callable[[str], list]:
    def parse(s: str) -> list:
        try:
            return [conv(x) for x in s.split(",") if x.strip()]
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    return parse


def _n_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="pymtp bench", description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", default=None, metavar="PATH",
                    help="GGUF to benchmark (repeatable); also 'default', 'deep' (its deep variant), "
                         "'fixture:FAMILY[:k=v,...]', 'deep:SPEC' (the deep variant of SPEC) "
                         "(default: the deep variant and the default model)")
    ap.add_argument("--prompts", choices=("code", "prose", "both"), default="both")
    ap.add_argument("--n-prompts", type=int, default=3, help="prompts per set (default 3)")
    ap.add_argument("--temps", type=_csv(float), default=[0.0, 0.8], help="temperatures (default 0,0.8)")
    ap.add_argument("--drafts", type=_csv(int), default=[1, 2, 3, 4], help="fixed draft lengths (default 1,2,3,4)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None, help="threads for every engine (default: all cores)")
    ap.add_argument("--no-llama-cpp", action="store_true", help="skip llama.cpp's MTP driver and plain decoding")
    ap.add_argument("--llama-src", default=None, help="llama.cpp tree to build the tools from (default: pinned)")
    ap.add_argument("--llama-bin", default=None, help="directory with prebuilt llama-speculative-simple and "
                                                       "llama-completion")
    ap.add_argument("--build-llama-tools", action="store_true", help="only build the llama.cpp tools, then exit")
    ap.add_argument("--no-profile", action="store_true", help="skip the Python-overhead profile")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--out", default="bench-out", help="output directory (default ./bench-out)")
    ap.add_argument("--smoke", action="store_true",
                    help="seconds: one tiny fixture, 1 prompt, 8 tokens, 1 repeat, no llama.cpp tools")
    return ap


def _machine() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "machine": platform.machine(),
                            "python": sys.version.split()[0], "cores": _n_cores(), "cpu_count": os.cpu_count()}
    try:
        info["loadavg"] = list(os.getloadavg())
    except OSError:
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        from ._native import build_info

        info["pymtp_build"] = build_info()
    except Exception:
        pass
    return info


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        return _main(args)
    except BenchError as e:
        print(f"pymtp bench: {e}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    if args.build_llama_tools:
        info = ensure_llama_tools(args.llama_src, bin_dir=args.llama_bin)
        print(json.dumps(info, indent=2))
        return 0
    if args.smoke:
        args.repeats, args.max_tokens, args.n_prompts = 1, SMOKE_TOKENS, 1
        args.no_llama_cpp = True
        if args.prompts == "both":
            args.prompts = "code"
        if args.model is None:
            args.model = ["fixture:glm4moe"]
    for name in ("repeats", "max_tokens", "n_prompts"):
        if getattr(args, name) < 1:
            raise BenchError(f"--{name.replace('_', '-')} must be at least 1")
    if any(k < 1 for k in args.drafts):
        raise BenchError("--drafts must be positive")
    threads = args.threads or _n_cores()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    from . import load

    model_paths = [resolve_model(s) for s in args.model] if args.model else default_models()
    prompts: list[Prompt] = []
    if args.prompts in ("code", "both"):
        prompts += code_prompts(args.n_prompts)
    if args.prompts in ("prose", "both"):
        prompts += prose_prompts(args.n_prompts)

    llama = None
    if not args.no_llama_cpp:
        llama = ensure_llama_tools(args.llama_src, bin_dir=args.llama_bin)
    variants = make_variants(args.drafts, llama is not None)

    result: dict[str, Any] = {
        "schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "argv": args.argv,
        "settings": {"threads": threads, "max_tokens": args.max_tokens, "repeats": args.repeats,
                     "temps": args.temps, "drafts": args.drafts, "prompts": args.prompts,
                     "n_prompts": args.n_prompts, "n_ctx": N_CTX, "llama_cpp": llama is not None,
                     "smoke": bool(args.smoke), "variants": [asdict(v) for v in variants]},
        "machine": _machine(), "llama_cpp": llama, "models": [], "prompts": [asdict(p) for p in prompts],
        "runs": [], "summary": [], "python_overhead": [],
    }
    if llama is not None:
        result["llama_cpp"]["example_commands"] = {
            v.name: llama_command(llama["bins"], v, Path("MODEL.gguf"), "PROMPT", 0.0, 0, args.max_tokens, threads)
            for v in variants if v.engine == "llama.cpp"}
    runs: list[dict[str, Any]] = result["runs"]
    t_start = time.perf_counter()

    for mpath in model_paths:
        model = load(mpath, n_ctx=N_CTX, n_threads=threads)
        label = mpath.stem
        minfo = {"label": label, "path": str(mpath), "architecture": model.architecture, "n_embd": model.n_embd,
                 "n_layer": model.n_layer, "n_mtp_layers": model.n_mtp_layers, "mtp_loaded": model.mtp_loaded,
                 "n_params": model.n_params, "size_bytes": model.size_bytes, "n_vocab": model.n_vocab}
        result["models"].append(minfo)
        mvariants = [v for v in variants if not v.speculative or model.mtp_loaded]
        if len(mvariants) < len(variants):
            _log(f"bench: {label} has no MTP head: only plain decoding")
        _log(f"bench: {label} ({model.architecture}, n_embd {model.n_embd}, {model.n_layer} layers, "
             f"{model.n_params / 1e6:.1f}M params), {len(prompts)} prompts, threads {threads}")

        def one(v: Variant, p: Prompt, temp: float, seed: int, rep: int, n_tok: int, warmup: bool) -> None:
            rec: dict[str, Any] = {"model": label, "temperature": temp, "prompt": p.id, "kind": p.kind,
                                   "repeat": rep, "variant": v.name, "engine": v.engine, "n_draft": v.n_draft,
                                   "adaptive": v.adaptive, "seed": seed, "warmup": warmup}
            try:
                if v.engine == "pymtp":
                    rec.update(run_pymtp(model, v, p.text, temp, seed, n_tok))
                else:
                    rec.update(run_llama(llama["bins"], v, mpath, p.text, temp, seed, n_tok, threads))
                rec["ok"] = True
            except (BenchError, subprocess.TimeoutExpired) as e:
                rec.update(ok=False, error=str(e)[-3000:])
                _log(f"bench: {v.name} failed: {str(e)[:300]}")
            runs.append(rec)

        # warm-up: every variant once, short, not summarized
        for temp in args.temps:
            for v in mvariants:
                one(v, prompts[0], temp, 0, -1, min(16, args.max_tokens), True)
        for temp in args.temps:
            for rep in range(args.repeats):
                t_rep = time.perf_counter()
                for p in prompts:
                    seed = 1000 + rep
                    for v in mvariants:
                        one(v, p, temp, seed, rep, args.max_tokens, False)
                _log(f"bench: {label} T={temp:g} repeat {rep + 1}/{args.repeats} "
                     f"({time.perf_counter() - t_rep:.0f}s)")

        if not args.no_profile and model.mtp_loaded:
            for temp in args.temps[:1]:
                try:
                    prof = profile_python_overhead(model, prompts[0].text, max_tokens=args.max_tokens,
                                                   threads=threads, temp=temp)
                    prof["model"] = label
                    result["python_overhead"].append(prof)
                except Exception as e:  # the profile must not lose the benchmark
                    _log(f"bench: python-overhead profile failed: {e!r}")
        model.close()

    result["summary"] = summarize(runs, variants)
    result["elapsed_s"] = time.perf_counter() - t_start
    try:
        result["machine"]["loadavg_end"] = list(os.getloadavg())
    except OSError:
        pass
    jpath = out / "bench.json"
    jpath.write_text(json.dumps(result, indent=1, default=str))
    table = format_table(result["summary"], kinds=("all",) if args.prompts != "both" else ("all", "code", "prose"))
    print(table)
    for prof in result["python_overhead"]:
        print(f"\nPython overhead per speculative step ({prof['model']}, T={prof['temperature']:g}, adaptive): "
              f"{100 * prof['python_fraction']:.1f}% of step time "
              f"({prof['python_us_per_step']:.0f} us of {prof['step_us']:.0f} us per step; "
              f"SpecStats view: {100 * prof['specstats_python_fraction']:.1f}%)")
    if not args.no_plot:
        png = plot(result, out / "bench.png")
        if png:
            print(f"\nwrote {jpath} and {png}")
        else:
            print(f"\nwrote {jpath}")
    else:
        print(f"\nwrote {jpath}")
    failed = [r for r in runs if not r.get("ok")]
    if failed:
        _log(f"bench: {len(failed)} run(s) failed (see 'error' in {jpath})")
    return 1 if failed and len(failed) == len(runs) else 0


if __name__ == "__main__":
    sys.exit(main())
