"""What the deployment's roles allow, from Azure's documentation, for the offline checks.

ROLE_IDS: built-in role definition ids, from the Azure built-in roles reference
(learn.microsoft.com/azure/role-based-access-control/built-in-roles; also in Microsoft's Functions azd samples).
PERMITTED_BY: for each operation the app or the host performs, the built-in roles whose actions allow it,
from "Permissions for calling data operations" (Storage: Authorize with Microsoft Entra ID, one data action
per REST operation) and the Service Bus roles (Send, Listen, Manage claims).
"""

from __future__ import annotations

ROLE_IDS = {
    "Storage Blob Data Owner": "b7e6dc6d-f1e8-4753-8033-0f276bb0955b",
    "Storage Blob Data Contributor": "ba92f5b4-2d11-453d-a403-e96b0029c9fe",
    "Storage Queue Data Contributor": "974c5e8b-45b9-4653-ba55-5f855dd0fb88",
    "Storage Table Data Contributor": "0a9a7e1f-b9d0-4cc4-a60d-0319b160aaa3",
    "Azure Service Bus Data Owner": "090c5cfd-751d-490a-894a-3ce6f1109419",
    "Azure Service Bus Data Sender": "69a216fc-b8fb-44d8-bc22-1f3c2cd27a39",
    "Azure Service Bus Data Receiver": "4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0",
    "Monitoring Metrics Publisher": "3913510d-42f4-4e42-8a64-420c390055eb",
}

BLOB_WRITE = frozenset({"Storage Blob Data Owner", "Storage Blob Data Contributor"})
BLOB_READ = BLOB_WRITE  # (Storage Blob Data Reader too; not assigned here)
QUEUE = frozenset({"Storage Queue Data Contributor"})
SB_SEND = frozenset({"Azure Service Bus Data Owner", "Azure Service Bus Data Sender"})
SB_LISTEN = frozenset({"Azure Service Bus Data Owner", "Azure Service Bus Data Receiver"})
SB_MANAGE = frozenset({"Azure Service Bus Data Owner"})

# Storage operations by the names shared.telemetry.metering.classify gives them. Blob: blobs/read, blobs/write (put,
# block, metadata, properties, copy, lease), blobs/delete, containers/read|write|delete. Queue: messages/read
# (peek), messages/process/action (get, delete), messages/add/action (put), messages/write (update),
# messages/delete (clear), queues/read|write|delete and queues/metadata/read|write.
STORAGE_OPERATIONS = {
    **dict.fromkeys(["blob.GetBlob", "blob.GetBlobProperties", "blob.GetMetadata", "blob.GetProperties"], BLOB_READ),
    **dict.fromkeys(["blob.ListBlobs", "blob.GetBlocklist", "blob.GetContainerProperties"], BLOB_READ),
    **dict.fromkeys(["blob.PutBlob", "blob.PutBlock", "blob.PutBlocklist", "blob.PutMetadata"], BLOB_WRITE),
    **dict.fromkeys(["blob.PutProperties", "blob.CopyBlob", "blob.DeleteBlob", "blob.CreateContainer"], BLOB_WRITE),
    **dict.fromkeys(["blob.DeleteContainer", "blob.LeaseContainer"], BLOB_WRITE),
    **{f"blob.LeaseBlob.{a}": BLOB_WRITE for a in ("Acquire", "Renew", "Release", "Break", "Change")},
    **dict.fromkeys(["queue.PutMessage", "queue.GetMessages", "queue.PeekMessages", "queue.DeleteMessage"], QUEUE),
    **dict.fromkeys(["queue.UpdateMessage", "queue.ClearMessages", "queue.CreateQueue", "queue.DeleteQueue"], QUEUE),
    **dict.fromkeys(["queue.GetQueueMetadata", "queue.SetQueueMetadata", "queue.ListQueues"], QUEUE),
}

# Service Bus: the SDK calls the app makes on its sender, and what the host does with the trigger queue.
SERVICEBUS_OPERATIONS = {
    "send_messages": SB_SEND,
    "schedule_messages": SB_SEND,
    "cancel_scheduled_messages": SB_SEND,
    "host: receive, complete, abandon, renew lock (the trigger)": SB_LISTEN,
    "host: queue runtime properties (target-based scaling)": SB_MANAGE,
}

TELEMETRY = frozenset({"Monitoring Metrics Publisher"})
