"""The ``pymtp`` command: generate, chat, bench, info, serve.

pymtp generate "def fibonacci(n):" --max-tokens 64
pymtp chat --model glm-4.5-air.gguf
pymtp info --model model.gguf
pymtp serve --model model.gguf --port 8000
pymtp bench --help
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Sequence

from . import __version__
from .cli_options import flag_name, flat_from_args, spec_flags_given
from .cli_parser import build_parser
from .repl import echo_stream
from .request import flat_options

EXIT_OK = 0
EXIT_ERROR = 1  # loading or generation failed
EXIT_USAGE = 2  # bad arguments, missing model file, model without a chat template
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A user error: printed without a traceback, exit status EXIT_USAGE."""


# ---- progress ----------------------------------------------------------------------------


class Progress:
    """An indicator for work of unknown length that shows only once it has taken `delay` s.

    A tqdm spinner on a terminal (when tqdm is installed), else one plain line
    "<label> ..." and "done in N s" at the end. Writes to `file` (stderr)."""

    def __init__(self, label: str, *, delay: float = 1.0, file=None, enabled: bool = True) -> None:
        self.label = label
        self.delay = delay
        self.file = file if file is not None else sys.stderr
        self.enabled = enabled
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self._shown = False
        self._t0 = 0.0

    def __enter__(self) -> Progress:
        self._t0 = time.perf_counter()
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="pymtp-progress", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        if self._done.wait(self.delay):
            return
        self._shown = True
        tty = getattr(self.file, "isatty", lambda: False)()
        bar = None
        if tty:
            try:
                from tqdm import tqdm

                bar = tqdm(
                    desc=self.label,
                    total=None,
                    file=self.file,
                    leave=False,
                    bar_format="{desc} {elapsed}",
                    dynamic_ncols=True,
                )
            except ImportError:
                bar = None
        if bar is None:
            print(f"{self.label} ...", file=self.file, flush=True)
            self._done.wait()
            return
        spin = "|/-\\"
        i = 0
        while not self._done.wait(0.1):
            bar.set_description_str(f"{self.label} {spin[i % 4]}", refresh=False)
            bar.refresh()
            i += 1
        bar.close()

    def __exit__(self, exc_type, exc, tb) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self._shown and exc_type is None:
            print(f"{self.label}: done in {time.perf_counter() - self._t0:.1f} s", file=self.file, flush=True)


# ---- helpers -------------------------------------------------------------------------------


def _model_path(args) -> str:
    from . import default_model

    if args.model in default_model.ALIASES:
        return str(default_model.resolve(args.model))
    if args.model:
        path = os.path.expanduser(args.model)
        if not os.path.isfile(path):
            raise CliError(f"model file not found: {path}")
        return path
    from .default_model import default_model_path

    try:
        return str(default_model_path())
    except FileNotFoundError as e:
        raise CliError(f"{e}. Give a GGUF with --model PATH (or set PYMTP_MODEL).") from None


def _load(args):
    """The Session of the model the arguments name (loaded with a progress indicator)."""
    import pymtp

    if getattr(args, "verbose", False):
        import logging

        pymtp.set_log_level("info")
        if not logging.getLogger().handlers:
            logging.basicConfig(format="%(name)s %(levelname)s: %(message)s")
    path = _model_path(args)
    with Progress(f"loading {os.path.basename(path)}", enabled=not args.quiet):
        split = [float(x) for x in args.tensor_split.split(",")] if args.tensor_split else None
        return pymtp.load(
            path,
            mtp=not args.no_mtp,
            n_ctx=args.n_ctx,
            n_threads=args.threads,
            n_gpu_layers=args.n_gpu_layers,
            rpc_servers=args.rpc.split(",") if args.rpc else None,
            tensor_split=split,
            mtp_local=not args.mtp_remote,
        )


def _options(args, model) -> dict:
    """generate()'s options from the flags (resolved once, by pymtp.stream / chat_stream). A
    model without MTP blocks decodes plainly (with a note) unless the flags ask for drafting."""
    flat = flat_from_args(args)
    if not model.mtp_loaded and flat.get("speculative", True) and flat.get("drafter", "mtp") != "lookup":
        given = spec_flags_given(flat)
        if given:
            raise CliError(
                f"{model.path.name} has no MTP blocks ({model.architecture}): its head cannot draft. "
                f"Drop {', '.join(given)}, draft by prompt lookup (--drafter lookup), or use --no-spec."
            )
        print(f"note: {model.path.name} has no MTP blocks; decoding without speculation", file=sys.stderr)
        flat["speculative"] = False
    return flat_options(flat)


def _read_prompt(args) -> str:
    if args.file:
        try:
            with open(os.path.expanduser(args.file), encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            raise CliError(f"cannot read the prompt file: {e}") from None
    if args.prompt is not None and args.prompt != "-":
        return args.prompt
    if args.prompt is None and sys.stdin is not None and sys.stdin.isatty():
        raise CliError("give a prompt: pymtp generate \"your prompt\" (or '-' to read stdin)")
    return sys.stdin.read()


def _result_json(result, model) -> dict:
    from .display import stats_dict

    return {
        "text": result.text,
        "finish_reason": result.finish_reason,
        "model": str(model.path),
        "usage": {
            "prompt_tokens": len(result.prompt_tokens),
            "completion_tokens": len(result.tokens),
            "total_tokens": len(result.prompt_tokens) + len(result.tokens),
        },
        "stats": stats_dict(result.stats),
    }


# ---- commands ------------------------------------------------------------------------------


def cmd_generate(args) -> int:
    import pymtp

    prompt = _read_prompt(args)
    if not prompt:
        raise CliError("the prompt is empty")
    session = _load(args)
    try:
        kw = _options(args, session.model)
        if args.chat:
            from .chat import chat_stream

            _check_template(session.model, args.template)
            s = chat_stream(prompt, session, template=args.template, **kw)
        else:
            s = pymtp.stream(prompt, session, **kw)
        if args.json:
            for _ in s:
                pass
            print(json.dumps(_result_json(s.result, session.model), ensure_ascii=False))
            return EXIT_OK
        _, done = echo_stream(s, stats=not args.quiet)
        if not done:
            print("interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        return EXIT_OK
    finally:
        session.close()


def _check_template(model, template: str | None) -> None:
    from .errors import PymtpError

    if template is None and model.chat_template() is None:
        raise CliError(
            f"{model.path.name} has no chat template, so chat cannot format the conversation. "
            "Pass one with --template NAME (a llama.cpp built-in such as chatml, llama3, gemma, "
            "mistral-v7, phi3), or use 'pymtp generate' with a raw prompt."
        )
    try:
        model.apply_chat_template([{"role": "user", "content": "hi"}], template=template)
    except PymtpError as e:
        raise CliError(f"chat template {template or '(from the GGUF)'} is not usable: {e}") from None


def cmd_chat(args) -> int:
    from .repl import ChatRepl

    session = _load(args)
    try:
        _check_template(session.model, args.template)
        repl = ChatRepl(
            session,
            _options(args, session.model),
            template=args.template,
            system=args.system,
            show_stats=args.stats,
            quiet=args.quiet,
            interactive=sys.stdin is not None and sys.stdin.isatty(),
        )
        return repl.run()
    finally:
        session.close()


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)  # pragma: no cover


def _fmt_count(n: int) -> str:
    for div, suf in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= div:
            return f"{n / div:.2f}{suf}"
    return str(n)


def model_info(model) -> dict:
    """The facts `pymtp info` prints, as a dict."""
    import pymtp

    tmpl = model.chat_template()
    return {
        "path": str(model.path),
        "file_size": model.path.stat().st_size,
        "architecture": model.architecture,
        "description": model.description,
        "name": model.meta("general.name"),
        "n_params": model.n_params,
        "size_bytes": model.size_bytes,
        "n_layer": model.n_layer,
        "n_embd": model.n_embd,
        "n_mtp_layers": model.n_mtp_layers,
        "mtp_loaded": model.mtp_loaded,
        "n_vocab": model.n_vocab,
        "n_ctx_train": model.n_ctx_train,
        "recurrent": model.is_recurrent,
        "hybrid": model.is_hybrid,
        "rollback": model.supports_rollback,
        "chat_template": tmpl is not None,
        "build_info": pymtp.build_info(),
        "pymtp_version": __version__,
    }


def cmd_info(args) -> int:
    session = _load(args)
    try:
        info = model_info(session.model)
    finally:
        session.close()
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    mtp = f"{info['n_mtp_layers']}" + (
        " (loaded)"
        if info["mtp_loaded"]
        else " (not loaded: --no-mtp)"
        if info["n_mtp_layers"] and args.no_mtp
        else ""
        if not info["n_mtp_layers"]
        else " (not loaded)"
    )
    kind = "hybrid (attention + recurrent)" if info["hybrid"] else "recurrent" if info["recurrent"] else "attention"
    rows = [
        ("file", info["path"]),
        ("file size", f"{_fmt_bytes(info['file_size'])} ({info['file_size']} bytes)"),
        ("name", info["name"] or "-"),
        ("architecture", f"{info['architecture']} ({info['description']})"),
        ("parameters", f"{_fmt_count(info['n_params'])} ({info['n_params']})"),
        ("layers", f"{info['n_layer']} trunk, n_embd {info['n_embd']}, {kind}"),
        ("MTP blocks", mtp + ("" if info["n_mtp_layers"] else "  -- no speculative decoding with this model")),
        ("vocabulary", f"{info['n_vocab']} tokens"),
        ("context length", f"{info['n_ctx_train']} (training)"),
        ("chat template", "yes" if info["chat_template"] else "none (use --template with chat)"),
        ("llama.cpp build", info["build_info"]),
        ("pymtp", info["pymtp_version"]),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    return EXIT_OK


def cmd_serve(args) -> int:
    try:
        from .server import create_app, serve
    except ImportError as e:
        raise CliError(f"{e}") from None
    session = _load(args)
    try:
        if args.template is not None:
            _check_template(session.model, args.template)
        defaults = flat_from_args(args)  # the settings of requests that give none (checked by create_app)
        api_key = args.api_key if args.api_key is not None else os.environ.get("PYMTP_API_KEY")
        limits = {}
        if args.parallel is not None:  # left out: create_app's default, the one the help names
            limits["parallel"] = args.parallel
        if args.max_queue is not None:
            limits["max_queue"] = args.max_queue
        if args.max_body is not None:
            limits["max_body"] = _byte_size(args.max_body, "--max-body")
        if args.request_timeout is not None:
            limits["request_timeout"] = args.request_timeout or None
        shutdown = {}
        if args.shutdown_timeout is not None:
            if args.shutdown_timeout < 0:
                raise CliError(f"--shutdown-timeout must be >= 0, got {args.shutdown_timeout}")
            shutdown["shutdown_timeout"] = args.shutdown_timeout
        try:
            app = create_app(
                session,
                model_name=args.model_name,
                chat_template=args.template,
                defaults=defaults,
                api_key=api_key,
                **limits,
            )
        except ValueError as e:
            raise CliError(str(e)) from None
        serve(app, host=args.host, port=args.port, log_level=args.log_level, close_session=True, **shutdown)
        return EXIT_OK
    finally:
        session.close()


def _byte_size(text: str, option: str) -> int:
    """A size in bytes: 1048576, 512K, 8M (powers of 1024)."""
    t = text.strip().upper().removesuffix("B")
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    try:
        n = float(t[:-1] if scale > 1 else t) * scale
    except ValueError:
        raise CliError(f"{option} must be a size such as 1048576, 512K or 8M, got {text!r}") from None
    if n < 1:
        raise CliError(f"{option} must be at least 1 byte, got {text!r}")
    return int(n)


def cmd_bench(argv: Sequence[str]) -> int:
    try:
        from . import bench
    except ImportError as e:
        if getattr(e, "name", None) == "pymtp.bench":
            print("error: pymtp bench is not available in this installation", file=sys.stderr)
            return EXIT_USAGE
        raise
    rc = bench.main(list(argv))
    return int(rc or 0)


# ---- entry point -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run the pymtp command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "bench":
        try:
            return cmd_bench(argv[1:])
        except SystemExit as e:  # the bench's own argparse (--help, bad arguments)
            return _exit_code(e)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return _exit_code(e)
    if args.command is None:
        parser.print_help()
        return EXIT_USAGE
    commands = {"generate": cmd_generate, "gen": cmd_generate, "chat": cmd_chat, "info": cmd_info, "serve": cmd_serve}
    from pydantic import ValidationError

    from .errors import PymtpError
    from .request import OptionError

    try:
        return commands[args.command](args)
    except CliError as e:
        print(f"pymtp {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except ValidationError as e:  # a bad option value (SamplingConfig / SpecConfig / GenerationConfig)
        print(f"pymtp {args.command}: error: invalid option value: {_validation_message(e)}", file=sys.stderr)
        return EXIT_USAGE
    except OptionError as e:  # a value the model cannot take (a logit_bias token past its vocabulary)
        print(f"pymtp {args.command}: error: {flag_name(e.option)}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (PymtpError, ValueError, OSError) as e:
        print(f"pymtp {args.command}: error: {e}", file=sys.stderr)
        return EXIT_ERROR


def _validation_message(e) -> str:
    msgs = []
    for err in e.errors():
        field = str(err["loc"][0]) if err.get("loc") else ""
        msgs.append(f"{flag_name(field)}: {err['msg']}" if field else err["msg"])
    return "; ".join(msgs) or str(e)


def _exit_code(e: SystemExit) -> int:
    code = e.code
    if code is None:
        return EXIT_OK
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return EXIT_ERROR


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
