"""Issue 29, offline: every parameter reaches the template from the azd environment and from CI, every setting
the app reads can be set through the template, the template refuses what Azure refuses, and the alerts, roles,
logs, versions and smoke test a deployer expects are there. What needs a subscription is in docs/deploying.md."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from typing import Any

import pytest
import yaml
from tree_sitter import Node

from shared.core.settings import Settings
from tests.infra.bicep import INFRA, ROOT, bicep_files, parse, properties, resources, string_value, text, variables

PARAMETER_FILE = json.loads((INFRA / "main.parameters.json").read_text())["parameters"]
SUBSTITUTION = re.compile(r"^\$\{([A-Z0-9_]+)(?:=(.*))?\}$")
# Set by azd itself before it reads main.parameters.json (the signed-in principal), so CI need not pass them;
# deploy.yml passes them anyway, for a deployer other than the signed-in one.
AZD_SETS = {"AZURE_PRINCIPAL_ID"}


def main_tree() -> Node:
    return parse((INFRA / "main.bicep").read_bytes())


def declarations(root: Node) -> dict[str, tuple[list[str], Node]]:
    """Each top-level `param`: its decorators' source text and its declaration."""
    out, pending = {}, []
    for node in root.named_children:
        if node.type == "decorators":
            pending = [text(d) for d in node.named_children]
        elif node.type == "parameter_declaration":
            out[text(node.named_children[0])] = (pending, node)
            pending = []
        else:
            pending = []
    return out


def default_of(node: Node) -> str | None:
    value = node.named_children[-1]
    if value.type == "type":
        return None
    return string_value(value) if value.type == "string" else text(value)


def substitution(name: str) -> tuple[str, str | None]:
    found = SUBSTITUTION.match(PARAMETER_FILE[name]["value"])
    assert found, f"{name} in main.parameters.json is not one azd environment value: {PARAMETER_FILE[name]}"
    return found.group(1), found.group(2)


def workflow_env(name: str, job: str) -> dict[str, str]:
    doc: dict[str, Any] = yaml.safe_load((ROOT / ".github/workflows" / name).read_text())
    return dict(doc["jobs"][job].get("env", {}))


def test_every_template_parameter_comes_from_an_azd_environment_value_with_the_templates_default() -> None:
    params = declarations(main_tree())
    assert set(PARAMETER_FILE) == set(params), "main.parameters.json and main.bicep name different parameters"
    for name, (_, node) in params.items():
        _, default = substitution(name)
        template_default = default_of(node)
        if template_default is None:
            assert default is None, f"{name} is required: azd must not invent a default"
        else:
            assert default == template_default, (
                f"{name}: main.parameters.json says {default!r}, main.bicep {template_default!r}"
            )


def test_every_parameter_of_main_parameters_is_supplied_by_the_deploy_and_preview_jobs() -> None:
    """A push to main must deploy with the operator's settings, not reset them to the defaults."""
    needed = {substitution(name)[0] for name in PARAMETER_FILE}
    for workflow, job in (("deploy.yml", "deploy"), ("ci.yml", "preview")):
        env = workflow_env(workflow, job)
        missing = needed - AZD_SETS - set(env)
        assert missing == set(), f"{workflow} {job} does not pass {sorted(missing)}"
        for variable in needed & set(env):
            expected = "${{ vars." + variable + " }}"
            assert env[variable] == expected, f"{variable} must come from the repository variable"


def test_deploys_from_ci_run_one_at_a_time() -> None:
    doc = yaml.safe_load((ROOT / ".github/workflows/deploy.yml").read_text())
    assert doc["concurrency"]["group"]
    assert doc["concurrency"]["cancel-in-progress"] is False, "cancelling a running deployment leaves it half done"


def template_setting_values() -> dict[str, Node]:
    return properties(variables(main_tree())["templateSettings"])


def test_every_setting_the_app_reads_can_be_set_through_the_template() -> None:
    """Each of Settings' variables is either set by the template from a parameter (azd env value, repository
    variable), or left to APP_SETTINGS, which the template merges under its own settings."""
    root = main_tree()
    params = set(declarations(root))
    fixed = template_setting_values()
    app_settings = [str(f.metadata["env"]) for f in dataclasses.fields(Settings) if f.metadata.get("env")]
    assert len(app_settings) > 40, "the list comes from shared/core/settings.py"
    scope = variables(root)
    for name in app_settings:
        if name not in fixed:
            continue  # APP_SETTINGS carries it
        used = set(re.findall(r"[A-Za-z_]\w*", expanded(text(fixed[name]), scope)))
        assert used & params, f"{name} is fixed by the template ({text(fixed[name])}); no parameter sets it"
    [union] = [n for n in walk_calls(root, "union") if "templateSettings" in text(n)]
    assert text(union) == "union(passedSettings, templateSettings)", "APP_SETTINGS under the template's own settings"
    passed = text(scope["passedSettings"])
    assert "split(appSettings, ';')" in passed
    assert "indexOf(pair, '=')" in passed


def expanded(source: str, scope: dict[str, Node], depth: int = 3) -> str:
    """An expression's text with the variables it names replaced by theirs (`names.workQueue` -> its value)."""
    for _ in range(depth):
        for name, node in scope.items():
            source = re.sub(rf"\b{name}\b", f"({text(node)})", source)
    return source


def walk_calls(root: Node, function: str) -> list[Node]:
    from tests.infra.bicep import walk

    return [n for n in walk(root) if n.type == "call_expression" and text(n.named_children[0]) == function]


def test_the_location_is_limited_to_regions_with_flex_consumption_and_azd_offers_only_those() -> None:
    decorators, _ = declarations(main_tree())["location"]
    allowed = next(d for d in decorators if d.startswith("@allowed"))
    regions = re.findall(r"'([a-z0-9]+)'", allowed)
    assert {"eastus", "westeurope", "swedencentral", "australiaeast"} <= set(regions)
    assert "eastus2euap" not in regions, "an early-access region a deployer cannot use"
    assert len(regions) >= 25
    assert any(re.search(r"azd:\s*\{\s*type:\s*'location'", d) for d in decorators)


def bounds(name: str) -> tuple[int | None, int | None]:
    decorators, _ = declarations(main_tree())[name]
    low = next((int(d[10:-1]) for d in decorators if d.startswith("@minValue(")), None)
    high = next((int(d[10:-1]) for d in decorators if d.startswith("@maxValue(")), None)
    return low, high


def test_the_instance_limit_is_one_arm_accepts_in_every_region_and_says_it_caps_each_scale_group() -> None:
    # Microsoft's page gives 1 to 1000, but ARM refuses under 40 outside a few listed regions (issue 41 item 7).
    assert bounds("maximumInstanceCount") == (40, 1000)
    decorators, _ = declarations(main_tree())["maximumInstanceCount"]
    description = next(d for d in decorators if d.startswith("@description"))
    assert "scale group" in description
    assert "not of the whole app" in description


def test_drainers_follow_the_instance_limit_within_the_regional_memory_quota() -> None:
    scope = variables(main_tree())
    rule = text(scope["maxDrainersPerQueue"])
    assert rule == "min(maximumInstanceCount, regionalMemoryQuotaMB / instanceMemoryMB, 1000)"
    assert text(template_setting_values()["MAX_DRAINERS_PER_QUEUE"]) == "string(maxDrainersPerQueue)"
    params = declarations(main_tree())
    assert default_of(params["regionalMemoryQuotaMB"][1]) == "512000"  # Flex Consumption plan page
    # what the rule gives at each instance size, against Settings' own ceiling for MAX_DRAINERS_PER_QUEUE
    field = next(f for f in dataclasses.fields(Settings) if f.metadata.get("env") == "MAX_DRAINERS_PER_QUEUE")
    for memory, expected in ((512, 1000), (2048, 250), (4096, 125)):
        assert min(1000, 512_000 // memory, 1000) == expected
        assert expected <= field.metadata["max"]


def test_no_cloud_suffix_is_hard_coded() -> None:
    for path in bicep_files():
        source = path.read_text()
        for suffix in ("servicebus.windows.net", "core.windows.net", "azurewebsites.net"):
            code = "\n".join(line for line in source.splitlines() if not line.lstrip().startswith("//"))
            assert suffix not in code, f"{path.name} hard-codes {suffix}"


def test_log_ingestion_has_a_daily_cap_and_trace_sampling_is_a_parameter() -> None:
    monitoring = (INFRA / "modules/monitoring.bicep").read_text()
    assert re.search(r"dailyQuotaGb:\s*dailyCapGb", monitoring)
    assert re.search(r"dailyCapGb:\s*logDailyCapGb", (INFRA / "main.bicep").read_text())
    fixed = template_setting_values()
    assert string_value(fixed["OTEL_TRACES_SAMPLER"]) == "microsoft.fixed_percentage"
    assert text(fixed["OTEL_TRACES_SAMPLER_ARG"]) == "traceSamplingRatio"


def test_alerts_watch_poison_depth_dead_letters_failures_5xx_and_the_daily_cap_and_notify_the_action_group() -> None:
    alerts = parse((INFRA / "modules/alerts.bicep").read_bytes())
    kinds = ("Microsoft.Insights/metricAlerts", "Microsoft.Insights/scheduledQueryRules")
    typed = {r.symbol: r.type for r in resources(alerts) if r.type.startswith(kinds)}
    found = {r.symbol: text(r.body) for r in resources(alerts) if r.type.startswith(kinds)}
    assert set(found) >= {"poison", "deadLetters", "failures", "http5xx", "dailyCap"}
    # Poison: depth above 0 as a metric (not moves counted in a window, not through the capped workspace),
    # from the gauge the app exports, and provisioning cannot fail before the app has sent it.
    assert typed["poison"].startswith("Microsoft.Insights/metricAlerts")
    assert "'queue_drain.queue.depth'" in found["poison"]
    assert "values: ['poison']" in found["poison"]
    assert re.search(r"operator: 'GreaterThan'\s+threshold: 0", found["poison"])
    assert "skipMetricValidation: true" in found["poison"]
    metrics = (ROOT / "shared/telemetry/metrics.py").read_text()
    assert '"queue_drain.queue.depth"' in metrics
    assert "skipMetricValidation: true" in found["http5xx"]
    # The log alerts' blind spot: the workspace's daily cap reached.
    assert "OverQuota" in found["dailyCap"]
    assert "logAnalyticsId" in found["dailyCap"]
    assert "'DeadletteredMessages'" in found["deadLetters"]
    assert "success == false" in found["failures"]
    assert "'Http5xx'" in found["http5xx"]
    for body in found.values():
        assert "actionGroupId" in body or "actions: actions" in body
    assert "alertActionGroupId" in declarations(main_tree())


def test_the_deployer_gets_data_plane_roles_when_a_principal_is_given() -> None:
    roles = parse((INFRA / "modules/roles.bicep").read_bytes())
    deployer = [r for r in resources(roles) if "deployerPrincipalId" in text(r.body)]
    assert len(deployer) >= 3
    assert all(r.body.type == "if_statement" for r in deployer), "no role when no principal id is given"
    assert re.search(r"deployerPrincipalId:\s*principalId", (INFRA / "main.bicep").read_text())
    assert substitution("principalId")[0] == "AZURE_PRINCIPAL_ID"


def test_the_function_logs_go_to_log_analytics() -> None:
    app = parse((INFRA / "modules/functionapp.bicep").read_bytes())
    [diagnostics] = [r for r in resources(app) if r.type.startswith("Microsoft.Insights/diagnosticSettings")]
    assert "'FunctionAppLogs'" in text(diagnostics.body)
    assert "workspaceId: logAnalyticsId" in text(diagnostics.body)


def test_azure_yaml_requires_an_azd_that_honours_funcignore_and_runs_the_smoke_test_on_every_os() -> None:
    doc = yaml.safe_load((ROOT / "azure.yaml").read_text())
    assert doc["requiredVersions"]["azd"] == ">= 1.18.0"  # Azure/azure-dev#5383, released in 1.18.0
    hook = doc["hooks"]["postdeploy"]
    assert hook["posix"]["run"] == "python3 infra/hooks/smoke.py"
    assert hook["windows"]["shell"] == "pwsh", "azd on Windows runs hooks in PowerShell, where python3 may not exist"
    assert hook["windows"]["run"] == "python infra/hooks/smoke.py"
    assert all(hook[os]["continueOnError"] is False for os in ("posix", "windows"))
    smoke = (ROOT / "infra/hooks/smoke.py").read_text()
    assert "/api/openapi.json" in smoke
    assert "azd auth token" in smoke, "the key is read with azd's own sign-in, not the Azure CLI's"
    assert "az functionapp keys list" not in smoke
    assert "/api/probes" in smoke, "a probe, not a batch through the user's handler"
    funcignore = (ROOT / ".funcignore").read_text().split()
    assert {"tests", "bench", "sim", "emulators", "devstack", "node_modules", "infra"} <= set(funcignore)


def test_pull_requests_build_and_lint_the_bicep_and_preview_when_credentials_exist() -> None:
    doc = yaml.safe_load((ROOT / ".github/workflows/ci.yml").read_text())
    runs = " ".join(s.get("run", "") for s in doc["jobs"]["bicep"]["steps"])
    assert "az bicep build --file infra/main.bicep" in runs
    assert "az bicep lint" in runs
    preview = doc["jobs"]["preview"]
    assert "pull_request" in preview["if"]
    assert "vars.AZURE_CLIENT_ID != ''" in preview["if"]
    assert "azd provision --preview" in " ".join(s.get("run", "") for s in preview["steps"])


def test_the_deployers_role_assignments_name_no_principal_type() -> None:
    # No azd release sets AZURE_PRINCIPAL_TYPE, so CI's service principal got 'User' and ARM refused the
    # assignments (UnmatchedPrincipalType). Left out, ARM looks the existing principal up itself.
    roles = parse((INFRA / "modules/roles.bicep").read_bytes())
    deployer = [r for r in resources(roles) if "deployerPrincipalId" in text(r.body)]
    assert deployer
    assert all("principalType" not in text(r.body) for r in deployer)
    assert "principalType" not in (INFRA / "main.parameters.json").read_text()
    assert "AZURE_PRINCIPAL_TYPE" not in (ROOT / ".github/workflows/deploy.yml").read_text()


def preprovision(app_settings: str, **identity: str) -> subprocess.CompletedProcess[str]:
    """The hook as azd runs it; the caller identity configured unless `identity` says otherwise."""
    who = identity or {"AUTH_CLIENT_ID": "5f2b8a0e-1c1d-4e0e-9a7b-000000000001"}
    env = {"PATH": os.environ.get("PATH", ""), "APP_SETTINGS": app_settings, **who}
    hook = ROOT / "infra/hooks/preprovision.py"
    return subprocess.run([sys.executable, str(hook)], env=env, capture_output=True, text=True, check=False)


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("CALLBACK_ALLOWED_HOSTS=a.example;b.example", "has no '='"),  # a ';' inside a value splits it
        ("RECEIVERS=8;RECEIVERS=4", "names RECEIVERS more than once"),
        ('{"RECEIVERS": "8", "RECEIVERS": "4"}', "names RECEIVERS more than once"),
        ('{"RECEIVERS": 8}', "must be a string"),
        ('{"RECEIVERS": ', "not valid JSON"),
    ],
)
def test_app_settings_that_would_split_drop_or_repeat_are_refused_before_provisioning(value: str, said: str) -> None:
    done = preprovision(value)
    assert done.returncode == 1
    assert said in done.stderr


@pytest.mark.parametrize("value", ["", "CHUNK_MAX_ITEMS=500;RECEIVERS=8", '{"CALLBACK_ALLOWED_HOSTS": "a;b"}'])
def test_well_formed_app_settings_pass_the_preprovision_hook(value: str) -> None:
    assert preprovision(value).returncode == 0


def test_app_settings_take_a_json_object_for_values_that_hold_a_semicolon() -> None:
    passed = text(variables(main_tree())["passedSettings"])
    assert "startsWith(trim(appSettings), '{')" in passed
    assert "json(appSettings)" in passed
    hooks = yaml.safe_load((ROOT / "azure.yaml").read_text())["hooks"]["preprovision"]
    assert hooks["posix"]["run"] == "python3 infra/hooks/preprovision.py"
    assert hooks["windows"]["run"] == "python infra/hooks/preprovision.py"
