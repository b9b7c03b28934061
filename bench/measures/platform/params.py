"""The platform model's inputs: the platform's constants, each with its source or assumption (`PlatformParams`), the
workload, and the app's own knobs as it ships (`AppPolicy`, read from the settings' defaults and host.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from shared.core.settings import Settings
from shared.engine.drainer import SCALE_CHECK_S

ROOT = Path(__file__).resolve().parents[3]


def setting_default(name: str) -> Any:
    """The app's own default for one setting (the model runs the app as it ships)."""
    for f in fields(Settings):
        if f.name == name:
            return f.default
    raise KeyError(name)


def host_max_concurrent_calls() -> int:
    host = json.loads((ROOT / "host.json").read_text())
    return int(host["extensions"]["serviceBus"]["maxConcurrentCalls"])


@dataclass(frozen=True)
class PlatformParams:
    # Target-based scaling adds at most four instances per decision ("Target-based scaling", Azure Functions docs,
    # learn.microsoft.com/azure/azure-functions/functions-target-based-scaling).
    max_add_per_decision: int = 4
    # How often the scale controller adds instances: for non-HTTP triggers at most once every 30 seconds
    # ("Event-driven scaling in Azure Functions", learn.microsoft.com/azure/azure-functions/event-driven-scaling,
    # "Understanding scaling behaviors", December 2025). Premium may be faster; Flex Consumption publishes nothing
    # else. A parameter.
    decision_interval_s: float = 30.0
    # An instance with no execution is removed after this long. Not published; a Microsoft product manager speaks
    # of about 30 s on Flex Consumption (github.com/Azure/azure-functions-host/issues/10706). bench.idle_sources
    # gives the range 30 s to 20 minutes; it moves instance-seconds here, not the time to drain.
    scale_in_delay_s: float = 30.0
    # Cold start of a new instance, drawn uniformly from this range. Not published: a few seconds is typical for a
    # warm pool; users report up to about 2 minutes for the first Service Bus message on a Flex Consumption app
    # without always-ready instances (github.com/Azure/azure-functions-dotnet-worker/issues/2902). SLOW_COLD_START_S
    # is the pessimistic range the report also runs. Always-ready instances skip it.
    cold_start_s: tuple[float, float] = (5.0, 30.0)
    always_ready: int = 0
    # Flex Consumption maximumInstanceCount: default 100, up to 1,000 (Flex Consumption plan docs). Consumption: 200.
    max_instances: int = 100
    # One vCPU per instance at 2,048 MB instance memory (Flex Consumption plan docs).
    vcpus_per_instance: float = 1.0
    # Azure Storage scalability targets: 2,000 messages/s per queue (1 KiB messages), 20,000 per account.
    queue_messages_per_s: float = 2_000.0
    # Service Bus: a trigger event reaches an idle listener in tens of milliseconds (assumed 50 ms).
    delivery_latency_s: float = 0.05
    # Whether the scaler's count of a Service Bus queue includes messages locked by running executions. The
    # extension's ServiceBusTargetScaler divides QueueRuntimeProperties.ActiveMessageCount by maxConcurrentCalls
    # (azure-sdk-for-net, sdk/servicebus/Microsoft.Azure.WebJobs.Extensions.ServiceBus/src/Listeners/
    # ServiceBusTargetScaler.cs and ServiceBusMetricsProvider.cs); Microsoft defines ActiveMessageCount as messages
    # "in the active state and ready for delivery" and no source says whether a locked message is counted. Both
    # readings are run (LOCK_READINGS).
    locked_counts_as_active: bool = True
    # The built-in queue trigger: an instance runs batchSize + newBatchThreshold (16 + 8) messages at once (queue
    # trigger docs), and its target executions per instance is the same sum: QueueTargetScaler uses
    # BatchSize + NewBatchThreshold unless dynamic concurrency sets one (azure-sdk-for-net,
    # sdk/storage/Microsoft.Azure.WebJobs.Extensions.Storage.Common/src/Listeners/QueueTargetScaler.cs, since 2024).
    queue_batch_size: int = 16
    queue_new_batch_threshold: int = 8
    # Once idle, the built-in trigger polls at most every maxPollingInterval (1 minute by default, queue trigger
    # docs), so a message that arrives on an always-ready instance waits up to that long.
    queue_max_polling_interval_s: float = 60.0
    # One GetMessages plus one DeleteMessage per message at a storage round trip of about 10 ms each in the
    # same region (assumed): 24 messages in flight make about 1,200 messages/s per instance at most.
    queue_round_trip_s: float = 0.010
    # Time step of the simulation.
    step_s: float = 0.25


# The pessimistic cold start: users report up to about 2 minutes (see cold_start_s).
SLOW_COLD_START_S = (30.0, 120.0)
# Both readings of ActiveMessageCount: locked messages counted, or only those ready for delivery.
LOCK_READINGS = (True, False)


@dataclass(frozen=True)
class Workload:
    items: int = 10_000_000
    # CPU the user's handler spends per item (the bench's CPU-bound handler spends about 1 ms).
    cpu_s_per_item: float = 0.001
    # One drainer's I/O ceiling without CPU limits: receive_batch x chunk_concurrency chunks in flight at the
    # storage round trip of Azure (assumed 20 ms): 32 x 250 items per 20 ms is far above any CPU figure, so
    # CPU bounds every instance here.
    drainer_items_per_s: float = 400_000.0


@dataclass(frozen=True)
class AppPolicy:
    """The app's knobs the model reads; the defaults are the app as it ships."""

    max_concurrent_calls: int = field(default_factory=host_max_concurrent_calls)
    max_drainers_per_queue: int = field(default_factory=lambda: int(setting_default("max_drainers_per_queue")))
    scale_out_depth: int = field(default_factory=lambda: int(setting_default("scale_out_depth")))
    drain_budget_s: float = field(default_factory=lambda: float(setting_default("drain_budget_s")))
    chunk_items: int = field(default_factory=lambda: int(setting_default("chunk_max_items")))
    scale_check_s: float = SCALE_CHECK_S
