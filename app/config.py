"""One settings class, read from the environment and `.env`."""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property
from pathlib import Path

from pydantic import AliasChoices, Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

DEV_SECRET_KEY = "dev-insecure-secret-key-change-me"
# The source checkout (README, tests, benchmarks): not part of an installed wheel.
ROOT = Path(__file__).resolve().parent.parent
# Templates, static files and migrations ship inside the package and are found through it.
PACKAGE = Path(__file__).resolve().parent


class Environment(StrEnum):
    development = "development"
    test = "test"
    production = "production"


class Settings(BaseSettings):
    """Configuration of the web service, the worker and the CLI.

    Every field is documented in the README's configuration table (a test
    checks this). Environment variables carry the `EBC_` prefix, except
    `DATABASE_URL`, which is also accepted bare as most platforms set it.
    """

    model_config = SettingsConfigDict(
        env_prefix="EBC_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    env: Environment = Field(Environment.development, description="development, test or production")
    database_url: str = Field(
        "sqlite:///./var/ebc.db",
        validation_alias=AliasChoices("EBC_DATABASE_URL", "DATABASE_URL"),
        description="SQLAlchemy URL; postgresql+psycopg://user@host/db in production",
    )
    secret_key: str = Field(
        DEV_SECRET_KEY, description="signs sessions and invite links; must be set in production"
    )
    base_url: str = Field(
        "http://127.0.0.1:8000", description="public URL, used in invite links and MTurk pages"
    )
    data_dir: Path = Field(Path("var"), description="local state: SQLite file, demo model, caches")
    session_max_age: int = Field(14 * 24 * 3600, description="researcher login lifetime, seconds")
    db_pool_size: int = Field(10, description="connections per web process (PostgreSQL)")
    log_level: str = Field("info", description="uvicorn and application log level")

    @model_validator(mode="after")
    def _refuse_dev_secrets_in_production(self) -> Settings:
        if self.env is Environment.production:
            if self.secret_key == DEV_SECRET_KEY or len(self.secret_key) < 32:
                raise ValueError(
                    "EBC_SECRET_KEY must be set to a random value of at least 32 characters "
                    "when EBC_ENV=production (e.g. `python -c 'import secrets; "
                    "print(secrets.token_urlsafe(48))'`)"
                )
            if "database_url" not in self.model_fields_set:
                raise ValueError("DATABASE_URL must be set explicitly when EBC_ENV=production")
        return self

    @cached_property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")
