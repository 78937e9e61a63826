"""What every engine over a llama.cpp model shares: the model, its name, the identity its answers depend on,
and the lock that keeps one request at a time on it (llama.cpp contexts are not thread-safe)."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from llama_cpp import Llama
from llama_cpp import __version__ as llama_cpp_version

from snapllm import __version__ as snapllm_version


class LoadedModel:
    """A model loaded in llama.cpp under the name clients send."""

    def __init__(self, llama: Llama, *, model_name: str, model_digest: str | None = None) -> None:
        self._llama = llama
        self._lock = threading.Lock()
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
