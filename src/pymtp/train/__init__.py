"""Training of pymtp's default model (training-only: needs torch and tokenizers).

    python -m pymtp.train --out src/pymtp/models/pymtp-default.gguf
    python -m pymtp.train.evaluate

Nothing outside this subpackage imports it; torch is never a runtime dependency.
"""
