// Every data-plane permission the function app's identity needs, and nothing at the subscription or
// resource-group level. tests/infra/test_templates.py checks each id against the role it names and that the
// roles cover every storage operation the app's own metering policy records.
param principalId string
param storageAccountName string
param serviceBusNamespaceName string
param triggerQueueName string
param applicationInsightsName string

// Built-in role definition ids (Azure built-in roles reference).
var storageBlobDataOwner = 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
var storageQueueDataContributor = '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
var azureServiceBusDataOwner = '090c5cfd-751d-490a-894a-3ce6f1109419'
var monitoringMetricsPublisher = '3913510d-42f4-4e42-8a64-420c390055eb'

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' existing = {
  name: storageAccountName
}

resource namespace 'Microsoft.ServiceBus/namespaces@2022-10-01-preview' existing = {
  name: serviceBusNamespaceName
}

resource triggerQueue 'Microsoft.ServiceBus/namespaces/queues@2022-10-01-preview' existing = {
  parent: namespace
  name: triggerQueueName
}

resource insights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

// Blobs: the app's manifests, claim checks, results, leases (acquire, renew, release), metadata and listings,
// and its containers; the host's deployment package, timer schedule status and listener leases. The Functions
// host documents Storage Blob Data Owner for AzureWebJobsStorage with an identity.
resource blobOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, principalId, storageBlobDataOwner)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageBlobDataOwner)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

// Queues: put, get (dequeue), peek, update, delete messages, read metadata (depth), create queues (partitions
// and their poison queues are created on first use).
resource queueContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, principalId, storageQueueDataContributor)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageQueueDataContributor)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

// Service Bus, on the trigger queue only: the app sends, schedules and cancels scheduled events; the host
// receives them (peek-lock, complete, abandon, renew lock) and the scale controller reads the queue's
// runtime properties (active message count) through the same connection, which needs the Manage right that
// only Data Owner carries among the built-in roles.
resource serviceBusOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(triggerQueue.id, principalId, azureServiceBusDataOwner)
  scope: triggerQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', azureServiceBusDataOwner)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

// Telemetry to Application Insights with Entra ID (local auth is off there).
resource metricsPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(insights.id, principalId, monitoringMetricsPublisher)
  scope: insights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', monitoringMetricsPublisher)
    principalId: principalId
    principalType: 'ServicePrincipal'
  }
}

// Whoever deploys (azd's AZURE_PRINCIPAL_ID), as Microsoft's azd samples do: with shared-key access off, the
// operator tools (`python -m shared.cli`, Storage Explorer, `az storage` with --auth-mode login) need Entra ID
// data-plane roles of their own. Read and write, not the owner's ACL rights; sending to the trigger queue for
// a replay. These assignments name no principalType: the deployer may be a person (azd up) or CI's service
// principal, no azd release tells which, and ARM refuses a wrong one (UnmatchedPrincipalType); left out, ARM looks
// the principal up itself, which is safe for a principal that exists before the deployment, as the deployer does.
@description('Object id of the deployer; empty: no role for it.')
param deployerPrincipalId string = ''

var storageBlobDataContributor = 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
var azureServiceBusDataSender = '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'

resource deployerBlobs 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(deployerPrincipalId)) {
  name: guid(account.id, deployerPrincipalId, storageBlobDataContributor)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageBlobDataContributor)
    principalId: deployerPrincipalId
  }
}

resource deployerQueues 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(deployerPrincipalId)) {
  name: guid(account.id, deployerPrincipalId, storageQueueDataContributor)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', storageQueueDataContributor)
    principalId: deployerPrincipalId
  }
}

resource deployerSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(deployerPrincipalId)) {
  name: guid(triggerQueue.id, deployerPrincipalId, azureServiceBusDataSender)
  scope: triggerQueue
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', azureServiceBusDataSender)
    principalId: deployerPrincipalId
  }
}
