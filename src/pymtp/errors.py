"""Exceptions pymtp raises. All derive from PymtpError."""


class PymtpError(RuntimeError):
    """Base class of pymtp's errors."""


class ModelLoadError(PymtpError, OSError):
    """The file is missing, unreadable, not a GGUF, or llama.cpp cannot load it."""


class InvalidHandleError(PymtpError):
    """A model or context was used after close()."""


class DecodeError(PymtpError):
    """llama.cpp refused or failed a decode."""


class ContextFullError(DecodeError):
    """The context has no room left for the batch."""


class UnsupportedError(PymtpError):
    """The model or context cannot do what was asked (e.g. no MTP blocks)."""
