"""An OpenAI-compatible HTTP server for one model (``pymtp serve``; needs ``pip install 'pymtp[server]'``).

Endpoints: ``POST /v1/completions``, ``POST /v1/chat/completions`` (both with
``"stream": true`` for server-sent events), ``GET /v1/models``, ``GET /health``.

    from pymtp.server import create_app, serve
    app = create_app(pymtp.load("model.gguf"))
    serve(app, port=8000)          # or: uvicorn.run(app, ...)

Requests run one at a time (an asyncio lock; generation runs in a worker
thread, so the event loop stays responsive). Responses carry the standard
``usage`` and a ``pymtp`` extension object with the speculation stats::

    "pymtp": {"acceptance_rate": 0.62, "mean_accepted": 1.4, "tokens_per_second": 88.1,
              "acceptance_by_position": [0.8, 0.6, 0.4], ...}

Sampling defaults are pymtp's (greedy unless ``temperature`` is given), not
OpenAI's. Extensions accepted in the body: ``top_k``, ``min_p``,
``repetition_penalty``, ``ignore_eos``, ``speculative`` (bool), ``n_draft``.
Unsupported OpenAI features (``n`` > 1, ``logprobs``, ``echo``, ``suffix``,
``tools``, penalties other than 0, ``logit_bias``) are refused with HTTP 400.

Modules, one job each: ``schemas`` (request bodies), ``errors`` (API errors and
their JSON), ``jobs`` (a request resolved into a Job), ``runner`` (one generation
at a time on the Session, in a worker thread), ``responses`` (response bodies and
stream chunks), ``app`` (routes, ``create_app``, ``serve``).
"""

try:
    import fastapi  # noqa: F401
    import starlette  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised without the extra
    raise ImportError("pymtp serve needs FastAPI and uvicorn: pip install 'pymtp[server]'") from e

from .app import create_app, serve
from .responses import spec_summary

__all__ = ["create_app", "serve", "spec_summary"]
