// Alerts as code: what an operator must hear about without watching the dashboard. Each notifies the action
// group when one is given (alertActionGroupId), else fires in the portal only.
// - poison: messages in the work queue's poison queue (items that failed MAX_DEQUEUE_COUNT times), as a metric;
// - the Log Analytics daily cap reached (the log alerts' blind spot);
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
param logAnalyticsId string

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

// Storage metrics have no per-queue dimension, so the poison queue's depth comes from the app: the gauge
// `queue_drain.queue.depth` (kind=poison, shared.telemetry.metrics), observed after every drain execution that parked
// items, at every GET /api/queues, and exported every minute while an instance lives. A metric alert, not a log
// query: it fires on depth > 0 (not on moves counted in a window), and it does not read the Log Analytics workspace,
// which stops taking logs for the rest of the day once its daily cap is reached. skipMetricValidation: the custom
// metric exists only once the app has sent it, and provisioning must not fail before that.
resource poison 'Microsoft.Insights/metricAlerts@2018-03-01' = {
  name: 'qd-poison-${functionAppName}'
  location: 'global'
  tags: tags
  properties: {
    description: 'Parked chunks in ${poisonQueueName} (or a partition\'s poison queue): depth above 0'
    severity: 2
    enabled: true
    scopes: [insights.id]
    evaluationFrequency: 'PT15M'
    windowSize: 'PT6H'
    criteria: {
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          name: 'poisonDepth'
          criterionType: 'StaticThresholdCriterion'
          metricName: 'queue_drain.queue.depth'
          metricNamespace: 'azure.applicationinsights'
          dimensions: [{ name: 'kind', operator: 'Include', values: ['poison'] }]
          operator: 'GreaterThan'
          threshold: 0
          timeAggregation: 'Maximum'
          skipMetricValidation: true
        }
      ]
    }
    actions: actions
  }
}

// The log alerts below (failures) read the workspace; past its daily cap it takes no logs until midnight UTC and
// they go blind. This one says so: Microsoft's documented query on the workspace's own operation log, which records
// the cap being reached ("OverQuota").
resource dailyCap 'Microsoft.Insights/scheduledQueryRules@2023-03-15-preview' = {
  name: 'qd-dailycap-${functionAppName}'
  location: location
  tags: tags
  properties: {
    displayName: 'queue-drain: the Log Analytics daily cap was reached (log alerts are blind until midnight UTC)'
    severity: 2
    enabled: true
    scopes: [logAnalyticsId]
    evaluationFrequency: 'PT15M'
    windowSize: 'PT15M'
    criteria: {
      allOf: [
        {
          query: '_LogOperation | where Category =~ "Ingestion" | where Detail contains "OverQuota"'
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
          // Http5xx is among the site metrics Microsoft lists for Flex Consumption apps; should a region not
          // publish it, the rule is still created rather than failing the whole provision.
          skipMetricValidation: true
        }
      ]
    }
    actions: actions
  }
}
