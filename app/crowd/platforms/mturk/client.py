"""The boto3 client of the MTurk requester API: endpoints, retries, errors.

One `boto3.client("mturk", region_name="us-east-1", endpoint_url=...)` per provider: the
sandbox requester endpoint by default, production only when the caller says so, or any
endpoint that speaks the MTurk requester API (a stand-in in the tests). Never
`region_name="sandbox"`: it signs with the wrong scope. Credentials come from the usual
AWS chain (environment, shared files, instance role), never from our settings.
Throttling is retried by botocore (standard or adaptive mode; `RateExceeded`, which
botocore does not know, by a handler of our own). Every failure becomes a `CrowdError`
(`crowd_error`).
"""

from __future__ import annotations

import random
from typing import Any
from urllib.parse import urlsplit

from app.crowd.base import CrowdError

REGION = "us-east-1"
SANDBOX_ENDPOINT = "https://mturk-requester-sandbox.us-east-1.amazonaws.com"
PRODUCTION_ENDPOINT = "https://mturk-requester.us-east-1.amazonaws.com"
ENDPOINTS = {"sandbox": SANDBOX_ENDPOINT, "production": PRODUCTION_ENDPOINT}
THROTTLE_CODES = frozenset({"RateExceeded", "ThrottlingException", "Throttling"})


def moves_real_money(endpoint_url: str | None) -> bool:
    """Whether an endpoint URL is MTurk production: any AWS host but the sandbox's."""
    if not endpoint_url:
        return False
    host = (urlsplit(endpoint_url.strip()).hostname or "").lower().rstrip(".")
    sandbox = urlsplit(SANDBOX_ENDPOINT).hostname
    return host != sandbox and (host == "amazonaws.com" or host.endswith(".amazonaws.com"))


def make_client(
    environment: str = "sandbox",
    *,
    endpoint_url: str | None = None,
    max_attempts: int = 5,
    retry_mode: str = "standard",
    timeout_s: float = 30,
):
    """A boto3 MTurk client for `environment`, or for `endpoint_url` when given.

    botocore retries throttling (`ThrottlingException`) and transient errors in
    `retry_mode` ("standard" or "adaptive", which also paces requests client-side);
    `RateExceeded`, an MTurk code botocore does not list, gets the same treatment from
    `_retry_rate_exceeded`.
    """
    import boto3
    from botocore.config import Config

    if environment not in ENDPOINTS:
        raise CrowdError(f"unknown MTurk environment {environment!r}: sandbox or production")
    if retry_mode not in ("standard", "adaptive"):
        raise CrowdError(f"retry mode {retry_mode!r}: standard or adaptive")
    config = Config(
        retries={"mode": retry_mode, "total_max_attempts": max_attempts},
        connect_timeout=timeout_s,
        read_timeout=timeout_s,
    )
    # A session of its own: the default session caches the credentials it found first.
    client = boto3.session.Session().client(
        "mturk",
        region_name=REGION,
        endpoint_url=endpoint_url or ENDPOINTS[environment],
        config=config,
    )
    client.meta.events.register("needs-retry.mturk", _RateExceededRetry(max_attempts).needs_retry)
    return client


class _RateExceededRetry:
    """Retry MTurk's `RateExceeded` like botocore retries `ThrottlingException`:
    exponential backoff with full jitter, up to `max_attempts` attempts in all."""

    def __init__(self, max_attempts: int, base_s: float = 1.0, cap_s: float = 20.0) -> None:
        self.max_attempts = max_attempts
        self.base_s = base_s
        self.cap_s = cap_s

    def needs_retry(self, response=None, attempts: int = 1, **_: Any) -> float | None:
        if response is None or attempts >= self.max_attempts:
            return None
        error = (response[1] or {}).get("Error", {})
        code = error.get("Code", "")
        turk = str((response[1] or {}).get("TurkErrorCode", ""))
        if code == "RateExceeded" or turk.endswith("RateExceeded"):
            return random.random() * min(self.cap_s, self.base_s * 2 ** (attempts - 1))
        return None


def crowd_error(exc: Exception, operation: str) -> CrowdError:
    """botocore's exception -> our CrowdError, with MTurk's own error code when it gave one.

    MTurk's refusal (a `ClientError` with a 4xx) did nothing. Anything else may have taken
    effect (`maybe_done`): a read timeout or a dropped connection after MTurk did the work,
    or a server fault (5xx), possibly after botocore's own retries; the ledger then treats
    the call's outcome as unknown (a bonus is checked with `ListBonusPayments` before it is
    made again). Only what never left this process (no credentials, bad parameters) is not.
    """
    from botocore.exceptions import ClientError, NoCredentialsError, ParamValidationError

    if isinstance(exc, NoCredentialsError):
        return CrowdError(
            "no AWS credentials: give them through the usual AWS chain "
            "(AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE or ~/.aws/credentials)"
        )
    if isinstance(exc, ParamValidationError):
        return CrowdError(f"MTurk {operation}: {exc}")
    if isinstance(exc, ClientError):
        body = exc.response or {}
        error = body.get("Error", {})
        code = body.get("TurkErrorCode") or error.get("TurkErrorCode") or error.get("Code")
        message = error.get("Message") or str(exc)
        status = int((body.get("ResponseMetadata") or {}).get("HTTPStatusCode") or 400)
        return CrowdError(
            f"MTurk {operation}: {message}",
            code=code,
            retryable=code in THROTTLE_CODES,
            maybe_done=status >= 500,
        )
    return CrowdError(
        f"MTurk {operation}: {exc} (the call may have reached MTurk)",
        retryable=True,
        maybe_done=True,
    )
