"""dscache ranks and devices: rank and world size from arguments, torch.distributed or the
environment; the device argument."""

import os
import sys
from typing import Any, Optional, Tuple

from ._errors import InvalidOption


def _env_int(name: str) -> Optional[int]:
    v = os.environ.get(name)
    if v is None or v.strip() == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError("environment variable %s=%r is not an integer" % (name, v)) from None


def _torch_dist() -> Any:
    """torch.distributed when torch is already imported and its process group initialised
    (torch is never imported here)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    except Exception:
        pass
    return None


def resolve_rank(rank: Optional[int] = None, world_size: Optional[int] = None,
                 ignore_rank_env: bool = False) -> Tuple[int, int, str]:
    """(rank, world_size, source): explicit arguments win; else torch.distributed's when it is
    initialised; else the RANK / WORLD_SIZE environment variables (torchrun, Slurm wrappers);
    else 0 / 1.

    An explicit rank or world_size that disagrees with an initialised torch.distributed (or,
    without it, with RANK / WORLD_SIZE) raises InvalidOption (a ValueError) naming both: such a
    process would read another rank's samples, or all of them (rank=0 copied from a
    single-process example onto every rank of a DDP job). ignore_rank_env=True takes the
    arguments as given, for a process meant to read on its own."""
    dist = _torch_dist()
    if dist is not None:
        env_rank, env_world, source = dist.get_rank(), dist.get_world_size(), "torch.distributed"
    else:
        env_rank, env_world, source = _env_int("RANK"), _env_int("WORLD_SIZE"), "environment"
    if not ignore_rank_env and (rank is not None or world_size is not None):
        bad = []
        if world_size is not None and env_world is not None and world_size != env_world:
            bad.append(("world_size", world_size, env_world))
        if rank is not None and env_rank is not None and rank != env_rank:
            bad.append(("rank", rank, env_rank))
        if bad:
            what = "WORLD_SIZE" if source == "environment" else "get_world_size()"
            rwhat = "RANK" if source == "environment" else "get_rank()"
            given = ", ".join("%s=%d" % (n, g) for n, g, _ in bad)
            where = "the environment" if source == "environment" else source
            says = ", ".join("%s=%d" % (what if n == "world_size" else rwhat, e)
                             for n, _, e in bad)
            if any(n == "world_size" for n, _, _ in bad):
                harm = ("the ranks would not split the dataset as the job's %d ranks should "
                        "(world_size=1 on every rank: each reads all of it)" % env_world)
            else:
                harm = ("this process would read rank %s's samples, which that rank reads too "
                        "(rank=%s copied onto every rank: each reads the same ones)"
                        % (rank, rank))
            raise InvalidOption(
                -22,
                "dscache: %s was given but %s has %s: %s. Leave rank and world_size unset to "
                "take them from %s, or pass ignore_rank_env=True if this process is meant to "
                "read as given" % (given, where, says, harm, where),
                "DSC_EINVAL")
    if world_size is not None:
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


def _parse_device(device: Any) -> int:
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
