// The storage account: the app's work queue and its poison queue, its containers, the deployment package's
// container, and a lifecycle rule that deletes old batch data. Shared-key access is off: every caller uses
// Entra ID (roles.bicep).
param name string
param location string
param tags object
param containerNames array
param queueNames array
@description('Containers whose blobs the lifecycle rule deletes after retentionDays.')
param expiringContainers array
param retentionDays int

resource account 'Microsoft.Storage/storageAccounts@2023-05-01' = {
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: { name: 'Standard_LRS' }
  properties: {
    allowSharedKeyAccess: false
    allowBlobPublicAccess: false
    defaultToOAuthAuthentication: true
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: 'Enabled'
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2023-05-01' = {
  parent: account
  name: 'default'
}

resource containers 'Microsoft.Storage/storageAccounts/blobServices/containers@2023-05-01' = [
  for container in containerNames: {
    parent: blobService
    name: container
    properties: { publicAccess: 'None' }
  }
]

resource queueService 'Microsoft.Storage/storageAccounts/queueServices@2023-05-01' = {
  parent: account
  name: 'default'
}

resource queues 'Microsoft.Storage/storageAccounts/queueServices/queues@2023-05-01' = [
  for queue in queueNames: {
    parent: queueService
    name: queue
  }
]

// Results, claim checks, manifests and the batch index (all under the batches and results containers) go
// after retentionDays. The state container (leases, back-off state, the poison index) is never expired.
// A parked chunk whose items sit in a claim-check blob cannot be replayed once that blob is gone.
resource lifecycle 'Microsoft.Storage/storageAccounts/managementPolicies@2023-05-01' = {
  parent: account
  name: 'default'
  properties: {
    policy: {
      rules: [
        {
          name: 'expire-batch-data'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: ['blockBlob']
              prefixMatch: [for container in expiringContainers: '${container}/']
            }
            actions: {
              baseBlob: {
                delete: { daysAfterModificationGreaterThan: retentionDays }
              }
            }
          }
        }
      ]
    }
  }
  dependsOn: [containers]
}

output name string = account.name
output blobEndpoint string = account.properties.primaryEndpoints.blob
output queueEndpoint string = account.properties.primaryEndpoints.queue
