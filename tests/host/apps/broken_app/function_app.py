"""An app whose settings check fails at import, as queue-drain's does on a bad setting."""

from __future__ import annotations

import azure.functions as func

raise RuntimeError("REQUIRED_SETTING is not set")

app = func.FunctionApp()
