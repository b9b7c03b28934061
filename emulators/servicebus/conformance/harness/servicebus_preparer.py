"""Stand-in replacements for the SDK tests' preparers: queues are declared in the stand-in's config.

Each `ServiceBusQueuePreparer(...)` the test modules create gets its own queue, registered when the module
is imported (collection) with the properties it asks for; `conftest.py` writes every registered queue into
the config of the one stand-in it starts. At call time the decorators hand the test what Azure's preparers
would: the namespace (its name is `localhost:PORT`, the endpoint suffix is empty), the namespace connection
string and the queue.
"""

from __future__ import annotations

import functools
import inspect
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SERVICEBUS_ENDPOINT_SUFFIX = ""
QUEUES: dict[str, dict[str, object]] = {}  # queue name -> emulator-format Properties
_numbers = itertools.count(1)


@dataclass(frozen=True)
class FakeResource:
    name: str
    id: str


@dataclass
class StandIn:
    port: int = 0
    connection_string: str = ""


STAND_IN = StandIn()  # filled in by conftest.py once the stand-in is up


def _namespace_kwargs() -> dict[str, object]:
    if not STAND_IN.port:
        raise RuntimeError("the stand-in is not running (conftest.py starts it)")
    name = f"localhost:{STAND_IN.port}"
    return {
        "servicebus_namespace": FakeResource(name, name),
        "servicebus_namespace_connection_string": STAND_IN.connection_string,
        "servicebus_fully_qualified_namespace": name,
    }


def _injecting(fn: Callable[..., Any], extra: Callable[[], dict[str, object]]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def run_async(*args: Any, **kwargs: Any) -> Any:
            return await fn(*args, **{**extra(), **kwargs})

        return run_async

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **{**extra(), **kwargs})

    return run


class CachedServiceBusResourceGroupPreparer:
    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return fn


class CachedServiceBusNamespacePreparer(CachedServiceBusResourceGroupPreparer):
    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        return _injecting(fn, _namespace_kwargs)


ServiceBusNamespacePreparer = CachedServiceBusNamespacePreparer


class ServiceBusQueuePreparer:
    """One queue per decorated test, with the properties Azure's preparer would create it with."""

    def __init__(
        self,
        name_prefix: str = "",
        use_cache: bool = False,
        requires_duplicate_detection: bool = False,
        dead_lettering_on_message_expiration: bool = False,
        requires_session: bool = False,
        enable_partitioning: bool = False,
        lock_duration: str = "PT30S",
        parameter_name: str = "servicebus_queue",
        **kwargs: object,
    ) -> None:
        self.name = f"{name_prefix or 'q'}-{next(_numbers)}"
        self.parameter_name = parameter_name
        QUEUES[self.name] = {
            "LockDuration": lock_duration,
            "RequiresDuplicateDetection": requires_duplicate_detection,
            "DeadLetteringOnMessageExpiration": dead_lettering_on_message_expiration,
            "RequiresSession": requires_session,
        }

    def __call__(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        queue = FakeResource(self.name, self.name)
        return _injecting(fn, lambda: {**_namespace_kwargs(), self.parameter_name: queue})


CachedServiceBusQueuePreparer = ServiceBusQueuePreparer
