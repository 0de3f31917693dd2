"""dscache ranks and devices: rank and world size from arguments, torch.distributed or the
environment; the device argument."""

import os
import sys
import warnings

from ._logbridge import _log

def _env_int(name):
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError("environment variable %s=%r is not an integer" % (name, v)) from None


def _torch_dist():
    """torch.distributed when torch is already imported and its process group initialised
    (torch is never imported here)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    except Exception:
        pass
    return None


def resolve_rank(rank=None, world_size=None):
    """(rank, world_size, source): explicit arguments win; else torch.distributed's when it is
    initialised; else the RANK / WORLD_SIZE environment variables (torchrun, Slurm wrappers);
    else 0 / 1. Warns (warnings.warn and the "dscache" logger) when the environment says there
    are several ranks but world_size=1 was given: every rank would then read the whole
    dataset."""
    dist = _torch_dist()
    if dist is not None:
        env_rank, env_world, source = dist.get_rank(), dist.get_world_size(), "torch.distributed"
    else:
        env_rank, env_world, source = _env_int("RANK"), _env_int("WORLD_SIZE"), "environment"
    if world_size is not None:
        if world_size == 1 and env_world is not None and env_world > 1:
            msg = ("dscache: world_size=1 was given but %s says %d ranks: every rank will read "
                   "the whole dataset (leave world_size unset to take it from there)"
                   % (source, env_world))
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
            _log.warning("%s", msg)
        world, src_w = world_size, "argument"
    elif env_world is not None:
        world, src_w = env_world, source
    else:
        world, src_w = 1, "default"
    if rank is not None:
        r = rank
    elif env_rank is not None and world_size is None:
        r = env_rank
    elif env_rank is not None and env_world == world:
        r = env_rank
    else:
        r = 0
    if world < 1 or not 0 <= r < world:
        raise ValueError("rank %d / world_size %d (from %s): need 0 <= rank < world_size"
                         % (r, world, src_w))
    return r, world, src_w


def _parse_device(device):
    """-1 for the host, else the CUDA device index: "cuda:N"/torch.device("cuda", N) -> N;
    "cuda" -> torch's current device when torch has initialised CUDA, else LOCAL_RANK, else 0."""
    if device is None:
        return -1
    text = str(device)  # torch.device prints as "cpu", "cuda", "cuda:0"
    if text == "cpu":
        return -1
    if text.startswith("cuda:") and text[5:].isdigit():
        return int(text[5:])
    if text == "cuda":
        tc = getattr(sys.modules.get("torch"), "cuda", None)
        try:
            if tc is not None and tc.is_initialized():
                return int(tc.current_device())
        except Exception:
            pass
        local = _env_int("LOCAL_RANK")
        return local if local is not None else 0
    raise ValueError("device must be 'cpu', 'cuda', 'cuda:N' or a torch.device, not %r"
                     % (device,))
