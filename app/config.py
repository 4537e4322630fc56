"""One settings class, read from the environment and `.env`."""

from __future__ import annotations

import ipaddress
from enum import StrEnum
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
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

    Every field is documented in docs/configuration.md's settings table (a test
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
    # A stalled network or database must answer 503 in bounded time, not hang every request.
    db_connect_timeout: int = Field(
        10, ge=1, le=600, description="seconds to wait for a new database connection"
    )
    db_statement_timeout: float = Field(
        30,
        ge=0,
        le=86_400,
        description="seconds a web request's SQL statement may run (PostgreSQL; 0: no limit); "
        "the worker and migrations have none",
    )
    db_pool_timeout: float = Field(
        10, ge=0, le=600, description="seconds a request waits for a free pooled connection"
    )
    db_tcp_timeout: int = Field(
        60,
        ge=10,
        le=3600,
        description="seconds after which a silent database connection counts as lost "
        "(TCP keepalives and tcp_user_timeout; PostgreSQL)",
    )
    enrol_per_address_per_hour: int = Field(
        20, ge=0, description="new Prolific/MTurk identities per client address per study per hour"
    )
    enrol_per_study_per_minute: int = Field(
        300, ge=0, description="new Prolific/MTurk identities per study per minute (all addresses)"
    )
    log_level: str = Field("info", description="uvicorn and application log level")
    trusted_proxies: str = Field(
        "",
        description="comma-separated addresses or CIDRs of reverse proxies whose "
        "X-Forwarded-For is believed (empty: nobody's)",
    )
    # Prolific (app.crowd.platforms.prolific). The token is a secret: SecretStr keeps it out
    # of reprs, logs and audit details.
    prolific_api_token: SecretStr | None = Field(
        None, description="Prolific API token (Authorization: Token ...); secret"
    )
    prolific_api_url: str = Field(
        "https://api.prolific.com/api/v1/", description="Prolific REST API base URL"
    )
    prolific_workspace_id: str | None = Field(
        None, description="Prolific workspace whose balance is shown (none: no balance)"
    )
    prolific_fee_rate: float = Field(
        0.428,
        ge=0,
        le=2,
        description="Prolific's platform fee as a share of rewards and bonuses, for cost "
        "estimates (0.428 standard; 0.333 for verified academic or non-profit workspaces)",
    )
    # Mechanical Turk (app.crowd.platforms.mturk). Credentials come from the usual AWS chain, never
    # from here. Production moves real money, so it is off unless set.
    mturk_production: bool = Field(
        False, description="allow MTurk's production endpoint (real money); off: sandbox only"
    )
    mturk_endpoint_url: str | None = Field(
        None,
        description="an MTurk-compatible requester endpoint used instead of AWS's sandbox "
        "or production one (a stand-in, a reproduction)",
    )
    mturk_retry_mode: Literal["standard", "adaptive"] = Field(
        "standard", description="botocore retry mode for throttling: standard or adaptive"
    )
    mturk_max_attempts: int = Field(
        5, ge=1, le=20, description="attempts per MTurk call, the first included"
    )
    crowd_calls_per_second: float = Field(
        2.0,
        gt=0,
        le=100,
        description="platform calls per second when publishing or paying in bulk",
    )

    @field_validator("trusted_proxies")
    @classmethod
    def _proxy_addresses(cls, value: str) -> str:
        entries = [e.strip() for e in value.split(",") if e.strip()]
        for entry in entries:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(
                    f"EBC_TRUSTED_PROXIES: {entry!r} is not an IP address or CIDR"
                ) from None
        return ",".join(entries)

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
