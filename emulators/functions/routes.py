"""ASP.NET-style route templates as the Functions host matches them, pure.

Supported: literal segments (case-insensitive), `{name}`, `{name?}`, `{name=default}`, `{*catchall}`,
inline constraints `{id:int}`, `{id:int:min(1)}`, `{code:regex(^[a-z]+$)}`, and literal text around a
parameter inside one segment (`{name}.json`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Generic, TypeVar

from emulators.functions.errors import RouteError

T = TypeVar("T")
Constraint = Callable[[str], bool]

_CONSTRAINT = re.compile(r"^(?P<name>[a-zA-Z]+)(?:\((?P<arg>.*)\))?$")

# Precedence of one segment, lower first (ASP.NET: literals, then constrained, then plain, then catch-all).
LITERAL, CONSTRAINED, PLAIN, CATCH_ALL = 1, 2, 3, 5


def _is_int(bits: int) -> Constraint:
    def check(value: str) -> bool:
        try:
            number = int(value)
        except ValueError:
            return False
        limit: int = 2 ** (bits - 1)
        return -limit <= number < limit

    return check


def _is_decimal(value: str) -> bool:
    try:
        Decimal(value)
    except InvalidOperation:
        return False
    return value.strip().lower() not in {"nan", "inf", "-inf", "infinity", "-infinity"}


def _is_guid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


def _is_datetime(value: str) -> bool:
    try:
        datetime.fromisoformat(value)
    except ValueError:
        return False
    return True


SIMPLE_CONSTRAINTS: dict[str, Constraint] = {
    "int": _is_int(32),
    "long": _is_int(64),
    "bool": lambda v: v.lower() in {"true", "false"},
    "guid": _is_guid,
    "alpha": lambda v: v.isascii() and v.isalpha(),
    "decimal": _is_decimal,
    "double": _is_decimal,
    "float": _is_decimal,
    "datetime": _is_datetime,
}


def _number_arg(name: str, arg: str) -> int:
    try:
        return int(arg)
    except ValueError as e:
        raise RouteError(f"constraint {name}({arg}) needs an integer argument") from e


def _argument_constraint(name: str, arg: str) -> Constraint:
    if name == "regex":
        pattern = re.compile(arg, re.IGNORECASE)
        return lambda v: pattern.search(v) is not None
    if name == "range":
        low_text, _, high_text = arg.partition(",")
        low, high = _number_arg(name, low_text), _number_arg(name, high_text)
        return lambda v: _is_int(64)(v) and low <= int(v) <= high
    bound = _number_arg(name, arg)
    checks: dict[str, Constraint] = {
        "min": lambda v: _is_int(64)(v) and int(v) >= bound,
        "max": lambda v: _is_int(64)(v) and int(v) <= bound,
        "length": lambda v: len(v) == bound,
        "minlength": lambda v: len(v) >= bound,
        "maxlength": lambda v: len(v) <= bound,
    }
    if name not in checks:
        raise RouteError(f"unknown route constraint {name!r}")
    return checks[name]


def parse_constraint(text: str) -> Constraint:
    match = _CONSTRAINT.match(text)
    if match is None:
        raise RouteError(f"malformed route constraint {text!r}")
    name, arg = match["name"].lower(), match["arg"]
    if arg is None:
        if name not in SIMPLE_CONSTRAINTS:
            raise RouteError(f"unknown route constraint {name!r}")
        return SIMPLE_CONSTRAINTS[name]
    return _argument_constraint(name, arg)


@dataclass(frozen=True)
class Parameter:
    name: str
    constraints: tuple[Constraint, ...] = ()
    optional: bool = False
    default: str | None = None
    catch_all: bool = False

    def accepts(self, value: str) -> bool:
        return all(check(value) for check in self.constraints)


def parse_parameter(text: str, template: str) -> Parameter:
    catch_all = text.startswith("*")
    body = text.lstrip("*")
    head, *constraint_texts = _split_constraints(body)
    default = None
    if "=" in head:
        head, default = head.split("=", 1)
    optional = head.endswith("?")
    name = head.rstrip("?")
    if not name.isidentifier():
        raise RouteError(f"route {template!r}: {name!r} is not a valid parameter name")
    constraints = tuple(parse_constraint(c) for c in constraint_texts)
    return Parameter(name, constraints, optional or catch_all or default is not None, default, catch_all)


def _split_constraints(text: str) -> list[str]:
    """Split `name:c1:c2(args)` on colons outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == ":" and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current += char
    parts.append(current)
    return parts


@dataclass(frozen=True)
class RouteTemplate:
    template: str
    pattern: re.Pattern[str]
    parameters: tuple[Parameter, ...]
    precedence: tuple[int, ...]

    def match(self, path: str) -> dict[str, str] | None:
        """Route values for `path` (without the route prefix), or None when it does not match."""
        found = self.pattern.fullmatch(path.strip("/"))
        if found is None:
            return None
        values: dict[str, str] = {}
        for parameter in self.parameters:
            value = found.group(parameter.name)
            if value is None or value == "":
                if parameter.default is not None:
                    values[parameter.name] = parameter.default
                elif not parameter.optional:
                    return None
                continue
            if not parameter.accepts(value):
                return None
            values[parameter.name] = value
        return values


def compile_route(template: str) -> RouteTemplate:
    segments = [s for s in template.strip("/").split("/") if s != ""] if template.strip("/") else []
    parameters: list[Parameter] = []
    regex_parts: list[tuple[str, bool]] = []
    precedence: list[int] = []
    for index, segment in enumerate(segments):
        is_last = index == len(segments) - 1
        regex, segment_parameters, rank = _compile_segment(segment, template, is_last)
        whole = len(segment_parameters) == 1 and segment.startswith("{") and segment.endswith("}")
        regex_parts.append((regex, whole and segment_parameters[0].optional))
        parameters.extend(segment_parameters)
        precedence.append(rank)
    names = [p.name.lower() for p in parameters]
    if len(set(names)) != len(names):
        raise RouteError(f"route {template!r} repeats a parameter name")
    return RouteTemplate(template, _join(regex_parts), tuple(parameters), tuple(precedence))


def _join(parts: Sequence[tuple[str, bool]]) -> re.Pattern[str]:
    """One regex for the path; a segment that may be absent takes its slash with it."""
    regex = ""
    for index, (part, may_be_absent) in enumerate(parts):
        piece = part if index == 0 else f"/{part}"
        regex += f"(?:{piece})?" if may_be_absent else piece
    return re.compile(regex, re.IGNORECASE | re.DOTALL)


def _compile_segment(segment: str, template: str, is_last: bool) -> tuple[str, list[Parameter], int]:
    parameters: list[Parameter] = []
    regex = ""
    for kind, text in _tokens(segment, template):
        if kind == "literal":
            regex += re.escape(text)
            continue
        parameter = parse_parameter(text, template)
        if (parameter.catch_all or parameter.optional) and not is_last:
            raise RouteError(f"route {template!r}: {{{text}}} must be in the last segment")
        parameters.append(parameter)
        regex += _parameter_regex(parameter)
    return regex, parameters, _rank(parameters)


def _tokens(segment: str, template: str) -> list[tuple[str, str]]:
    """Literal text and parameters of one segment; `{{` and `}}` stand for braces (also inside a regex)."""
    tokens: list[tuple[str, str]] = []
    kind, text, index = "literal", "", 0
    while index < len(segment):
        pair = segment[index : index + 2]
        if pair in ("{{", "}}"):
            text, index = text + pair[0], index + 2
            continue
        char = segment[index]
        index += 1
        if char == "{" and kind == "literal":
            tokens.append((kind, text))
            kind, text = "parameter", ""
        elif char == "}" and kind == "parameter":
            tokens.append((kind, text))
            kind, text = "literal", ""
        elif char in "{}":
            raise RouteError(f"route {template!r}: unbalanced braces in segment {segment!r}")
        else:
            text += char
    if kind == "parameter":
        raise RouteError(f"route {template!r}: unbalanced braces in segment {segment!r}")
    tokens.append((kind, text))
    return [(k, t) for k, t in tokens if k == "parameter" or t]


def _parameter_regex(parameter: Parameter) -> str:
    body = ".*" if parameter.catch_all else "[^/]+?" if not parameter.optional else "[^/]*?"
    return f"(?P<{parameter.name}>{body})"


def _rank(parameters: Sequence[Parameter]) -> int:
    if not parameters:
        return LITERAL
    if any(p.catch_all for p in parameters):
        return CATCH_ALL
    return CONSTRAINED if any(p.constraints for p in parameters) else PLAIN


@dataclass(frozen=True)
class RouteMatch(Generic[T]):
    target: T
    values: dict[str, str]


@dataclass(frozen=True)
class MethodNotAllowed:
    allowed: tuple[str, ...]


@dataclass
class RouteTable(Generic[T]):
    """Routes in ASP.NET precedence order; `resolve` answers a match, 405 or nothing (404)."""

    _routes: list[tuple[RouteTemplate, frozenset[str] | None, T]] = field(default_factory=list)

    def add(self, template: str, methods: Iterable[str] | None, target: T) -> RouteTemplate:
        route = compile_route(template)
        allowed = frozenset(m.upper() for m in methods) if methods else None
        self._routes.append((route, allowed, target))
        self._routes.sort(key=lambda entry: entry[0].precedence)
        return route

    def resolve(self, method: str, path: str) -> RouteMatch[T] | MethodNotAllowed | None:
        allowed: set[str] = set()
        for route, methods, target in self._routes:
            values = route.match(path)
            if values is None:
                continue
            if methods is None or method.upper() in methods:
                return RouteMatch(target, values)
            allowed |= methods
        return MethodNotAllowed(tuple(sorted(allowed))) if allowed else None
