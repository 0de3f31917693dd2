"""A two-source multimodal blend: image-caption pairs from a large web set and a small curated
set, 3:1, with each sample's source in the batch (docs/mixtures.md). Run:
DSCACHE_SERVERS=HOST:PORT python3 multimodal_two_sources.py (datasets "pairs_web" and
"pairs_curated", fields image u8[3,8,8] and caption i32[]; the curated set may hold more fields)."""
import os

import dscache

loader = dscache.Loader(
    sources=[dscache.Source("pairs_web", weight=0.75),
             dscache.Source("pairs_curated", weight=0.25)],
    servers=os.environ.get("DSCACHE_SERVERS", "127.0.0.1:7070"), batch_size=6, seed=1,
    fields=["image", "caption"])        # the fields the model needs; others are not read
for step in range(3):
    batch = next(loader)
    images = batch["image"]             # uint8 [6, 3, 8, 8]
    captions = batch["caption"]         # values + batch["caption_offsets"]
    print("step", step, "sources", batch["source"].tolist())
print(loader.stats()["sources"]["pairs_curated"]["samples"], "curated samples in 3 steps")
loader.close()
print("ok")
