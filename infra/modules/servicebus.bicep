// The doorbell: a Service Bus namespace and the trigger queue. Basic is the cheapest tier with every feature
// the app uses: queues, scheduled messages (and cancelling them), peek-lock with dead-lettering after
// MaxDeliveryCount, and Entra ID authorization. It has no topics, sessions, duplicate detection or
// transactions, none of which the app needs. Local (SAS) auth is off.
param name string
param location string
param tags object
param queueName string
param maxDeliveryCount int

resource namespace 'Microsoft.ServiceBus/namespaces@2022-10-01-preview' = {
  name: name
  location: location
  tags: tags
  sku: {
    name: 'Basic'
    tier: 'Basic'
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
  }
}

resource queue 'Microsoft.ServiceBus/namespaces/queues@2022-10-01-preview' = {
  parent: namespace
  name: queueName
  properties: {
    maxDeliveryCount: maxDeliveryCount
    lockDuration: 'PT1M'
    deadLetteringOnMessageExpiration: true
  }
}

output name string = namespace.name
// The host of the namespace's own endpoint (https://<name>.servicebus.<cloud suffix>:443/), not a hard-coded
// public-cloud suffix, so sovereign clouds work too.
var endpointParts = split(namespace.properties.serviceBusEndpoint, '/')
output fullyQualifiedNamespace string = first(split(endpointParts[2], ':'))
