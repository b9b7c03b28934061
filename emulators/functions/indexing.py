"""Find the app's functions the way the Python worker does (worker indexing, v2 model).

Import `function_app`, take its one top-level `FunctionApp` (any `FunctionRegister`), call
`get_functions()` exactly once (a second call raises in azure-functions), and describe each function.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import sys
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from azure.functions.decorators.function_app import FunctionRegister

from emulators.functions.config import resolve_setting_refs
from emulators.functions.errors import ConfigError, IndexingError

SCRIPT_FILE_SETTING = "PYTHON_SCRIPT_FILE_NAME"
DEFAULT_SCRIPT_FILE = "function_app.py"
SUPPORTED_TRIGGERS = {"httpTrigger", "timerTrigger", "serviceBusTrigger"}
CONTEXT_PARAMETER = "context"


@dataclass(frozen=True)
class FunctionSpec:
    """One indexed function: its trigger (function.json keys, %NAME% resolved) and how to call it."""

    name: str
    trigger_type: str
    trigger_parameter: str
    trigger: Mapping[str, Any]
    user_function: Callable[..., Any]
    is_async: bool
    wants_context: bool
    directory: str

    @property
    def full_name(self) -> str:
        return f"Functions.{self.name}"


@dataclass(frozen=True)
class LoadFailure:
    """A function the host could not load; the others still run (as in the real host)."""

    name: str
    reason: str


def import_app_module(app_dir: Path, script_file: str = DEFAULT_SCRIPT_FILE) -> ModuleType:
    """Import the app's script with its folder on sys.path; any error becomes an IndexingError."""
    if not (app_dir / script_file).is_file():
        raise IndexingError(f"{script_file} not found in {app_dir}")
    folder = str(app_dir.resolve())
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        return importlib.import_module(Path(script_file).stem)
    except Exception as e:
        detail = "".join(traceback.format_exception(e)).rstrip()
        raise IndexingError(f"importing {script_file} failed: {type(e).__name__}: {e}\n{detail}") from e


def find_function_app(module: ModuleType) -> FunctionRegister:
    apps = [value for value in vars(module).values() if isinstance(value, FunctionRegister)]
    if not apps:
        raise IndexingError(f"Could not find top level function app instances in {module.__name__}.py")
    if len(apps) > 1:
        raise IndexingError(f"Multiple top level function app instances are defined in {module.__name__}.py")
    return apps[0]


def index_functions(
    app: FunctionRegister, settings: Mapping[str, str], directory: str
) -> tuple[list[FunctionSpec], list[LoadFailure]]:
    try:
        functions = app.get_functions()
    except Exception as e:
        raise IndexingError(f"indexing the function app failed: {type(e).__name__}: {e}") from e
    specs, failures = [], []
    for function in functions:
        name = str(function.get_function_name())
        try:
            specs.append(describe(function, settings, directory))
        except (ConfigError, IndexingError) as e:
            failures.append(LoadFailure(name, str(e)))
    return specs, failures


def describe(function: Any, settings: Mapping[str, str], directory: str) -> FunctionSpec:
    name = function.get_function_name()
    trigger = function.get_trigger()
    if trigger is None or trigger.type not in SUPPORTED_TRIGGERS:
        kind = getattr(trigger, "type", None)
        raise IndexingError(f"trigger type {kind!r} is not supported by the local host")
    _check_bindings(function, trigger.name)
    user_function = function.get_user_function()
    parameters = inspect.signature(user_function).parameters
    extra = [p for p in parameters if p not in {trigger.name, CONTEXT_PARAMETER}]
    if extra:
        raise IndexingError(f"parameters {extra} are not bound to anything the local host supports")
    return FunctionSpec(
        name=name,
        trigger_type=trigger.type,
        trigger_parameter=trigger.name,
        trigger=resolve_values(plain(trigger.get_dict_repr()), settings),
        user_function=user_function,
        is_async=inspect.iscoroutinefunction(user_function),
        wants_context=CONTEXT_PARAMETER in parameters,
        directory=directory,
    )


def _check_bindings(function: Any, trigger_name: str) -> None:
    for binding in function.get_bindings():
        if binding.name == trigger_name:
            continue
        if binding.type == "http" and binding.name == "$return":
            continue
        raise IndexingError(f"binding {binding.name!r} of type {binding.type!r} is not supported by the local host")


def plain(value: Any) -> Any:
    """function.json-style values: enums by value, nested lists and dicts converted too."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def resolve_values(trigger: dict[str, Any], settings: Mapping[str, str]) -> dict[str, Any]:
    return {
        key: resolve_setting_refs(value, settings) if isinstance(value, str) else value
        for key, value in trigger.items()
    }


def load(app_dir: Path, settings: Mapping[str, str]) -> tuple[list[FunctionSpec], list[LoadFailure]]:
    """Import the app from `app_dir` and index it (settings must already be in the environment)."""
    script = settings.get(SCRIPT_FILE_SETTING) or DEFAULT_SCRIPT_FILE
    module = import_app_module(app_dir, script)
    return index_functions(find_function_app(module), settings, str(app_dir.resolve()))
