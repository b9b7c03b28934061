"""The `context` argument the Python worker passes to functions that declare it."""

from __future__ import annotations

import threading

import azure.functions as func
from azure.functions import _abc as functions_abc


class TraceContext(functions_abc.TraceContext):
    def __init__(self, trace_parent: str = "", trace_state: str = "") -> None:
        self._trace_parent = trace_parent
        self._trace_state = trace_state

    @property
    def trace_state(self) -> str:
        return self._trace_state

    @property
    def trace_parent(self) -> str:
        return self._trace_parent

    @property
    def attributes(self) -> dict[str, str]:
        return {}


class RetryContext(functions_abc.RetryContext):
    @property
    def retry_count(self) -> int:
        return 0

    @property
    def max_retry_count(self) -> int:
        return 0

    @property
    def exception(self) -> None:  # type: ignore[override]
        return None


class InvocationContext(func.Context):
    """Invocation id, function name and folder, as the worker provides them."""

    def __init__(self, invocation_id: str, function_name: str, function_directory: str) -> None:
        self._invocation_id = invocation_id
        self._function_name = function_name
        self._function_directory = function_directory
        self._thread_local = threading.local()
        self._thread_local.invocation_id = invocation_id

    @property
    def invocation_id(self) -> str:
        return self._invocation_id

    @property
    def thread_local_storage(self) -> threading.local:  # type: ignore[override]
        return self._thread_local

    @property
    def function_name(self) -> str:
        return self._function_name

    @property
    def function_directory(self) -> str:
        return self._function_directory

    @property
    def trace_context(self) -> TraceContext:
        return TraceContext()

    @property
    def retry_context(self) -> RetryContext:
        return RetryContext()
