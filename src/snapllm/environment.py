"""The bases of every settings class: plain values (:class:`Settings`) and their environment variables
(:class:`EnvironmentSettings`), both validated by pydantic.

    class EngineEnvironment(EngineSettings, EnvironmentSettings): ...
    EngineEnvironment.from_env({"SNAPLLM_N_CTX": "0"})              # ConfigurationError naming it

docs/architecture.md ("Settings") says how a setting is declared once and read from its variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError, from_json
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


class Settings(BaseModel):
    """Base of the settings value classes: frozen, validated, built from keyword arguments by field name
    (an alias names the field's environment variable, which only :class:`EnvironmentSettings` reads)."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,
        use_attribute_docstrings=True,
        validate_by_name=True,
        validate_by_alias=False,
    )


def _decode_json_text(value: Any) -> Any:
    if not isinstance(value, str | bytes):
        return value
    try:
        return from_json(value)
    except ValueError as exc:
        raise PydanticCustomError("json_invalid", "Invalid JSON: {error}", {"error": str(exc)}) from None


#: A structured field's value may come as JSON text, as its environment variable gives it:
#: ``routes: Annotated[dict[str, str], JSON_TEXT]``.
JSON_TEXT = BeforeValidator(_decode_json_text)


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
    """Base of the classes that read settings from the environment: ``SNAPLLM_`` variables, frozen, no
    ``.env`` or secrets. A subclass lists a :class:`Settings` class before this one, whose fields it reads;
    JSON values are decoded by the fields (:data:`JSON_TEXT`), so a bad one is named like any other."""

    model_config = SettingsConfigDict(
        env_prefix="SNAPLLM_",
        frozen=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
        validate_by_name=False,
        validate_by_alias=True,
        enable_decoding=False,
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
            # A default computed from another field is not called when that field failed: no error of its own.
            errors = [e for e in exc.errors(include_url=False) if e["type"] != "default_factory_not_called"]
            raise ConfigurationError("; ".join(map(cls._describe, errors))) from None

    @classmethod
    def variable_name(cls, field_name: str) -> str:
        """The environment variable of a field: its alias, or the prefix and its name in capitals."""
        alias = cls.model_fields[field_name].validation_alias
        return alias if isinstance(alias, str) else f"{cls.model_config['env_prefix']}{field_name}".upper()

    @classmethod
    def _describe(cls, error: ErrorDetails) -> str:
        """``SNAPLLM_N_CTX must be at least 16, got '8'``."""
        if not error["loc"]:  # a rule over several fields: its message names them
            return str(error.get("ctx", {}).get("error", error["msg"]))
        key, *path = error["loc"]  # an aliased field's key is already its variable
        variable = cls.variable_name(str(key)) if key in cls.model_fields else str(key)
        variable += "".join(f"[{part!r}]" for part in path)
        if error["type"] == "missing":
            return f"{variable} must be set"
        template = _PHRASES.get(error["type"])
        phrase = template.format(**error.get("ctx", {})) if template else error["msg"]
        return f"{variable} {phrase.replace('Input should be', 'must be')}, got {error['input']!r}"
