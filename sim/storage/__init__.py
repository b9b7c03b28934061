"""The storage account stand-in: Azure Storage queues and blobs in memory, served to the app's real SDK clients
over an azure-core transport (`transport`: `SimTransport`), from the account's contents (`account`) through the REST
operations on blobs, containers and leases (`blobs`) and on queues (`queues`), each request charged to the caller
operation that sent it (`charges`)."""
