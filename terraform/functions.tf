# The coordinator: a Linux Function App running the Go custom handler, its host
# storage (identity-based AzureWebJobsStorage), the artifacts container and the
# Key Vault that holds the operator token.

locals {
  artifacts_container = "artifacts"
  functions_client_id = azurerm_user_assigned_identity.functions.client_id
  coordinator_url     = "https://${azurerm_linux_function_app.this.default_hostname}"

  function_app_settings = merge({
    # No FUNCTIONS_WORKER_RUNTIME: site_config.application_stack
    # (use_custom_runtime) sets it to "custom", and the platform refuses the
    # key in app_settings as well.

    # The zip from `make package` is mounted read-only as the app's content;
    # the handler is a prebuilt binary, so no remote build.
    WEBSITE_RUN_FROM_PACKAGE       = "1"
    SCM_DO_BUILD_DURING_DEPLOYMENT = "false"

    # Host storage. AzureWebJobsStorage__accountName comes from
    # storage_account_name + storage_uses_managed_identity below (the provider
    # owns that setting); these two select the user-assigned identity.
    AzureWebJobsStorage__credential = local.managed_identity_credential
    AzureWebJobsStorage__clientId   = local.functions_client_id

    # Connection "CosmosDB" (cosmosDBTrigger and the store adapter).
    CosmosDB__accountEndpoint = azurerm_cosmosdb_account.this.endpoint
    CosmosDB__credential      = local.managed_identity_credential
    CosmosDB__clientId        = local.functions_client_id

    # Connection "ServiceBus" (the dispatch publisher).
    ServiceBus__fullyQualifiedNamespace = local.servicebus_fqdn
    ServiceBus__credential              = local.managed_identity_credential
    ServiceBus__clientId                = local.functions_client_id

    # The handler's own SDK clients (azidentity) pick the same identity.
    AZURE_CLIENT_ID = local.functions_client_id

    # Application Insights with local auth off: ingest with the identity.
    APPLICATIONINSIGHTS_AUTHENTICATION_STRING = "Authorization=AAD;ClientId=${local.functions_client_id}"

    FLEET_STORE            = "cosmos"
    FLEET_BUS              = "servicebus"
    FLEET_COSMOS_DATABASE  = azurerm_cosmosdb_sql_database.fleet.name
    FLEET_SERVICEBUS_TOPIC = azurerm_servicebus_topic.dispatch.name
    FLEET_ARTIFACTS_URL    = "${azurerm_storage_account.this.primary_blob_endpoint}${azurerm_storage_container.artifacts.name}"

    FLEET_REAPER_SCHEDULE     = var.reaper_schedule
    FLEET_REDISPATCH_SCHEDULE = var.redispatch_schedule
    FLEET_GC_SCHEDULE         = var.gc_schedule
    FLEET_ECHO_SCHEDULE       = var.echo_schedule
    FLEET_PRUNE_SCHEDULE      = var.prune_schedule
    FLEET_PRUNE_AFTER         = var.prune_after
    FLEET_FORGE_SCHEDULE      = var.forge_schedule
    FLEET_LEASE_TTL           = var.lease_ttl
    FLEET_REDISPATCH_AFTER    = var.redispatch_after

    # Resolved by App Service with key_vault_reference_identity_id; the token
    # itself never appears in app settings. Versionless, so a rotated secret is
    # picked up without touching this configuration.
    FLEET_OPERATOR_TOKEN = "@Microsoft.KeyVault(SecretUri=${azurerm_key_vault_secret.operator_token.versionless_id})"
  }, local.github_settings)
}

# The GitHub credentials, when given, live in Key Vault like the operator
# token and reach the app as Key Vault references, never in plain text.
locals {
  github_token_set  = nonsensitive(var.github_token != "")
  github_secret_set = nonsensitive(var.github_webhook_secret != "")
  github_settings = merge(
    { FLEET_GITHUB_API_URL = var.github_api_url },
    local.github_token_set ? { FLEET_GITHUB_TOKEN = "@Microsoft.KeyVault(SecretUri=${azurerm_key_vault_secret.github_token[0].versionless_id})" } : {},
    local.github_secret_set ? { FLEET_GITHUB_WEBHOOK_SECRET = "@Microsoft.KeyVault(SecretUri=${azurerm_key_vault_secret.github_webhook_secret[0].versionless_id})" } : {},
  )
}

resource "azurerm_key_vault_secret" "github_token" {
  count        = local.github_token_set ? 1 : 0
  name         = "fleet-github-token"
  value        = var.github_token
  key_vault_id = azurerm_key_vault.this.id
  content_type = "text/plain"
}

resource "azurerm_key_vault_secret" "github_webhook_secret" {
  count        = local.github_secret_set ? 1 : 0
  name         = "fleet-github-webhook-secret"
  value        = var.github_webhook_secret
  key_vault_id = azurerm_key_vault.this.id
  content_type = "text/plain"
}

# --- Storage: Functions host state and artifacts -----------------------------

resource "azurerm_storage_account" "this" {
  name                     = local.names.storage
  location                 = azurerm_resource_group.this.location
  resource_group_name      = azurerm_resource_group.this.name
  account_tier             = "Standard"
  account_replication_type = var.storage_replication_type
  account_kind             = "StorageV2"

  # Entra ID only: no shared keys, no SAS, nothing public.
  shared_access_key_enabled       = false
  default_to_oauth_authentication = true
  allow_nested_items_to_be_public = false
  min_tls_version                 = "TLS1_2"
  https_traffic_only_enabled      = true

  tags = local.tags
}

resource "azurerm_storage_container" "artifacts" {
  name                  = local.artifacts_container
  storage_account_id    = azurerm_storage_account.this.id
  container_access_type = "private"
}

# The Functions host keeps timer locks and host keys in blobs it creates
# itself, which needs Blob Data Owner on the account; the same grant covers
# the artifacts container.
resource "azurerm_role_assignment" "functions_storage" {
  scope                = azurerm_storage_account.this.id
  role_definition_name = "Storage Blob Data Owner"
  principal_id         = azurerm_user_assigned_identity.functions.principal_id
  principal_type       = "ServicePrincipal"
}

# --- Key Vault: the operator token -------------------------------------------

resource "azurerm_key_vault" "this" {
  name                = local.names.key_vault
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  tenant_id           = data.azurerm_client_config.current.tenant_id
  sku_name            = "standard"

  # Access policies rather than Azure RBAC: a policy is in force as soon as the
  # vault exists, so the first apply can write the secret, whereas a fresh RBAC
  # grant to the deployer may take minutes to propagate and fail that write.
  # The vault holds this one secret, so vault-wide Get for the Function App is
  # as narrow as a secret-scoped role.
  rbac_authorization_enabled = false
  soft_delete_retention_days = 7
  # Off so `terraform destroy` can purge the vault and a re-apply can reuse the
  # name; the token can always be re-issued.
  purge_protection_enabled = false

  access_policy {
    tenant_id          = data.azurerm_client_config.current.tenant_id
    object_id          = data.azurerm_client_config.current.object_id
    secret_permissions = ["Get", "List", "Set", "Delete", "Recover", "Purge"]
  }

  access_policy {
    tenant_id          = data.azurerm_client_config.current.tenant_id
    object_id          = azurerm_user_assigned_identity.functions.principal_id
    secret_permissions = ["Get"]
  }

  tags = local.tags
}

resource "azurerm_key_vault_secret" "operator_token" {
  name         = "fleet-operator-token"
  value        = var.operator_token
  key_vault_id = azurerm_key_vault.this.id
  content_type = "text/plain"
}

# --- Function App ------------------------------------------------------------

resource "azurerm_service_plan" "functions" {
  name                = local.names.service_plan
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  os_type             = "Linux"
  sku_name            = var.function_plan_sku
  tags                = local.tags
}

resource "azurerm_linux_function_app" "this" {
  name                = local.names.function_app
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  service_plan_id     = azurerm_service_plan.functions.id

  storage_account_name          = azurerm_storage_account.this.name
  storage_uses_managed_identity = true

  functions_extension_version = "~4"
  https_only                  = true
  # AzureWebJobsDashboard is key-based and long deprecated.
  builtin_logging_enabled = false
  # Deploy with Entra ID (az CLI bearer token), never publishing passwords.
  ftp_publish_basic_authentication_enabled       = false
  webdeploy_publish_basic_authentication_enabled = false

  identity {
    type         = "UserAssigned"
    identity_ids = [azurerm_user_assigned_identity.functions.id]
  }
  key_vault_reference_identity_id = azurerm_user_assigned_identity.functions.id

  site_config {
    # Timers and the change-feed trigger only run while the host runs.
    always_on                              = true
    ftps_state                             = "Disabled"
    minimum_tls_version                    = "1.2"
    http2_enabled                          = true
    application_insights_connection_string = azurerm_application_insights.this.connection_string

    application_stack {
      use_custom_runtime = true
    }
  }

  app_settings = local.function_app_settings

  tags = local.tags

  # The host must not start before it may read storage, Cosmos DB and the bus.
  depends_on = [
    azurerm_role_assignment.functions_storage,
    azurerm_role_assignment.functions_bus_sender,
    azurerm_role_assignment.functions_telemetry,
    azurerm_cosmosdb_sql_role_assignment.functions,
    azurerm_cosmosdb_sql_container.this,
  ]
}
