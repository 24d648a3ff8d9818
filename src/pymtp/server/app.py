"""The FastAPI app: routes over a Runner and a JobMaker, and serve() to run it with uvicorn."""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI

from .. import __version__
from ..session import as_session
from .errors import APIError, from_exception, install_error_handlers
from .jobs import JobMaker
from .responses import ChatReply, CompletionReply, Reply
from .runner import Job, Runner
from .schemas import ChatCompletionRequest, CommonRequest, CompletionRequest

__all__ = ["create_app", "serve"]


def create_app(model, *, model_name: str | None = None, chat_template: str | None = None,
               defaults: dict[str, Any] | None = None) -> FastAPI:
    """A FastAPI app serving model: a Session from ``pymtp.load()`` (a Model, or a path,
    gets a session of its own, closed when the app shuts down).

    model_name: the id in /v1/models and responses (default: the file's stem).
    chat_template: a llama.cpp built-in template name or template text to use
    instead of the GGUF's. defaults: request defaults, e.g. {"max_tokens": 512,
    "temperature": 0.7, "speculative": False}."""
    session, made = as_session(model)
    m = session.model
    model_id = model_name or m.path.stem
    runner = Runner(session)
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
    install_error_handlers(app)
    card = {"id": model_id, "object": "model", "created": int(time.time()), "owned_by": "pymtp",
            "pymtp": {"architecture": m.architecture, "n_mtp_layers": m.n_mtp_layers, "mtp_loaded": m.mtp_loaded,
                      "n_vocab": m.n_vocab, "n_ctx_train": m.n_ctx_train, "n_params": m.n_params,
                      "chat_template": chat_template is not None or m.chat_template() is not None}}

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": model_id}

    @app.get("/v1/models")
    async def list_models():
        return {"object": "list", "data": [card]}

    @app.get("/v1/models/{name:path}")
    async def get_model(name: str):
        if name != model_id:
            raise APIError(404, f"The model '{name}' does not exist; this server serves '{model_id}'",
                           "model", "not_found_error", "model_not_found")
        return card

    async def respond(req: CommonRequest, job: Job, reply: Reply):
        """One path for both endpoints: a stream of events, or the whole response."""
        if req.stream:
            items = runner.stream(job)
            first = await items.__anext__()
            if first[0] == "error":      # before the first piece: still a plain JSON error
                await items.aclose()
                raise from_exception(first[1])
            return reply.streaming(first, items, req.wants_usage())
        try:
            result = await runner.run(job)
        except Exception as e:
            raise from_exception(e) from None
        return reply.body(result)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest):
        job = jobs.completion(req)
        return await respond(req, job, CompletionReply(model_id, job.speculative))

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest):
        job = jobs.chat(req)
        return await respond(req, job, ChatReply(model_id, job.speculative))

    return app


def serve(app: FastAPI, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    """Run app with uvicorn until interrupted."""
    try:
        import uvicorn
    except ImportError as e:  # pragma: no cover
        raise ImportError("pymtp serve needs uvicorn: pip install 'pymtp[server]'") from e
    print(f"pymtp: serving {app.state.session.model.path.name} at http://{host}:{port}/v1 "
          "(OpenAI-compatible; Ctrl-C to stop)", flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
