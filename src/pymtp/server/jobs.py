"""From a request body to its Jobs (one per choice): the prompt, and the request's settings
resolved once by pymtp.request over the server's defaults.

The model id is checked here (an unknown one is a 404), and unsupported OpenAI
features are refused with a 400 naming the field, before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pydantic import ValidationError

from ..chat import chat_prompt, chat_prompt_tokens, end_marker_stops, merge_stops, normalize_messages
from ..errors import PymtpError, UnsupportedError
from ..request import OptionError, Request, flat_options, resolve
from ..session import Session
from .errors import APIError, bad_request, validation_error
from .runner import Job
from .schemas import SETTINGS, ChatCompletionRequest, CommonRequest, CompletionRequest

__all__ = ["JobMaker"]


class JobMaker:
    """Resolves requests for one session with the server's defaults and chat template.

    defaults: request defaults in the flat form of the request fields (the settings models'
    fields and speculative), e.g. {"max_tokens": 512, "temperature": 0.7, "speculative": False,
    "n_draft": 4}; checked here (ValueError). A model without MTP blocks decodes plainly unless a
    request sends speculative=true with drafter "lookup"."""

    def __init__(
        self,
        session: Session,
        model_id: str,
        *,
        chat_template: str | None = None,
        defaults: dict[str, Any] | None = None,
    ) -> None:
        self.session, self.model_id, self.chat_template = session, model_id, chat_template
        unknown = sorted(set(defaults or {}) - set(SETTINGS))
        if unknown:
            raise ValueError(
                f"unknown request defaults: {', '.join(unknown)} (the settings are: {', '.join(SETTINGS)})"
            )
        self.defaults = {} if session.model.mtp_loaded else {"speculative": False}
        self.defaults.update(defaults or {})
        try:
            resolve(flat_options({}, self.defaults), session.model, where="the server's defaults")
        except ValidationError as e:
            raise ValueError(f"the server's request defaults are invalid: {e}") from None
        # Fixed per server (one model, one template): computed once, off the request path.
        self.chat_stops = end_marker_stops(session.model, chat_template)

    def completion(self, req: CompletionRequest) -> list[Job]:
        """The jobs of a completion request, one per choice."""
        self.check_model(req.model)
        return self.choices(req, self.job(req, self.completion_prompt(req)))

    def chat(self, req: ChatCompletionRequest) -> list[Job]:
        """The jobs of a chat completion request, one per choice."""
        self.check_model(req.model)
        job = self.job(req, self.chat_prompt(req), self.chat_stops)
        # A forced call is the reply: it follows the tool's schema, and response_format (checked
        # all the same) would apply to a text reply, which a forced call leaves no room for (as
        # OpenAI's API does; pydantic-ai sends both).
        response = self.response_constraint(req)
        constraint = self.forced_tool_constraint(req) or response
        if constraint is not None:
            job = replace(job, request=replace(job.request, grammar=constraint))
        return self.choices(req, job)

    def tools(self, req: ChatCompletionRequest) -> tuple[list[dict], str] | None:
        """The request's tools and the template's tool-call format, when it offers tools."""
        if not req.tools or req.tool_choice == "none":
            return None
        from ..tools import tool_format

        return list(req.tools), tool_format(self.chat_template or self.session.model.chat_template())

    def response_constraint(self, req: ChatCompletionRequest):
        """response_format json_object / json_schema as a pymtp.grammar.Constraint (None: text)."""
        rf = req.response_format or {}
        kind = rf.get("type", "text")
        if kind == "text":
            return None
        if kind not in ("json_object", "json_schema"):
            raise bad_request(f"response_format type {kind!r}: use text, json_object or json_schema", "response_format")
        try:
            from ..grammar import Constraint

            if kind == "json_object":
                return Constraint(self.session.model, json_object=True)
            schema = (rf.get("json_schema") or {}).get("schema")
            if schema is None:
                raise ValueError("response_format json_schema needs json_schema.schema")
            return Constraint(self.session.model, json_schema=schema)
        except ImportError as e:
            raise bad_request(
                f"structured output needs llguidance: pip install 'pymtp-llm[grammar]' ({e})", "response_format"
            ) from None
        except ValueError as e:
            raise bad_request(str(e), "response_format") from None

    def forced_tool_constraint(self, req: ChatCompletionRequest):
        """A tool_choice that forces a call ("required" or a named function) as a Constraint."""
        offered = self.tools(req)
        if offered is None or req.tool_choice in (None, "auto"):
            return None
        from ..chat import _forced_tools
        from ..grammar import Constraint
        from ..tools import forced_call

        try:
            forced = _forced_tools(offered[0], req.tool_choice)
            assert forced is not None  # tool_choice forces a call here
            return Constraint(self.session.model, **forced_call(forced, offered[1], self.session.model))
        except ValueError as e:
            raise bad_request(str(e), "tool_choice") from None

    def check_model(self, name: str | None) -> None:
        """The served model's id, or none (null, "" or the field left out), are accepted; others are 404."""
        if name and name != self.model_id:
            raise APIError(
                404,
                f"The model '{name}' does not exist; this server serves '{self.model_id}' (GET /v1/models)",
                "model",
                "not_found_error",
                "model_not_found",
            )

    @staticmethod
    def choices(req: CommonRequest, job: Job) -> list[Job]:
        """n jobs for n choices: each its own generation; choice i samples with seed + i when a seed is given."""
        n, r = req.n or 1, job.request
        seed = r.sampling.seed
        return [
            job
            if i == 0 or seed is None
            else replace(job, request=replace(r, sampling=r.sampling.model_copy(update={"seed": seed + i})))
            for i in range(n)
        ]

    def job(self, req: CommonRequest, prompt: Callable[[], list[int]], extra_stop: tuple[str, ...] = ()) -> Job:
        """The Job of req (shared fields) with prompt; extra_stop is added to the request's stops."""
        options = flat_options(req.settings(), self.defaults)
        options["stop"] = merge_stops(options.get("stop"), extra_stop) or None
        options["logprobs"], options["top_logprobs"] = self.logprobs(req)
        return Job(
            prompt,
            self.resolve(options, logprobs_param="top_logprobs" if isinstance(req.logprobs, bool) else "logprobs"),
        )

    def resolve(self, options: dict[str, Any], logprobs_param: str = "top_logprobs") -> Request:
        """pymtp.request.resolve for this server's model, its errors as 400s naming the field."""
        try:
            return resolve(options, self.session.model, where="the request")
        except ValidationError as e:
            raise validation_error(e.errors()) from None
        except OptionError as e:
            param = logprobs_param if e.option == "top_logprobs" else e.option
            raise bad_request(str(e), param) from None

    @staticmethod
    def logprobs(req: CommonRequest) -> tuple[bool, int]:
        """(logprobs of the chosen tokens, alternatives per token) in OpenAI's two forms: chat sends
        logprobs true and top_logprobs n, completions logprobs n."""
        if isinstance(req.logprobs, bool):
            top = req.top_logprobs or 0
            if top and not req.logprobs:
                raise bad_request("top_logprobs needs logprobs: true", "top_logprobs")
            return req.logprobs, top
        if req.top_logprobs:
            raise bad_request(
                "top_logprobs is a chat completions parameter; completions take logprobs=n", "top_logprobs"
            )
        return req.logprobs is not None, req.logprobs or 0

    def completion_prompt(self, req: CompletionRequest) -> Callable[[], list[int]]:
        """The prompt's tokens, made later (in the worker): one text, or one list of token ids."""
        if req.echo:
            raise bad_request("echo is not supported", "echo")
        if req.suffix:
            raise bad_request("suffix is not supported", "suffix")
        if (req.best_of or 1) != 1:
            raise bad_request("only best_of=1 is supported", "best_of")
        p = req.prompt
        if isinstance(p, list):
            if len(p) == 0:
                raise bad_request("the prompt is empty", "prompt")
            if isinstance(p[0], (list, str)):
                if len(p) != 1:
                    raise bad_request("one prompt per request (batches are not supported)", "prompt")
                p = p[0]
        model = self.session.model
        if isinstance(p, str):
            if not p:
                raise bad_request("the prompt is empty", "prompt")
            text = p
            return lambda: model.tokenize(text, add_special=True)
        tokens = [int(t) for t in p]
        if not tokens:
            raise bad_request("the prompt is empty", "prompt")
        bad = [t for t in tokens if not 0 <= t < model.n_vocab]
        if bad:
            raise bad_request(f"token id {bad[0]} is out of the vocabulary (0..{model.n_vocab - 1})", "prompt")
        return lambda: tokens

    def chat_prompt(self, req: ChatCompletionRequest) -> Callable[[], list[int]]:
        """The templated conversation's tokens, made later (in the worker)."""
        model = self.session.model
        offered = self.tools(req)
        try:
            if offered or any(m.tool_calls or m.role == "tool" for m in req.messages):
                # tools, and turns with tool calls or results: the GGUF's Jinja template (pymtp.template)
                from ..template import render_chat

                text = render_chat(
                    model,
                    [m.model_dump(exclude_none=True) for m in req.messages],
                    template=self.chat_template,
                    tools=list(req.tools) if req.tools else None,
                    tool_choice=req.tool_choice,
                )
                return lambda: chat_prompt_tokens(model, text)
            messages = normalize_messages([m.model_dump() for m in req.messages])
        except ValueError as e:
            raise bad_request(str(e), "messages") from None
        try:
            text = chat_prompt(model, messages, template=self.chat_template)
        except UnsupportedError as e:
            raise bad_request(
                f"{e} (start the server with --template NAME, e.g. chatml)", "messages", "chat_template_missing"
            ) from None
        except PymtpError as e:
            raise bad_request(f"the chat template could not be applied: {e}", "messages") from None
        return lambda: chat_prompt_tokens(model, text)
