"""dscache logging: the C library's log lines go to the Python logger "dscache"."""

import logging
import os
import sys
import threading
import warnings
from types import FrameType
from typing import Deque, Dict, Optional

from ._capi import _LOG_FN

_log = logging.getLogger("dscache")
_log.addHandler(logging.NullHandler())  # quiet unless the application configures logging

# One callback for every loader, alive as long as the module; log_ctx is a key into _sinks
# (the loader's last error lines, for exception messages). The library calls it from its own
# threads too: ctypes takes the GIL for the call, logging and deque.append are thread-safe.

_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}
_ENV_LEVELS = {"error": 0, "warn": 1, "warning": 1, "info": 2, "debug": 3}
_sinks: Dict[int, Deque[str]] = {}
_sink_ids = iter(range(1, 1 << 62))
_sinks_lock = threading.Lock()


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


def _warn(text: str) -> None:
    """A RuntimeWarning attributed to the caller's line: the first frame outside this package
    (the user's Loader(...) or for-loop), not dscache's own. From a library thread, which has
    no Python caller, it stays with the callback."""
    frame: Optional[FrameType]
    level, frame = 1, sys._getframe(0)
    while frame is not None and os.path.dirname(
            os.path.abspath(frame.f_code.co_filename)) == _PACKAGE_DIR:
        frame, level = frame.f_back, level + 1
    warnings.warn(text, RuntimeWarning, stacklevel=level if frame is not None else 2)


@_LOG_FN
def _on_log(ctx: Optional[int], level: int, message: Optional[bytes]) -> None:
    text = message.decode(errors="replace") if message else ""
    if level == 1 and text.startswith("loader: replicas "):
        # Raised in the thread that creates the loader (the check runs inside create).
        _warn("dscache: " + text)
    if level == 0:
        sink = _sinks.get(ctx or 0)
        if sink is not None:
            sink.append(text)
    if level == 1 and text.startswith("loader: device=cuda: nvJPEG"):
        # Said at create (or by a decode thread): images decode on the host instead of the GPU.
        _warn("dscache: " + text)
    if level == 1 and text.startswith("loader: fallback_path: "):
        # Said once per loader, by the thread that routes the chunk: files instead of servers.
        _warn("dscache: " + text)
    if level == 1 and ("too small for the shuffle window" in text
                       or text.startswith("loader: drop_last: ")):
        # Said once, at create: chunks would be fetched several times per epoch.
        _warn(text)
    _log.log(_LEVELS.get(level, logging.DEBUG), "%s", text)


_stderr_handler: Optional[logging.Handler] = None


def _has_handler(logger: Optional[logging.Logger]) -> bool:
    while logger is not None:
        if any(not isinstance(h, logging.NullHandler) for h in logger.handlers):
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


def _c_log_level() -> int:
    """The C library's log_level for the "dscache" logger's effective level, after applying
    DSCACHE_LOG (which the library applies to a callback's level too)."""
    global _stderr_handler
    env = os.environ.get("DSCACHE_LOG", "").strip().lower()
    if env:
        lvl = _ENV_LEVELS.get(env, 1)
        if _log.level == logging.NOTSET or _log.level > _LEVELS[lvl]:
            _log.setLevel(_LEVELS[lvl])
        if _stderr_handler is None and not _has_handler(_log):
            # As the library does without a callback: DSCACHE_LOG alone prints to stderr.
            _stderr_handler = logging.StreamHandler(sys.stderr)
            _stderr_handler.setFormatter(logging.Formatter("dscache %(levelname)s: %(message)s"))
            _log.addHandler(_stderr_handler)
    eff = _log.getEffectiveLevel()
    return 3 if eff <= logging.DEBUG else 2 if eff <= logging.INFO else \
        1 if eff <= logging.WARNING else 0
