# Least privilege and no keys: key auth is off on every data store, the Function
# App connects with its identity only, and the operator token never appears in
# plain text in the app's configuration.

mock_provider "azurerm" {
  source = "./tests/mocks"
}

variables {
  operator_token = "op-0123456789abcdef0123456789abcdef"
}

run "key_auth_is_off_everywhere" {
  command = plan

  assert {
    condition     = azurerm_cosmosdb_account.this.local_authentication_enabled == false
    error_message = "Cosmos DB must refuse account keys (local_authentication_enabled = false)."
  }

  assert {
    condition     = azurerm_cosmosdb_account.this.access_key_metadata_writes_enabled == false
    error_message = "Cosmos DB must refuse key-based metadata writes."
  }

  assert {
    condition     = azurerm_servicebus_namespace.this.local_auth_enabled == false
    error_message = "Service Bus must refuse SAS keys (local_auth_enabled = false)."
  }

  assert {
    condition     = azurerm_servicebus_namespace.this.sku == "Standard"
    error_message = "Service Bus must be Standard (topics and subscriptions)."
  }

  assert {
    condition     = azurerm_storage_account.this.shared_access_key_enabled == false && azurerm_storage_account.this.default_to_oauth_authentication == true
    error_message = "The storage account must refuse shared keys and default to Entra ID."
  }

  assert {
    condition     = azurerm_storage_account.this.allow_nested_items_to_be_public == false && azurerm_storage_container.artifacts.container_access_type == "private"
    error_message = "Artifacts must not be publicly readable."
  }

  assert {
    condition     = azurerm_application_insights.this.local_authentication_enabled == false
    error_message = "Application Insights must accept only Entra-authenticated telemetry."
  }

  assert {
    condition     = anytrue([for c in azurerm_cosmosdb_account.this.capabilities : c.name == "EnableServerless"])
    error_message = "Cosmos DB is serverless by default."
  }
}

run "function_app_uses_identity_connections_only" {
  # apply: several settings are built from computed endpoints and ids, which
  # the mocked provider only fills in at apply.
  command = apply

  assert {
    condition     = azurerm_linux_function_app.this.site_config[0].application_stack[0].use_custom_runtime == true
    error_message = "The Function App must run the custom handler."
  }

  # application_stack sets FUNCTIONS_WORKER_RUNTIME itself; the same key in
  # app_settings as well is refused by the platform (AZURE.md).
  assert {
    condition     = !contains(keys(azurerm_linux_function_app.this.app_settings), "FUNCTIONS_WORKER_RUNTIME")
    error_message = "FUNCTIONS_WORKER_RUNTIME must not be in app_settings beside site_config.application_stack."
  }

  assert {
    condition     = azurerm_linux_function_app.this.storage_uses_managed_identity == true && azurerm_linux_function_app.this.storage_account_access_key == null
    error_message = "Host storage must be reached with the identity, never an account key."
  }

  assert {
    condition = alltrue([
      for k in ["AzureWebJobsStorage__credential", "CosmosDB__credential", "ServiceBus__credential"] :
      azurerm_linux_function_app.this.app_settings[k] == "managedidentity"
    ])
    error_message = "Storage, Cosmos DB and Service Bus connections must use credential = managedidentity."
  }

  assert {
    condition = alltrue([
      for k in ["AzureWebJobsStorage__clientId", "CosmosDB__clientId", "ServiceBus__clientId", "CosmosDB__accountEndpoint", "ServiceBus__fullyQualifiedNamespace"] :
      contains(keys(azurerm_linux_function_app.this.app_settings), k)
    ])
    error_message = "Every identity-based connection needs its endpoint and the identity's clientId."
  }

  assert {
    condition     = !contains(keys(azurerm_linux_function_app.this.app_settings), "AzureWebJobsStorage") && !contains(keys(azurerm_linux_function_app.this.app_settings), "AzureWebJobsDashboard")
    error_message = "No connection-string setting for host storage."
  }

  assert {
    # Any key or connection string with a key in it would match one of these.
    condition = alltrue([
      for k, v in azurerm_linux_function_app.this.app_settings :
      length(regexall("(?i)(accountkey|sharedaccesskey|sharedaccesssignature|password|[?&]sig=)", "${k}=${v}")) == 0
    ])
    error_message = "No app setting may carry a key, SAS or password."
  }

  assert {
    condition     = azurerm_linux_function_app.this.app_settings["FLEET_OPERATOR_TOKEN"] == "@Microsoft.KeyVault(SecretUri=https://fleet-kv-mock.vault.azure.net/secrets/fleet-operator-token)"
    error_message = "FLEET_OPERATOR_TOKEN must be a versionless Key Vault reference."
  }

  assert {
    condition = alltrue([
      for v in values(azurerm_linux_function_app.this.app_settings) : !strcontains(v, var.operator_token)
    ])
    error_message = "The operator token must not appear in any app setting."
  }

  assert {
    condition     = azurerm_linux_function_app.this.key_vault_reference_identity_id == azurerm_user_assigned_identity.functions.id
    error_message = "Key Vault references must resolve with the Functions identity."
  }

  assert {
    condition     = azurerm_linux_function_app.this.ftp_publish_basic_authentication_enabled == false && azurerm_linux_function_app.this.webdeploy_publish_basic_authentication_enabled == false
    error_message = "Publishing passwords must be disabled (deploy with Entra ID)."
  }

  assert {
    condition     = azurerm_linux_function_app.this.https_only == true && azurerm_linux_function_app.this.site_config[0].always_on == true
    error_message = "HTTPS only, and Always On so timers and the change feed keep running."
  }
}

run "fleet_settings_have_their_defaults" {
  command = plan

  assert {
    condition = alltrue([
      for k, v in {
        FLEET_REAPER_SCHEDULE     = "2-59/15 * * * * *"
        FLEET_REDISPATCH_SCHEDULE = "8-59/30 * * * * *"
        FLEET_GC_SCHEDULE         = "13 0 * * * *"
        FLEET_ECHO_SCHEDULE       = "1-59/5 * * * * *"
        FLEET_PRUNE_SCHEDULE      = "9 */5 * * * *"
        FLEET_PRUNE_AFTER         = "168h"
        FLEET_FORGE_SCHEDULE      = "4 * * * * *"
        FLEET_LEASE_TTL           = "5m"
        FLEET_REDISPATCH_AFTER    = "5m" # the dispatch TTL: 2m on one machine, 5m to cover a cold start
        FLEET_BUS                 = "servicebus"
        FLEET_STORE               = "cosmos"
        FLEET_COSMOS_DATABASE     = "fleet"
        FLEET_SERVICEBUS_TOPIC    = "fleet-dispatch"
      } : azurerm_linux_function_app.this.app_settings[k] == v
    ])
    error_message = "The FLEET_* settings must carry the documented defaults."
  }
}

run "data_plane_grants_are_scoped" {
  command = apply

  assert {
    condition     = azurerm_cosmosdb_sql_role_assignment.functions.role_definition_id == "${azurerm_cosmosdb_account.this.id}/sqlRoleDefinitions/00000000-0000-0000-0000-000000000002"
    error_message = "The Functions identity gets the Cosmos DB Built-in Data Contributor role."
  }

  assert {
    condition     = azurerm_cosmosdb_sql_role_assignment.functions.scope == "${azurerm_cosmosdb_account.this.id}/dbs/fleet"
    error_message = "The Cosmos DB grant is scoped to the fleet database."
  }

  assert {
    condition     = azurerm_role_assignment.functions_bus_sender.role_definition_name == "Azure Service Bus Data Sender" && azurerm_role_assignment.functions_bus_sender.scope == azurerm_servicebus_topic.dispatch.id
    error_message = "The Functions identity may only send, and only to the dispatch topic."
  }

  assert {
    condition     = azurerm_role_assignment.functions_storage.scope == azurerm_storage_account.this.id
    error_message = "Host storage grant is on the Function App's own storage account."
  }

  assert {
    condition     = length([for p in azurerm_key_vault.this.access_policy : p if p.object_id == azurerm_user_assigned_identity.functions.principal_id && toset(p.secret_permissions) == toset(["Get"])]) == 1
    error_message = "The Functions identity may only Get secrets from the vault."
  }
}

run "provisioned_throughput_when_not_serverless" {
  command = plan

  variables {
    cosmos_serverless = false
  }

  assert {
    condition     = length(azurerm_cosmosdb_account.this.capabilities) == 0 && azurerm_cosmosdb_sql_database.fleet.autoscale_settings[0].max_throughput == 1000
    error_message = "Without serverless, the database gets shared autoscale throughput."
  }
}

# The GitHub credentials, when given, are Key Vault references like the
# operator token: never in plain text in app settings (or in outputs, see
# outputs.tftest.hcl).
run "github_credentials_are_key_vault_references" {
  command = plan

  variables {
    github_token          = "ghp_0123456789abcdefghijklmnopqrstuvwxyz"
    github_webhook_secret = "whsec-0123456789abcdef"
  }

  # The mock gives every secret the operator token's ids; these are theirs.
  override_resource {
    target          = azurerm_key_vault_secret.github_token
    values          = { versionless_id = "https://fleet-kv-mock.vault.azure.net/secrets/fleet-github-token" }
    override_during = plan
  }

  override_resource {
    target          = azurerm_key_vault_secret.github_webhook_secret
    values          = { versionless_id = "https://fleet-kv-mock.vault.azure.net/secrets/fleet-github-webhook-secret" }
    override_during = plan
  }

  assert {
    condition     = azurerm_linux_function_app.this.app_settings["FLEET_GITHUB_TOKEN"] == "@Microsoft.KeyVault(SecretUri=https://fleet-kv-mock.vault.azure.net/secrets/fleet-github-token)"
    error_message = "FLEET_GITHUB_TOKEN must be a versionless Key Vault reference."
  }

  assert {
    condition     = azurerm_linux_function_app.this.app_settings["FLEET_GITHUB_WEBHOOK_SECRET"] == "@Microsoft.KeyVault(SecretUri=https://fleet-kv-mock.vault.azure.net/secrets/fleet-github-webhook-secret)"
    error_message = "FLEET_GITHUB_WEBHOOK_SECRET must be a versionless Key Vault reference."
  }

  assert {
    condition = alltrue([
      for v in values(azurerm_linux_function_app.this.app_settings) : !strcontains(v, var.github_token) && !strcontains(v, var.github_webhook_secret)
    ])
    error_message = "The GitHub credentials must not appear in any app setting."
  }
}

run "no_github_credentials_no_settings" {
  command = plan

  assert {
    condition     = !contains(keys(azurerm_linux_function_app.this.app_settings), "FLEET_GITHUB_TOKEN") && length(azurerm_key_vault_secret.github_token) == 0
    error_message = "Without a GitHub token there is no secret and no setting."
  }

  assert {
    condition     = azurerm_linux_function_app.this.app_settings["FLEET_GITHUB_API_URL"] == "https://api.github.com"
    error_message = "FLEET_GITHUB_API_URL defaults to GitHub's API."
  }
}
