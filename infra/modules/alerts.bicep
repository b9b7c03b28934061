// Alerts as code: what an operator must hear about without watching the dashboard. Each notifies the action
// group when one is given (alertActionGroupId), else fires in the portal only.
// - poison: messages in the work queue's poison queue (items that failed MAX_DEQUEUE_COUNT times);
// - dead letters: trigger events Service Bus dead-lettered (a malformed event, or one the app failed on
//   MaxDeliveryCount times);
// - function failures, and the HTTP 5xx rate of the API.
param location string
param tags object
param serviceBusNamespaceName string
param triggerQueueName string
param poisonQueueName string
param functionAppName string
param applicationInsightsName string
param actionGroupId string

var actions = empty(actionGroupId) ? [] : [{ actionGroupId: actionGroupId }]

resource namespace 'Microsoft.ServiceBus/namespaces@2022-10-01-preview' existing = {
  name: serviceBusNamespaceName
}

resource site 'Microsoft.Web/sites@2024-04-01' existing = {
  name: functionAppName
}

resource insights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: applicationInsightsName
}

// Storage metrics have no per-queue dimension, so the poison queue's growth is read from the app's own log:
// every move writes a `shared.engine.drainer` warning "... moved to the poison queue ..." (shared/engine/settling.py),
// exported to Application Insights by shared.telemetry.export. The depth itself is on GET /api/queues.
resource poison 'Microsoft.Insights/scheduledQueryRules@2023-03-15-preview' = {
  name: 'qd-poison-${functionAppName}'
  location: location
  tags: tags
  properties: {
    displayName: 'queue-drain: messages moved to ${poisonQueueName} (or a partition\'s or lane\'s poison queue)'
    severity: 2
    enabled: true
    scopes: [insights.id]
    evaluationFrequency: 'PT15M'
    windowSize: 'PT15M'
    criteria: {
      allOf: [
        {
          query: 'traces | where message has "moved to the poison queue"'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: { numberOfEvaluationPeriods: 1, minFailingPeriodsToAlert: 1 }
        }
      ]
    }
    actions: { actionGroups: empty(actionGroupId) ? [] : [actionGroupId] }
  }
}

resource deadLetters 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: 'qd-deadletters-${serviceBusNamespaceName}'
  location: 'global'
  tags: tags
  properties: {
    description: 'Trigger events dead-lettered on ${triggerQueueName}'
    severity: 2
    enabled: true
    scopes: [namespace.id]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          name: 'deadlettered'
          criterionType: 'StaticThresholdCriterion'
          metricName: 'DeadletteredMessages'
          metricNamespace: 'Microsoft.ServiceBus/namespaces'
          dimensions: [{ name: 'EntityName', operator: 'Include', values: [triggerQueueName] }]
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Maximum'
        }
      ]
    }
    actions: actions
  }
}

resource failures 'Microsoft.Insights/scheduledQueryRules@2023-03-15-preview' = {
  name: 'qd-failures-${functionAppName}'
  location: location
  tags: tags
  properties: {
    displayName: 'queue-drain: function executions failed'
    severity: 2
    enabled: true
    scopes: [insights.id]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    criteria: {
      allOf: [
        {
          query: 'requests | where success == false'
          timeAggregation: 'Count'
          operator: 'GreaterThan'
          threshold: 0
          failingPeriods: { numberOfEvaluationPeriods: 1, minFailingPeriodsToAlert: 1 }
        }
      ]
    }
    actions: { actionGroups: empty(actionGroupId) ? [] : [actionGroupId] }
  }
}

resource http5xx 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: 'qd-http5xx-${functionAppName}'
  location: 'global'
  tags: tags
  properties: {
    description: 'HTTP 5xx answers of the API'
    severity: 2
    enabled: true
    scopes: [site.id]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT15M'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          name: 'http5xx'
          criterionType: 'StaticThresholdCriterion'
          metricName: 'Http5xx'
          metricNamespace: 'Microsoft.Web/sites'
          operator: 'GreaterThan'
          threshold: 5
          timeAggregation: 'Total'
        }
      ]
    }
    actions: actions
  }
}
