"""Training of pymtp's models (training-only: needs torch; nothing at runtime imports it).

    python -m pymtp.train                   # the default model's NextN head (distill.py)
    python -m pymtp.train.selfdistill       # multi-step soft distillation of that head (#30)
    python -m pymtp.train.evaluate_head     # heads' acceptance, measured in llama.cpp
    python -m pymtp.train.train             # the tiny bundled model (pymtp.load("tiny"))
    python -m pymtp.train.evaluate          # the tiny model's figures
"""
