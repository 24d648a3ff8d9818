"""The FastAPI app: routes over a runner and a JobMaker, the edge middleware (ids, access log,
body limit, API key), and serve() to run it with uvicorn until SIGTERM / SIGINT."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Awaitable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from .. import __version__
from ..session import as_session
from .access import BodyLimitMiddleware, ClientGone, RequestMiddleware
from .auth import ApiKeyMiddleware, check_api_key
from .batched import BatchRunner
from .errors import APIError, from_exception, install_error_handlers, overloaded, shutting_down
from .jobs import JobMaker
from .metrics import CONTENT_TYPE, Metrics
from .responses import ChatReply, CompletionReply, Reply
from .runner import DEFAULT_MAX_QUEUE, Runner, RunnerBase
from .schemas import ChatCompletionRequest, CommonRequest, CompletionRequest, parse_body
from .tickets import QueueFull, ShuttingDown

__all__ = [
    "DEFAULT_MAX_BODY",
    "DEFAULT_PARALLEL",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "create_app",
    "serve",
]

log = logging.getLogger("pymtp.server")

#: The largest request body by default (a 128k-token prompt as text or token ids is ~1 MB).
DEFAULT_MAX_BODY = 8 << 20
#: Seconds a request may take by default, waiting for a slot included.
DEFAULT_REQUEST_TIMEOUT = 600.0
#: Seconds the requests in flight get to finish after SIGTERM by default.
DEFAULT_SHUTDOWN_TIMEOUT = 20.0
#: Requests that run together by default (create_app and ``pymtp serve --parallel``).
DEFAULT_PARALLEL = 4


def create_app(
    model,
    *,
    model_name: str | None = None,
    chat_template: str | None = None,
    defaults: dict[str, Any] | None = None,
    api_key: str | None = None,
    parallel: int = DEFAULT_PARALLEL,
    slot_ctx: int | None = None,
    max_queue: int = DEFAULT_MAX_QUEUE,
    max_body: int = DEFAULT_MAX_BODY,
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
) -> FastAPI:
    """A FastAPI app serving model: a Session from ``pymtp.load()`` (a Model, or a path,
    gets a session of its own, closed when the app shuts down).

    model_name: the id in /v1/models and responses (default: the file's stem); requests
    name it in ``model`` or leave ``model`` out, any other id is a 404.
    chat_template: a llama.cpp built-in template name or template text to use
    instead of the GGUF's. defaults: the settings of a request that gives none, by request
    field name (any field of SamplingConfig, SpecConfig, GenerationConfig, and speculative),
    e.g. {"max_tokens": 512, "temperature": 0.7, "speculative": False}; checked now (ValueError).
    A model without MTP blocks decodes plainly by default. api_key: when given, every /v1 request
    needs ``Authorization: Bearer <api_key>`` (401 otherwise); /health and /metrics stay open.
    parallel: requests that run together in batched speculative steps (pymtp.batch; each of
    slot_ctx positions, default the session's n_ctx; default 4, as ``pymtp serve``); 1: one at a
    time on the session (whose prompt cache keeps several conversations).
    max_queue: requests that may wait for a slot; more get 503 with Retry-After. max_body: the
    largest request body in bytes (413 beyond). request_timeout: seconds a request may take,
    waiting included (None: no limit); a generation still running then ends with
    finish_reason "length" (``"pymtp": {"finish_reason": "timeout"}``).

    The app's runner stops (its worker thread ends, its contexts are freed) at the app's
    lifespan shutdown; run it with lifespan on."""
    api_key = check_api_key(api_key)
    if not 1 <= parallel <= 64:
        raise ValueError(f"parallel must be in [1, 64], got {parallel}")
    if max_queue < 0:
        raise ValueError(f"max_queue must be >= 0, got {max_queue}")
    if max_body < 1:
        raise ValueError(f"max_body must be >= 1 byte, got {max_body}")
    if request_timeout is not None and request_timeout <= 0:
        raise ValueError(f"request_timeout must be > 0 seconds (None: no limit), got {request_timeout}")
    session, made = as_session(model)
    m = session.model
    model_id = model_name or m.path.stem
    metrics = Metrics()
    runner: RunnerBase = (
        BatchRunner(session, metrics, n_seq=parallel, n_ctx=slot_ctx, max_queue=max_queue)
        if parallel > 1
        else Runner(session, metrics, max_queue=max_queue)
    )
    jobs = JobMaker(session, model_id, chat_template=chat_template, defaults=defaults)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        app.state.runner.close()  # nothing else runs on the loop now: it may wait for a step
        if made:
            session.close()

    app = FastAPI(
        title="pymtp",
        description="OpenAI-compatible API over pymtp (MTP speculative decoding)",
        version=__version__,
        lifespan=lifespan,
    )
    app.state.session = session
    app.state.model = m
    app.state.runner = runner
    app.state.metrics = metrics
    app.state.model_id = model_id
    app.state.parallel = parallel
    app.state.api_key_required = api_key is not None
    app.state.session_made = made
    install_error_handlers(app)
    app.add_middleware(BodyLimitMiddleware, max_body=max_body)  # inside the key check
    if api_key is not None:
        app.add_middleware(ApiKeyMiddleware, api_key=api_key)
    app.add_middleware(RequestMiddleware, metrics=metrics, request_timeout=request_timeout)  # outermost
    card = {
        "id": model_id,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "pymtp",
        "pymtp": {
            "architecture": m.architecture,
            "n_mtp_layers": m.n_mtp_layers,
            "mtp_loaded": m.mtp_loaded,
            "n_vocab": m.n_vocab,
            "n_ctx_train": m.n_ctx_train,
            "n_params": m.n_params,
            "chat_template": chat_template is not None or m.chat_template() is not None,
        },
    }

    @app.get("/health")
    async def health(request: Request):
        """200 while the model is loaded, 503 once it is closed or the server is shutting down
        (a load balancer stops sending requests). Open without the API key."""
        if session.closed:
            return JSONResponse(status_code=503, content={"status": "unavailable", "model": model_id})
        if request.app.state.runner.draining:
            return JSONResponse(status_code=503, content={"status": "shutting down", "model": model_id})
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
            raise APIError(
                404,
                f"The model '{name}' does not exist; this server serves '{model_id}'",
                "model",
                "not_found_error",
                "model_not_found",
            )
        return card

    async def respond(request: Request, req: CommonRequest, todo: list, reply: Reply):
        """One path for both endpoints: a stream of events, or the whole response. A client
        that goes away before its answer cancels its generations (ClientGone)."""
        runner: RunnerBase = request.app.state.runner
        try:
            ticket = runner.submit(todo, request.scope["state"].get("pymtp_deadline"))
        except QueueFull as e:
            raise overloaded(
                f"the server is busy: every slot is taken and {e.waiting} requests are waiting "
                "(pymtp serve --max-queue); retry later",
                retry_after(runner),
            ) from None
        except ShuttingDown:
            raise shutting_down() from None
        request.state.pymtp_ticket = ticket  # the access line counts its tokens; the edge cancels it at the end
        if req.stream:
            first = await until_disconnected(request, ticket.next())
            if first is not None and first[1] == "error":  # before the first piece: still a plain JSON error
                raise from_exception(first[2])

            def on_error(err: APIError) -> None:  # for the metrics: a 200 that ended in an error
                request.state.pymtp_outcome = "server_error" if err.status >= 500 else "client_error"

            return reply.streaming(ticket, first, req.wants_usage(), on_error)
        try:
            results = await until_disconnected(request, ticket.results())
        except ClientGone:
            raise
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
        return await respond(
            request, req, todo, ChatReply(model_id, todo[0].speculative, jobs.tools(req), session.piece)
        )

    return app


def retry_after(runner: RunnerBase) -> float:
    """Seconds after which a refused request may find a place: about one slot's turn (the mean
    generation's time over the slots), at least 1, at most 60."""
    per_slot = runner.metrics.mean_generation_seconds() / max(1, runner.queue.n_slots)
    return min(60.0, max(1.0, per_slot))


async def until_disconnected(request: Request, work: Awaitable):
    """work's result, unless the client goes away first: then work is cancelled (its finally
    cancels the ticket) and ClientGone is raised. The body was read already, so the next
    message from the client can only say that it left."""

    async def left() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(left())
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
        gone.cancel()
    if task.done() and not task.cancelled():
        return task.result()
    try:
        await task  # let its finally run
    except (asyncio.CancelledError, Exception):  # noqa: BLE001 - the client is gone: nobody to tell
        pass
    raise ClientGone()


def serve(
    app: FastAPI,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
    close_session: bool = False,
) -> None:
    """Run app with uvicorn until SIGTERM or SIGINT (Ctrl-C), then shut down gracefully: take no
    new request (the listening socket closes, and a request on a kept-alive connection gets 503),
    let the requests in flight finish for up to shutdown_timeout seconds, end the rest (a stream
    gets an error event and [DONE], a whole response a 503), stop the generation worker, and
    return (a second Ctrl-C skips the wait). close_session: close the
    app's session (and its model) too. Logs go to stderr through a writer that never blocks."""
    try:
        import uvicorn
    except ImportError as e:  # pragma: no cover
        raise ImportError("pymtp serve needs uvicorn: pip install 'pymtp-llm[server]'") from e
    from . import logs

    runner: RunnerBase = app.state.runner

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame) -> None:
            runner.drain(shutdown_timeout)  # flags: safe in a signal handler
            super().handle_exit(sig, frame)
            self._captured_signals.clear()  # a graceful stop is exit 0, not death by the signal

    writer = logs.configure(log_level)
    try:
        key = ", API key required" if app.state.api_key_required else ""
        print(
            f"pymtp: serving {app.state.session.model.path.name} as '{app.state.model_id}' at "
            f"http://{host}:{port}/v1 (OpenAI-compatible{key}; Ctrl-C to stop)",
            flush=True,
        )
        # The runner ends what is still running at shutdown_timeout (streams get an error event and
        # [DONE]); uvicorn's own deadline, a little later, only cancels what that did not end.
        config = uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level=log_level,
            log_config=None,
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=math.ceil(shutdown_timeout) + 5,
        )
        Server(config).run()
        stopped = runner.close()  # the lifespan did it, unless the server never started
        if close_session:
            app.state.session.close()
        left = [
            t.name
            for t in threading.enumerate()
            if t is not threading.main_thread() and t.name != "pymtp-log" and t.is_alive()
        ]
        if stopped and not left:
            log.info(
                "stopped: the generation worker has ended%s, no thread is left",
                ", the model is closed" if app.state.session.closed else "",
            )
        else:
            log.warning("stopped, but threads are still running: %s", ", ".join(left) or "the generation worker")
    finally:
        logs.unconfigure(writer)
