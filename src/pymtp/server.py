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
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from typing import Any, Callable, Optional, Union

try:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException
except ImportError as e:  # pragma: no cover - exercised without the extra
    raise ImportError("pymtp serve needs FastAPI and uvicorn: pip install 'pymtp[server]'") from e

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .chat import chat_prompt, chat_prompt_tokens, end_marker_stops, normalize_messages
from .config import GenerationConfig, SamplingConfig, SpecConfig
from .errors import ContextFullError, PymtpError, UnsupportedError
from .generate import GenerationResult, TextStream
from .model import Model

__all__ = ["create_app", "serve", "spec_summary"]

log = logging.getLogger("pymtp.server")

_FINISH = {"stop": "stop", "length": "length", "context": "length"}


# ---- request bodies ------------------------------------------------------------------------


class _Common(BaseModel):
    """Fields shared by completions and chat completions (unknown fields are ignored)."""

    model_config = ConfigDict(extra="ignore")

    model: Optional[str] = None
    max_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    n: Optional[int] = Field(None, ge=1)
    stream: Optional[bool] = False
    stream_options: Optional[dict[str, Any]] = None
    stop: Optional[Union[str, list[str]]] = None
    seed: Optional[int] = Field(None, ge=0)
    presence_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    logit_bias: Optional[dict[str, float]] = None
    logprobs: Optional[Union[bool, int]] = None
    top_logprobs: Optional[int] = None
    user: Optional[str] = None
    # pymtp / llama.cpp extensions
    top_k: Optional[int] = Field(None, ge=0)
    min_p: Optional[float] = Field(None, ge=0.0, lt=1.0)
    repetition_penalty: Optional[float] = Field(None, gt=0.0, le=10.0)
    ignore_eos: Optional[bool] = None
    speculative: Optional[bool] = None
    n_draft: Optional[int] = Field(None, ge=1, le=16)


class CompletionRequest(_Common):
    prompt: Union[str, list[str], list[int], list[list[int]]]
    echo: Optional[bool] = False
    suffix: Optional[str] = None
    best_of: Optional[int] = Field(None, ge=1)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    role: str
    content: Optional[Union[str, list[Any]]] = None


class ChatCompletionRequest(_Common):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    tools: Optional[list[Any]] = None
    tool_choice: Optional[Any] = None
    response_format: Optional[dict[str, Any]] = None


# ---- errors ----------------------------------------------------------------------------------


class APIError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None,
                 type_: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.type, self.code = status, message, param, type_, code


def _error_response(status: int, message: str, param: str | None = None,
                    type_: str = "invalid_request_error", code: str | None = None) -> JSONResponse:
    return JSONResponse(status_code=status,
                        content={"error": {"message": message, "type": type_, "param": param, "code": code}})


def _bad(message: str, param: str | None = None, code: str | None = None) -> APIError:
    return APIError(400, message, param, code=code)


def _validation_error(errors: list[dict]) -> APIError:
    msgs, param = [], None
    for err in errors:
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        if param is None and loc:
            param = ".".join(loc)
        msgs.append(f"{'.'.join(loc) or 'body'}: {err.get('msg', 'invalid')}")
    return _bad("; ".join(msgs) or "invalid request", param)


def _from_exception(e: BaseException) -> APIError:
    if isinstance(e, APIError):
        return e
    if isinstance(e, ValidationError):
        return _validation_error(e.errors())
    if isinstance(e, (ValueError, UnsupportedError, ContextFullError)):
        return _bad(str(e))
    if isinstance(e, PymtpError):
        return APIError(500, str(e), type_="server_error")
    log.exception("unexpected error", exc_info=e)
    return APIError(500, f"internal error: {type(e).__name__}: {e}", type_="server_error")


# ---- stats ------------------------------------------------------------------------------------


def spec_summary(result: GenerationResult, speculative: bool) -> dict[str, Any]:
    """The ``pymtp`` extension object of a response."""
    s = result.stats
    return {
        "speculative": speculative,
        "acceptance_rate": s.acceptance_rate,
        "mean_accepted": s.mean_accepted,
        "tokens_per_second": s.tokens_per_second,
        "acceptance_by_position": list(s.acceptance_by_position),
        "tokens_per_step": s.tokens_per_step,
        "n_steps": s.n_steps,
        "n_drafted": s.n_drafted,
        "n_accepted": s.n_accepted,
        "t_prefill": s.t_prefill,
        "t_total": s.t_total,
        "finish_reason": result.finish_reason,
    }


def _usage(result: GenerationResult) -> dict[str, int]:
    p, c = len(result.prompt_tokens), len(result.tokens)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


# ---- the worker: one generation at a time, in a thread ---------------------------------------------


class _Job:
    """What one request asks for, resolved and validated (cheap checks on the event loop)."""

    def __init__(self, prompt: Callable[[], list[int]], sampling: SamplingConfig, spec: SpecConfig | None,
                 limits: GenerationConfig) -> None:
        self.prompt, self.sampling, self.spec, self.limits = prompt, sampling, spec, limits


class _Runner:
    """Serializes generations on the model; each runs in its own worker thread.

    The asyncio lock is released by the worker thread when its generation has
    really ended, so a client that disconnects mid-stream cannot make two
    generations overlap on the model's contexts."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.lock = asyncio.Lock()

    async def run(self, job: _Job) -> GenerationResult:
        loop = asyncio.get_running_loop()
        await self.lock.acquire()
        fut: asyncio.Future = loop.create_future()

        def settle(ok: bool, value) -> None:
            if not fut.done():
                (fut.set_result if ok else fut.set_exception)(value)

        def work() -> None:
            try:
                s = self._stream(job)
                for _ in s:
                    pass
                loop.call_soon_threadsafe(settle, True, s.result)
            except BaseException as e:  # noqa: BLE001 - handed to the event loop
                loop.call_soon_threadsafe(settle, False, e)
            finally:
                loop.call_soon_threadsafe(self.lock.release)

        threading.Thread(target=work, name="pymtp-generate", daemon=True).start()
        return await fut

    async def stream(self, job: _Job):
        """An async iterator of ("piece", str) ... then ("done", GenerationResult) or ("error", exc)."""
        loop = asyncio.get_running_loop()
        await self.lock.acquire()
        queue: asyncio.Queue = asyncio.Queue()
        cancel = threading.Event()

        def put(item) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def work() -> None:
            s = None
            try:
                s = self._stream(job)
                for piece in s:
                    if cancel.is_set():
                        break
                    put(("piece", piece))
                else:
                    put(("done", s.result))
            except BaseException as e:  # noqa: BLE001
                put(("error", e))
            finally:
                if s is not None:
                    try:
                        s.close()
                    except Exception:  # pragma: no cover
                        pass
                loop.call_soon_threadsafe(self.lock.release)

        threading.Thread(target=work, name="pymtp-stream", daemon=True).start()
        try:
            while True:
                item = await queue.get()
                yield item
                if item[0] != "piece":
                    return
        finally:
            cancel.set()

    def _stream(self, job: _Job) -> TextStream:
        return TextStream(self.model, job.prompt(), job.sampling, job.spec, job.limits)


# ---- the app ------------------------------------------------------------------------------------


def create_app(model: Model, *, model_name: str | None = None, chat_template: str | None = None,
               defaults: dict[str, Any] | None = None) -> FastAPI:
    """A FastAPI app serving model.

    model_name: the id in /v1/models and responses (default: the file's stem).
    chat_template: a llama.cpp built-in template name or template text to use
    instead of the GGUF's. defaults: request defaults, e.g. {"max_tokens": 512,
    "temperature": 0.7, "speculative": False}."""
    model_id = model_name or model.path.stem
    defaults = dict(defaults or {})
    created = int(time.time())
    runner = _Runner(model)
    # Fixed per server (one model, one template): computed once, off the request path.
    chat_stops = end_marker_stops(model, chat_template)
    app = FastAPI(title="pymtp", description="OpenAI-compatible API over pymtp (MTP speculative decoding)",
                  version=_version())
    app.state.model = model
    app.state.runner = runner

    @app.exception_handler(APIError)
    async def _api_error(request: Request, e: APIError):
        return _error_response(e.status, e.message, e.param, e.type, e.code)

    @app.exception_handler(RequestValidationError)
    async def _request_validation(request: Request, e: RequestValidationError):
        err = _validation_error(list(e.errors()))
        return _error_response(400, err.message, err.param)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException):
        kind = "not_found_error" if e.status_code == 404 else "invalid_request_error"
        return _error_response(e.status_code, str(e.detail), type_=kind)

    def _model_card() -> dict[str, Any]:
        return {"id": model_id, "object": "model", "created": created, "owned_by": "pymtp",
                "pymtp": {"architecture": model.architecture, "n_mtp_layers": model.n_mtp_layers,
                          "mtp_loaded": model.mtp_loaded, "n_vocab": model.n_vocab,
                          "n_ctx_train": model.n_ctx_train, "n_params": model.n_params,
                          "chat_template": chat_template is not None or model.chat_template() is not None}}

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": model_id}

    @app.get("/v1/models")
    async def list_models():
        return {"object": "list", "data": [_model_card()]}

    @app.get("/v1/models/{name:path}")
    async def get_model(name: str):
        if name != model_id:
            raise APIError(404, f"The model '{name}' does not exist; this server serves '{model_id}'",
                           "model", "not_found_error", "model_not_found")
        return _model_card()

    def _job(req: _Common, prompt: Callable[[], list[int]], max_tokens: int | None,
             extra_stop: tuple[str, ...] = ()) -> tuple[_Job, bool]:
        if (req.n or 1) != 1:
            raise _bad("only n=1 is supported", "n")
        if req.logprobs not in (None, False, 0) or req.top_logprobs:
            raise _bad("logprobs are not supported", "logprobs")
        if req.logit_bias:
            raise _bad("logit_bias is not supported", "logit_bias")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(req, name):
                raise _bad(f"{name} is not supported (use repetition_penalty)", name)
        stops = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
        if any(s == "" for s in stops):
            raise _bad("stop strings must not be empty", "stop")
        stops += [s for s in extra_stop if s not in stops]

        def pick(name: str, fallback):
            v = getattr(req, name, None)
            return v if v is not None else defaults.get(name, fallback)

        speculative = pick("speculative", True)
        if speculative and not model.mtp_loaded:
            if req.speculative:
                raise _bad(f"{model_id} has no MTP blocks: it cannot draft (send speculative=false)",
                           "speculative")
            speculative = False
        try:
            sampling = SamplingConfig(temperature=pick("temperature", 0.0), top_k=pick("top_k", 0),
                                      top_p=pick("top_p", 1.0), min_p=pick("min_p", 0.0),
                                      repetition_penalty=pick("repetition_penalty", 1.0), seed=req.seed)
            limits = GenerationConfig(max_tokens=max_tokens or defaults.get("max_tokens", 256), stop=tuple(stops),
                                      ignore_eos=pick("ignore_eos", False))
            spec = None
            if speculative:
                n_draft = pick("n_draft", None)
                spec = SpecConfig(n_draft=n_draft) if n_draft is not None else SpecConfig()
        except ValidationError as e:
            raise _validation_error(e.errors()) from None
        return _Job(prompt, sampling, spec, limits), bool(speculative)

    def _completion_prompt(req: CompletionRequest) -> Callable[[], list[int]]:
        p = req.prompt
        if req.echo:
            raise _bad("echo is not supported", "echo")
        if req.suffix:
            raise _bad("suffix is not supported", "suffix")
        if (req.best_of or 1) != 1:
            raise _bad("only best_of=1 is supported", "best_of")
        if isinstance(p, list):
            if len(p) == 0:
                raise _bad("the prompt is empty", "prompt")
            if isinstance(p[0], list):
                if len(p) != 1:
                    raise _bad("one prompt per request (batches are not supported)", "prompt")
                p = p[0]
            elif isinstance(p[0], str):
                if len(p) != 1:
                    raise _bad("one prompt per request (batches are not supported)", "prompt")
                p = p[0]
        if isinstance(p, str):
            if not p:
                raise _bad("the prompt is empty", "prompt")
            text = p
            return lambda: model.tokenize(text, add_special=True)
        tokens = [int(t) for t in p]
        if not tokens:
            raise _bad("the prompt is empty", "prompt")
        bad = [t for t in tokens if not 0 <= t < model.n_vocab]
        if bad:
            raise _bad(f"token id {bad[0]} is out of the vocabulary (0..{model.n_vocab - 1})", "prompt")
        return lambda: tokens

    def _chat_prompt(req: ChatCompletionRequest) -> tuple[Callable[[], list[int]], tuple[str, ...]]:
        if req.tools and req.tool_choice != "none":
            raise _bad("tools (function calling) are not supported", "tools")
        if req.response_format and req.response_format.get("type", "text") != "text":
            raise _bad("only response_format {'type': 'text'} is supported", "response_format")
        try:
            messages = normalize_messages([m.model_dump() for m in req.messages])
        except ValueError as e:
            raise _bad(str(e), "messages") from None
        try:
            text = chat_prompt(model, messages, template=chat_template)
        except UnsupportedError as e:
            raise _bad(f"{e} (start the server with --template NAME, e.g. chatml)", "messages",
                       "chat_template_missing") from None
        except PymtpError as e:
            raise _bad(f"the chat template could not be applied: {e}", "messages") from None
        return (lambda: chat_prompt_tokens(model, text)), chat_stops

    def _sse(obj: Any) -> str:
        return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

    async def _streaming(job: _Job, speculative: bool, make_chunk, final_extra, include_usage: bool):
        """Start the generation; errors before the first piece become a JSON error response."""
        it = runner.stream(job)
        first = await it.__anext__()
        if first[0] == "error":
            await it.aclose()
            raise _from_exception(first[1])

        async def body():
            item = first
            try:
                for chunk in final_extra.get("prefix", ()):
                    yield _sse(chunk)
                while True:
                    kind, value = item
                    if kind == "piece":
                        if value:
                            yield _sse(make_chunk(value, None))
                    elif kind == "done":
                        last = make_chunk(None, _FINISH.get(value.finish_reason, "stop"))
                        last["pymtp"] = spec_summary(value, speculative)
                        yield _sse(last)
                        if include_usage:
                            u = make_chunk(None, None)
                            u["choices"] = []
                            u["usage"] = _usage(value)
                            yield _sse(u)
                        break
                    else:  # an error after the stream started: report it in-band
                        err = _from_exception(value)
                        yield _sse({"error": {"message": err.message, "type": err.type, "param": err.param,
                                              "code": err.code}})
                        break
                    item = await it.__anext__()
                yield "data: [DONE]\n\n"
            finally:
                await it.aclose()

        return StreamingResponse(body(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest):
        job, speculative = _job(req, _completion_prompt(req), req.max_tokens)
        rid, ts = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        if req.stream:
            def chunk(text, finish):
                return {"id": rid, "object": "text_completion", "created": ts, "model": model_id,
                        "choices": [{"text": text or "", "index": 0, "logprobs": None, "finish_reason": finish}]}
            return await _streaming(job, speculative, chunk, {}, _include_usage(req))
        try:
            result = await runner.run(job)
        except Exception as e:
            raise _from_exception(e) from None
        return {"id": rid, "object": "text_completion", "created": ts, "model": model_id,
                "choices": [{"text": result.text, "index": 0, "logprobs": None,
                             "finish_reason": _FINISH.get(result.finish_reason, "stop")}],
                "usage": _usage(result), "pymtp": spec_summary(result, speculative)}

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatCompletionRequest):
        prompt, stops = _chat_prompt(req)
        job, speculative = _job(req, prompt, req.max_completion_tokens or req.max_tokens, stops)
        rid, ts = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
        if req.stream:
            def chunk(text, finish):
                delta = {"content": text} if text is not None else {}
                return {"id": rid, "object": "chat.completion.chunk", "created": ts, "model": model_id,
                        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            role = chunk("", None)
            role["choices"][0]["delta"] = {"role": "assistant", "content": ""}
            return await _streaming(job, speculative, chunk, {"prefix": [role]}, _include_usage(req))
        try:
            result = await runner.run(job)
        except Exception as e:
            raise _from_exception(e) from None
        return {"id": rid, "object": "chat.completion", "created": ts, "model": model_id,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": result.text},
                             "logprobs": None, "finish_reason": _FINISH.get(result.finish_reason, "stop")}],
                "usage": _usage(result), "pymtp": spec_summary(result, speculative)}

    return app


def _include_usage(req: _Common) -> bool:
    return bool((req.stream_options or {}).get("include_usage"))


def _version() -> str:
    try:
        from . import __version__
        return __version__
    except Exception:  # pragma: no cover
        return "0"


def serve(app: FastAPI, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    """Run app with uvicorn until interrupted."""
    try:
        import uvicorn
    except ImportError as e:  # pragma: no cover
        raise ImportError("pymtp serve needs uvicorn: pip install 'pymtp[server]'") from e
    print(f"pymtp: serving {app.state.model.path.name} at http://{host}:{port}/v1 "
          "(OpenAI-compatible; Ctrl-C to stop)", flush=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
