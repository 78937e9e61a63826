"""A persistent ggml thread pool for a llama.cpp context, so a token does not start and join its threads.

    pool = CpuThreadPool(llama, threads=6)
    with pool.running(): ...    # one request's decodes; the workers sleep when it ends
    pool.close()                # detaches, then joins the threads

Binds ``llama_attach_threadpool`` through ctypes (llama-cpp-python does not); why: docs/architecture.md.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from typing import Any

import llama_cpp.llama_cpp as low_level
from llama_cpp import Llama

#: ggml's ``GGML_MAX_N_THREADS``: the size of the CPU mask in ``struct ggml_threadpool_params``.
_GGML_MAX_N_THREADS = 512
#: ggml's own polling level (``ggml_threadpool_params_default``), which llama-server also runs with.
DEFAULT_POLL = 50


class _ThreadPoolParams(ctypes.Structure):
    """``struct ggml_threadpool_params`` (ggml.h)."""

    _fields_ = (
        ("cpumask", ctypes.c_bool * _GGML_MAX_N_THREADS),
        ("n_threads", ctypes.c_int),
        ("prio", ctypes.c_int),
        ("poll", ctypes.c_uint32),
        ("strict_cpu", ctypes.c_bool),
        ("paused", ctypes.c_bool),
    )


def _bind(library: ctypes.CDLL, name: str, argtypes: tuple[Any, ...], restype: Any) -> Any:
    function = getattr(library, name)
    function.argtypes = argtypes
    function.restype = restype
    return function


# The libraries llama-cpp-python has loaded already (dlopen returns the same instance for the same file), by
# their sonames: a wheel also ships the unversioned names, the Lambda layer only what the loader needs.
_ggml_base = ctypes.CDLL(str(low_level._base_path / "libggml-base.so.0"))
_ggml_cpu = ctypes.CDLL(str(low_level._base_path / "libggml-cpu.so.0"))
_params_default = _bind(_ggml_base, "ggml_threadpool_params_default", (ctypes.c_int,), _ThreadPoolParams)
_pool_new = _bind(_ggml_cpu, "ggml_threadpool_new", (ctypes.POINTER(_ThreadPoolParams),), ctypes.c_void_p)
_pool_free = _bind(_ggml_cpu, "ggml_threadpool_free", (ctypes.c_void_p,), None)
_pool_pause = _bind(_ggml_cpu, "ggml_threadpool_pause", (ctypes.c_void_p,), None)
_attach = _bind(
    low_level._lib, "llama_attach_threadpool", (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p), None
)
_detach = _bind(low_level._lib, "llama_detach_threadpool", (ctypes.c_void_p,), None)


class CpuThreadPool:
    """ggml worker threads kept for the life of one llama.cpp context: ``threads`` for single-token
    decodes, and ``batch_threads`` (when they differ) for prompt batches."""

    def __init__(
        self, llama: Llama, *, threads: int, batch_threads: int | None = None, poll: int = DEFAULT_POLL
    ) -> None:
        # The model is kept until the pool is closed: detaching needs its context alive.
        self._llama = llama
        self._ctx = llama.ctx
        self.threads = threads
        self.batch_threads = batch_threads or threads
        self.poll = poll
        self._pools: tuple[int, ...] = ()
        self._pid = 0
        self._closed = False
        #: Stopped: requests decode on ggml's threads of their own until :meth:`start`.
        self._stopped = False
        #: Pools detached by :meth:`stop`, joined once a decode made the backend let go of them.
        self._detached: tuple[int, ...] = ()
        self._detached_pid = 0
        self._start()

    def _new(self, threads: int) -> int:
        params = _params_default(threads)
        params.poll = self.poll
        # Created paused: the workers sleep until the first decode wakes them.
        params.paused = True
        pool = _pool_new(ctypes.byref(params))
        if not pool:
            raise MemoryError(f"ggml could not create a pool of {threads} threads")
        return int(pool)

    def _start(self) -> None:
        single = self._new(self.threads)
        batch = self._new(self.batch_threads) if self.batch_threads != self.threads else single
        self._pools = (single,) if batch == single else (single, batch)
        self._pid = os.getpid()
        _attach(self._ctx, single, batch)

    @property
    def alive(self) -> bool:
        """Whether the pool's threads run in this process (not after a fork, not after :meth:`close`)."""
        return bool(self._pools) and self._pid == os.getpid()

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Around one request's decodes: the pool made live in this process (in a forked process, whose
        pools' threads stayed in the parent; not after :meth:`stop`), then paused (its workers asleep) when
        the request ends, however it ends."""
        if not self._stopped:
            self.start()
        try:
            yield
        finally:
            if self.alive:
                for pool in self._pools:
                    _pool_pause(pool)
            self._free_stopped()

    def start(self) -> None:
        """Start the pool's threads in this process, where they do not run (never after :meth:`close`)."""
        self._stopped = False
        if not self._closed and not self.alive:
            # A forked process's pools are its parent's: their memory is not freed, as freeing would join
            # threads that do not exist here (and the CPU backend pauses the last one at the next decode).
            self._start()

    def stop(self) -> None:
        """Detach the pool: the next request decodes on threads of its own, and its threads are joined
        after it, as ggml's CPU backend pauses a pool it was given until then (freeing it earlier would
        leave the backend a dangling pointer). :meth:`start` attaches a new pool."""
        self._stopped = True
        if self.alive:
            _detach(self._ctx)
            self._detached += self._pools
            self._detached_pid = self._pid
        self._pools = ()

    def _free_stopped(self) -> None:
        pools, self._detached = self._detached, ()
        if self._detached_pid != os.getpid():
            return  # forked before they were joined: their threads are the parent's
        for pool in pools:
            _pool_free(pool)

    def close(self) -> None:
        """Detach the pool and join its threads: the model decodes no more."""
        self._closed = True
        self.stop()
        self._free_stopped()
