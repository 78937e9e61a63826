"""The shared base of every function's settings: environment variables read and validated by pydantic.

Each function has one :class:`EnvironmentSettings` subclass that declares its variables: a field per
variable (named after it, less the ``SNAPLLM_`` prefix, or with an alias for another name such as
``POWERTOOLS_SERVICE_NAME``), its default, its range as ``Field`` constraints and a ``description``
(which is also the README's configuration table, :mod:`snapllm.settings_doc`)::

    class StreamingEnvironment(EnvironmentSettings):
        max_body_bytes: int = Field(256 * 1024, ge=1, description="Largest request body accepted.")

    StreamingEnvironment.from_env()                              # os.environ
    StreamingEnvironment.from_env({"SNAPLLM_MAX_BODY_BYTES": "0"})  # ConfigurationError naming it

As the functions always read them: surrounding whitespace is dropped and an empty value means the
default (``template.yaml`` passes an empty stack parameter through as ``""``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Self

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources.utils import parse_env_vars

from snapllm.errors import ConfigurationError

# How a rejected value is described, by pydantic error type; ``{ge}`` and the like come from its context.
_PHRASES = {
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "int_type": "must be an integer",
    "float_parsing": "must be a number",
    "float_type": "must be a number",
    "finite_number": "must be a finite number",
    "bool_parsing": "must be true or false",
    "bool_type": "must be true or false",
    "greater_than_equal": "must be at least {ge}",
    "greater_than": "must be more than {gt}",
    "less_than_equal": "must be at most {le}",
    "less_than": "must be less than {lt}",
    "string_too_short": "must not be empty",
    "json_invalid": "is not valid JSON ({error})",
    "dict_type": "must be a JSON object",
    "value_error": "{error}",
}


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over any mapping: ``os.environ`` or a test's ``dict``."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # The hook EnvSettingsSource reads os.environ in (DotEnvSettingsSource overrides it the same way).
        values = {name: value.strip() for name, value in self._environ.items()}
        present = {name: value for name, value in values.items() if value}
        return parse_env_vars(present, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


@dataclass(frozen=True)
class Variable:
    """One environment variable as the documentation shows it."""

    name: str
    default: str
    description: str


class EnvironmentSettings(BaseSettings):
    """Base of the functions' settings classes: ``SNAPLLM_`` variables, frozen, no ``.env`` or secrets."""

    model_config = SettingsConfigDict(env_prefix="SNAPLLM_", frozen=True, allow_inf_nan=False)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Keyword arguments, then the process environment: Lambda has neither ``.env`` files nor secrets."""
        return init_settings, _MappingEnvSource(settings_cls, os.environ)

    @classmethod
    def from_env(cls, env: Mapping[str, str] = os.environ) -> Self:
        """The settings in ``env``; a bad value raises :class:`ConfigurationError` naming the variable."""
        try:
            return cls(_build_sources=((_MappingEnvSource(cls, env),), {}))
        except ValidationError as exc:
            raise ConfigurationError(cls.describe_errors(exc)) from None

    @classmethod
    def variable_name(cls, field_name: str) -> str:
        """The environment variable of a field: its alias, or the prefix and its name in capitals."""
        alias = cls.model_fields[field_name].validation_alias
        if isinstance(alias, str):
            return alias
        return f"{cls.model_config.get('env_prefix', '')}{field_name}".upper()

    @classmethod
    def variables(cls) -> list[Variable]:
        """Every variable the class reads, with its default and description, in declaration order."""
        return [
            Variable(cls.variable_name(name), _default_text(field), field.description or "")
            for name, field in cls.model_fields.items()
        ]

    @classmethod
    def describe_errors(cls, exc: ValidationError) -> str:
        """One sentence per rejected value, each naming the variable: ``SNAPLLM_N_CTX must be ...``."""
        names = {name: cls.variable_name(name) for name in cls.model_fields}
        names.update({variable: variable for variable in names.values()})  # an alias is its own loc
        return "; ".join(_describe(error, names) for error in exc.errors(include_url=False))


def _describe(error: ErrorDetails, names: Mapping[str, str]) -> str:
    key, *path = error["loc"]
    variable = names.get(str(key), str(key)) + "".join(f"[{part!r}]" for part in path)
    if error["type"] == "missing":
        return f"{variable} must be set"
    template = _PHRASES.get(error["type"])
    phrase = template.format(**error.get("ctx", {})) if template else f"is invalid ({error['msg']})"
    return f"{variable} {phrase}, got {error['input']!r}"


def _default_text(field: FieldInfo) -> str:
    """The default as the documentation shows it; ``json_schema_extra={"unset": ...}`` says what no value
    means where the default is None (``key's file name``) or the variable is required."""
    extra = field.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("unset"), str):
        return str(extra["unset"])
    if field.is_required():
        return "required"
    default = field.get_default(call_default_factory=True)
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, float) and default.is_integer():
        return f"`{int(default)}`"
    return f"`{default}`"
