"""pymtp.load("org/repo", file=...) through huggingface_hub, against a local server on 127.0.0.1
that answers the Hub's API for one repository of fixture GGUFs (HF_ENDPOINT). Each load runs
in a subprocess: huggingface_hub reads HF_ENDPOINT, HF_HOME and HF_HUB_OFFLINE at import."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import pymtp

pytest.importorskip("huggingface_hub", reason="the Hub test needs huggingface_hub (the [hub] and [test] extras)")

REPO = "pymtp-test/fixtures-GGUF"
SHA = "0123456789abcdef0123456789abcdef01234567"


class FakeHub(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    requests: list[str] = []

    def log_message(self, *args) -> None:
        pass

    def _send(self, code: int, body: bytes = b"", headers: dict | None = None, head: bool = False) -> None:
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _route(self, head: bool) -> None:
        path = self.path.split("?")[0]
        self.requests.append(f"{self.command} {path}")
        if path == f"/api/models/{REPO}/revision/main":
            info = {"id": REPO, "sha": SHA, "siblings": [{"rfilename": n} for n in self.files]}
            return self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"}, head)
        if path == f"/api/models/{REPO}/tree/{SHA}":
            tree = [
                {
                    "type": "file",
                    "path": n,
                    "size": len(b),
                    "oid": hashlib.sha1(b).hexdigest(),
                    "lfs": {"oid": hashlib.sha256(b).hexdigest(), "size": len(b), "pointerSize": 134},
                }
                for n, b in self.files.items()
            ]
            return self._send(200, json.dumps(tree).encode(), {"Content-Type": "application/json"}, head)
        for rev in ("main", SHA):
            prefix = f"/{REPO}/resolve/{rev}/"
            if path.startswith(prefix) and path[len(prefix) :] in self.files:
                body = self.files[path[len(prefix) :]]
                etag = hashlib.sha256(body).hexdigest()
                return self._send(
                    200,
                    body,
                    {"X-Repo-Commit": SHA, "ETag": f'"{etag}"', "Content-Type": "application/octet-stream"},
                    head,
                )
        self._send(404, b'{"error": "not found"}', {"X-Error-Code": "EntryNotFound"}, head)

    def do_GET(self) -> None:
        self._route(head=False)

    def do_HEAD(self) -> None:
        self._route(head=True)


@pytest.fixture
def hub(gguf, tmp_path):
    FakeHub.files = {
        "glm4moe-Q8_0.gguf": Path(gguf("glm4moe")).read_bytes(),
        "qwen35-F16.gguf": Path(gguf("qwen35")).read_bytes(),
        "README.md": b"# fixtures\n",
    }
    FakeHub.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = dict(
        os.environ,
        HF_ENDPOINT=f"http://127.0.0.1:{server.server_address[1]}",
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_XET="1",
    )
    env.pop("HF_HUB_OFFLINE", None)
    yield server, env
    server.shutdown()
    server.server_close()


def load_in_subprocess(env: dict, *args: str) -> subprocess.CompletedProcess:
    code = (
        "import sys, json, pymtp\n"
        "repo, pattern = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None\n"
        "try:\n"
        "    s = pymtp.load(repo, file=pattern, n_ctx=256)\n"
        "except Exception as e:\n"
        "    print(json.dumps({'error': type(e).__name__, 'message': str(e)})); sys.exit(0)\n"
        "r = pymtp.generate(s.tokenize('def parse(line):'), s, max_tokens=8, ignore_eos=True)\n"
        "print(json.dumps({'path': str(s.model.path), 'arch': s.model.architecture, 'tokens': r.tokens}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_gguf_comes_from_the_hub_and_then_from_its_cache(hub, gguf):
    server, env = hub
    got = load_in_subprocess(env, REPO, "*glm4moe*")
    assert got["arch"] == "glm4moe" and Path(got["path"]).name == "glm4moe-Q8_0.gguf"
    assert Path(got["path"]).is_relative_to(Path(env["HF_HOME"]))  # huggingface_hub's cache
    assert any(r.endswith("/glm4moe-Q8_0.gguf") for r in FakeHub.requests)
    assert not any("qwen35" in r and "resolve" in r for r in FakeHub.requests)  # only the file asked for
    with pymtp.load(gguf("glm4moe"), n_ctx=256) as s:
        want = pymtp.generate(s.tokenize("def parse(line):"), s, max_tokens=8, ignore_eos=True).tokens
    assert got["tokens"] == want
    server.shutdown()  # the Hub goes away
    offline = load_in_subprocess(dict(env, HF_HUB_OFFLINE="1"), REPO, "*glm4moe*")
    assert offline["path"] == got["path"] and offline["tokens"] == want


def test_patterns_that_match_none_or_several_are_clear_errors(hub):
    _, env = hub
    none = load_in_subprocess(env, REPO, "*Q4_K_M*")
    assert none["error"] == "ModelLoadError" and "no GGUF file matches" in none["message"]
    several = load_in_subprocess(env, REPO, "*.gguf")
    assert several["error"] == "ModelLoadError" and "2 GGUF files match" in several["message"]


def test_an_unreachable_hub_without_a_cached_copy_is_a_clear_error(hub):
    server, env = hub
    server.shutdown()
    server.server_close()
    got = load_in_subprocess(env, REPO, "*glm4moe*")
    assert got["error"] == "ModelLoadError" and REPO in got["message"]


def test_file_needs_a_repository(gguf):
    with pytest.raises(ValueError, match="org/repo"):
        pymtp.load(str(gguf("glm4moe")), file="*Q8_0*")
