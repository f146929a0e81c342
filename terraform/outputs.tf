# Endpoints, names and identity ids. Nothing secret: no keys exist (key auth
# is off everywhere) and the tokens stay in Key Vault and Container Apps
# secrets. tests/outputs.tftest.hcl checks every output below against the
# token values.

output "resource_group_name" {
  description = "Resource group holding the fleet."
  value       = azurerm_resource_group.this.name
}

output "function_app_name" {
  description = "Function App name: the target of `az functionapp deployment source config-zip`."
  value       = azurerm_linux_function_app.this.name
}

output "coordinator_url" {
  description = "Base URL of the coordinator; the API is under /api (e.g. /api/fleet/jobs). Factories get it as FLEET_URL."
  value       = local.coordinator_url
}

output "cosmos_endpoint" {
  description = "Cosmos DB account endpoint (CosmosDB__accountEndpoint)."
  value       = azurerm_cosmosdb_account.this.endpoint
}

output "cosmos_account_name" {
  description = "Cosmos DB account name."
  value       = azurerm_cosmosdb_account.this.name
}

output "cosmos_database_name" {
  description = "Cosmos DB database holding the fleet containers (FLEET_COSMOS_DATABASE)."
  value       = azurerm_cosmosdb_sql_database.fleet.name
}

output "servicebus_namespace" {
  description = "Service Bus fully qualified namespace (ServiceBus__fullyQualifiedNamespace)."
  value       = local.servicebus_fqdn
}

output "servicebus_topic" {
  description = "Dispatch topic name (FLEET_SERVICEBUS_TOPIC)."
  value       = azurerm_servicebus_topic.dispatch.name
}

output "factory_subscriptions" {
  description = "Service Bus subscription name per factory pool."
  value       = { for name, sub in azurerm_servicebus_subscription.pool : name => sub.name }
}

output "functions_identity" {
  description = "User-assigned identity of the Function App."
  value = {
    id           = azurerm_user_assigned_identity.functions.id
    client_id    = azurerm_user_assigned_identity.functions.client_id
    principal_id = azurerm_user_assigned_identity.functions.principal_id
  }
}

output "factory_identities" {
  description = "User-assigned identity per factory pool; a static host uses its client_id (ServiceBus__clientId) once the identity is attached to it."
  value = {
    for name, id in azurerm_user_assigned_identity.factory : name => {
      id           = id.id
      client_id    = id.client_id
      principal_id = id.principal_id
    }
  }
}

output "factory_jobs" {
  description = "Container Apps Job name per elastic pool that has its token."
  value       = { for name, job in azurerm_container_app_job.pool : name => job.name }
}

output "elastic_pools_awaiting_token" {
  description = "Elastic pools with no job yet because factory_tokens has no token for them."
  value       = local.elastic_pools_awaiting_token
}

output "storage_account_name" {
  description = "Storage account for the Functions host and artifacts."
  value       = azurerm_storage_account.this.name
}

output "artifacts_url" {
  description = "Blob container URL for artifacts (FLEET_ARTIFACTS_URL)."
  value       = local.function_app_settings.FLEET_ARTIFACTS_URL
}

output "key_vault_uri" {
  description = "Key Vault holding the operator token (secret fleet-operator-token)."
  value       = azurerm_key_vault.this.vault_uri
}

output "application_insights_name" {
  description = "Application Insights component receiving the handler's logs."
  value       = azurerm_application_insights.this.name
}

output "log_analytics_workspace_id" {
  description = "Log Analytics workspace resource ID (Functions and Container Apps logs)."
  value       = azurerm_log_analytics_workspace.this.id
}

output "container_app_environment_id" {
  description = "Container Apps environment of the elastic pools."
  value       = azurerm_container_app_environment.factories.id
}
