"""Shared by the image tests: docs/order.md's keyed crop/flip plan written out in Python, and the
PIL reference of one decoded sample (BILINEAR; crop then resize for random_resized, PIL's resize
of the exact box for center)."""
import math

import numpy as np
from PIL import Image

M64 = (1 << 64) - 1


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def plan(crop, W, H, out_w, out_h, seed, epoch, index, flip, scale=(0.08, 1.0),
         ratio=(3 / 4, 4 / 3)):
    key = mix64(mix64(mix64(seed ^ 0x494D414745) ^ epoch) ^ index)

    def draw(k):
        return mix64((key + (k + 1) * 0x9E3779B97F4A7C15) & M64)

    def unit(k):
        return (draw(k) >> 11) * 2.0 ** -53

    def below(k, n):
        return (draw(k) * n) >> 64

    f = (draw(40) >> 63) if flip else 0
    if crop == "none":
        return (0.0, 0.0, float(W), float(H), f)
    if crop == "center":
        aspect = out_w / out_h
        w, h = W, W / aspect
        if h > H:
            h, w = H, H * aspect
        return ((W - w) / 2, (H - h) / 2, w, h, f)
    area = W * H
    lo, hi = math.log(ratio[0]), math.log(ratio[1])
    for tr in range(10):
        target = area * (scale[0] + (scale[1] - scale[0]) * unit(4 * tr))
        aspect = math.exp(lo + (hi - lo) * unit(4 * tr + 1))
        w, h = round(math.sqrt(target * aspect)), round(math.sqrt(target / aspect))
        if 0 < w <= W and 0 < h <= H:
            y = below(4 * tr + 2, H - h + 1)
            x = below(4 * tr + 3, W - w + 1)
            return (float(x), float(y), float(w), float(h), f)
    w, h = W, H
    if W / H < ratio[0]:
        h = round(w / ratio[0])
    elif W / H > ratio[1]:
        w = round(h * ratio[1])
    return (float((W - w) // 2), float((H - h) // 2), float(w), float(h), f)


def reference(path, h, w, crop, box):
    im = Image.open(path).convert("RGB")
    x, y, bw, bh, flip = box
    if crop == "none":
        r = im.resize((w, h), Image.BILINEAR)
    elif crop == "center":
        # the codec's exact box; torchvision's Resize(shorter side) + CenterCrop rounds the
        # intermediate size and the offset, which moves the box by up to half a pixel
        r = im.resize((w, h), Image.BILINEAR, box=(x, y, x + bw, y + bh))
    else:
        r = im.crop((int(x), int(y), int(x + bw), int(y + bh))).resize((w, h), Image.BILINEAR)
    a = np.asarray(r)
    return a[:, ::-1] if flip else a
