// Log Analytics and a workspace-based Application Insights that accepts telemetry only with Entra ID
// (the function app sends it as its managed identity: Monitoring Metrics Publisher, roles.bicep). A daily cap
// bounds what a log storm can cost.
param logAnalyticsName string
param applicationInsightsName string
param location string
param tags object
@description('Daily ingestion cap in GB; -1 for none.')
param dailyCapGb int

resource workspace 'Microsoft.OperationalInsights/workspaces@2023-09-01' = {
  name: logAnalyticsName
  location: location
  tags: tags
  properties: {
    sku: { name: 'PerGB2018' }
    retentionInDays: 30
    workspaceCapping: {
      dailyQuotaGb: dailyCapGb
    }
  }
}

resource insights 'Microsoft.Insights/components@2020-02-02' = {
  name: applicationInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: workspace.id
    DisableLocalAuth: true
  }
}

output applicationInsightsName string = insights.name
output logAnalyticsId string = workspace.id
