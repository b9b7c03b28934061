// The function app on Flex Consumption (Linux, Python 3.11), running as the user-assigned identity. Its
// deployment package lives in a blob container reached with that identity; the app settings are names and
// endpoints only (identity-based connections), never a key or a connection string with a secret.
param name string
param planName string
param location string
param tags object
param identityId string
param identityClientId string
param instanceMemoryMB int
param maximumInstanceCount int
@description('Always-ready instances for the drain function (Service Bus trigger); 0 for none.')
param drainAlwaysReady int
param deploymentContainerUrl string
param applicationInsightsName string
@description('The Log Analytics workspace that receives the platform\'s function logs (diagnostic settings).')
param logAnalyticsId string
@description('The app settings the app and the host read (names checked by tests/infra/test_templates.py).')
param appSettings object

resource insights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

resource plan 'Microsoft.Web/serverfarms@2024-04-01' = {
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    reserved: true
  }
}

resource site 'Microsoft.Web/sites@2024-04-01' = {
  name: name
  location: location
  tags: union(tags, { 'azd-service-name': 'api' })
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${identityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    siteConfig: {
      minTlsVersion: '1.2'
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: deploymentContainerUrl
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: identityId
          }
        }
      }
      scaleAndConcurrency: {
        instanceMemoryMB: instanceMemoryMB
        maximumInstanceCount: maximumInstanceCount
        alwaysReady: drainAlwaysReady > 0 ? [{ name: 'function:drain', instanceCount: drainAlwaysReady }] : []
      }
      runtime: {
        name: 'python'
        version: '3.11'
      }
    }
  }
}

resource settings 'Microsoft.Web/sites/config@2024-04-01' = {
  parent: site
  name: 'appsettings'
  properties: union(appSettings, {
    APPLICATIONINSIGHTS_CONNECTION_STRING: insights.properties.ConnectionString
    APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'ClientId=${identityClientId};Authorization=AAD'
    // With host.json's telemetryMode OpenTelemetry: the worker tells the host the app exports its own spans and
    // logs (shared.telemetry, with the managed identity), and the host stops forwarding the worker's logs.
    // PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY, the setting Microsoft documents for Application Insights,
    // would have the worker configure the distro itself, without this app's Entra ID credential.
    PYTHON_ENABLE_OPENTELEMETRY: 'true'
  })
}

// The platform's own function logs (FunctionAppLogs: host and worker lines, including what happens before the
// app's telemetry starts, such as an indexing failure or a bad app setting) into Log Analytics.
resource diagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'function-logs'
  scope: site
  properties: {
    workspaceId: logAnalyticsId
    logs: [
      {
        category: 'FunctionAppLogs'
        enabled: true
      }
    ]
  }
}

output name string = site.name
output url string = 'https://${site.properties.defaultHostName}'
