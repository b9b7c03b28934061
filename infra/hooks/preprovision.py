"""azd's preprovision hook: refuse, before anything is created, what ARM would take wrongly or silently.

APP_SETTINGS (infra/main.bicep's `appSettings`) is `NAME=value;NAME=value` or a JSON object of strings. In the
pair form a value cannot hold `;` (it would split), a pair without `=` would be dropped, and a repeated name would
keep one of its values without a word: each is refused here with what to write instead.

Standard library only (it runs wherever azd runs); azd passes its environment values as environment variables.
"""

from __future__ import annotations

import json
import os
import sys


def problems(app_settings: str) -> list[str]:
    """What is wrong with an APP_SETTINGS value; empty if nothing is."""
    text = app_settings.strip()
    if not text:
        return []
    if text.startswith("{"):
        try:
            doc = json.loads(text, object_pairs_hook=list)
        except ValueError as e:
            return [f"APP_SETTINGS is not valid JSON: {e}"]
        if not isinstance(doc, list):
            return ["APP_SETTINGS in its JSON form must be one object of NAME: value"]
        pairs = [(str(k), v) for k, v in doc]
        found = [f"APP_SETTINGS: {k} must be a string" for k, v in pairs if not isinstance(v, str)]
    else:
        pairs, found = [], []
        for part in text.split(";"):
            if not part.strip():
                continue
            if "=" not in part:
                found.append(f"APP_SETTINGS: {part.strip()!r} has no '=' (a value holding ';' needs the JSON form)")
                continue
            name, _, value = part.partition("=")
            pairs.append((name.strip(), value))
    names = [name for name, _ in pairs]
    found += [f"APP_SETTINGS: the name {n!r} is empty or holds spaces" for n in names if not n or " " in n]
    found += [f"APP_SETTINGS names {n} more than once" for n in sorted({n for n in names if names.count(n) > 1})]
    return found


def main() -> None:
    found = problems(os.environ.get("APP_SETTINGS", ""))
    for problem in found:
        print(f"preprovision: {problem}", file=sys.stderr)
    if found:
        sys.exit(1)
    print("preprovision: APP_SETTINGS is well formed")


if __name__ == "__main__":
    main()
