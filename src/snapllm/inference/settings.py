"""Settings of the inference function, read once from environment variables at init.

The engine's value classes (:mod:`snapllm.engine.settings`) declare the settings; each class here reads
one of them from its ``SNAPLLM_`` variables, which ``template.yaml`` sets from stack parameters::

    settings = InferenceSettings.from_env()
    settings.model.bucket, settings.loader.part_size, settings.engine.n_ctx
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic_settings import SettingsConfigDict

from snapllm.engine.settings import EngineSettings, LoaderSettings, LoaderVariables, ModelSource
from snapllm.environment import EnvironmentSettings
from snapllm.errors import ConfigurationError


class ModelEnvironment(ModelSource, EnvironmentSettings):
    """The model object's variables, ``SNAPLLM_MODEL_*``."""

    model_config = SettingsConfigDict(env_prefix="SNAPLLM_MODEL_")


class LoaderEnvironment(LoaderVariables, EnvironmentSettings):
    """The loader's variables, ``SNAPLLM_S3_*``."""

    model_config = SettingsConfigDict(env_prefix="SNAPLLM_S3_")

    def loader_settings(self) -> LoaderSettings:
        return LoaderSettings(**dict(self))


class EngineEnvironment(EngineSettings, EnvironmentSettings):
    """llama.cpp's and the generation's variables, ``SNAPLLM_*``."""


#: The inference function's variables, in the configuration page's order (the streaming function loads
#: its model from them too).
INFERENCE_ENVIRONMENT: tuple[type[EnvironmentSettings], ...] = (
    ModelEnvironment,
    LoaderEnvironment,
    EngineEnvironment,
)


@dataclass(frozen=True)
class InferenceSettings:
    """Everything the inference function reads from its environment."""

    model: ModelSource
    loader: LoaderSettings = field(default_factory=LoaderSettings)
    engine: EngineSettings = field(default_factory=EngineSettings)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> InferenceSettings:
        """The settings in ``env``; bad values raise one :class:`ConfigurationError` naming every variable."""
        read, errors = [], []
        for variables in INFERENCE_ENVIRONMENT:
            try:
                read.append(variables.from_env(env))
            except ConfigurationError as exc:
                errors.append(str(exc))
        if errors:
            raise ConfigurationError("; ".join(errors))
        model, loader, engine = read
        return cls(ModelSource(**dict(model)), LoaderSettings(**dict(loader)), EngineSettings(**dict(engine)))
