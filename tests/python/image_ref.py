"""Shared by the image tests: docs/order.md's keyed crop/flip plan written out in Python, and the
PIL reference of one decoded sample as torchvision makes it (convert("RGB"), then BILINEAR:
RandomResizedCrop's crop then resize for random_resized, Resize(s) + CenterCrop for center, a
resize for none), written with PIL only so that it runs where torchvision is absent;
test_image_torchvision.py checks it against torchvision itself."""
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
        new_w, new_h = center_resize(W, H, out_w, out_h)
        left = int(round((new_w - out_w) / 2.0))
        top = int(round((new_h - out_h) / 2.0))
        fx, fy = W / new_w, H / new_h
        return (left * fx, top * fy, out_w * fx, out_h * fy, f)
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


def center_resize(W, H, out_w, out_h):
    """torchvision's Resize(s) output size (the shorter side s, the longer int(s * long /
    short)) for the smallest s that covers out_w x out_h: s = S for a square S output."""
    short, long_ = (W, H) if W <= H else (H, W)
    need_short, need_long = (out_w, out_h) if W <= H else (out_h, out_w)
    s = need_short
    while int(s * long_ / short) < need_long:
        s += 1
    new_short, new_long = s, int(s * long_ / short)
    return (new_short, new_long) if W <= H else (new_long, new_short)


def load_rgb(path, background=None):
    """torchvision's default loader, Image.open(f).convert("RGB"); with background (r, g, b), the
    image's alpha composited over that colour as PIL's paste(mask=alpha) does."""
    im = Image.open(path)
    if background is None:
        return im.convert("RGB")
    rgba = im.convert("RGBA")
    out = Image.new("RGB", im.size, tuple(background))
    out.paste(rgba.convert("RGB"), mask=rgba.getchannel("A"))
    return out


def reference(path, h, w, crop, box, background=None):
    im = load_rgb(path, background)
    x, y, bw, bh, flip = box
    if crop == "none":
        r = im.resize((w, h), Image.BILINEAR)
    elif crop == "center":
        # Resize(s) + CenterCrop((h, w)): PIL's resize to the rounded size, then the crop
        new_w, new_h = center_resize(im.size[0], im.size[1], w, h)
        r = im if (new_w, new_h) == im.size else im.resize((new_w, new_h), Image.BILINEAR)
        left, top = int(round((new_w - w) / 2.0)), int(round((new_h - h) / 2.0))
        r = r.crop((left, top, left + w, top + h))
    else:
        r = im.crop((int(x), int(y), int(x + bw), int(y + bh))).resize((w, h), Image.BILINEAR)
    a = np.asarray(r)
    return a[:, ::-1] if flip else a
