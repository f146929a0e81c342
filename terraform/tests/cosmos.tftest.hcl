# The containers Terraform creates are the store's containers
# (shared/store/containers.go): names, partition keys, TTLs and index
# exclusions. tests/terraform_containers_test.go ties the locals block in
# cosmos.tf to the Go definition; this file ties the resources to that shape.

mock_provider "azurerm" {
  source = "./tests/mocks"
}

variables {
  operator_token = "op-0123456789abcdef0123456789abcdef"
}

run "containers_match_the_store" {
  command = plan

  assert {
    condition = {
      for name, c in azurerm_cosmosdb_sql_container.this : name => c.partition_key_paths
      } == {
      fleet_jobs        = tolist(["/productId"])
      fleet_runs        = tolist(["/jobId"])
      fleet_factories   = tolist(["/id"])
      fleet_events      = tolist(["/jobId"])
      fleet_artifacts   = tolist(["/jobId"])
      fleet_queue_state = tolist(["/productId"])
      fleet_products    = tolist(["/productId"])
      fleet_repos       = tolist(["/id"])
      fleet_budgets     = tolist(["/productId"])
      fleet_profiles    = tolist(["/productId"])
      fleet_tokens      = tolist(["/id"])
      fleet_ledger      = tolist(["/id"])
      fleet_echo        = tolist(["/jobId"])
      leases            = tolist(["/id"])
    }
    error_message = "Container names or partition keys differ from store.Containers."
  }

  assert {
    condition     = azurerm_cosmosdb_sql_container.this["fleet_events"].default_ttl == 7776000 && alltrue([for name, c in azurerm_cosmosdb_sql_container.this : c.default_ttl == null if name != "fleet_events"])
    error_message = "Only fleet_events expires (90 days); nothing else has a TTL."
  }

  assert {
    condition     = [for p in azurerm_cosmosdb_sql_container.this["fleet_jobs"].indexing_policy[0].excluded_path : p.path] == ["/body/?", "/profile/body/?", "/recentEvents/*"] && [for p in azurerm_cosmosdb_sql_container.this["fleet_events"].indexing_policy[0].excluded_path : p.path] == ["/data/*"] && [for p in azurerm_cosmosdb_sql_container.this["fleet_profiles"].indexing_policy[0].excluded_path : p.path] == ["/body/?"]
    error_message = "Large unqueried fields (job body and its profile snapshot, event data, profile bodies) stay out of the index."
  }

  assert {
    condition     = alltrue([for c in azurerm_cosmosdb_sql_container.this : [for p in c.indexing_policy[0].included_path : p.path] == ["/*"]])
    error_message = "Everything else is indexed."
  }

  assert {
    condition     = alltrue([for c in azurerm_cosmosdb_sql_container.this : c.database_name == "fleet"])
    error_message = "All containers live in the fleet database."
  }
}

run "database_name_is_configurable" {
  command = plan

  variables {
    cosmos_database_name = "fleet-staging"
  }

  assert {
    condition     = azurerm_cosmosdb_sql_database.fleet.name == "fleet-staging" && azurerm_linux_function_app.this.app_settings["FLEET_COSMOS_DATABASE"] == "fleet-staging"
    error_message = "The database name reaches both Cosmos DB and FLEET_COSMOS_DATABASE."
  }
}
