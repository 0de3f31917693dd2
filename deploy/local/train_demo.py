#!/usr/bin/env python3
"""The demo trainer: a small torch model trained for a number of steps, each step also spending
--compute-ms of simulated accelerator time, fed by one of:
  --mode dscache  dscache.Loader from a running dscached (with --torch-dataloader: through
                  torch's DataLoader(dscache.torch.Dataset(...), batch_size=None));
  --mode files    the naive baseline: a torch Dataset whose __getitem__ reads the stored bytes of
                  the (lz4) chunk holding the sample from the shard files and decodes the whole
                  chunk to take one sample out (chunks are the unit of compression);
  --mode pread    the stronger baseline: a torch Dataset reading only the sample's own bytes
                  (one preadv per field into the output array, files kept open) from an
                  uncompressed copy of the dataset (--dir names that copy).
Both file baselines go through torch's DataLoader (--workers processes, shuffle=True), and
start with the dataset's files evicted from the page cache: fsync + posix_fadvise(DONTNEED) on
each file, which touches only these files (pages the kernel cannot drop stay cached; after the
first touch a chunk is served from the page cache, as on a local disk).
With --device cuda[:N] the model trains on that GPU: dscache hands out batches already on the
device (its own stream and pinned slots), the baselines pin in the DataLoader and copy with
.to(device, non_blocking=True), inside the timed wait for data.
Prints one summary line per run: throughput, data stall and loss.

usage: train_demo.py --mode dscache|files|pread --dataset NAME --dir DATASET_DIR
                     [--servers HOST:PORT] [--batch-size B] [--steps N] [--compute-ms MS]
                     [--workers W] [--seed S] [--device cpu|cuda[:N]|auto] [--json]
                     [--torch-dataloader]
"""
import argparse
import bisect
import ctypes
import ctypes.util
import json
import os
import struct
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

_NP = {"u8": np.uint8, "i8": np.int8, "u16": np.uint16, "i16": np.int16, "u32": np.uint32,
       "i32": np.int32, "i64": np.int64, "f16": np.float16, "bf16": np.uint16,
       "f32": np.float32, "f64": np.float64}


class ShardFileDataset(torch.utils.data.Dataset):
    """The naive baseline: every __getitem__ opens the sample's shard file, reads the stored
    bytes of the chunk holding it, decompresses them (lz4) and slices the sample out: what a
    per-sample file format costs a trainer reading from disk or a network file system."""

    def __init__(self, directory):
        with open(os.path.join(directory, "manifest.json")) as f:
            self.manifest = json.load(f)
        self.dir = directory
        self.fields = []
        for fld in self.manifest["schema"]:
            dtype = np.dtype(_NP[fld["dtype"]])
            shape = tuple(fld.get("shape", []))
            self.fields.append((fld["name"], dtype, shape,
                                int(dtype.itemsize * int(np.prod(shape, dtype=np.int64)))))
        self.shards = self.manifest["shards"]
        self.first = []
        total = 0
        for s in self.shards:
            self.first.append(total)
            total += int(s["samples"])
        self.samples = total
        self.index = {}  # shard -> list of index entries, read once (from the footer)
        lib = ctypes.util.find_library("lz4") or "liblz4.so.1"
        self.lz4 = ctypes.CDLL(lib)
        self.lz4.LZ4_decompress_safe.restype = ctypes.c_int
        self.lz4.LZ4_decompress_safe.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int,
                                                 ctypes.c_int]

    def __len__(self):
        return self.samples

    def _entries(self, shard, fd):
        if shard not in self.index:
            size = os.fstat(fd).st_size
            footer = os.pread(fd, 32, size - 32)
            index_offset, count = struct.unpack_from("<QI", footer)
            raw = os.pread(fd, 48 * count, index_offset)
            self.index[shard] = [struct.unpack_from("<QQIIIB", raw, 48 * i) for i in range(count)]
        return self.index[shard]

    def __getitem__(self, i):
        shard = bisect.bisect_right(self.first, i) - 1
        k = i - self.first[shard]
        chunk = k // int(self.shards[shard]["chunk_samples"])
        fd = os.open(os.path.join(self.dir, self.shards[shard]["file"]), os.O_RDONLY)
        try:
            offset, first, stored_len, raw_len, count, codec = self._entries(shard, fd)[chunk]
            stored = os.pread(fd, stored_len, offset)
        finally:
            os.close(fd)
        if codec == 1:
            out = ctypes.create_string_buffer(raw_len)
            n = self.lz4.LZ4_decompress_safe(stored, out, stored_len, raw_len)
            if n != raw_len:
                raise IOError("lz4 decode failed in shard %d chunk %d" % (shard, chunk))
            raw = out.raw
        else:
            raw = stored
        j = k - first
        sample, off = {}, 0
        for name, dtype, shape, nbytes in self.fields:  # chunks are field-major
            a = np.frombuffer(raw, dtype=dtype, count=nbytes // dtype.itemsize,
                              offset=off + j * nbytes)
            sample[name] = torch.from_numpy(a.reshape(shape).copy())
            off += count * nbytes
        return sample


class SamplePreadDataset(ShardFileDataset):
    """The stronger baseline, on an uncompressed copy: every __getitem__ reads exactly the
    sample's bytes, one os.preadv per field straight into the output array (chunks are
    field-major, so a sample's fields lie apart), from shard files opened once per process."""

    def __init__(self, directory):
        super().__init__(directory)
        self.fds = {}
        self.pid = os.getpid()

    def _fd(self, shard):
        if self.pid != os.getpid():  # a DataLoader worker: its own descriptors
            self.fds, self.pid = {}, os.getpid()
        fd = self.fds.get(shard)
        if fd is None:
            fd = os.open(os.path.join(self.dir, self.shards[shard]["file"]), os.O_RDONLY)
            self.fds[shard] = fd
        return fd

    def __getitem__(self, i):
        shard = bisect.bisect_right(self.first, i) - 1
        k = i - self.first[shard]
        chunk = k // int(self.shards[shard]["chunk_samples"])
        fd = self._fd(shard)
        offset, first, stored_len, raw_len, count, codec = self._entries(shard, fd)[chunk]
        if codec != 0:
            raise IOError("--mode pread needs an uncompressed dataset (shard %d chunk %d is "
                          "compressed)" % (shard, chunk))
        j = k - first
        sample, off = {}, 0
        for name, dtype, shape, nbytes in self.fields:
            a = np.empty(shape, dtype=dtype)
            if os.preadv(fd, [memoryview(a).cast("B")], offset + off + j * nbytes) != nbytes:
                raise IOError("short read in shard %d chunk %d" % (shard, chunk))
            sample[name] = torch.from_numpy(a)
            off += count * nbytes
        return sample


def evict_page_cache(directory):
    """Asks the kernel to drop this dataset's files (and only them) from the page cache: fsync,
    then posix_fadvise(POSIX_FADV_DONTNEED) on each. Returns a note for the summary."""
    names = sorted(os.listdir(directory))
    done = 0
    for name in names:
        try:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            done += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return "%d files evicted from the page cache (fadvise DONTNEED)" % done


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["dscache", "files", "pread"], required=True)
    p.add_argument("--servers", default=None)
    p.add_argument("--dataset", required=True)
    p.add_argument("--dir", required=True)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--compute-ms", type=float, default=5.0)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu",
                   help="cpu (default), cuda, cuda:N, or auto (cuda:0 when torch sees a GPU)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--torch-dataloader", action="store_true",
                   help="--mode dscache: feed through DataLoader(dscache.torch.Dataset(...), "
                        "batch_size=None) instead of iterating dscache.Loader")
    args = p.parse_args()
    if args.device == "auto":
        args.device = "cuda:0" if torch.cuda.is_available() else "cpu"
    if args.device != "cpu" and not args.device.startswith("cuda"):
        p.error("--device is cpu, cuda, cuda:N or auto, not %r" % args.device)
    if args.device.startswith("cuda"):
        if not torch.cuda.is_available():
            p.error("--device %s: torch sees no CUDA device" % args.device)
        if args.device == "cuda":
            args.device = "cuda:0"
    dev = torch.device(args.device)
    on_gpu = dev.type == "cuda"

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    note = ""
    if args.mode == "dscache":
        import dscache
        if not args.servers:
            p.error("--mode dscache needs --servers")
        if args.torch_dataloader:
            import dscache.torch
            tds = dscache.torch.Dataset(servers=args.servers, dataset=args.dataset,
                                        batch_size=args.batch_size, seed=args.seed,
                                        drop_last=True, device=dev)
            loader = tds.loader
            dl = torch.utils.data.DataLoader(tds, batch_size=None, num_workers=0)
        else:
            loader = dscache.Loader(servers=args.servers, dataset=args.dataset,
                                    batch_size=args.batch_size, seed=args.seed, output="torch",
                                    drop_last=True, device=args.device)
            dl = loader

        def batches():
            epoch = 0
            while True:
                loader.set_epoch(epoch)
                for b in dl:
                    yield b
                epoch += 1
    else:
        ds = ShardFileDataset(args.dir) if args.mode == "files" else SamplePreadDataset(args.dir)
        note = evict_page_cache(args.dir)
        dl = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=True,
                                         num_workers=args.workers, drop_last=True,
                                         persistent_workers=args.workers > 0, pin_memory=on_gpu)

        def batches():
            while True:
                for b in dl:
                    if on_gpu:
                        b = {k: v.to(dev, non_blocking=True) for k, v in b.items()}
                    yield b

    image_key, label_key = "image", "label"
    model = None
    opt = None
    losses = []
    it = batches()
    stall = compute = 0.0
    samples = 0
    # Step 0 (start-up, first fetches) is not measured.
    for step in range(args.steps + 1):
        t0 = time.perf_counter()
        batch = next(it)
        t1 = time.perf_counter()
        x = batch[image_key].reshape(batch[image_key].shape[0], -1).float() / 255.0
        y = batch[label_key].long() % 10
        if model is None:
            # Small on purpose: the accelerator's work is the --compute-ms sleep, so the
            # host's share of a step stays close to what a GPU trainer leaves it.
            model = torch.nn.Linear(x.shape[1], 10).to(dev)
            opt = torch.optim.SGD(model.parameters(), lr=0.05)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        del batch, x, y
        if args.compute_ms > 0:
            time.sleep(args.compute_ms / 1000.0)  # the accelerator's share of the step
        t2 = time.perf_counter()
        if step > 0:
            stall += t1 - t0
            compute += t2 - t1
            samples += args.batch_size
    wall = stall + compute
    labels = {
        "dscache": ("DataLoader(dscache.torch.Dataset) (dscached over TCP, lz4 chunks)"
                    if args.torch_dataloader else "dscache.Loader (dscached over TCP, lz4 chunks)"),
        "files": "files, naive: per sample, read + lz4-decode its whole chunk "
                 "(DataLoader, %d workers)" % args.workers,
        "pread": "files, per-sample pread of the sample's bytes from an uncompressed copy "
                 "(DataLoader, %d workers)" % args.workers,
    }
    result = {
        "mode": args.mode,
        "device": args.device,
        "label": labels[args.mode],
        "workers": args.workers,
        "steps": args.steps,
        "samples_per_s": samples / wall,
        "stall_pct": 100.0 * stall / wall,
        "step_ms": 1000.0 * wall / args.steps,
        "loss_first": losses[0],
        "loss_last": sum(losses[-10:]) / len(losses[-10:]),
        "note": note,
    }
    if args.mode == "dscache":
        st = loader.stats()
        result["loader_stall_pct"] = 100.0 * st["stall_fraction"]
        loader.close()
    if args.json:
        print(json.dumps(result))
    else:
        print("%-8s %6d steps  %9.0f samples/s  stall %5.1f%%  step %6.2f ms  loss %.3f -> %.3f %s"
              % (args.mode, args.steps, result["samples_per_s"], result["stall_pct"],
                 result["step_ms"], result["loss_first"], result["loss_last"],
                 ("(" + note + ")") if note else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
