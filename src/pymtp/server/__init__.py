"""An OpenAI-compatible HTTP server for one model (``pymtp serve``; needs ``pip install 'pymtp-llm[server]'``).

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (both with
``"stream": true`` for server-sent events, and ``n`` choices), ``GET /v1/models``,
``GET /health`` and ``GET /metrics`` (Prometheus text). ``model`` in a request is the
served id or left out (another id is a 404); ``create_app(..., api_key=KEY)`` makes
every /v1 request need ``Authorization: Bearer KEY``.

    from pymtp.server import create_app, serve
    app = create_app(pymtp.load("model.gguf"))
    serve(app, port=8000)          # or: uvicorn.run(app, ...)

With ``create_app(..., parallel=N)`` (``pymtp serve --parallel N``, default 4) up to N
requests run together in batched speculative steps (server.batched, pymtp.batch), and the n
choices of a request run together; with parallel=1 generations run one at a time on the
session (server.runner). Either way generation runs in a worker thread, so the event loop stays
responsive. Responses carry the standard
``usage`` and a ``pymtp`` extension object with the speculation stats::

    "pymtp": {"acceptance_rate": 0.62, "mean_accepted": 1.4, "tokens_per_second": 88.1,
              "acceptance_by_position": [0.8, 0.6, 0.4], ...}

Sampling defaults are pymtp's (greedy unless ``temperature`` is given, or the
server's ``defaults`` say otherwise), not OpenAI's temperature 1. Extensions accepted
in the body: ``top_k``, ``min_p``, ``repetition_penalty``, ``ignore_eos``,
``speculative`` (bool), ``n_draft``. ``presence_penalty``, ``frequency_penalty`` and
``logit_bias`` are OpenAI's, except that the penalties count the last 64 tokens
(``repetition_window``), not the whole text; ``logprobs`` / ``top_logprobs`` give the chosen tokens'
and each row's likeliest (streamed, each chunk carries the tokens generated since the last
one). Unsupported OpenAI features (``echo``, ``suffix``,
``n`` > 16) are refused with HTTP 400. ``response_format`` (json_object,
json_schema) and ``tools`` / ``tool_choice`` (the GGUF's Jinja template, calls parsed into
``tool_calls``; a forced call constrains the output) need ``pip install 'pymtp-llm[agents]'``.

Modules, one job each: ``schemas`` (request bodies, parsed from raw JSON), ``errors``
(API errors and their JSON), ``jobs`` (a request resolved into Jobs, one per choice),
``runner`` (one generation at a time on the Session, in a worker thread),
``responses`` (response bodies and stream chunks), ``auth`` (the API key),
``metrics`` (counters, gauges, the Prometheus text), ``app`` (routes, ``create_app``, ``serve``).
"""

try:
    import fastapi  # noqa: F401
    import starlette  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised without the extra
    raise ImportError("pymtp serve needs FastAPI and uvicorn: pip install 'pymtp-llm[server]'") from e

from .app import create_app, serve
from .responses import spec_summary

__all__ = ["create_app", "serve", "spec_summary"]
