"""Training of pymtp's models: ``pip install 'pymtp-llm[train]'`` (torch, tokenizers); nothing at
runtime imports it. Run from a source checkout: the defaults write the models into
``src/pymtp/models`` and their records (loss curves, run records, references) into ``training/``.

    python -m pymtp.train                   # the default model's NextN head (distill.py)
    python -m pymtp.train.selfdistill       # multi-step soft distillation of that head (#30)
    python -m pymtp.train.evaluate_head     # heads' acceptance, measured in llama.cpp
    python -m pymtp.train.train             # the tiny bundled model (pymtp.load("tiny"))
    python -m pymtp.train.evaluate          # the tiny model's figures
"""
