# held-out curve figures of the shipped head and run6's step-200 checkpoint under the old
# (stdlib-count) and the new (shipped ranking) draft vocabulary, on run6's fixed eval batches
import numpy as np, torch, json
from pathlib import Path
from pymtp.train import teacher
from pymtp.train.selfdistill import Crops, held_figures, SHIPPED
from pymtp.train.head import HeadConfig, read_head_gguf
from pymtp.train.multistep import DraftVocab
W_ = Path.home()/'.cache/pymtp/train/smollm2-135m'
torch.set_num_threads(2)
cfg = HeadConfig()
W = torch.from_numpy(np.load(W_/'embed.npy').astype(np.float32))
new = np.load(W_/'vocab.npy')
counts = np.load(Path.home()/'.cache/pymtp/draft-vocab/smollm2-135m-mtp-f16-3da73830e80d-a2-700c948a558398bc.npy')
old_top = np.argsort(-counts, kind='stable')[:4096]
import pymtp
from pymtp import default_model
with pymtp.Model(default_model.resolve(None)) as m:
    eog = [t for t in (m.eos, m.eot) if t is not None]
old = np.unique(np.concatenate([old_top, np.asarray(eog, np.int64)])).astype(np.int32)
print('new', len(new), 'old', len(old), 'overlap', np.isin(new, old).sum())
he = teacher.load(W_/'teacher', True, n_shards=8)
held = Crops(he, 256); rng = np.random.default_rng(5)
eval_batches = [held.batch(rng, 8, 'cpu') for _ in range(4)]
hc = Crops(teacher.load(W_/'teacher', True, domains={'code'}, n_shards=8), 256); rng2 = np.random.default_rng(6)
code_batches = [hc.batch(rng2, 8, 'cpu') for _ in range(4)]
shipped = read_head_gguf(SHIPPED, cfg)
run6 = read_head_gguf(W_/'run6/run6-step200.gguf', cfg)
out = {}
for vname, v in (('old', old), ('new', new)):
    dv = DraftVocab(v, cfg.n_vocab)
    for hname, h in (('shipped', shipped), ('run6-step200', run6)):
        a = held_figures(h, W, dv, eval_batches, 3, 'text'); c = held_figures(h, W, dv, code_batches, 3, 'text')
        out[f'{vname} vocab, {hname}'] = {k: a[k] for k in ('held_agree1', 'held_chain2', 'held_chain3')} | {'code_' + k: c[k] for k in ('held_agree1', 'held_chain2', 'held_chain3')}
        print(vname, hname, out[f'{vname} vocab, {hname}'], flush=True)
Path('/tmp/t4/curve_vocab.json').write_text(json.dumps(out, indent=1))
