// The user-assigned identity the function app runs as: every data-plane call it makes, and the host's own
// (deployment package, timer and listener leases, Service Bus trigger), are authorized through it (roles.bicep).
param name string
param location string
param tags object

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: name
  location: location
  tags: tags
}

output id string = identity.id
output clientId string = identity.properties.clientId
output principalId string = identity.properties.principalId
