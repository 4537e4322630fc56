"""The local channel (invite links for lab members) as a crowd platform: no platform, our
own store its source of truth, every call bookkeeping in the same ledger (`provider`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from app.crowd.base import CostEstimate, CrowdProvider, CrowdServiceError, PostingSpec
from app.crowd.platform import Capabilities, Platform, ProviderOptions
from app.models import Channel

if TYPE_CHECKING:
    from app.config import Settings


class Local(Platform):
    name = "local"
    label = "Local (invite links)"
    channel = Channel.local
    work_ref = "public_id"
    caps = Capabilities(
        fee_rule="none: lab annotators are paid off-platform (rewards are recorded)",
        remote=False,
        # One environment of its own: no platform, no sandbox.
        environments=("local",),
        reopens=True,
        self_enrolment=False,
    )

    def provider(self, settings: Settings, env: str | None, how: ProviderOptions) -> CrowdProvider:
        """Its "platform" is our own store, which it reads through `sessions` (the caller's
        session factory)."""
        from app.crowd.platforms.local.provider import LocalProvider

        if env not in (None, *self.caps.environments):
            raise CrowdServiceError(
                "the local channel (invite links) has one environment, local: no sandbox or "
                "production"
            )
        if how.sessions is None:
            raise ValueError("the local provider reads our own store: give it `sessions`")
        return LocalProvider(how.sessions)

    page_rank = 90

    def enabled(self, study: Any) -> bool:
        return True  # invite links always work

    def price(self, settings: Settings, spec: PostingSpec) -> Callable[..., CostEstimate]:
        from app.crowd.platforms.local.provider import price

        return functools.partial(price, spec)


PLATFORM = Local()
