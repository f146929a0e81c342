# No output is secret. Every output declared in outputs.tf is listed here
# (tests/terraform_test.go fails if one is missing) and none may contain a
# token; none may be marked sensitive either, which that Go test also checks.

mock_provider "azurerm" {
  source = "./tests/mocks"
}

variables {
  operator_token = "op-0123456789abcdef0123456789abcdef"

  factory_pools = {
    mac-1 = { kind = "static" }
    linux = { kind = "elastic", image = "fleetacr.azurecr.io/factory:1.0.0" }
  }
  factory_tokens = {
    linux = "ft-linux-0123456789abcdef"
  }
  github_token          = "ghp_0123456789abcdefghijklmnopqrstuvwxyz"
  github_webhook_secret = "whsec-0123456789abcdef"
}

run "outputs_hold_no_secrets" {
  command = apply

  assert {
    condition = alltrue([
      for v in [
        jsonencode(output.resource_group_name),
        jsonencode(output.function_app_name),
        jsonencode(output.coordinator_url),
        jsonencode(output.cosmos_endpoint),
        jsonencode(output.cosmos_account_name),
        jsonencode(output.cosmos_database_name),
        jsonencode(output.servicebus_namespace),
        jsonencode(output.servicebus_topic),
        jsonencode(output.factory_subscriptions),
        jsonencode(output.functions_identity),
        jsonencode(output.factory_identities),
        jsonencode(output.factory_jobs),
        jsonencode(output.elastic_pools_awaiting_token),
        jsonencode(output.storage_account_name),
        jsonencode(output.artifacts_url),
        jsonencode(output.key_vault_uri),
        jsonencode(output.application_insights_name),
        jsonencode(output.log_analytics_workspace_id),
        jsonencode(output.container_app_environment_id),
      ] :
      !strcontains(v, var.operator_token) && alltrue([for t in values(var.factory_tokens) : !strcontains(v, t)]) &&
      !strcontains(v, var.github_token) && !strcontains(v, var.github_webhook_secret) &&
      length(regexall("(?i)(instrumentationkey|accountkey|sharedaccesskey|connectionstring)", v)) == 0
    ])
    error_message = "An output carries a token, key or connection string."
  }

  assert {
    condition     = output.coordinator_url == "https://fleet-func-mock.azurewebsites.net" && output.servicebus_namespace == "fleet-sb-mock.servicebus.windows.net"
    error_message = "Endpoints are published for clients and factories."
  }

  assert {
    condition     = output.factory_identities["linux"].client_id != "" && output.factory_jobs["linux"] == "fleet-linux" && length(output.factory_jobs) == 1
    error_message = "Identity ids and job names are published per pool."
  }
}
