"""dscache's type names for annotations (no run-time use): a batch, the servers and device
arguments, a saved state. Array values are numpy arrays, or torch tensors with output="torch"
(torch is not a dependency, so a value is typed Any)."""

from typing import Any, Dict, List, Tuple, Union

# A batch: field name -> numpy array [B, ...] or torch tensor (plus "__index__", "*_offsets",
# "*_lengths", ... as the loader documents).
Batch = Dict[str, Any]
# "HOST:PORT,HOST:PORT" (also "dns:NAME:PORT", "file:PATH") or a list of "HOST:PORT"; None where
# the argument may be left out.
Servers = Union[str, List[str], Tuple[str, ...], None]
# "cpu", "cuda", "cuda:N", a torch.device, or None (the host).
Device = Union[str, Any, None]
# state_dict(): a plain dict of strings and numbers (torch.save keeps it).
State = Dict[str, Any]
# stats(): figures by name (numbers, strings, nested dicts).
Stats = Dict[str, Any]
