"""The HTTP client of Prolific's API (httpx): the token in the `Authorization` header only,
retries with exponential backoff (honouring `Retry-After`), and every failure a
`ProlificError` carrying Prolific's own message.

What may be retried depends on the call (`Retry`): a read or an idempotent call is retried
on 429, 5xx and lost connections (`SAFE`); a call that is not idempotent on Prolific's
side (creating a study, paying a bonus) only when it never reached Prolific (`UNSAFE`:
429 and connections never made).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from enum import Enum
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from app.crowd.platforms.prolific.api import ProlificError, platform_message

log = logging.getLogger(__name__)

DEFAULT_API_URL = "https://api.prolific.com/api/v1/"
_RETRY_STATUSES = {429, 500, 502, 503, 504}
_MAX_DELAY = 30.0

M = TypeVar("M", bound=BaseModel)


def retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After", "")
    return float(value) if value.isdigit() else None


class Retry(Enum):
    SAFE = "safe"  # retry 429, 5xx and lost connections: the call may be made again
    UNSAFE = "unsafe"  # retry only what never reached Prolific: 429, refused connections


class ProlificClient:
    """One workspace's API client: `get` and `send` a model, with retries (`request`)."""

    def __init__(
        self,
        token: str,
        *,
        api_url: str = DEFAULT_API_URL,
        max_retries: int = 4,
        backoff_seconds: float = 0.5,
        timeout_seconds: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.max_retries = max_retries
        self.backoff_seconds = backoff_seconds
        self._sleep = sleep
        self._http = httpx.Client(
            base_url=api_url if api_url.endswith("/") else api_url + "/",
            headers={"Authorization": f"Token {token}", "Accept": "application/json"},
            timeout=timeout_seconds,
            transport=transport,
        )

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    def close(self) -> None:
        self._http.close()

    def get(self, path: str, model: type[M], *, params: dict | None = None) -> M:
        response = self.request("GET", path, params=params, retry=Retry.SAFE)
        return self.parse(response, model)

    def send(
        self,
        method: str,
        path: str,
        body: BaseModel | None,
        model: type[M] | None = None,
        *,
        retry: Retry = Retry.SAFE,
    ) -> Any:
        payload = body.model_dump(mode="json", exclude_none=True) if body is not None else None
        response = self.request(method, path, json=payload, retry=retry)
        return self.parse(response, model) if model is not None else None

    @staticmethod
    def parse(response: httpx.Response, model: type[M]) -> M:
        try:
            return model.model_validate(response.json())
        except (ValueError, ValidationError) as exc:
            raise ProlificError(
                f"Prolific answered {response.request.method} {response.request.url.path} "
                f"with something unexpected: {str(exc)[:300]}",
                status=response.status_code,
            ) from None

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict | None = None,
        retry: Retry,
    ) -> httpx.Response:
        attempt = 0
        while True:
            delay = None
            try:
                response = self._http.request(method, path, json=json, params=params)
            except httpx.TransportError as exc:
                # A connection never made reached nobody; anything later may have.
                never_sent = isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout)
                if attempt >= self.max_retries or not (never_sent or retry is Retry.SAFE):
                    raise ProlificError(
                        f"Prolific could not be reached ({type(exc).__name__}) on "
                        f"{method} {path}"
                        + ("" if never_sent else "; the call may have reached Prolific"),
                        retryable=never_sent or retry is Retry.SAFE,
                        maybe_done=not never_sent,
                    ) from None
            else:
                if response.is_success:
                    return response
                status = response.status_code
                retryable = status == 429 or (status in _RETRY_STATUSES and retry is Retry.SAFE)
                if not retryable or attempt >= self.max_retries:
                    message, code = platform_message(response)
                    raise ProlificError(
                        f"Prolific refused {method} {path} ({status}): {message}",
                        status=status,
                        code=code or str(status),
                        retryable=status in _RETRY_STATUSES,
                    )
                delay = retry_after(response)
            attempt += 1
            wait = min(
                _MAX_DELAY,
                delay if delay is not None else self.backoff_seconds * 2 ** (attempt - 1),
            )
            log.warning("Prolific %s %s: retry %d in %.1fs", method, path, attempt, wait)
            self._sleep(wait)
