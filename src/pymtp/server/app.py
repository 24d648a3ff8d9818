"""The FastAPI app: routes over a Runner and a JobMaker, the API key and metrics middleware, and
serve() to run it with uvicorn."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from .. import __version__
from ..session import as_session
from .auth import ApiKeyMiddleware, check_api_key
from .errors import APIError, from_exception, install_error_handlers
from .jobs import JobMaker
from .metrics import CONTENT_TYPE, Metrics, MetricsMiddleware
from .responses import ChatReply, CompletionReply, Reply
from .batched import BatchRunner
from .runner import Job, Runner
from .schemas import ChatCompletionRequest, CommonRequest, CompletionRequest, parse_body

__all__ = ["create_app", "serve"]


def create_app(model, *, model_name: str | None = None, chat_template: str | None = None,
               defaults: dict[str, Any] | None = None, api_key: str | None = None, parallel: int = 1,
               slot_ctx: int | None = None) -> FastAPI:
    """A FastAPI app serving model: a Session from ``pymtp.load()`` (a Model, or a path,
    gets a session of its own, closed when the app shuts down).

    model_name: the id in /v1/models and responses (default: the file's stem); requests
    name it in ``model`` or leave ``model`` out, any other id is a 404.
    chat_template: a llama.cpp built-in template name or template text to use
    instead of the GGUF's. defaults: request defaults, e.g. {"max_tokens": 512,
    "temperature": 0.7, "speculative": False}. api_key: when given, every /v1 request
    needs ``Authorization: Bearer <api_key>`` (401 otherwise); /health and /metrics stay open.
    parallel: requests that run together in batched speculative steps (pymtp.batch; each of
    slot_ctx positions, default the session's n_ctx); 1: one at a time on the session."""
    api_key = check_api_key(api_key)
    if not 1 <= parallel <= 64:
        raise ValueError(f"parallel must be in [1, 64], got {parallel}")
    session, made = as_session(model)
    m = session.model
    model_id = model_name or m.path.stem
    metrics = Metrics()
    runner = (BatchRunner(session, metrics, n_seq=parallel, n_ctx=slot_ctx) if parallel > 1
              else Runner(session, metrics))
    jobs = JobMaker(session, model_id, chat_template=chat_template, defaults=defaults)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        if made:
            session.close()

    app = FastAPI(title="pymtp", description="OpenAI-compatible API over pymtp (MTP speculative decoding)",
                  version=__version__, lifespan=lifespan)
    app.state.session = session
    app.state.model = m
    app.state.runner = runner
    app.state.metrics = metrics
    app.state.model_id = model_id
    app.state.api_key_required = api_key is not None
    install_error_handlers(app)
    if api_key is not None:
        app.add_middleware(ApiKeyMiddleware, api_key=api_key)
    app.add_middleware(MetricsMiddleware, metrics=metrics)     # added last: outermost, so it counts 401s
    card = {"id": model_id, "object": "model", "created": int(time.time()), "owned_by": "pymtp",
            "pymtp": {"architecture": m.architecture, "n_mtp_layers": m.n_mtp_layers, "mtp_loaded": m.mtp_loaded,
                      "n_vocab": m.n_vocab, "n_ctx_train": m.n_ctx_train, "n_params": m.n_params,
                      "chat_template": chat_template is not None or m.chat_template() is not None}}

    @app.get("/health")
    async def health():
        """200 while the model is loaded, 503 once it is closed. Open without the API key."""
        if session.closed:
            return JSONResponse(status_code=503, content={"status": "unavailable", "model": model_id})
        return {"status": "ok", "model": model_id}

    @app.get("/metrics")
    async def prometheus_metrics():
        """Counters and gauges in the Prometheus text format (pymtp.server.metrics). Open without the API key."""
        return PlainTextResponse(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def list_models():
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{name:path}")
    async def get_model(name: str):
        if name != model_id:
            raise APIError(404, f"The model '{name}' does not exist; this server serves '{model_id}'",
                           "model", "not_found_error", "model_not_found")
        return card

    async def respond(request: Request, req: CommonRequest, todo: list[Job], reply: Reply):
        """One path for both endpoints: a stream of events, or the whole response."""
        if req.stream:
            items = runner.stream_choices(todo)
            first = await items.__anext__()
            if first[1] == "error":      # before the first piece: still a plain JSON error
                await items.aclose()
                raise from_exception(first[2])

            def on_error(err: APIError) -> None:      # for the metrics: a 200 that ended in an error
                request.state.pymtp_outcome = "server_error" if err.status >= 500 else "client_error"

            return reply.streaming(first, items, req.wants_usage(), on_error)
        try:
            results = await runner.run_all(todo)
        except Exception as e:
            raise from_exception(e) from None
        return reply.body(results)

    @app.post("/v1/completions")
    async def completions(request: Request):
        req = parse_body(await request.body(), CompletionRequest)
        todo = jobs.completion(req)
        return await respond(request, req, todo, CompletionReply(model_id, todo[0].speculative, session.piece))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        req = parse_body(await request.body(), ChatCompletionRequest)
        todo = jobs.chat(req)
        return await respond(request, req, todo, ChatReply(model_id, todo[0].speculative, jobs.tools(req),
                                                           session.piece))

    return app


def serve(app: FastAPI, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    """Run app with uvicorn until interrupted."""
    try:
        import uvicorn
    except ImportError as e:  # pragma: no cover
        raise ImportError("pymtp serve needs uvicorn: pip install 'pymtp-llm[server]'") from e
    key = ", API key required" if app.state.api_key_required else ""
    print(f"pymtp: serving {app.state.session.model.path.name} as '{app.state.model_id}' at "
          f"http://{host}:{port}/v1 (OpenAI-compatible{key}; Ctrl-C to stop)", flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
