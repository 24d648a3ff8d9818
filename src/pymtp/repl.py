"""The interactive chat behind ``pymtp chat``: commands, Ctrl-C, a conversation that fits.

    /help    the commands and keys
    /reset   forget the conversation (the system prompt stays)
    /stats   the stats line of the last reply
    /exit    quit (also /quit, Ctrl-D, or Ctrl-C twice at the prompt)

A line that starts with "/" is a command and never goes to the model; "//" at the start
sends the rest of the line, beginning with "/". Ctrl-C during a reply stops it and the
partial reply stays in the conversation; at the prompt it clears the line, and a second
Ctrl-C in a row exits. When the conversation no longer fits the context, the oldest turns
are dropped (the system prompt stays) and a one-line note says so. Replies stream to
stdout; everything else (notes, stats, help) goes to stderr.
"""

from __future__ import annotations

import sys

from .chat import chat_prompt, chat_prompt_tokens, chat_stream
from .display import stats_line
from .errors import PymtpError
from .session import Session
from .stats import GenerationResult

__all__ = ["ChatRepl", "HELP"]

EXIT_OK = 0

HELP = """\
commands:
  /help    this help
  /reset   forget the conversation (the system prompt stays)
  /stats   the stats of the last reply
  /exit    quit (also /quit, Ctrl-D, or Ctrl-C twice at the prompt)
Ctrl-C stops a reply; at the prompt it clears the line. Up/Down recall earlier lines.
Start a line with // to send a message that begins with /."""

_EXIT = ("/exit", "/quit", "/q")
_HELP = ("/help", "/h", "/?")


def _enable_line_editing() -> None:
    """Line editing and arrow-key history for input() (the standard library's readline)."""
    try:
        import readline  # noqa: F401  (importing it is what hooks it into input())
    except ImportError:  # pragma: no cover  (Windows without pyreadline)
        pass


def write_out(text: str) -> None:
    """Write to stdout now, replacing what its encoding cannot show."""
    out = sys.stdout
    try:
        out.write(text)
    except UnicodeEncodeError:
        enc = getattr(out, "encoding", None) or "utf-8"
        out.write(text.encode(enc, "replace").decode(enc, "replace"))
    out.flush()


def echo_stream(stream, *, stats: bool = False) -> tuple[str, bool]:
    """Write a stream's pieces to stdout as they come, then end the line.

    Returns the text written and whether the stream ran to its end; Ctrl-C stops
    it (the stream is closed) and returns False. stats: print the stats line on
    stderr after a stream that ended."""
    pieces: list[str] = []
    try:
        for piece in stream:
            pieces.append(piece)
            write_out(piece)
    except KeyboardInterrupt:
        stream.close()
        write_out("\n")
        return "".join(pieces), False
    write_out("\n")
    if stats:
        print(stats_line(stream.result.stats, stream.result.finish_reason), file=sys.stderr, flush=True)
    return "".join(pieces), True


class ChatRepl:
    """A chat with one Session, read line by line from input().

    gen_kwargs: what chat_stream passes to pymtp.stream (max_tokens, temperature,
    speculative...). template: a chat template override. system: a system message kept
    through /reset and through dropping old turns. show_stats: the stats line after
    every reply (unless quiet). interactive: a terminal (prompt, banner, readline)."""

    def __init__(
        self,
        session: Session,
        gen_kwargs: dict,
        *,
        template: str | None = None,
        system: str | None = None,
        show_stats: bool = False,
        quiet: bool = False,
        interactive: bool = False,
    ) -> None:
        self.session = session
        self.kw = dict(gen_kwargs)
        self.template = template
        self.system: list[dict] = [{"role": "system", "content": system}] if system else []
        self.history: list[dict] = list(self.system)
        self.show_stats = show_stats
        self.quiet = quiet
        self.interactive = interactive
        self.last: GenerationResult | None = None  # the GenerationResult of the last reply that ran to its end
        self.last_interrupted = False

    # ---- the loop ------------------------------------------------------------------------------

    def run(self) -> int:
        """Read and answer lines until /exit, Ctrl-D (end of input) or two Ctrl-C in a row."""
        if self.interactive:
            _enable_line_editing()
            m = self.session.model
            spec = ", MTP drafting" if self.kw.get("speculative") is not False else ""
            self.say(
                f"pymtp chat with {m.path.name} ({m.architecture}{spec}). /help for commands, /exit or Ctrl-D to quit."
            )
        interrupts = 0  # Ctrl-C at the prompt, in a row
        while True:
            try:
                line = input("> " if self.interactive else "")
            except EOFError:
                if self.interactive:
                    self.say("")
                return EXIT_OK
            except KeyboardInterrupt:
                interrupts += 1
                if interrupts >= 2:
                    self.say("")
                    return EXIT_OK
                self.say("\n(line cleared: Ctrl-C again or Ctrl-D to exit)")
                continue
            interrupts = 0
            try:
                if not self.handle(line):
                    return EXIT_OK
            except KeyboardInterrupt:  # outside the reply's own streaming (templating, stats)
                self.say("\n(interrupted)")

    def handle(self, line: str) -> bool:
        """Answer one input line; False when it asks to exit."""
        text = line.strip()
        if not text:
            return True
        if text.startswith("/") and not text.startswith("//"):
            return self.command(text)
        if text.startswith("//"):
            line = line.lstrip()[1:]
        self.turn(line)
        return True

    def say(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    # ---- commands ------------------------------------------------------------------------------

    def command(self, text: str) -> bool:
        name = text.split()[0].lower()
        if name in _EXIT:
            return False
        if name in _HELP:
            self.say(HELP)
        elif name == "/reset":
            self.history = list(self.system)
            self.say("(conversation cleared" + (", system prompt kept)" if self.system else ")"))
        elif name == "/stats":
            self.say(self.stats_text())
        else:
            self.say(
                f"unknown command {name} (not sent to the model); /help lists the commands, // starts a message with /"
            )
        return True

    def stats_text(self) -> str:
        """The stats line of the last reply, with how much of its prompt came from the cache."""
        if self.last is None:
            return "(no stats: the last reply was interrupted)" if self.last_interrupted else "(no reply yet)"
        s = self.last.stats
        return f"{stats_line(s, self.last.finish_reason)} | reused {s.n_reused} of {s.n_prompt} prompt tokens"

    # ---- a turn --------------------------------------------------------------------------------

    def turn(self, line: str) -> None:
        """Send a user message; stream the reply; keep both (the reply even when interrupted)."""
        convo = self.fit(self.history + [{"role": "user", "content": line}])
        if convo is None:
            return
        try:
            stream = chat_stream(convo, self.session, template=self.template, **self.kw)
            reply, done = echo_stream(stream, stats=False)
        except PymtpError as e:  # the conversation survives a failed generation
            self.say(f"error: {e}")
            return
        self.history = convo + [{"role": "assistant", "content": reply}]
        self.last = stream.result if done else None
        self.last_interrupted = not done
        if not done:
            self.say("(reply interrupted)")
            return
        if self.last is not None and self.last.finish_reason == "context":
            self.say("(the reply stopped at the end of the context)")
        if self.show_stats and not self.quiet:
            self.say(self.stats_text())

    def count(self, convo: list[dict]) -> int:
        """Prompt tokens of a conversation, as chat_stream makes them."""
        model = self.session.model
        return len(chat_prompt_tokens(model, chat_prompt(model, convo, template=self.template)))

    def fit(self, convo: list[dict]) -> list[dict] | None:
        """The conversation, its oldest turns dropped if it leaves too little room for a reply;
        None (with a note) when its last message does not fit even alone.

        Room for a reply is max_tokens, at most a quarter of the context. Once it runs
        short, turns are dropped until the conversation fills at most half the context: the
        turns after that extend a cached prefix again, instead of each one dropping a turn
        and re-reading the whole conversation."""
        n_ctx = self.session.target.n_ctx
        reserve = min(int(self.kw.get("max_tokens") or 1), n_ctx // 4)
        head = len(self.system)
        n = self.count(convo)
        if n + reserve <= n_ctx:
            return convo
        dropped = 0
        while len(convo) - head > 1 and (n + reserve > n_ctx or n > n_ctx // 2):
            # the oldest turn: its user message and what follows up to the next user message
            j = head + 1
            while j < len(convo) - 1 and convo[j]["role"] != "user":
                j += 1
            convo = convo[:head] + convo[j:]
            dropped += 1
            n = self.count(convo)
        if n >= n_ctx:
            self.say(
                f"(not sent: this message makes a prompt of {n} tokens"
                f"{' with the system prompt' if head else ''}; the context holds {n_ctx})"
            )
            return None
        if dropped:
            kept = ", kept the system prompt" if head else ""
            self.say(
                f"(the conversation outgrew the context of {n_ctx} tokens: dropped the oldest "
                f"{dropped} turn{'s' if dropped > 1 else ''}{kept})"
            )
        return convo
