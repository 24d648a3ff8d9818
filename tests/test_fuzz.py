"""Fuzzing: the public API's parameters and corrupted GGUF files.

Whatever goes in, pymtp answers with a Python exception (PymtpError,
ValueError / TypeError / pydantic's ValidationError, OSError) or a result:
never a crash, an abort or a hang.

Corrupted files are loaded (and, when they load, generated from) in a worker
subprocess, so that a regression that aborts the process (a GGML_ASSERT, a
SIGFPE, a segfault) fails the test with the mutation that caused it instead
of killing pytest. The mutator and the worker live here; tools/fuzz_campaign.py
runs them for longer, outside CI:

    python tools/fuzz_campaign.py --minutes 10

Example counts are small and derandomized (bounded CI time); the campaign is
where volume goes.
"""

from __future__ import annotations

import json
import math
import os
import random
import struct
import subprocess
import sys
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import pymtp  # noqa: E402
from pymtp.errors import PymtpError  # noqa: E402

ALLOWED = (PymtpError, ValueError, TypeError, OSError)  # ValidationError is a ValueError

# ---- GGUF layout: where the header, metadata and tensor-info fields lie -----------------------


@dataclass(frozen=True)
class Region:
    offset: int
    size: int
    kind: str  # "u32" "u64" "i32" "f32" "bool" "type" "len" "str" "dims" ...
    label: str


_SCALAR_KIND = {
    0: "u8",
    1: "i8",
    2: "u16",
    3: "i16",
    4: "u32",
    5: "i32",
    6: "f32",
    7: "bool",
    10: "u64",
    11: "i64",
    12: "f64",
}


def gguf_layout(path: str | os.PathLike) -> tuple[list[Region], int]:
    """The fields of a GGUF's header, KV metadata and tensor infos, and the data offset.

    Arrays contribute their header (key, element type, count) and their first and
    last two elements, not every element (a tokenizer has thousands)."""
    from gguf import GGUFReader

    r = GGUFReader(str(path))
    regions: list[Region] = [Region(0, 4, "magic", "magic")]

    def add_parts(start: int, parts, labels, kinds):
        off = start
        for part, label, kind in zip(parts, labels, kinds):
            if kind is not None:
                regions.append(Region(off, part.nbytes, kind, label))
            off += part.nbytes

    for key, f in r.fields.items():
        parts = list(f.parts)
        if key.startswith("GGUF."):
            add_parts(f.offset, parts, [key], ["u32" if key == "GGUF.version" else "u64"])
            continue
        head = [f"{key}:key_len", f"{key}:key", f"{key}:type"]
        head_kinds = ["len", "str", "type"]
        vtype = int(f.types[0])
        if vtype == 9:  # array: [key_len, key, type, elem type, count, elements...]
            elem = int(f.types[1]) if len(f.types) > 1 else 0
            labels = head + [f"{key}:elem_type", f"{key}:count"]
            kinds = head_kinds + ["type", "u64"]
            rest = parts[5:]
            if elem == 8:  # strings: (len, bytes) pairs
                n = len(rest) // 2
                for i in range(n):
                    keep = i < 2 or i >= n - 2
                    labels += [f"{key}[{i}]:len", f"{key}[{i}]"]
                    kinds += ["len" if keep else None, "str" if keep else None]
            else:
                for i in range(len(rest)):
                    keep = i < 2 or i >= len(rest) - 2
                    labels.append(f"{key}[{i}]")
                    kinds.append(_SCALAR_KIND.get(elem, "raw") if keep else None)
            add_parts(f.offset, parts, labels, kinds)
        elif vtype == 8:  # string: [key_len, key, type, len, bytes]
            add_parts(f.offset, parts, head + [f"{key}:len", f"{key}:value"], head_kinds + ["len", "str"])
        else:
            add_parts(f.offset, parts, head + [f"{key}:value"], head_kinds + [_SCALAR_KIND.get(vtype, "raw")])
    for t in r.tensors:
        parts = list(t.field.parts)  # [name_len, name, n_dims, dims, type, offset]
        add_parts(
            t.field.offset,
            parts,
            [
                f"{t.name}:name_len",
                f"{t.name}:name",
                f"{t.name}:n_dims",
                f"{t.name}:dims",
                f"{t.name}:type",
                f"{t.name}:offset",
            ],
            ["len", "str", "u32", "dims", "u32", "u64"],
        )
    return regions, int(r.data_offset)


# ---- mutations ------------------------------------------------------------------------------
# A mutation is a JSON-able list: ["set", offset, hex bytes] or ["trunc", n_bytes].

INTERESTING_INTS = (
    0,
    1,
    2,
    3,
    4,
    7,
    8,
    15,
    16,
    17,
    31,
    32,
    63,
    64,
    127,
    128,
    255,
    256,
    303,
    304,
    305,
    1023,
    1024,
    4096,
    65535,
    65536,
    2**24,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**40,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 1,
)
INTERESTING_FLOATS = (0.0, -0.0, 1.0, -1.0, 1e-45, 1e-30, 1e30, 3.4e38, math.inf, -math.inf, math.nan)


def encode_value(kind: str, size: int, value) -> bytes:
    """value packed into size bytes the way a field of this kind holds it."""
    if isinstance(value, float):
        if size >= 8:
            return struct.pack("<d", value) + b"\0" * (size - 8)
        if size >= 4:
            return struct.pack("<f", value) + b"\0" * (size - 4)
        return bytes(size)
    return (int(value) % (1 << (8 * size))).to_bytes(size, "little")


def random_mutations(rng: random.Random, regions: list[Region], data_offset: int, file_size: int) -> list:
    """One to three mutations, most of them aimed at a field of the header or metadata."""
    muts: list = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        r = rng.random()
        if r < 0.12:
            muts.append(["trunc", rng.choice((rng.randrange(0, data_offset + 1), rng.randrange(0, file_size)))])
            continue
        if r < 0.22:  # a raw byte anywhere before the tensor data
            off = rng.randrange(0, data_offset)
            muts.append(["set", off, bytes([rng.randrange(256)]).hex()])
            continue
        if r < 0.25:  # NaN / Inf / huge values in the weights
            off = data_offset + 4 * rng.randrange(0, (file_size - data_offset) // 4)
            muts.append(["set", off, struct.pack("<f", rng.choice((math.nan, math.inf, -math.inf, 1e38))).hex()])
            continue
        reg = rng.choice(regions)
        size = reg.size
        if reg.kind in ("str", "dims") and size > 8 and rng.random() < 0.7:
            # a piece of a string or dims array: a byte or an 8-byte word
            sub = rng.choice((1, 4, 8))
            start = reg.offset + rng.randrange(0, max(1, size - sub + 1))
            size = min(sub, reg.offset + reg.size - start)
            off = start
        else:
            off = reg.offset
        mode = rng.random()
        if mode < 0.15:
            bit = rng.randrange(8 * size)
            value = None
            payload = bytearray(size)  # flip applied in apply_mutations via "xor"
            payload[bit // 8] = 1 << (bit % 8)
            muts.append(["xor", off, bytes(payload).hex()])
            continue
        if mode < 0.3:
            payload = bytes(rng.randrange(256) for _ in range(size))
        elif reg.kind in ("f32", "f64") and mode < 0.8:
            payload = encode_value(reg.kind, size, rng.choice(INTERESTING_FLOATS))
        else:
            value = rng.choice(INTERESTING_INTS)
            if rng.random() < 0.3:
                value = -value
            payload = encode_value(reg.kind, size, value)
        muts.append(["set", off, payload.hex()])
    return muts


def apply_mutations(data: bytes, muts: list) -> bytes:
    buf = bytearray(data)
    for m in muts:
        if m[0] == "trunc":
            del buf[m[1] :]
        else:
            off, payload = m[1], bytes.fromhex(m[2])
            if off >= len(buf):
                continue
            payload = payload[: len(buf) - off]
            if m[0] == "xor":
                payload = bytes(a ^ b for a, b in zip(buf[off : off + len(payload)], payload))
            buf[off : off + len(payload)] = payload
    return bytes(buf)


# ---- the worker subprocess ---------------------------------------------------------------------


def _worker_main() -> None:  # pragma: no cover - runs in the subprocess
    """Reads JSON requests from stdin, answers one JSON line per request."""
    import resource

    # Absurd allocations (a corrupted size) should fail inside the process, not summon the OOM killer.
    limit = int(os.environ.get("PYMTP_FUZZ_AS_LIMIT", str(8 << 30)))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import pymtp as p
    from pymtp.errors import PymtpError as PE

    allowed = (PE, ValueError, TypeError, OSError)
    # Answers go to the original stdout; anything native code prints goes to stderr.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    for line in sys.stdin:
        req = json.loads(line)
        res: dict = {"stage": "load"}
        model = None
        try:
            model = p.load(req["path"], n_ctx=64, mtp=req.get("mtp", True))
            res["stage"] = "generate"
            for spec in (True, False):
                try:
                    r = p.generate(req.get("prompt", "Hello"), model, max_tokens=4, speculative=spec)
                    res.setdefault("finish", []).append(r.finish_reason)
                except p.UnsupportedError:
                    res.setdefault("finish", []).append("unsupported")
            res["ok"] = True
        except allowed as e:
            res.update(ok=False, allowed=True, exc=type(e).__name__, msg=str(e)[:300])
        except BaseException as e:  # noqa: BLE001 - reported, the parent decides
            res.update(ok=False, allowed=False, exc=type(e).__name__, msg=str(e)[:300])
        finally:
            if model is not None:
                try:
                    model.close()
                except BaseException as e:  # noqa: BLE001
                    res.update(ok=False, allowed=False, exc=type(e).__name__, msg="close: " + str(e)[:300])
        out.write(json.dumps(res) + "\n")
        out.flush()


class LoadWorker:
    """A subprocess that loads GGUFs; survives nothing it should not, reports what killed it."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.proc: subprocess.Popen | None = None
        self.n_started = 0

    def _start(self) -> None:
        import tempfile

        self.n_started += 1
        # stderr goes to a file: a pipe nobody drains would fill up and stall the worker.
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [sys.executable, "-u", __file__, "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env={**os.environ, "PYTHONFAULTHANDLER": "1", "GGML_NO_BACKTRACE": "1"},
            start_new_session=True,  # a hung worker is killed with whatever it forked
        )

    def run(self, path: str, **req) -> dict:
        """The worker's answer, or {"crashed": True, ...} when it died or hung."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        p = self.proc
        assert p is not None and p.stdin is not None and p.stdout is not None
        p.stdin.write(json.dumps({"path": path, **req}) + "\n")
        p.stdin.flush()
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        ready = sel.select(self.timeout)
        sel.close()
        line = p.stdout.readline() if ready else ""
        if line:
            return json.loads(line)
        hung = p.poll() is None
        if hung:
            import signal

            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        p.wait()
        self._stderr.seek(0)
        err = self._stderr.read().decode("utf-8", "replace")
        self._stderr.close()
        self.proc = None
        return {"crashed": True, "hung": hung, "returncode": p.returncode, "stderr": err[-3000:]}

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.proc.stdout.close()
            self._stderr.close()
        self.proc = None


def check_answer(answer: dict, muts: list) -> None:
    if answer.get("crashed"):
        what = "hung" if answer["hung"] else f"died (returncode {answer['returncode']})"
        pytest.fail(f"loading a corrupted GGUF {what}; mutations {muts}\n{answer['stderr']}")
    if not answer.get("ok") and not answer.get("allowed"):
        pytest.fail(
            f"a corrupted GGUF raised {answer['exc']}: {answer['msg']} (not a pymtp/OS/Value/Type error); "
            f"mutations {muts}"
        )


# ---- fixtures ------------------------------------------------------------------------------------

FUZZ_FAMILIES = ("glm4moe", "qwen35", "step35", "deepseek2")


@pytest.fixture(scope="module")
def worker():
    w = LoadWorker(timeout=float(os.environ.get("PYMTP_FUZZ_TIMEOUT", "60")))
    yield w
    w.close()


@pytest.fixture(scope="module")
def layouts(gguf):
    out = {}
    for fam in FUZZ_FAMILIES:
        path = gguf(fam)
        regions, data_offset = gguf_layout(path)
        out[fam] = (path.read_bytes(), regions, data_offset)
    return out


# ---- corrupted GGUF bytes -------------------------------------------------------------------------


def test_worker_loads_the_intact_fixtures(worker, layouts, tmp_path):
    for fam, (data, _, _) in layouts.items():
        path = tmp_path / f"{fam}.gguf"
        path.write_bytes(data)
        answer = worker.run(str(path))
        assert answer.get("ok"), (fam, answer)
        assert answer["finish"] == ["length", "length"]


@st.composite
def mutation_lists(draw, layout):
    """Mutations hypothesis can shrink: a field of the layout and a value for it."""
    data, regions, data_offset = layout
    muts = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(("field", "field", "field", "byte", "trunc")))
        if kind == "trunc":
            muts.append(["trunc", draw(st.integers(0, data_offset + 64))])
        elif kind == "byte":
            muts.append(["set", draw(st.integers(0, data_offset - 1)), bytes([draw(st.integers(0, 255))]).hex()])
        else:
            reg = draw(st.sampled_from(regions))
            if reg.kind in ("f32", "f64"):
                value = draw(st.sampled_from(INTERESTING_FLOATS))
            else:
                value = draw(st.sampled_from(INTERESTING_INTS)) * draw(st.sampled_from((1, -1)))
            muts.append(["set", reg.offset, encode_value(reg.kind, reg.size, value).hex()])
    return muts


@pytest.mark.parametrize("family", FUZZ_FAMILIES)
def test_corrupted_gguf_never_crashes(family, layouts, worker, tmp_path_factory):
    layout = layouts[family]
    data = layout[0]
    d = tmp_path_factory.mktemp(f"fuzz-{family}")
    counter = iter(range(10**9))

    @settings(
        max_examples=int(os.environ.get("PYMTP_FUZZ_EXAMPLES", "150")),
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(muts=mutation_lists(layout))
    def run(muts):
        path = d / f"case{next(counter)}.gguf"
        path.write_bytes(apply_mutations(data, muts))
        try:
            check_answer(worker.run(str(path)), muts)
        finally:
            path.unlink()

    run()
    n_cases = next(counter)
    print(f"{family}: {n_cases} corrupted files")
    assert n_cases >= 10


@pytest.mark.parametrize("family", FUZZ_FAMILIES)
def test_every_truncation_point_of_the_header_fails_cleanly(family, layouts, worker, tmp_path):
    """Cut the file at every field boundary of the header, metadata and tensor infos."""
    data, regions, data_offset = layouts[family]
    cuts = sorted({r.offset for r in regions} | {r.offset + r.size for r in regions} | {data_offset})
    # Every boundary of a small family; a sample of the rest keeps CI time bounded.
    cuts = cuts[:: max(1, len(cuts) // 60)]
    path = tmp_path / "cut.gguf"
    for n in cuts:
        path.write_bytes(data[:n])
        answer = worker.run(str(path))
        check_answer(answer, [["trunc", n]])
        assert not answer.get("ok"), f"a file cut at byte {n} of {len(data)} loaded"


def test_known_crashers_are_refused(worker, gguf, tmp_path):
    """Corruptions that aborted llama.cpp before the shim checked for them (regression cases)."""
    for fam, muts in KNOWN_CRASHERS:
        data = gguf(fam).read_bytes()
        path = tmp_path / "crasher.gguf"
        path.write_bytes(apply_mutations(data, muts))
        answer = worker.run(str(path))
        check_answer(answer, muts)


# (family, mutations) that aborted or crashed the process before the shim refused them, as
# found by tools/fuzz_campaign.py on the seed-0 fixtures (FIXTURE_VERSION 1): load_hparams
# asserts (layer / expert counts), duplicate vocabulary entries, unknown expert gating,
# rope dims and M-RoPE sections wider than a head, NaN / negative norm epsilons, quantized
# norms and attention sinks, ssm.inner_size against the tensors, full_attention_interval 0
# (SIGFPE), DeepSeek2 MLA dims and KV heads, a tensor table without trunk blocks (SIGSEGV)
# or with a partial MTP block (now loads without MTP), GQA head counts, MLA head sizes,
# experts without a router (SIGSEGV), an all-false sliding-window pattern, K / V head sizes.
KNOWN_CRASHERS: list[tuple[str, list]] = [
    ("qwen3next", [["set", 760, "e0ffffffffffffff"]]),
    ("qwen35", [["set", 1008, "00010000"]]),
    ("qwen3next", [["set", 772, "02"]]),
    ("qwen35moe", [["set", 372, "5d"]]),
    ("deepseek2", [["xor", 323, "00000010"]]),
    ("deepseek2", [["set", 997, "fc"]]),
    ("qwen35", [["xor", 308, "00000040"]]),
    ("step35", [["set", 543, "0346faab"]]),
    ("qwen35moe", [["set", 721, "47ae9c45"]]),
    ("step35", [["set", 1778, "7c"]]),
    ("mimo2", [["xor", 1067, "0020"]]),
    ("glm4moe", [["set", 1619, "7e"]]),
    ("deepseek2", [["set", 1202, "ffffffff"]]),
    ("qwen3next", [["set", 10010, "02000000"]]),
    ("qwen35moe", [["set", 1282, "ff000000"]]),
    ("qwen35moe", [["set", 279932, "9976967e"], ["set", 664, "c1"]]),
    ("qwen35", [["set", 625, "0602be92"]]),
    ("glm4moe", [["set", 637, "000080ff"]]),
    ("qwen35moe", [["set", 1282, "01000000"]]),
    ("qwen3next", [["set", 1187, "00000000"]]),
    ("qwen3next", [["set", 1187, "30010000"]]),
    ("qwen35", [["set", 942, "000000ff"]]),
    ("glm4moe", [["set", 1064, "7919f97b"]]),
    ("deepseek2", [["set", 619, "000000000100000000000000000000000000000000000000000000000000"]]),
    ("qwen35moe", [["set", 1282, "00000000"]]),
    ("deepseek2", [["set", 910, "f91227a6"]]),
    ("deepseek2", [["set", 936, "01"]]),
    ("qwen3next", [["set", 1282, "01000000"]]),
    ("mimo2", [["set", 8, "0300000000000000"]]),
    ("mimo2", [["xor", 6542, "01000000"]]),
    ("deepseek2", [["set", 947, "09"]]),
    ("mimo2", [["set", 613, "0000c07f"]]),
    ("qwen3next", [["set", 2377, "af"], ["xor", 9379, "08"], ["set", 1236, "00000000"]]),
    ("deepseek2", [["set", 8, "2000000000000000"]]),
    ("deepseek2", [["set", 587, "0000000000010000"]]),
    ("deepseek2", [["set", 607, "00040000"]]),
    ("deepseek2", [["set", 751, "04000000"]]),
    ("deepseek2", [["set", 581, "ffffffff"]]),
    ("qwen35", [["xor", 482, "00000040"]]),
    ("deepseek2", [["set", 653, "ffff0000"]]),
    ("step35", [["xor", 7849, "01"]]),
    ("deepseek2", [["set", 653, "df"]]),
    ("deepseek2", [["set", 653, "31010000"]]),
    ("step35", [["set", 1184, "00"]]),
    ("glm4moe", [["xor", 491, "00000010"]]),
    ("deepseek2", [["set", 247292, "000080ff"], ["xor", 653, "10000000"]]),
    ("glm4moe", [["xor", 581, "00000080"]]),
]


# ---- the public API's parameters -------------------------------------------------------------------

_any_number = st.one_of(
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from((0, 1, -1, 0.5, 2**31, 2**63)),
)
_junk = st.one_of(
    st.none(),
    st.text(max_size=3),
    st.lists(st.integers(-1, 3), max_size=2),
    st.booleans(),
    st.just(object()),
    st.binary(max_size=3),
)


def _param(valid, *, numbers: bool = True):
    return st.one_of(valid, _any_number, _junk) if numbers else st.one_of(valid, _junk)


_prompt = st.one_of(
    st.text(max_size=24),
    st.lists(st.integers(-5, 400), max_size=12),  # some ids past n_vocab (304)
    st.lists(st.one_of(st.integers(-(2**40), 2**40), st.floats(), st.text(max_size=2)), max_size=4),
    st.sampled_from(("", "Hello", "x" * 600, b"bytes")),
    st.none(),
    st.integers(),
)
_spec = st.one_of(
    st.booleans(),
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "n_draft": _param(st.integers(0, 20)),
            "p_min": _param(st.floats(-1, 2)),
            "adaptive": _param(st.booleans()),
            "cooldown": _param(st.integers(-1, 20)),
            "n_min": _param(st.integers(0, 20)),
            "bogus": st.integers(),
        },
    ),
    _junk,
)
_kwargs = st.fixed_dictionaries(
    {},
    optional={
        "max_tokens": _param(st.integers(-2, 12)),
        "temperature": _param(st.floats(-1, 3)),
        "top_k": _param(st.integers(-2, 400)),
        "top_p": _param(st.floats(-0.5, 1.5)),
        "min_p": _param(st.floats(-0.5, 1.5)),
        "repetition_penalty": _param(st.floats(-1, 12)),
        "seed": _param(st.integers(-2, 2**64)),
        "stop": _param(st.one_of(st.text(max_size=3), st.lists(st.text(max_size=3), max_size=3)), numbers=False),
        "ignore_eos": _param(st.booleans()),
        "speculative": _spec,
    },
)


@pytest.fixture(scope="module")
def fuzz_model(gguf):
    m = pymtp.load(gguf("glm4moe"), n_ctx=64)
    yield m
    m.close()


@settings(
    max_examples=int(os.environ.get("PYMTP_FUZZ_API_EXAMPLES", "200")),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(prompt=_prompt, kwargs=_kwargs, use_stream=st.booleans())
def test_generate_parameters_raise_only_python_errors(fuzz_model, prompt, kwargs, use_stream):
    m = fuzz_model
    kwargs.setdefault("max_tokens", 8)
    try:
        if use_stream:
            s = pymtp.stream(prompt, m, **kwargs)
            pieces = list(s)
            assert "".join(pieces) == s.result.text
            r = s.result
        else:
            r = pymtp.generate(prompt, m, **kwargs)
    except ValidationError as e:
        assert e.errors(), e  # names the field(s) at fault
        return
    except ALLOWED:
        return
    for one in r if isinstance(r, list) else [r]:  # a list of prompts: one result each
        assert one.finish_reason in ("stop", "length", "context")
        assert len(one.tokens) <= max(0, int(kwargs["max_tokens"]))
        assert all(0 <= t < m.n_vocab for t in one.tokens)
    if isinstance(r, list):
        assert len(r) == len(prompt)


def test_the_model_is_healthy_after_the_api_fuzz(fuzz_model, gguf):
    """Runs after the fuzz above (same module): the shared model still gives a fresh model's output."""
    with pymtp.load(gguf("glm4moe"), n_ctx=64) as fresh:
        want = pymtp.generate("Hello", fresh, max_tokens=12).tokens
    assert pymtp.generate("Hello", fuzz_model, max_tokens=12).tokens == want


@settings(
    max_examples=int(os.environ.get("PYMTP_FUZZ_API_EXAMPLES", "200")),
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(
                (
                    "decode",
                    "draft",
                    "seq_rm",
                    "seq_cp",
                    "pos_max",
                    "logits",
                    "hidden",
                    "set_head",
                    "checkpoint_save",
                    "checkpoint_restore",
                )
            ),
            st.lists(st.integers(-3, 400), min_size=0, max_size=6),
            st.integers(-3, 300),
            st.integers(-3, 300),
            st.integers(-2, 2),
        ),
        max_size=12,
    )
)
def test_low_level_calls_raise_only_python_errors(fuzz_model, ops):
    """Random sequences of native calls with in- and out-of-range ids, positions and sequences."""
    import numpy as np

    m = fuzz_model
    with pymtp.TargetContext(m, n_ctx=64, n_batch=8) as t, pymtp.DraftContext(t) as d:
        row = np.zeros((8, m.n_embd), dtype=np.float32)
        for op, toks, a, b, seq in ops:
            try:
                if op == "decode":
                    t.decode(toks, a, seq_id=seq)
                elif op == "draft":
                    d.decode(toks, a, row[0], row[1:] if len(toks) > 1 else None, seq_id=seq)
                elif op == "seq_rm":
                    (t if seq >= 0 else d).seq_rm(a, b)
                elif op == "seq_cp":
                    t.seq_cp(seq, abs(seq), a, b)
                elif op == "pos_max":
                    t.pos_max(seq)
                elif op == "logits":
                    (t if seq >= 0 else d).logits()
                elif op == "hidden":
                    (t if seq >= 0 else d).hidden()
                elif op == "set_head":
                    d.set_head(a)
                elif op == "checkpoint_save":
                    t.checkpoint_save(seq)
                else:
                    t.checkpoint_restore(seq)
            except ALLOWED:
                pass
        # still a working context pair
        t.seq_rm(0)
        t.decode([1, 2, 3], 0)
        assert t.logits().shape == (3, m.n_vocab)


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        _worker_main()
