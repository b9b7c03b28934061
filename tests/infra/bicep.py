"""Read the project's Bicep with tree-sitter-bicep (the Bicep CLI downloads a binary and cannot be installed
here): syntax errors, object keys, string values and declarations, enough for the offline checks."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import tree_sitter_bicep
from tree_sitter import Language, Node, Parser

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
PARSER = Parser(Language(tree_sitter_bicep.language()))


def bicep_files() -> list[Path]:
    return sorted(INFRA.rglob("*.bicep"))


def parse(source: bytes) -> Node:
    return PARSER.parse(source).root_node


def errors(root: Node) -> list[str]:
    """Where the parser found an error or had to invent a missing token."""
    found = []
    for node in walk(root):
        if node.type == "ERROR" or node.is_missing:
            row, column = node.start_point
            found.append(f"line {row + 1}, column {column + 1}: {node.type} {text(node)[:60]!r}")
    return found


def walk(node: Node) -> Iterator[Node]:
    yield node
    for child in node.children:
        yield from walk(child)


def text(node: Node) -> str:
    return (node.text or b"").decode("utf-8")


def key_of(prop: Node) -> str:
    """An object property's key: an identifier, or a quoted name (`'${identityId}'` stays as written)."""
    key = prop.children[0]
    return text(key).strip("'") if key.type == "string" else text(key)


def properties(obj: Node) -> dict[str, Node]:
    """An object literal's properties by key (their value nodes)."""
    return {key_of(p): p.children[-1] for p in obj.named_children if p.type == "object_property"}


def find_property(root: Node, key: str) -> list[Node]:
    """The values of every object property named `key`, anywhere under `root`."""
    return [n.children[-1] for n in walk(root) if n.type == "object_property" and key_of(n) == key]


def string_value(node: Node) -> str | None:
    """A plain string literal's value (None for an interpolated string or an expression)."""
    if node.type != "string" or any(c.type == "interpolation" for c in node.named_children):
        return None
    return text(node)[1:-1]


@dataclass(frozen=True)
class Resource:
    symbol: str
    type: str  # 'Microsoft.X/y@version'
    body: Node


def resources(root: Node) -> list[Resource]:
    found = []
    for node in walk(root):
        if node.type == "resource_declaration":
            symbol, kind = node.named_children[0], node.named_children[1]
            body = next(c for c in node.named_children[2:] if c.type in {"object", "for_statement", "if_statement"})
            found.append(Resource(text(symbol), text(kind).strip("'"), body))
    return found


def variables(root: Node) -> dict[str, Node]:
    """Top-level `var name = value` declarations."""
    return {
        text(n.named_children[0]): n.named_children[-1] for n in root.named_children if n.type == "variable_declaration"
    }


def parameter_defaults(root: Node) -> dict[str, Node]:
    """Top-level `param name type = default` declarations that have a default: the value a deployment gets
    unless it passes its own."""
    return {
        text(n.named_children[0]): n.named_children[-1]
        for n in root.named_children
        if n.type == "parameter_declaration" and n.named_children[-1].type != "type"
    }
