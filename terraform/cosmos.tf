# Cosmos DB: the fleet's state. Key auth is off; the Functions identity reaches
# the data plane through a Cosmos SQL role assignment.

locals {
  # Mirror of shared/store/containers.go, the single definition of the store's
  # shape; tests/terraform_containers_test.go fails on any difference. One entry
  # per container: partition key path, default TTL in seconds (0 = off) and the
  # paths left out of the index.
  cosmos_containers = {
    fleet_jobs = {
      partition_key  = "/productId"
      default_ttl    = 0
      excluded_paths = ["/body/?", "/profile/body/?", "/recentEvents/*"]
    }
    fleet_runs = {
      partition_key  = "/jobId"
      default_ttl    = 0
      excluded_paths = []
    }
    fleet_factories = {
      partition_key  = "/id"
      default_ttl    = 0
      excluded_paths = []
    }
    fleet_events = {
      partition_key  = "/jobId"
      default_ttl    = 7776000 # 90 days
      excluded_paths = ["/data/*"]
    }
    fleet_artifacts = {
      partition_key  = "/jobId"
      default_ttl    = 0
      excluded_paths = []
    }
    fleet_queue_state = {
      partition_key  = "/productId"
      default_ttl    = 0
      excluded_paths = []
    }
    fleet_products = {
      partition_key  = "/productId"
      default_ttl    = 0
      excluded_paths = []
    }
    fleet_repos = {
      partition_key  = "/id"
      default_ttl    = 0
      excluded_paths = []
    }
    fleet_budgets = {
      partition_key  = "/productId"
      default_ttl    = 0
      excluded_paths = []
    }
    fleet_profiles = {
      partition_key  = "/productId"
      default_ttl    = 0
      excluded_paths = ["/body/?"]
    }
    fleet_tokens = {
      partition_key  = "/id"
      default_ttl    = 0
      excluded_paths = []
    }
    fleet_ledger = {
      partition_key  = "/id"
      default_ttl    = 0
      excluded_paths = []
    }
    fleet_echo = {
      partition_key  = "/jobId"
      default_ttl    = 0
      excluded_paths = []
    }
    leases = {
      partition_key  = "/id"
      default_ttl    = 0
      excluded_paths = []
    }
  }

  # Built-in "Cosmos DB Built-in Data Contributor" data-plane role.
  cosmos_data_contributor_role = "00000000-0000-0000-0000-000000000002"
}

resource "azurerm_cosmosdb_account" "this" {
  name                = local.names.cosmos
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  offer_type          = "Standard"
  kind                = "GlobalDocumentDB"

  # Entra ID only: no account keys, and no key-based writes to databases or
  # containers either (those go through ARM, i.e. this configuration).
  local_authentication_enabled       = false
  access_key_metadata_writes_enabled = false
  minimal_tls_version                = "Tls12"

  consistency_policy {
    consistency_level = var.cosmos_consistency_level
  }

  geo_location {
    location          = azurerm_resource_group.this.location
    failover_priority = 0
  }

  dynamic "capabilities" {
    for_each = var.cosmos_serverless ? ["EnableServerless"] : []
    content {
      name = capabilities.value
    }
  }

  tags = local.tags
}

resource "azurerm_cosmosdb_sql_database" "fleet" {
  name                = var.cosmos_database_name
  resource_group_name = azurerm_cosmosdb_account.this.resource_group_name
  account_name        = azurerm_cosmosdb_account.this.name

  # Serverless accounts take no throughput; provisioned ones share one
  # autoscale budget across all containers.
  dynamic "autoscale_settings" {
    for_each = var.cosmos_serverless ? [] : [var.cosmos_autoscale_max_throughput]
    content {
      max_throughput = autoscale_settings.value
    }
  }
}

resource "azurerm_cosmosdb_sql_container" "this" {
  for_each = local.cosmos_containers

  name                  = each.key
  resource_group_name   = azurerm_cosmosdb_account.this.resource_group_name
  account_name          = azurerm_cosmosdb_account.this.name
  database_name         = azurerm_cosmosdb_sql_database.fleet.name
  partition_key_paths   = [each.value.partition_key]
  partition_key_kind    = "Hash"
  partition_key_version = 2
  default_ttl           = each.value.default_ttl > 0 ? each.value.default_ttl : null

  indexing_policy {
    indexing_mode = "consistent"

    included_path {
      path = "/*"
    }

    dynamic "excluded_path" {
      for_each = each.value.excluded_paths
      content {
        path = excluded_path.value
      }
    }
  }
}

# The Functions app reads and writes every container, including the change
# feed and its lease container; scoped to the fleet database, not the account.
resource "azurerm_cosmosdb_sql_role_assignment" "functions" {
  resource_group_name = azurerm_cosmosdb_account.this.resource_group_name
  account_name        = azurerm_cosmosdb_account.this.name
  role_definition_id  = "${azurerm_cosmosdb_account.this.id}/sqlRoleDefinitions/${local.cosmos_data_contributor_role}"
  principal_id        = azurerm_user_assigned_identity.functions.principal_id
  scope               = "${azurerm_cosmosdb_account.this.id}/dbs/${azurerm_cosmosdb_sql_database.fleet.name}"
}
