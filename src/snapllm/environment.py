"""The base of every function's settings: environment variables read and validated by pydantic-settings.

A subclass declares one field per variable, named after it less ``SNAPLLM_`` (or aliased, as
``POWERTOOLS_SERVICE_NAME``), with its default and range; the docstring under the field is its
``description``, which is also the docs' configuration table's (:mod:`snapllm_dev.settings_doc`)::

    StreamingEnvironment.from_env()                                 # os.environ
    StreamingEnvironment.from_env({"SNAPLLM_MAX_BODY_BYTES": "0"})  # ConfigurationError naming it

Values are stripped and an empty one means the default: ``template.yaml`` passes an empty stack
parameter through as ``""``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Self

from pydantic import ValidationError
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from snapllm.errors import ConfigurationError

# What a rejected value must be where pydantic's words would not do; its other messages stay, with
# "Input should be less than 30" read as "must be less than 30".
_PHRASES = {
    "int_parsing": "must be an integer",
    "float_parsing": "must be a number",
    "bool_parsing": "must be true or false",
    "greater_than_equal": "must be at least {ge}",
    "string_too_short": "must not be empty",
    "json_invalid": "is not valid JSON ({error})",
    "value_error": "{error}",
}


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over any mapping, values stripped and blank ones dropped."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # The hook EnvSettingsSource reads os.environ in (DotEnvSettingsSource overrides it the same way).
        present = {name: value.strip() for name, value in self._environ.items() if value.strip()}
        return parse_env_vars(present, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


class EnvironmentSettings(BaseSettings):
    """Base of the functions' settings classes: ``SNAPLLM_`` variables, frozen, no ``.env`` or secrets."""

    model_config = SettingsConfigDict(
        env_prefix="SNAPLLM_", frozen=True, allow_inf_nan=False, use_attribute_docstrings=True
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        **_: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Keyword arguments, then the process environment: Lambda has neither .env files nor secrets.
        return init_settings, _MappingEnvSource(settings_cls, os.environ)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Self:
        """The settings in ``env``; bad values raise one :class:`ConfigurationError` naming each variable."""
        try:
            return cls(_build_sources=((_MappingEnvSource(cls, env),), {}))
        except ValidationError as exc:
            raise ConfigurationError("; ".join(map(cls._describe, exc.errors(include_url=False)))) from None

    @classmethod
    def variable_name(cls, field_name: str) -> str:
        """The environment variable of a field: its alias, or the prefix and its name in capitals."""
        alias = cls.model_fields[field_name].validation_alias
        return alias if isinstance(alias, str) else f"{cls.model_config['env_prefix']}{field_name}".upper()

    @classmethod
    def _describe(cls, error: ErrorDetails) -> str:
        """``SNAPLLM_N_CTX must be at least 16, got '8'``."""
        key, *path = error["loc"]  # an aliased field's key is already its variable
        variable = cls.variable_name(str(key)) if key in cls.model_fields else str(key)
        variable += "".join(f"[{part!r}]" for part in path)
        if error["type"] == "missing":
            return f"{variable} must be set"
        template = _PHRASES.get(error["type"])
        phrase = template.format(**error.get("ctx", {})) if template else error["msg"]
        return f"{variable} {phrase.replace('Input should be', 'must be')}, got {error['input']!r}"
