"""Configuration: ``config.toml`` validated by one pydantic model per concern (``pipelines.config.sections``).

Every key can be overridden by an environment variable ``PIPELINES_<SECTION>__<KEY>`` (for example
``PIPELINES_BROKER__URL``); top-level keys by ``PIPELINES_<KEY>``. Nothing is read at import: call
[`load_settings`][pipelines.config.settings.load_settings] (the CLI and ``actors`` do).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError, field_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict, SettingsError

from pipelines.config.masking import mask_secrets
from pipelines.config.problems import ENV_PREFIX, explain, unparsable_variables
from pipelines.config.sections import (
    AppConfig,
    BrokerConfig,
    EncryptionConfig,
    LoggingConfig,
    MetricsConfig,
    ProfilesConfig,
    RetriesConfig,
    StoreConfig,
    TelemetryConfig,
    UiConfig,
    WorkerConfig,
)
from pipelines.errors import ConfigError
from pipelines.wire.naming import is_valid_namespace

#: Environment variable naming the config file; the default is ``./config.toml``.
CONFIG_PATH_ENV = "PIPELINES_CONFIG"
DEFAULT_CONFIG_PATH = Path("config.toml")


_read_environment: ContextVar[bool] = ContextVar("read_environment", default=True)


class Settings(BaseSettings):
    """The whole configuration, one section per concern."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", frozen=True)

    namespace: str = "pipelines"
    """The prefix of every exchange, queue and run-store key: one namespace per environment."""
    app: AppConfig = AppConfig()
    broker: BrokerConfig = BrokerConfig()
    store: StoreConfig = StoreConfig()
    retries: RetriesConfig = RetriesConfig()
    worker: WorkerConfig = WorkerConfig()
    profiles: ProfilesConfig = ProfilesConfig()
    encryption: EncryptionConfig = EncryptionConfig()
    logging: LoggingConfig = LoggingConfig()
    telemetry: TelemetryConfig = TelemetryConfig()
    metrics: MetricsConfig = MetricsConfig()
    ui: UiConfig = UiConfig()

    @field_validator("namespace")
    @classmethod
    def _namespace_word(cls, namespace: str) -> str:
        if not is_valid_namespace(namespace):
            raise ValueError("expected a lower-case word of letters, digits, '_' or '-' (at most 63), such as 'prod'")
        return namespace

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The file's values come in as init arguments; the environment overrides them, except when a
        # configuration already read is being changed on purpose (`with_overrides`).
        if not _read_environment.get():
            return (init_settings,)
        return (env_settings, init_settings)

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> Settings:
        """Validate ``values`` as a configuration, ignoring the environment (tests, embedded apps).

        Raises:
            ConfigError: As for [`load_settings`][pipelines.config.settings.load_settings].
        """
        return _validated(dict(values), source="values", use_env=False)

    def masked(self) -> dict[str, Any]:
        """The effective configuration with every credential in URLs, every key and the console token as ``***``."""
        masked: dict[str, Any] = mask_secrets(self.model_dump(mode="json"))
        masked["encryption"]["keys"] = ["***"] * len(self.encryption.keys)
        masked["ui"]["token"] = "***" if self.ui.token else ""
        return masked

    def with_overrides(self, **sections: Mapping[str, Any]) -> Settings:
        """A copy with some section keys replaced, validated like the file."""
        data = self.model_dump()
        for section, values in sections.items():
            if isinstance(data.get(section), dict):
                data[section] = {**data[section], **values}
            else:
                data[section] = values
        return _validated(data, source="overrides", use_env=False)


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Read and validate the configuration.

    Args:
        path: The TOML file; defaults to ``$PIPELINES_CONFIG`` or ``./config.toml``. A missing
            default file means "all defaults"; a missing explicit file is an error.

    Raises:
        ConfigError: One message naming the key, the bad value and the expected form.
    """
    explicit = path is not None or CONFIG_PATH_ENV in os.environ
    file = Path(path if path is not None else os.environ.get(CONFIG_PATH_ENV, DEFAULT_CONFIG_PATH))
    data: dict[str, Any] = {}
    if file.exists():
        try:
            data = tomllib.loads(file.read_text())
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{file} is not valid TOML: {e}.") from None
    elif explicit:
        fix = (
            "Give the path of an existing file (--config)."
            if path is not None
            else f"Point {CONFIG_PATH_ENV} at an existing file, or unset it to use ./{DEFAULT_CONFIG_PATH}."
        )
        raise ConfigError(f"Config file {file} does not exist. {fix}")
    return _validated(data, source=str(file), use_env=True)


def _validated(data: dict[str, Any], *, source: str, use_env: bool) -> Settings:
    if use_env:
        _reject_unknown_sections()
    token = _read_environment.set(use_env)
    try:
        return Settings(**data)
    except ValidationError as e:
        raise ConfigError(explain(e, source)) from None
    except SettingsError:
        # pydantic-settings could not parse an environment value of a structured key (a list, say).
        names = ", ".join(unparsable_variables()) or f"a {ENV_PREFIX}* variable"
        raise ConfigError(
            f"Invalid configuration: {names} is not JSON; list and table values in the environment must be, "
            "such as PIPELINES_BROKER__DELAY_TIERS_S='[1, 5, 30]'."
        ) from None
    finally:
        _read_environment.reset(token)


def _reject_unknown_sections() -> None:
    """A ``PIPELINES_<SECTION>__<KEY>`` variable whose section does not exist is a typo, not a setting.

    pydantic-settings reads only the variables of known sections, so ``PIPELINES_BROKR__URL`` would
    otherwise be ignored and the worker would quietly connect where the file says.
    """
    sections = {name for name, field in Settings.model_fields.items() if isinstance(field.default, BaseModel)}
    for name in sorted(os.environ):
        section, nested, _ = name.removeprefix(ENV_PREFIX).partition("__")
        if name.startswith(ENV_PREFIX) and nested and section.lower() not in sections:
            raise ConfigError(
                f"Invalid configuration: {name} names no section {section.lower()!r}. "
                f"Sections are {', '.join(sorted(sections))}; check its spelling or unset it."
            )
