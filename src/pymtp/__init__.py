"""pymtp: multi-token-prediction speculative decoding from Python, on llama.cpp.

import pymtp
print(pymtp.generate("def fibonacci(n):", max_tokens=64).text)
"""

from . import display as _display
from ._native import build_info, set_log_level, system_info
from .batch import Batch, BatchItem
from .chat import chat, chat_stream
from .config import GenerationConfig, SamplingConfig, SpecConfig
from .default_model import default_model_path
from .errors import (
    ContextFullError,
    DecodeError,
    InvalidHandleError,
    ModelLoadError,
    PymtpError,
    UnsupportedError,
)
from .generate import TextStream, generate, load, stream
from .model import DraftContext, Model, TargetContext
from .quant import quantize
from .session import Session
from .speculator import MTPSpeculator
from .stats import GenerationResult, SpecStats, StepResult

__version__ = "0.1.0"

_display.register_jupyter()  # results and stats render as tables in a notebook

__all__ = [
    "Batch",
    "BatchItem",
    "ContextFullError",
    "DecodeError",
    "DraftContext",
    "GenerationConfig",
    "GenerationResult",
    "InvalidHandleError",
    "MTPSpeculator",
    "Model",
    "ModelLoadError",
    "PymtpError",
    "SamplingConfig",
    "Session",
    "SpecConfig",
    "SpecStats",
    "StepResult",
    "TargetContext",
    "TextStream",
    "UnsupportedError",
    "build_info",
    "chat",
    "chat_stream",
    "default_model_path",
    "generate",
    "load",
    "quantize",
    "set_log_level",
    "stream",
    "system_info",
]
