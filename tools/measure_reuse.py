"""Time to first token of a chat's next turn, with the cache reused vs a full prefill.

    python tools/measure_reuse.py [--model default] [--tokens 2000] [--repeats 5] [--threads 2]
                                  [--out build/reuse.json]

A conversation of about --tokens tokens is built from held-out standard-library files
(user turns) and the model's own replies (assistant turns), with the model's chat template.
Then, --repeats times, interleaved:

* reuse: a Session that just generated turn N's reply gets turn N+1 (the history, the reply
  and one new user message); time until the first text piece of the reply;
* full: a Session whose cache holds nothing of it gets the same prompt (its cache is
  voided first by a short unrelated prompt), same measurement;
* saved: another conversation (a different user) takes the reuse Session, then the same
  prompt comes back: its cache is restored from the session's prompt cache.

Prints the medians, their ratio and the positions each path decoded. With --llama-server
PATH, the same two prompts (as token ids) also go to llama.cpp's llama-server on the same
file, interleaved with the pymtp runs: turn N, then turn N+1 with ``cache_prompt`` (reuse),
and turn N+1 with ``cache_prompt`` off (full), and turn N+1 after another prompt (saved: its
slot's prompt comes back from llama-server's RAM prompt cache); wall time of a one-token
completion.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import time
import urllib.request
from pathlib import Path

import pymtp
from pymtp.train import data


def conversation(session: pymtp.Session, n_tokens: int) -> list[dict]:
    """User turns from held-out code files, assistant turns written by the model, until the
    templated conversation holds about n_tokens tokens."""
    _, heldout = data.split_files()
    texts = [t[:1500] for t in (data.read_text(f) for f in heldout[:60]) if t]
    msgs = [{"role": "system", "content": "You are a careful code reviewer."}]
    for text in texts:
        msgs.append({"role": "user", "content": "Review this code:\n" + text})
        reply = pymtp.chat(msgs, session, max_tokens=48, ignore_eos=True)
        msgs.append({"role": "assistant", "content": reply.text})
        if len(session.tokenize(session.apply_chat_template(msgs), parse_special=True)) >= n_tokens:
            break
    return msgs


def first_token_seconds(session: pymtp.Session, msgs: list[dict]) -> tuple[float, pymtp.TextStream]:
    t0 = time.perf_counter()
    s = pymtp.chat_stream(msgs, session, max_tokens=2, ignore_eos=True)
    next(iter(s))
    dt = time.perf_counter() - t0
    for _ in s:
        pass
    return dt, s


class LlamaServer:
    """llama-server on the same GGUF, for the same measurement."""

    def __init__(self, binary: str, model: Path, threads: int | None, n_ctx: int = 4096) -> None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        cmd = [binary, "-m", str(model), "-c", str(n_ctx), "--port", str(self.port), "-np", "1"]
        if threads:
            cmd += ["-t", str(threads), "-tb", str(threads)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1)
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError("llama-server did not come up")

    def first_token_seconds(self, tokens: list[int], cache_prompt: bool) -> tuple[float, dict]:
        body = json.dumps({"prompt": tokens, "n_predict": 1, "cache_prompt": cache_prompt, "temperature": 0}).encode()
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/completion", body, {"Content-Type": "application/json"}
        )
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=600) as r:
            out = json.loads(r.read())
        return time.perf_counter() - t0, out.get("timings", {})

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=Path("build/reuse.json"))
    ap.add_argument("--llama-server", metavar="PATH", help="also measure llama.cpp's llama-server")
    args = ap.parse_args()

    reuse = pymtp.load(args.model, n_threads=args.threads, n_ctx=4096)
    full = pymtp.Session(reuse.model, n_threads=args.threads, n_ctx=4096, cache_mb=0)  # no saved texts
    msgs = conversation(reuse, args.tokens)
    history, last_user = msgs[:-2], msgs[-2]
    turn_n = history + [last_user]
    other = [
        {"role": "system", "content": "You are a helpful assistant for another user."},
        {"role": "user", "content": "Write a short poem about the sea, the wind and the harbour."},
    ]
    server = LlamaServer(args.llama_server, reuse.model.path, args.threads) if args.llama_server else None
    rows = []
    for r in range(args.repeats):
        # reuse: generate turn N's reply on `reuse`, then ask turn N+1
        reply = pymtp.chat(turn_n, reuse, max_tokens=24, ignore_eos=True)
        nxt = turn_n + [
            {"role": "assistant", "content": reply.text},
            {"role": "user", "content": f"And what would you change first? ({r})"},
        ]
        t_reuse, s_reuse = first_token_seconds(reuse, nxt)
        pymtp.generate("unrelated", full, max_tokens=1)  # full: nothing of it cached
        t_full, s_full = first_token_seconds(full, nxt)
        pymtp.chat(other, reuse, max_tokens=1)  # saved: another user came between
        t_saved, s_saved = first_token_seconds(reuse, nxt)
        st_r, st_f, st_s = s_reuse.result.stats, s_full.result.stats, s_saved.result.stats
        assert st_s.reused_saved, st_s
        if server:
            before = s_reuse.result.prompt_tokens[: st_r.n_reused + 1]  # what turn N left cached
            server.first_token_seconds(before, True)
            t_srv_reuse, tim_r = server.first_token_seconds(s_reuse.result.prompt_tokens, True)
            # full: cache_prompt off (llama-server also keeps prompts in a RAM cache that an
            # unrelated request does not evict)
            t_srv_full, tim_f = server.first_token_seconds(s_reuse.result.prompt_tokens, False)
            server.first_token_seconds(reuse.tokenize(reuse.apply_chat_template(other), parse_special=True), True)
            t_srv_saved, tim_s = server.first_token_seconds(s_reuse.result.prompt_tokens, True)
            rows_srv = {
                "t_server_reuse": t_srv_reuse,
                "t_server_full": t_srv_full,
                "t_server_saved": t_srv_saved,
                "server_prompt_n_reuse": tim_r.get("prompt_n"),
                "server_prompt_n_full": tim_f.get("prompt_n"),
                "server_prompt_n_saved": tim_s.get("prompt_n"),
            }
            print(
                f"  llama-server: {t_srv_reuse * 1e3:.1f} ms (cache_prompt, {tim_r.get('prompt_n')} decoded) vs "
                f"{t_srv_full * 1e3:.1f} ms (full, {tim_f.get('prompt_n')} decoded), "
                f"{t_srv_saved * 1e3:.1f} ms after another prompt ({tim_s.get('prompt_n')} decoded)",
                flush=True,
            )
        else:
            rows_srv = {}
        rows.append(
            {
                "t_reuse": t_reuse,
                "t_full": t_full,
                "t_saved": t_saved,
                "n_prompt": st_r.n_prompt,
                "decoded_reuse": st_r.n_prompt - 1 - st_r.n_reused,
                "decoded_full": st_f.n_prompt - 1 - st_f.n_reused,
                "decoded_saved": st_s.n_prompt - 1 - st_s.n_reused,
                **rows_srv,
            }
        )
        print(
            f"repeat {r}: prompt {st_r.n_prompt} tokens; first token after {t_reuse * 1e3:.1f} ms "
            f"(reuse, {rows[-1]['decoded_reuse']} decoded) vs {t_full * 1e3:.1f} ms "
            f"(full, {rows[-1]['decoded_full']} decoded), {t_saved * 1e3:.1f} ms after another "
            f"conversation (saved, {rows[-1]['decoded_saved']} decoded)",
            flush=True,
        )
    med = {k: statistics.median(r[k] for r in rows) for k in ("t_reuse", "t_full", "t_saved")}
    med_r, med_f, med_s = med["t_reuse"], med["t_full"], med["t_saved"]
    summary = {
        "model": str(reuse.model.path),
        "system": pymtp.system_info(),
        "threads": args.threads,
        "n_prompt_median": statistics.median(r["n_prompt"] for r in rows),
        "ttft_reuse_ms": med_r * 1e3,
        "ttft_full_ms": med_f * 1e3,
        "ratio": med_r / med_f,
        "ttft_saved_ms": med_s * 1e3,
        "ratio_saved": med_s / med_f,
        "rows": rows,
    }
    print(
        f"median time to first token: reuse {med_r * 1e3:.1f} ms, full prefill {med_f * 1e3:.1f} ms, "
        f"ratio {med_r / med_f:.3f}; after another conversation {med_s * 1e3:.1f} ms, ratio {med_s / med_f:.3f}"
    )
    if server:
        sr, sf, ss = (
            statistics.median(r[k] for r in rows) for k in ("t_server_reuse", "t_server_full", "t_server_saved")
        )
        summary.update(
            server_reuse_ms=sr * 1e3,
            server_full_ms=sf * 1e3,
            server_ratio=sr / sf,
            server_saved_ms=ss * 1e3,
            server_ratio_saved=ss / sf,
        )
        print(
            f"llama-server: cache_prompt {sr * 1e3:.1f} ms, full {sf * 1e3:.1f} ms, ratio {sr / sf:.3f}; "
            f"after another prompt {ss * 1e3:.1f} ms, ratio {ss / sf:.3f}"
        )
        server.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1))
    full.close()
    reuse.close()


if __name__ == "__main__":
    main()
