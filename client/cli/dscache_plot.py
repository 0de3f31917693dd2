#!/usr/bin/env python3
"""Draws a dscache bench time series (CSV written by `dscache bench --plot`) as a PNG:
throughput over time, the stall over time split by what the loader waited on (the stage
breakdown), the busy time of each stage, and the loader's verdict.

Usage: dscache_plot.py SERIES.csv OUT.png [--title TEXT] [--verdict TEXT]
--verdict: the footer (dscache bench passes its final verdict); default: the last row's.
Needs matplotlib (Debian: apt-get install python3-matplotlib); without it, exits with status 3
and says so. Exit 2: bad arguments or an unreadable CSV.
"""
import csv
import sys

WAITS = [("wait_fetch", "fetch (queued, in flight)", "#4c72b0"),
         ("wait_budget", "in-flight budget", "#8172b2"),
         ("wait_decode", "decode", "#dd8452"),
         ("wait_collate", "collate", "#55a868")]
BUSY = [("network_s", "network wait", "#4c72b0"),
        ("decode_s", "decode", "#dd8452"),
        ("collate_s", "collate", "#55a868"),
        ("h2d_s", "host to device", "#c44e52")]


def read_series(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        raise ValueError("no rows")
    return rows


def column(rows, key):
    return [float(r.get(key) or 0) for r in rows]


def main(argv):
    args = [a for a in argv[1:]]
    opts = {"--title": None, "--verdict": None}
    for flag in opts:
        if flag in args:
            i = args.index(flag)
            if i + 1 >= len(args):
                print("dscache_plot: %s needs a value" % flag, file=sys.stderr)
                return 2
            opts[flag] = args[i + 1]
            del args[i:i + 2]
    title = opts["--title"]
    if len(args) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    src, out = args
    try:
        rows = read_series(src)
    except (OSError, ValueError, csv.Error) as e:
        print("dscache_plot: cannot read %s: %s" % (src, e), file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("dscache_plot: matplotlib is not installed (Debian: apt-get install "
              "python3-matplotlib); the series is in %s" % src, file=sys.stderr)
        return 3
    t = column(rows, "t")
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(10, 9), sharex=True)
    ax1.plot(t, column(rows, "samples_per_s"), color="#333333", label="samples/s")
    ax1.set_ylabel("samples / s")
    ax1b = ax1.twinx()
    ax1b.plot(t, column(rows, "mb_per_s"), color="#999999", linestyle="--", label="MB/s decoded")
    ax1b.set_ylabel("MB / s")
    ax1.set_title(title or "dscache loader: throughput and stall over time")
    lines = ax1.get_legend_handles_labels()
    lines2 = ax1b.get_legend_handles_labels()
    ax1.legend(lines[0] + lines2[0], lines[1] + lines2[1], loc="upper left", fontsize=8)
    ax1.grid(alpha=0.3)

    # Stall per interval, split by what next() waited on (shares of the step time); what no
    # wait explains (taking the lock, handing the batch out) is "other".
    stall = column(rows, "stall")
    step = column(rows, "step_s")
    waits = [column(rows, k) for k, _, _ in WAITS]
    stacks = []
    for w in waits:
        stacks.append([100 * w[i] / step[i] if step[i] > 0 else 0 for i in range(len(t))])
    stacks.append([max(0.0, 100 * stall[i] - sum(s[i] for s in stacks)) for i in range(len(t))])
    ax2.stackplot(t, *stacks, labels=[label for _, label, _ in WAITS] + ["other"],
                  colors=[c for _, _, c in WAITS] + ["#cccccc"], alpha=0.85)
    ax2.plot(t, [100 * s for s in stall], color="black", linewidth=1, label="stall")
    ax2.set_ylabel("stall, % of step time")
    ax2.legend(loc="upper left", fontsize=8, ncol=6)
    ax2.grid(alpha=0.3)

    for key, label, color in BUSY:
        ax3.plot(t, column(rows, key), label=label, color=color)
    ax3.set_ylabel("busy seconds per second")
    ax3.set_xlabel("seconds")
    ax3.legend(loc="upper left", fontsize=8, ncol=4)
    ax3.grid(alpha=0.3)

    verdict = opts["--verdict"]
    if verdict is None:
        last = rows[-1]
        verdict = "last interval: %s - %s" % (last.get("bottleneck", "?"),
                                              last.get("suggestion", ""))
    fig.text(0.01, 0.005, verdict[:160], fontsize=8)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    try:
        fig.savefig(out, dpi=100)
    except OSError as e:
        print("dscache_plot: cannot write %s: %s" % (out, e), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
