# Computed values the mocked azurerm provider returns in place of Azure. IDs
# are shaped like real resource IDs because the provider validates the IDs one
# resource passes to another (namespace_id, topic_id, key_vault_id, ...).

mock_data "azurerm_client_config" {
  defaults = {
    tenant_id       = "72f988bf-0000-4000-8000-000000000001"
    subscription_id = "00000000-0000-4000-8000-000000000002"
    client_id       = "00000000-0000-4000-8000-000000000003"
    object_id       = "00000000-0000-4000-8000-000000000004"
  }
}

mock_resource "azurerm_resource_group" {
  defaults = {
    id = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet"
  }
}

mock_resource "azurerm_user_assigned_identity" {
  defaults = {
    id           = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.ManagedIdentity/userAssignedIdentities/fleet-id-mock"
    principal_id = "10000000-0000-4000-8000-000000000000"
    client_id    = "20000000-0000-4000-8000-000000000000"
    tenant_id    = "72f988bf-0000-4000-8000-000000000001"
  }
}

mock_resource "azurerm_cosmosdb_account" {
  defaults = {
    id       = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.DocumentDB/databaseAccounts/fleet-cosmos-mock"
    endpoint = "https://fleet-cosmos-mock.documents.azure.com:443/"
  }
}

mock_resource "azurerm_cosmosdb_sql_database" {
  defaults = {
    id = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.DocumentDB/databaseAccounts/fleet-cosmos-mock/sqlDatabases/fleet"
  }
}

mock_resource "azurerm_servicebus_namespace" {
  defaults = {
    id       = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.ServiceBus/namespaces/fleet-sb-mock"
    endpoint = "https://fleet-sb-mock.servicebus.windows.net:443/"
  }
}

mock_resource "azurerm_servicebus_topic" {
  defaults = {
    id = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.ServiceBus/namespaces/fleet-sb-mock/topics/fleet-dispatch"
  }
}

mock_resource "azurerm_servicebus_subscription" {
  defaults = {
    id = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.ServiceBus/namespaces/fleet-sb-mock/topics/fleet-dispatch/subscriptions/mock"
  }
}

mock_resource "azurerm_storage_account" {
  defaults = {
    id                    = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.Storage/storageAccounts/fleetstmock"
    primary_blob_endpoint = "https://fleetstmock.blob.core.windows.net/"
  }
}

mock_resource "azurerm_key_vault" {
  defaults = {
    id        = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.KeyVault/vaults/fleet-kv-mock"
    vault_uri = "https://fleet-kv-mock.vault.azure.net/"
  }
}

mock_resource "azurerm_key_vault_secret" {
  defaults = {
    id                      = "https://fleet-kv-mock.vault.azure.net/secrets/fleet-operator-token/0123456789abcdef0123456789abcdef"
    versionless_id          = "https://fleet-kv-mock.vault.azure.net/secrets/fleet-operator-token"
    resource_id             = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.KeyVault/vaults/fleet-kv-mock/secrets/fleet-operator-token/versions/0123456789abcdef0123456789abcdef"
    resource_versionless_id = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.KeyVault/vaults/fleet-kv-mock/secrets/fleet-operator-token"
  }
}

mock_resource "azurerm_service_plan" {
  defaults = {
    id = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.Web/serverFarms/fleet-plan"
  }
}

mock_resource "azurerm_linux_function_app" {
  defaults = {
    id               = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.Web/sites/fleet-func-mock"
    default_hostname = "fleet-func-mock.azurewebsites.net"
  }
}

mock_resource "azurerm_log_analytics_workspace" {
  defaults = {
    id = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.OperationalInsights/workspaces/fleet-log"
  }
}

mock_resource "azurerm_application_insights" {
  defaults = {
    id                = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.Insights/components/fleet-appi"
    connection_string = "InstrumentationKey=30000000-0000-4000-8000-000000000000;IngestionEndpoint=https://westeurope-5.in.applicationinsights.azure.com/"
  }
}

mock_resource "azurerm_container_app_environment" {
  defaults = {
    id = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.App/managedEnvironments/fleet-cae"
  }
}

mock_resource "azurerm_container_app_job" {
  defaults = {
    id = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.App/jobs/fleet-mock"
  }
}
