"""Seeded sampled requests are reproducible on a CPU build: the same n>1 request gives the same
choices on its first call (cold slots, nothing cached) and later ones (warm: the prompt is
taken from the cache), with --parallel 1 (choices one at a time) and --parallel 4 (the
choices decoded together in batched steps), speculative or not, on fixtures in Q4_0 and
Q4_K_M (8-bit activations: a last-bit difference moves a logit enough to flip a sampled token,
as on real quantized models; the stock build fails this test).

That holds because a row's bits do not depend on the batch it is decoded in
(tests/test_batch_invariance.py) as long as a decode has at most 8 rows: the servers run with
PYMTP_MAX_UBATCH=8, so prefills and the batched steps of three choices (3 x 4 rows) are
computed 8 rows at a time too. Without it, Q4_K_M parts between --parallel 1 and 4 (a cached
prompt position decoded again in a small batch, 12-row steps). The requests leave the policy
at auto, whose draft lengths follow measured seconds: a seed makes sampling coupled (each
token a race keyed by seed and position), so the drafts do not decide the text, and the
speculative choices equal the plain ones. The contract is in docs/design/exactness.md."""

from __future__ import annotations

import http.client
import json
import os

import pytest
from conftest import GPU_BUILD

from pymtp.quant import quantize
from pymtp_testing.server_load import start_server

pytestmark = pytest.mark.skipif(
    GPU_BUILD, reason="the bit-exact contract holds for CPU builds (GPU builds keep a tolerance)"
)

#: a short prompt, and one whose cache passes 512 cells (another attention path before patch 0005)
PROMPTS = ("The quick brown fox", "def fib(n):\n    " + "x = x + 1\n    " * 90)


def _post(srv, path: str, body: dict) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=600)
    try:
        conn.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        raw = resp.read()
        assert resp.status == 200, raw[:300]
        return json.loads(raw)
    finally:
        conn.close()


def _requests() -> list[tuple[str, dict]]:
    out = []
    for prompt in PROMPTS:
        for speculative in (True, False):
            out.append(
                (
                    "/v1/completions",
                    dict(
                        prompt=prompt,
                        n=3,
                        seed=7,
                        temperature=0.9,
                        max_tokens=40,
                        ignore_eos=True,
                        speculative=speculative,
                    ),
                )
            )
    out.append(
        (
            "/v1/chat/completions",
            dict(
                messages=[{"role": "user", "content": PROMPTS[0]}],
                n=3,
                seed=11,
                temperature=1.0,
                top_p=0.95,
                max_tokens=40,
                ignore_eos=True,
            ),
        )
    )
    return out


def _choices(obj: dict) -> list[str]:
    ordered = sorted(obj["choices"], key=lambda c: c["index"])
    return [c["text"] if "text" in c else c["message"]["content"] for c in ordered]


@pytest.fixture(scope="module", params=["Q4_0", "Q4_K_M"])
def answers(gguf, tmp_path_factory, request):
    """{parallel: [(cold choices, warm choices) per request]} from one server per --parallel, on
    the glm4moe fixture in the weight type (256 wide for the K-quants)."""
    from conftest import CHATML

    wtype = request.param
    wide = dict(n_embd=256, head_dim=64, n_ff=512, n_ff_exp=256) if wtype.startswith("Q4_K") else {}
    path = str(
        quantize(
            gguf("glm4moe", chat_template=CHATML, **wide),
            tmp_path_factory.mktemp("det") / f"{wtype}.gguf",
            type=wtype,
            mtp_type=None,
        )
    )
    out = {}
    before = os.environ.get("PYMTP_MAX_UBATCH")
    os.environ["PYMTP_MAX_UBATCH"] = "8"  # prefills in pieces of 8 rows, as decodes: see the module doc
    try:
        _serve(path, out)
    finally:  # as it was (conftest sets it for the whole suite on CPU builds)
        if before is None:
            del os.environ["PYMTP_MAX_UBATCH"]
        else:
            os.environ["PYMTP_MAX_UBATCH"] = before
    return out


def _serve(path: str, out: dict) -> None:
    for parallel in (1, 4):
        with start_server(["-m", path, "--threads", "2", "-c", "1024", "--parallel", str(parallel)]) as srv:
            got = []
            for route, body in _requests():
                cold = _choices(_post(srv, route, body))
                warm = _choices(_post(srv, route, body))
                got.append((cold, warm))
            out[parallel] = got


@pytest.mark.parametrize("i", range(len(_requests())))
def test_seeded_choices_are_the_same_cold_warm_and_at_any_parallel(answers, i):
    route, body = _requests()[i]
    what = f"{route} ({len(json.dumps(body))}-byte body, speculative={body.get('speculative', True)})"
    (cold1, warm1), (cold4, warm4) = answers[1][i], answers[4][i]
    assert len(set(cold1)) > 1, f"the choices should differ from each other (seed + i): {cold1}"
    assert warm1 == cold1, f"{what}: --parallel 1, warm {warm1} vs cold {cold1}"
    assert cold4 == cold1, f"{what}: --parallel 4 {cold4} vs --parallel 1 {cold1}"
    assert warm4 == cold4, f"{what}: --parallel 4, warm {warm4} vs cold {cold4}"


@pytest.mark.parametrize("i", [0, 2])
def test_seeded_speculative_choices_are_the_plain_ones(answers, i):
    """Requests i and i + 1 differ only in speculative=True / False (coupled sampling)."""
    for parallel in (1, 4):
        spec, plain = answers[parallel][i][0], answers[parallel][i + 1][0]
        assert spec == plain, f"--parallel {parallel}, prompt {i // 2}: speculative {spec} vs plain {plain}"
