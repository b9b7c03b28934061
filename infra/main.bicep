// queue-drain on Azure: a Flex Consumption function app reaching storage and Service Bus with a
// user-assigned managed identity, no secret anywhere. Deployed by `azd up` (azure.yaml) or
// `az deployment sub create -f infra/main.bicep` (README "Deploying").
targetScope = 'subscription'

@minLength(1)
@maxLength(40)
@description('Name of the environment (azd: AZURE_ENV_NAME); with the subscription and region it seeds every resource name.')
param environmentName string

// The regions that offer Flex Consumption, as Microsoft's Flex Consumption azd samples list them
// (functions-quickstart-python-http-azd, November 2025; its early-access region eastus2euap left out). Check
// `az functionapp list-flexconsumption-locations` for regions added since. azd offers only these (azd 1.12+).
@minLength(1)
@description('Region of every resource; one that offers Flex Consumption.')
@allowed([
  'australiaeast'
  'australiasoutheast'
  'brazilsouth'
  'canadacentral'
  'centralindia'
  'centralus'
  'eastasia'
  'eastus'
  'eastus2'
  'francecentral'
  'germanywestcentral'
  'italynorth'
  'japaneast'
  'koreacentral'
  'northcentralus'
  'northeurope'
  'norwayeast'
  'southafricanorth'
  'southcentralus'
  'southeastasia'
  'southindia'
  'spaincentral'
  'swedencentral'
  'uaenorth'
  'uksouth'
  'ukwest'
  'westcentralus'
  'westeurope'
  'westus'
  'westus2'
  'westus3'
])
@metadata({
  azd: {
    type: 'location'
  }
})
param location string

@description('Object id of whoever deploys (azd: AZURE_PRINCIPAL_ID, set by azd from the signed-in account): it gets the data-plane roles the operator tools need, since shared-key access is off. Empty: none.')
param principalId string = ''

@description('Where the app reads a request\'s tenant (TENANT_FROM): `principal`, the caller\'s identity behind App Service Authentication with Entra ID (docs/deploying.md "Caller identity"); `header`, the X-Tenant a request names, for one trusted caller (no authentication).')
@allowed(['principal', 'header'])
param tenantFrom string = 'principal'

@description('The Entra app registration whose tokens the app accepts (azd: AUTH_CLIENT_ID, which infra/hooks/app_registration.py sets). Required with tenantFrom `principal`.')
param authClientId string = ''

@description('Memory of each instance in MB; 2048 gives one vCPU, 4096 two.')
@allowed([512, 2048, 4096])
param instanceMemoryMB int = 2048

// Microsoft's event-driven scaling page (Flex Consumption) gives 1 as the lowest value and 1000 as the highest, but
// ARM refuses values under 40 outside the few regions Microsoft lists for them: the template takes 40 to 1000, so a
// value ARM may refuse fails here, before anything is created. In a listed region, lower this bound by hand.
@description('Most on-demand instances of each scale group (the HTTP functions together; the drain function; the timer), not of the whole app; always-ready instances are not counted. Flex Consumption defaults to 100; 40 to 1000 here (under 40 only in the regions Microsoft lists: edit this bound). MAX_DRAINERS_PER_QUEUE follows it, within the regional memory quota.')
@minValue(40)
@maxValue(1000)
param maximumInstanceCount int = 100

@description('The subscription\'s Flex Consumption memory quota in this region, in MB (512,000 unless support raised it), shared by every Flex Consumption app there: the most drain instances it allows is this over instanceMemoryMB.')
@minValue(512)
param regionalMemoryQuotaMB int = 512000

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

@description('Any other app setting the app reads (README "Settings"), as NAME=value pairs separated by semicolons, for example `CHUNK_MAX_ITEMS=500;RECEIVERS=8`, or as a JSON object of strings for values that hold a semicolon (azd: APP_SETTINGS). The template writes the whole app settings list on every deployment, so a setting changed by hand in the portal is reset: set it here. Names the template sets itself are set through their own parameters and win.')
param appSettings string = ''

@description('Log Analytics daily ingestion cap in GB; -1 for none. When reached, logs stop until the next day (UTC).')
param logDailyCapGb int = 1

@description('Fraction of traces kept (0 to 1), as OTEL_TRACES_SAMPLER_ARG of the Application Insights fixed-percentage sampler; 1 keeps every trace.')
param traceSamplingRatio string = '1.0'

@description('Resource id of an existing action group the alerts notify; empty: the alerts fire in the portal only.')
param alertActionGroupId string = ''

// The app's Service Bus queue, storage queue and blob containers (their defaults are shared/settings.py's).
@description('The trigger queue (TRIGGER_QUEUE).')
param triggerQueueName string = 'queue-drain-trigger'
@description('The work queue (WORK_QUEUE); its poison queue is `<name>-poison`.')
param workQueueName string = 'work-items'
@description('Manifests and claim-check blobs (BATCHES_CONTAINER).')
param batchesContainerName string = 'queue-drain-batches'
@description('Result records (RESULTS_CONTAINER).')
param resultsContainerName string = 'queue-drain-results'
@description('Leases, back-off state and the poison index (STATE_CONTAINER).')
param stateContainerName string = 'queue-drain-state'

var resourceToken = toLower(uniqueString(subscription().id, environmentName, location))
var tags = { 'azd-env-name': environmentName }
var appName = 'func-qd-${resourceToken}'
// The app's own names, set explicitly in the app settings (their defaults are shared/settings.py's).
var names = {
  triggerQueue: triggerQueueName
  workQueue: workQueueName
  poisonQueue: '${workQueueName}-poison'
  batchesContainer: batchesContainerName
  resultsContainer: resultsContainerName
  stateContainer: stateContainerName
  deploymentContainer: 'app-package-${resourceToken}'
}
// One drainer per instance (host.json maxConcurrentCalls 1): no more drainers than the drain function's scale
// group may have instances, nor than the regional memory quota can hold.
var maxDrainersPerQueue = min(maximumInstanceCount, regionalMemoryQuotaMB / instanceMemoryMB, 1000)
// APP_SETTINGS: a JSON object (`{"NAME": "value"}`: any value, `;` included), or `NAME=value;NAME=value`, each split
// at its first `=` (a value may hold `=`, not `;`). infra/hooks/preprovision.py refuses a repeated name, a pair with
// no `=` and a JSON value that is not a string before anything is provisioned.
var passedSettings = startsWith(trim(appSettings), '{')
  ? json(appSettings)
  : toObject(
      filter(split(appSettings, ';'), pair => contains(pair, '=')),
      pair => trim(substring(pair, 0, indexOf(pair, '='))),
      pair => substring(pair, indexOf(pair, '=') + 1)
    )

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
    dailyCapGb: logDailyCapGb
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
    deployerPrincipalId: principalId
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
    logAnalyticsId: monitoring.outputs.logAnalyticsId
    appSettings: union(passedSettings, templateSettings)
  }
}

module auth 'modules/auth.bicep' = if (tenantFrom == 'principal') {
  name: 'auth'
  scope: rg
  params: {
    siteName: app.outputs.name
    clientId: authClientId // infra/hooks/preprovision.py refuses `principal` without it
  }
}

module alerts 'modules/alerts.bicep' = {
  name: 'alerts'
  scope: rg
  params: {
    location: location
    tags: tags
    serviceBusNamespaceName: serviceBus.outputs.name
    triggerQueueName: names.triggerQueue
    poisonQueueName: names.poisonQueue
    functionAppName: app.outputs.name
    applicationInsightsName: monitoring.outputs.applicationInsightsName
    actionGroupId: alertActionGroupId
    logAnalyticsId: monitoring.outputs.logAnalyticsId
  }
}

// The settings the template sets itself; APP_SETTINGS (passedSettings) carries any other the app reads.
var templateSettings = {
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
  MAX_DRAINERS_PER_QUEUE: string(maxDrainersPerQueue)
  OTEL_TRACES_SAMPLER: 'microsoft.fixed_percentage'
  OTEL_TRACES_SAMPLER_ARG: traceSamplingRatio
  TENANT_FROM: tenantFrom
}

output AZURE_RESOURCE_GROUP string = rg.name
output AZURE_FUNCTION_APP_NAME string = app.outputs.name
output FUNCTION_APP_URL string = app.outputs.url
output MAX_DRAINERS_PER_QUEUE int = maxDrainersPerQueue
output TENANT_FROM string = tenantFrom // the smoke hook checks that Easy Auth refuses a forged principal
output FETCH_FUNCTION_KEY string = 'az functionapp keys list --resource-group ${rg.name} --name ${app.outputs.name} --query functionKeys.default --output tsv'
output APPLICATIONINSIGHTS_NAME string = monitoring.outputs.applicationInsightsName
