"""Offline checks of the deployment template (infra/, azure.yaml): it parses, it sets exactly the settings the
app and the host read, with identities and no secret, and its role assignments are the roles they name and
cover what the app does. No Azure subscription is involved; what that leaves unproven is in README."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tree_sitter import Node

from shared.core.settings import BINDING_SETTINGS, Settings, setting_names
from tests.infra import roles
from tests.infra.bicep import (
    INFRA,
    ROOT,
    bicep_files,
    errors,
    find_property,
    parameter_defaults,
    parse,
    properties,
    resources,
    string_value,
    text,
    variables,
)

# The identity-based connections, as a deployment without secrets sets them (read by the host and the app).
IDENTITY_SETTINGS = frozenset(
    {
        "AzureWebJobsStorage__credential",
        "AzureWebJobsStorage__clientId",
        "AzureWebJobsStorage__blobServiceUri",
        "AzureWebJobsStorage__queueServiceUri",
        "ServiceBusConnection__fullyQualifiedNamespace",
        "ServiceBusConnection__credential",
        "ServiceBusConnection__clientId",
    }
)
# Settings the Functions host reads itself (Functions app settings reference; identity-based connections;
# Application Insights with Entra ID): the template may set these although the app never reads them.
HOST_SETTINGS = IDENTITY_SETTINGS | {
    "APPLICATIONINSIGHTS_CONNECTION_STRING",
    "APPLICATIONINSIGHTS_AUTHENTICATION_STRING",
    "PYTHON_ENABLE_OPENTELEMETRY",  # read by the Python worker (Azure Functions OpenTelemetry docs)
    "OTEL_TRACES_SAMPLER",  # read by the Azure Monitor distro (trace sampling)
    "OTEL_TRACES_SAMPLER_ARG",
}
# What an identity-based deployment must set: both connections as identities, and the binding expressions.
REQUIRED = IDENTITY_SETTINGS | set(BINDING_SETTINGS)
SECRETS = re.compile(r"listKeys|listConnectionStrings|AccountKey=|SharedAccessKey|@secure\(\)", re.IGNORECASE)


def tree(name: str) -> Node:
    return parse((INFRA / name).read_bytes())


def resolve(node: Node, scope: dict[str, Node]) -> str | None:
    """A setting's value when the template fixes it: a string literal, a parameter's default, or `names.x` of a
    variable object."""
    value = string_value(node)
    if node.type == "string" and value is None:
        return interpolate(node, scope)
    if value is not None or node.type not in {"member_expression", "identifier"}:
        return value
    if node.type == "identifier":
        default = scope.get(text(node))
        return None if default is None else resolve(default, scope)
    base, _, member = text(node).partition(".")
    obj = scope.get(base)
    if obj is None or obj.type != "object":
        return None
    inner = properties(obj).get(member)
    return None if inner is None else resolve(inner, scope)


def interpolate(node: Node, scope: dict[str, Node]) -> str | None:
    """`'${workQueueName}-poison'` with each interpolation resolved, or None if one cannot be."""
    parts = []
    for child in node.named_children:
        part = resolve(child.named_children[0], scope) if child.type == "interpolation" else text(child)
        if part is None:
            return None
        parts.append(part)
    return "".join(parts)


def template_settings() -> dict[str, str | None]:
    """The app settings the template sets: main.bicep's `templateSettings` plus those functionapp.bicep adds."""
    main = tree("main.bicep")
    scope = {**variables(main), **parameter_defaults(main)}
    out = {key: resolve(value, scope) for key, value in properties(variables(main)["templateSettings"]).items()}
    site_resources = resources(tree("modules/functionapp.bicep"))
    [config] = [r for r in site_resources if r.type.startswith("Microsoft.Web/sites/config")]
    [union] = find_property(config.body, "properties")
    for obj in (c for c in union.named_children[-1].named_children if c.type == "object"):
        out.update({key: resolve(value, {}) for key, value in properties(obj).items()})
    return out


def test_the_parser_finds_errors_when_there_are_some() -> None:
    """The control for the parse check below: a broken template must not pass."""
    assert errors(parse(b"resource x 'Microsoft.Web/sites@2024-04-01' = {\n  name: \n")), "an unclosed object"
    assert not errors(parse(b"param n string\nvar x = { a: n }\n"))


@pytest.mark.parametrize("path", bicep_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_bicep_file_parses_without_error_nodes(path: Path) -> None:
    assert errors(parse(path.read_bytes())) == []


def test_there_is_a_template_with_every_module_it_uses() -> None:
    main = (INFRA / "main.bicep").read_text()
    used = set(re.findall(r"module \w+ '([^']+)'", main))
    assert used, "main.bicep declares its modules"
    assert {str(p.relative_to(INFRA)) for p in bicep_files()} == {"main.bicep", *used}
    azure_yaml = (ROOT / "azure.yaml").read_text()
    assert "host: function" in azure_yaml
    assert "language: python" in azure_yaml


def test_the_template_sets_only_settings_the_app_or_the_host_reads() -> None:
    names = set(template_settings())
    unknown = names - setting_names() - HOST_SETTINGS
    assert unknown == set(), f"the template sets {sorted(unknown)}, which nothing reads"
    assert REQUIRED - names == set(), f"the template does not set {sorted(REQUIRED - names)}"


def test_the_template_uses_identities_and_no_secret() -> None:
    settings = template_settings()
    assert "AzureWebJobsStorage" not in settings, "a connection string, not an identity"
    assert "ServiceBusConnection" not in settings, "a connection string, not an identity"
    assert settings["AzureWebJobsStorage__credential"] == "managedidentity"
    assert settings["ServiceBusConnection__credential"] == "managedidentity"
    for path in bicep_files():
        assert not SECRETS.search(path.read_text()), f"{path.name} reads or takes a secret"
    storage = (INFRA / "modules/storage.bicep").read_text()
    assert re.search(r"allowSharedKeyAccess:\s*false", storage)
    assert re.search(r"disableLocalAuth:\s*true", (INFRA / "modules/servicebus.bicep").read_text())
    assert re.search(r"DisableLocalAuth:\s*true", (INFRA / "modules/monitoring.bicep").read_text())


PLACEHOLDERS = {
    "Uri": "https://stqdexample.blob.core.windows.net/",
    "fullyQualifiedNamespace": "sb-qd-example.servicebus.windows.net",
    "clientId": "00000000-0000-0000-0000-000000000000",
    "MAX_DRAINERS_PER_QUEUE": "100",
    "APPLICATIONINSIGHTS_CONNECTION_STRING": "InstrumentationKey=00000000-0000-0000-0000-000000000000",
    "APPLICATIONINSIGHTS_AUTHENTICATION_STRING": "Authorization=AAD",
}


def deployed_environment() -> dict[str, str]:
    """The template's app settings as the app would see them; values only Azure knows become placeholders."""
    environ = {}
    for key, value in template_settings().items():
        if value is None:
            value = next((v for k, v in PLACEHOLDERS.items() if key.endswith(k)), None)
        assert value is not None, f"{key}: no placeholder for a value only Azure knows"
        environ[key] = value
    return environ


def test_the_app_starts_with_the_settings_the_template_sets() -> None:
    """Settings.from_env with the template's values: every value the template fixes is one the app accepts,
    and the connections parse as identities."""
    settings = Settings.from_env(deployed_environment())
    assert settings.storage.uses_identity
    assert settings.servicebus.namespace == "sb-qd-example.servicebus.windows.net"
    assert settings.trigger_queue == resolve_name("triggerQueue")
    assert settings.poison_queue(settings.work_queue) == resolve_name("poisonQueue"), "the poison queue it creates"


def resolve_name(member: str) -> str | None:
    main = tree("main.bicep")
    scope = {**variables(main), **parameter_defaults(main)}
    return resolve(properties(scope["names"])[member], scope)


def role_assignments() -> list[tuple[str, str, str]]:
    """(role variable, its id, scope symbol) of each role assignment in roles.bicep."""
    root = tree("modules/roles.bicep")
    ids = {name: string_value(value) for name, value in variables(root).items()}
    out = []
    for r in resources(root):
        if not r.type.startswith("Microsoft.Authorization/roleAssignments"):
            continue
        [definition] = find_property(r.body, "roleDefinitionId")
        variable = text(definition.named_children[-1].named_children[-1])
        [scope] = find_property(r.body, "scope")
        out.append((variable, str(ids.get(variable)), text(scope)))
    return out


def role_name(variable: str) -> str:
    """`azureServiceBusDataOwner` -> the built-in role it names, `Azure Service Bus Data Owner`."""
    words = re.sub(r"([A-Z])", r" \1", variable).split()
    name = " ".join(w[:1].upper() + w[1:] for w in words)
    assert name in roles.ROLE_IDS, f"{variable} names no built-in role in the table"
    return name


def test_each_role_assignment_is_the_built_in_role_it_names() -> None:
    assigned = role_assignments()
    assert len(assigned) >= 4
    for variable, role_id, _ in assigned:
        assert role_id == roles.ROLE_IDS[role_name(variable)], f"{variable} = {role_id}"


def assigned_roles(scopes: set[str]) -> set[str]:
    return {role_name(v) for v, _, scope in role_assignments() if scope in scopes}


def test_the_roles_cover_every_service_bus_call_the_app_makes_and_what_the_host_does() -> None:
    publisher = (ROOT / "shared/bus/publisher.py").read_text()
    sdk_call = r"\.(send_messages|schedule_messages|cancel_scheduled_messages|receive_messages)\("
    calls = set(re.findall(sdk_call, publisher))
    assert calls >= {"send_messages", "schedule_messages", "cancel_scheduled_messages"}, calls
    granted = assigned_roles({"triggerQueue", "namespace"})
    host = {k for k in roles.SERVICEBUS_OPERATIONS if k.startswith("host:")}
    for operation in calls | host:
        assert roles.SERVICEBUS_OPERATIONS[operation] & granted, f"no assigned role allows {operation}"
    assert roles.TELEMETRY & assigned_roles({"insights"}), "telemetry to Application Insights with Entra ID"


def test_azd_parameters_name_only_parameters_the_template_has_and_give_every_required_one() -> None:
    given = set(json.loads((INFRA / "main.parameters.json").read_text())["parameters"])
    declared, required = set(), set()
    for node in tree("main.bicep").named_children:
        if node.type == "parameter_declaration":
            name = text(node.named_children[0])
            declared.add(name)
            if not any(c.type == "=" for c in node.children):
                required.add(name)
    assert given <= declared, f"unknown parameters: {sorted(given - declared)}"
    assert required <= given, f"azd would prompt for {sorted(required - given)}"
    assert required == {"environmentName", "location"}
