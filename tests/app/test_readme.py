"""The README documents every app setting the code reads, with its real default."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from shared.settings import BINDING_SETTINGS, Settings, parse_value

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
ROWS = dict(re.findall(r"^\| `([A-Za-z0-9_]+)` \| ([^|]+) \|", README, flags=re.MULTILINE))


def test_every_setting_is_in_the_readme_with_its_default():
    for f in dataclasses.fields(Settings):
        variable = f.metadata.get("env")
        if variable is None:
            continue
        assert variable in ROWS, f"{variable} is missing from the README settings table"
        documented = ROWS[variable].strip().strip("`")
        documented = "" if documented == "empty" else documented  # an empty string, said in words
        if variable in BINDING_SETTINGS:
            assert documented == "required"
        else:
            assert parse_value(variable, documented, f.type, f.metadata) == f.default, (variable, documented)


def test_the_readme_starts_with_the_two_commands():
    commands = re.findall(r"^make (\w+)", README, flags=re.MULTILINE)
    assert commands[:2] == ["run", "test"]
