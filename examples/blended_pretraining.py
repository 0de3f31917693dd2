"""Megatron-style blended pretraining input: three token sources (web, code, books) blended by
weight, each source's documents packed into rows of 2048 tokens, stopped mid-epoch and resumed
exactly (docs/mixtures.md). Run: DSCACHE_SERVERS=HOST:PORT python3 blended_pretraining.py
(the servers serve datasets "web" and "books"; "code" may live elsewhere: DSCACHE_CODE_SERVERS).
Each dataset has a variable-length field input_ids (i32[])."""
import os

import numpy as np

import dscache

servers = os.environ.get("DSCACHE_SERVERS", "127.0.0.1:7070")
code_servers = os.environ.get("DSCACHE_CODE_SERVERS", servers)


def make_loader():
    return dscache.Loader(
        sources=[dscache.Source("web", weight=0.6),
                 dscache.Source("code", weight=0.3, servers=code_servers),
                 dscache.Source("books", weight=0.1, repeat=2.0)],  # 2 passes a source-epoch
        servers=servers, batch_size=10, seed=0,
        pack={"input_ids": 2048})       # each source's documents packed into rows of 2048


loader = make_loader()
seen, saved, after = [0, 0, 0], None, []
for step in range(12):
    batch = next(loader)
    tokens = batch["input_ids"]         # int32 [10, 2048]: the model's input
    cu = batch["cu_seqlens"]            # int32: document boundaries for varlen attention
    assert tokens.shape == (10, 2048) and cu[-1] == tokens.size
    for s in batch["source"]:
        seen[s] += 1
    if step == 5:                       # a checkpoint mid-epoch
        saved = loader.state_dict()
    if step > 5:
        after.append(tokens.copy())
loader.close()
print("rows per source after 12 steps:", dict(zip(["web", "code", "books"], seen)))

resumed = make_loader()                 # e.g. after a restart
resumed.load_state_dict(saved)
for want in after:
    assert np.array_equal(next(resumed)["input_ids"], want)
resumed.close()
print("resumed at step 6: the same rows, token for token")
print("ok")
