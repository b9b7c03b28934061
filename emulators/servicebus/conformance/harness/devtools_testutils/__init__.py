"""The few names the SDK's queue tests import from Microsoft's test tools (not on a package index).

The tests' base classes need nothing from the recording proxy here (no HTTP is recorded), and the
credential is the stand-in's development key, so no Azure identity is involved.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any

from azure.core.credentials import AzureNamedKeyCredential

KEY_NAME = "RootManageSharedAccessKey"
KEY = "SAS_KEY_VALUE"


class AzureRecordedTestCase:
    """Base class of the SDK's live tests; nothing to record against the stand-in."""

    @staticmethod
    def await_prepared_test(test_fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
        """Run an async test to completion in its own event loop (what Microsoft's helper does)."""

        @functools.wraps(test_fn)
        def run(*args: Any, **kwargs: Any) -> None:
            asyncio.run(test_fn(*args, **kwargs))  # type: ignore[arg-type]

        return run


class AzureMgmtRecordedTestCase(AzureRecordedTestCase):
    """Base class of the SDK's live tests; nothing to record against the stand-in."""


def get_credential(is_async: bool = False) -> AzureNamedKeyCredential:
    """The stand-in's development key (the sync and aio clients both take a named key credential)."""
    return AzureNamedKeyCredential(KEY_NAME, KEY)
