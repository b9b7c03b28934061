// App Service Authentication (Easy Auth) in front of the function app, with Microsoft Entra ID: the platform
// validates each caller's bearer token (issued by this directory for the app registration `clientId`), answers
// 401 to a request without a valid one, and sets X-MS-CLIENT-PRINCIPAL, whose app roles name the caller's tenant
// (`tenant.<id>`) and the `operator` (shared/core/identity.py). The OpenAPI document and the smoke test's probe
// stay out of it. The app registration, its roles and its service principal are made by
// infra/hooks/app_registration.py (docs/deploying.md "Caller identity"): the Microsoft Graph Bicep extension's
// `extension` statement is not parsed by the offline check of this template (tree-sitter-bicep), so the
// registration is scripted instead.
param siteName string
@description('The Entra app registration\'s application (client) id: its tokens are the ones accepted.')
param clientId string

resource site 'Microsoft.Web/sites@2024-04-01' existing = {
  name: siteName
}

resource auth 'Microsoft.Web/sites/config@2024-04-01' = {
  parent: site
  name: 'authsettingsV2'
  properties: {
    platform: {
      enabled: true
    }
    globalValidation: {
      requireAuthentication: true
      unauthenticatedClientAction: 'Return401'
      excludedPaths: [
        '/api/openapi.json'
        '/api/probes' // the deploy smoke test's probe (infra/hooks/smoke.py): a function key, no tenant's data
      ]
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: clientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${tenant().tenantId}/v2.0'
        }
        validation: {
          allowedAudiences: [
            'api://${clientId}'
            clientId
          ]
        }
      }
    }
    login: {
      tokenStore: {
        enabled: false
      }
    }
  }
}
