# greedy acceptance, stdlib set vs shipped set, on the bench's own prompt kinds at larger n
import json
import sys
from pathlib import Path

import pymtp
from pymtp import draft_vocab
from pymtp.bench.prompts import code_prompts, prose_prompts
from pymtp.train import evaluate_head as eh
from pymtp.train.selfdistill import SHIPPED

REAL = draft_vocab.SHIPPED
out = {}
for kind, ps in (("code", code_prompts(16)), ("prose", prose_prompts(16))):
    for arm in ("stdlib_set", "corpus_mix_set"):
        draft_vocab.SHIPPED = Path("/nonexistent.npz") if arm == "stdlib_set" else REAL
        s = pymtp.load(eh.assemble(SHIPPED), n_ctx=2048)
        toks = [s.tokenize(p.text) for p in ps]
        for nd in (1, 3):
            r = eh.speculative(s, toks, 48, {}, 0, n_draft=nd)
            out[f"{kind}/{arm}/n_draft{nd}"] = r
            print(kind, len(ps), arm, nd, r, flush=True)
        s.close()
Path(sys.argv[1]).write_text(json.dumps(out, indent=1))
