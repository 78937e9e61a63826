"""What every engine over a llama.cpp model shares: the model, its name, the identity its answers depend on,
the lock that keeps one request at a time on it (llama.cpp contexts are not thread-safe), and the thread
pool its decodes run on."""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import llama_cpp.llama_cpp as low_level
from llama_cpp import Llama
from llama_cpp import __version__ as llama_cpp_version

from snapllm import __version__ as snapllm_version
from snapllm.engine.settings import EngineSettings, ValueCacheType
from snapllm.engine.threadpool import CpuThreadPool


def maps_weights(model_path: str, settings: EngineSettings) -> bool:
    """Whether llama.cpp maps the model file (its pages are the weights) rather than reading it into
    buffers of its own.

    A memfd (``/proc/self/fd/N``: the inference function's download) is read when repacking, so that the
    caller's closing it leaves one copy of every weight. A file on a filesystem is always mapped: its pages
    are the page cache's, shared and reclaimable, where reading would copy all of them into private memory
    (and, on a kernel whose page cache holds large folios, into 4 KiB pages that make decoding 5-10% slower).
    The repacked tensors are then copies beside the mapping's pages, which the kernel may drop.
    """
    if not settings.repack_weights:
        return True
    try:
        target = os.readlink(model_path)
    except OSError:  # not a link: a file on a filesystem
        return True
    return not target.startswith("/memfd:")


#: ggml's type ids (``enum ggml_type``) for the value cache types a setting names.
_GGML_TYPES: dict[ValueCacheType, int] = {"f16": low_level.GGML_TYPE_F16, "bf16": 30}


def attention_params(settings: EngineSettings) -> dict[str, Any]:
    """``Llama()``'s attention arguments: flash attention, and with it the value cache's type (keys f16)."""
    if not settings.flash_attention:
        return {"flash_attn": False}
    return {
        "flash_attn": True,
        "type_k": low_level.GGML_TYPE_F16,
        "type_v": _GGML_TYPES[settings.cache_type_v],
    }


#: ggml's switch for its tiled K-quant matrix kernel, which takes batches of 8 rows or more and rounds
#: otherwise than the kernel fewer rows run (docs/decoding.md, "One answer whatever the batch").
TILED_MATMUL_VARIABLE = "GGML_CPU_TILED_MM"


@contextlib.contextmanager
def model_params(settings: EngineSettings) -> Iterator[None]:
    """Set the model parameters that ``Llama()`` has no argument for, for the duration of one construction.

    ``use_extra_bufts`` lets llama.cpp repack the weights of some quant types (Q4_0, Q4_K, IQ4_NL) into
    the layout of the CPU's matrix kernels; ``Llama()`` always asks for llama.cpp's default (on). ggml's
    tiled K-quant kernel is turned off (it reads its switch once, at a process's first matrix product, so
    before any model loads), so that a K-quant weight multiplies a token's row alike in every batch.
    """
    os.environ[TILED_MATMUL_VARIABLE] = "0"
    original = low_level.llama_model_default_params

    def patched() -> Any:
        params = original()
        params.use_extra_bufts = settings.repack_weights
        return params

    low_level.llama_model_default_params = patched
    try:
        yield
    finally:
        low_level.llama_model_default_params = original


class LoadedModel:
    """A model loaded in llama.cpp under the name clients send."""

    def __init__(
        self,
        llama: Llama,
        *,
        model_name: str,
        model_digest: str | None = None,
        settings: EngineSettings | None = None,
    ) -> None:
        self._llama = llama
        self._lock = threading.Lock()
        settings = settings or EngineSettings()
        self._pool: CpuThreadPool | None = None
        if settings.thread_pool:
            # Created with the model; the runtime stops its threads before a snapshot and starts them again
            # in the restore's hook (docs/architecture.md).
            self._pool = CpuThreadPool(
                llama,
                threads=int(llama.n_threads),
                batch_threads=int(llama.n_threads_batch),
                poll=settings.thread_poll,
            )
            # An engine dropped without close() still joins its threads (the pool keeps the context alive
            # until then).
            weakref.finalize(self, self._pool.close)
        self._model_name = model_name
        # What the answers depend on: the model's bytes and the software that runs them.
        self._identity = (
            f"{model_digest or model_name}|llama-cpp-python {llama_cpp_version}|snapllm {snapllm_version}"
        )

    @property
    def model_name(self) -> str:
        return self._model_name

    @property
    def identity(self) -> str:
        """The model's digest (else name) and the versions of the software that runs it."""
        return self._identity

    @property
    def metadata(self) -> Mapping[str, str]:
        """The GGUF file's key-value metadata (``tokenizer.chat_template``, ``general.architecture``...)."""
        return self._llama.metadata

    @property
    def threads(self) -> int:
        return int(self._llama.n_threads)

    @property
    def thread_pool(self) -> CpuThreadPool | None:
        """The persistent threads decodes run on (None: llama.cpp starts threads for each decode)."""
        return self._pool

    @contextlib.contextmanager
    def _running(self) -> Iterator[None]:
        """One request on the model: the lock held, and the thread pool live, then asleep afterwards."""
        with self._lock:
            if self._pool is None:
                yield
                return
            with self._pool.running():
                yield

    def stop_threads(self) -> None:
        """Detach the thread pool: the next request decodes on threads of its own, and the pool's threads
        are joined after it, until :meth:`start_threads`."""
        with self._lock:
            if self._pool is not None:
                self._pool.stop()

    def start_threads(self) -> None:
        """Start the thread pool's threads now, so that no request waits for them."""
        with self._lock:
            if self._pool is not None:
                self._pool.start()

    def close(self) -> None:
        """Join the thread pool's threads; the model is not used afterwards."""
        with self._lock:
            if self._pool is not None:
                self._pool.close()
