"""Draws docs/images/pixels-torchvision.png: for a few real images (openclipart PNGs with alpha
and text, a JPEG photo), torchvision's Resize(224) + CenterCrop(224) of convert("RGB"), dscache's
crop="center" before and after (image_tool of two builds), and the absolute differences (x4).

    /usr/bin/python3 docs/images/pixels_picture.py --tool build/bin/image_tool \\
        [--before OLD_BUILD/bin/image_tool] [-o docs/images/pixels-torchvision.png]

Needs PIL, numpy, torchvision, and the Debian packages openclipart-png and mate-backgrounds."""
import argparse
import os
import subprocess
import tempfile

import numpy as np
import torchvision.transforms as T
from PIL import Image, ImageDraw

S = 224
IMAGES = [
    "/usr/share/openclipart/png/recreation/party/fire_valessio_soares_de_.png",
    "/usr/share/openclipart/png/people/self_portrait_hardi1.png",
    "/usr/share/openclipart/png/food/menu_example1.png",
    "/usr/share/openclipart/png/computer/icons/apacheconf.png",
    "/usr/share/backgrounds/mate/nature/Dune.jpg",
]


def codec(tool, path):
    with tempfile.NamedTemporaryFile(suffix=".raw") as f:
        subprocess.run([tool, "decode", path, f.name, str(S), str(S), "center", "0", "hwc", "0",
                        "0", "0"], check=True, capture_output=True)
        return np.fromfile(f.name, np.uint8).reshape(S, S, 3)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--before")
    ap.add_argument("-o", default="docs/images/pixels-torchvision.png")
    args = ap.parse_args()
    tf = T.Compose([T.Resize(S), T.CenterCrop(S)])
    cols = ["torchvision"] + (["dscache before", "|diff| x4 before"] if args.before else []) + \
        ["dscache now", "|diff| x4 now"]
    pad, head, label = 6, 22, 30
    rows = [p for p in IMAGES if os.path.exists(p)]
    sheet = Image.new("RGB", (len(cols) * (S + pad) + pad,
                              head + len(rows) * (S + label + pad) + pad), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    for c, name in enumerate(cols):
        draw.text((pad + c * (S + pad) + 4, 6), name, fill=(0, 0, 0))
    for r, path in enumerate(rows):
        ref = np.asarray(tf(Image.open(path).convert("RGB")))
        tiles, notes = [ref], []
        for tool in ([args.before] if args.before else []) + [args.tool]:
            got = codec(tool, path)
            d = np.abs(got.astype(np.int16) - ref)
            tiles += [got, np.clip(d * 4, 0, 255).astype(np.uint8)]
            notes.append("mean %.2f p99 %.0f" % (d.mean(), np.percentile(d, 99)))
        y = head + r * (S + label + pad)
        for c, tile in enumerate(tiles):
            sheet.paste(Image.fromarray(tile), (pad + c * (S + pad), y))
        draw.text((pad + 4, y + S + 4), os.path.basename(path), fill=(0, 0, 0))
        for k, note in enumerate(notes):
            draw.text((pad + (2 + 2 * k) * (S + pad) + 4, y + S + 4), note, fill=(0, 0, 0))
    sheet.save(args.o, optimize=True)
    print("wrote %s (%dx%d)" % (args.o, sheet.size[0], sheet.size[1]))


if __name__ == "__main__":
    main()
