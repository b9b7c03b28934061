// queue-drain on Azure: a Flex Consumption function app reaching storage and Service Bus with a
// user-assigned managed identity, no secret anywhere. Deployed by `azd up` (azure.yaml) or
// `az deployment sub create -f infra/main.bicep` (README "Deploying").
targetScope = 'subscription'

@minLength(1)
@maxLength(40)
@description('Name of the environment (azd: AZURE_ENV_NAME); with the subscription and region it seeds every resource name.')
param environmentName string

@minLength(1)
@description('Region of every resource; it must offer Flex Consumption (az functionapp list-flexconsumption-locations).')
param location string

@description('Memory of each instance in MB; 2048 gives one vCPU, 4096 two.')
@allowed([512, 2048, 4096])
param instanceMemoryMB int = 2048

@description('Most instances the platform may run: Flex Consumption defaults to 100 and allows up to 1000. MAX_DRAINERS_PER_QUEUE follows it.')
@minValue(1)
@maxValue(1000)
param maximumInstanceCount int = 100

@description('Always-ready instances for the drain function. 0 (default): nothing billed while idle, but a doorbell that finds the app scaled to zero waits for a cold start (seconds; users report up to about 2 minutes for the first Service Bus message). 1 or more: sub-second wake-ups, each instance billed while idle (README "Deploying").')
@minValue(0)
@maxValue(20)
param drainAlwaysReady int = 0

@description('Days after which result blobs, claim checks, manifests and the batch index are deleted (storage lifecycle rule).')
@minValue(1)
param retentionDays int = 30

@description('How often Service Bus delivers a trigger event before dead-lettering it (MaxDeliveryCount).')
@minValue(1)
@maxValue(100)
param triggerMaxDeliveryCount int = 10

@description('The fallback timer (NCRONTAB, seconds first), the last net behind the look chain that watches every queue holding messages. Every 6 hours (default) lets an idle app scale to zero between ticks: about 180 storage transactions a day for one queue with every source counted. Every minute keeps an instance, and the host\'s locks, alive all day: about 10,200 a day (BENCHMARKS.md "Idle per app").')
param fallbackSchedule string = '0 0 */6 * * *'

var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = { 'azd-env-name': environmentName }
var appName = 'func-qd-${resourceToken}'
// The app's own names: the same values as shared/settings.py's defaults, set explicitly in the app settings.
var names = {
  triggerQueue: 'queue-drain-trigger'
  workQueue: 'work-items'
  poisonQueue: 'work-items-poison'
  batchesContainer: 'queue-drain-batches'
  resultsContainer: 'queue-drain-results'
  stateContainer: 'queue-drain-state'
  deploymentContainer: 'app-package-${resourceToken}'
}

resource rg 'Microsoft.Resources/resourceGroups@2024-03-01' = {
  name: 'rg-${environmentName}'
  location: location
  tags: tags
}

module identity 'modules/identity.bicep' = {
  name: 'identity'
  scope: rg
  params: {
    name: 'id-qd-${resourceToken}'
    location: location
    tags: tags
  }
}

module monitoring 'modules/monitoring.bicep' = {
  name: 'monitoring'
  scope: rg
  params: {
    logAnalyticsName: 'log-qd-${resourceToken}'
    applicationInsightsName: 'appi-qd-${resourceToken}'
    location: location
    tags: tags
  }
}

module storage 'modules/storage.bicep' = {
  name: 'storage'
  scope: rg
  params: {
    name: 'stqd${resourceToken}'
    location: location
    tags: tags
    containerNames: [names.deploymentContainer, names.batchesContainer, names.resultsContainer, names.stateContainer]
    queueNames: [names.workQueue, names.poisonQueue]
    expiringContainers: [names.batchesContainer, names.resultsContainer]
    retentionDays: retentionDays
  }
}

module serviceBus 'modules/servicebus.bicep' = {
  name: 'servicebus'
  scope: rg
  params: {
    name: 'sb-qd-${resourceToken}'
    location: location
    tags: tags
    queueName: names.triggerQueue
    maxDeliveryCount: triggerMaxDeliveryCount
  }
}

module roles 'modules/roles.bicep' = {
  name: 'roles'
  scope: rg
  params: {
    principalId: identity.outputs.principalId
    storageAccountName: storage.outputs.name
    serviceBusNamespaceName: serviceBus.outputs.name
    triggerQueueName: names.triggerQueue
    applicationInsightsName: monitoring.outputs.applicationInsightsName
  }
}

module app 'modules/functionapp.bicep' = {
  name: 'functionapp'
  scope: rg
  dependsOn: [roles]
  params: {
    name: appName
    planName: 'plan-qd-${resourceToken}'
    location: location
    tags: tags
    identityId: identity.outputs.id
    identityClientId: identity.outputs.clientId
    instanceMemoryMB: instanceMemoryMB
    maximumInstanceCount: maximumInstanceCount
    drainAlwaysReady: drainAlwaysReady
    deploymentContainerUrl: '${storage.outputs.blobEndpoint}${names.deploymentContainer}'
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    appSettings: {
      AzureWebJobsStorage__credential: 'managedidentity'
      AzureWebJobsStorage__clientId: identity.outputs.clientId
      AzureWebJobsStorage__blobServiceUri: storage.outputs.blobEndpoint
      AzureWebJobsStorage__queueServiceUri: storage.outputs.queueEndpoint
      ServiceBusConnection__fullyQualifiedNamespace: serviceBus.outputs.fullyQualifiedNamespace
      ServiceBusConnection__credential: 'managedidentity'
      ServiceBusConnection__clientId: identity.outputs.clientId
      TRIGGER_QUEUE: names.triggerQueue
      FALLBACK_SCHEDULE: fallbackSchedule
      WORK_QUEUE: names.workQueue
      BATCHES_CONTAINER: names.batchesContainer
      RESULTS_CONTAINER: names.resultsContainer
      STATE_CONTAINER: names.stateContainer
      MAX_DRAINERS_PER_QUEUE: string(maximumInstanceCount)
    }
  }
}

output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_FUNCTION_APP_NAME string = app.outputs.name
output FUNCTION_APP_URL string = app.outputs.url
output FETCH_FUNCTION_KEY string = 'az functionapp keys list --resource-group ${rg.name} --name ${app.outputs.name} --query functionKeys.default --output tsv'
output APPLICATIONINSIGHTS_NAME string = monitoring.outputs.applicationInsightsName
