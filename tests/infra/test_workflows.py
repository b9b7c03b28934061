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


class _Context(dict[str, Any]):
    """A GitHub expression context: `github.event.workflow_run.event` reads nested keys, a missing one is ''."""

    def __getattr__(self, name: str) -> Any:
        value = self.get(name, "")
        return _Context(value) if isinstance(value, dict) else value


def deploy_condition(github: dict[str, Any]) -> bool:
    """The deploy job's `if:` evaluated for one event (its operators are &&, ||, == and parentheses only)."""
    expression = load("deploy.yml")["jobs"]["deploy"]["if"]
    assert set(expression) <= set("abcdefghijklmnopqrstuvwxyz_.'=|&() \n"), "an operator this reader does not know"
    python = expression.replace("&&", " and ").replace("||", " or ")
    result = eval(python, {"__builtins__": {}}, {"github": _Context(github)})  # noqa: S307 (the workflow's own text)
    return bool(result)


def run_of_ci(
    event: str, head_repository: str, head_branch: str = "main", conclusion: str = "success"
) -> dict[str, Any]:
    return {
        "event_name": "workflow_run",
        "repository": "owner/queue-drain",
        "event": {
            "workflow_run": {
                "conclusion": conclusion,
                "event": event,
                "head_branch": head_branch,
                "head_repository": {"full_name": head_repository},
            }
        },
    }


def test_a_forks_pull_request_from_a_branch_named_main_never_reaches_the_deploy_job() -> None:
    # `branches: [main]` of workflow_run matches the fork's branch name: the job's condition must refuse it.
    assert not deploy_condition(run_of_ci("pull_request", "someone/queue-drain"))
    assert not deploy_condition(run_of_ci("pull_request", "owner/queue-drain"))
    assert not deploy_condition(run_of_ci("push", "someone/queue-drain"))
    assert not deploy_condition(run_of_ci("push", "owner/queue-drain", head_branch="feature"))
    assert not deploy_condition(run_of_ci("push", "owner/queue-drain", conclusion="failure"))


def test_a_push_to_this_repositorys_main_that_passed_ci_deploys_and_so_does_a_manual_run() -> None:
    assert deploy_condition(run_of_ci("push", "owner/queue-drain"))
    assert deploy_condition({"event_name": "workflow_dispatch", "repository": "owner/queue-drain"})
