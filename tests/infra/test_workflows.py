"""The GitHub workflows (issue 14): the test job runs the same script as CI here, and the deploy job signs in
with OIDC and never reads a stored secret."""

from __future__ import annotations

from typing import Any

import yaml

from tests.infra.bicep import ROOT

WORKFLOWS = ROOT / ".github" / "workflows"


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((WORKFLOWS / name).read_text())
    return doc


def steps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for job in doc["jobs"].values() for s in job["steps"]]


def test_the_test_job_runs_the_ci_script() -> None:
    runs = [s.get("run", "") for s in steps(load("ci.yml"))]
    assert "bash .ci/run" in runs


def test_the_deploy_job_uses_oidc_and_no_stored_secret() -> None:
    doc = load("deploy.yml")
    assert doc["permissions"]["id-token"] == "write"
    text = (WORKFLOWS / "deploy.yml").read_text()
    assert "secrets." not in text, "identifiers come from repository variables; no secret is stored"
    commands = " ".join(s.get("run", "") for s in steps(doc))
    assert "--federated-credential-provider github" in commands
    assert "azd up" in commands
