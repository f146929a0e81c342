# Elastic factory pools: one Container Apps Job per pool, started by KEDA when
# the pool's subscription holds messages, one fleet job per execution
# (`--once`), scaled to zero when idle.

locals {
  # The token exists only once the coordinator has enrolled the pool
  # (POST /api/fleet/factories/enroll), so a pool's job is created on the
  # apply after its token is supplied. Pool names are not secret.
  tokened_pools = nonsensitive(toset(keys(var.factory_tokens)))

  elastic_pools_with_token     = { for name, pool in local.elastic_pools : name => pool if contains(local.tokened_pools, name) }
  elastic_pools_awaiting_token = sort([for name in keys(local.elastic_pools) : name if !contains(local.tokened_pools, name)])

  factory_token_secret = "factory-token"
  # Container Apps mounts each secret of the job as a file named after it: the
  # factory reads its token from there (FLEET_FACTORY_TOKEN_FILE), so the token
  # is never in the process environment (/proc/<pid>/environ) that engines
  # could read.
  factory_secrets_dir = "/run/fleet-secrets"
}

check "factory_tokens" {
  assert {
    condition     = length(local.elastic_pools_awaiting_token) == 0
    error_message = "No job yet for elastic pool(s) ${join(", ", local.elastic_pools_awaiting_token)}: enroll each with POST /api/fleet/factories/enroll and put the returned token in factory_tokens (see terraform/README.md)."
  }

  assert {
    condition     = length(setsubtract(local.tokened_pools, keys(var.factory_pools))) == 0
    error_message = "factory_tokens has entries for pools not in factory_pools: ${join(", ", sort(tolist(setsubtract(local.tokened_pools, keys(var.factory_pools)))))}."
  }
}

resource "azurerm_container_app_environment" "factories" {
  name                       = local.names.container_env
  location                   = azurerm_resource_group.this.location
  resource_group_name        = azurerm_resource_group.this.name
  logs_destination           = "log-analytics"
  log_analytics_workspace_id = azurerm_log_analytics_workspace.this.id
  tags                       = local.tags
}

resource "azurerm_role_assignment" "factory_acr_pull" {
  for_each = { for name, pool in local.elastic_pools : name => pool if var.container_registry != null }

  scope                = var.container_registry.id
  role_definition_name = "AcrPull"
  principal_id         = azurerm_user_assigned_identity.factory[each.key].principal_id
  principal_type       = "ServicePrincipal"
}

resource "azurerm_container_app_job" "pool" {
  for_each = local.elastic_pools_with_token

  name                         = "${var.name_prefix}-${each.key}"
  location                     = azurerm_resource_group.this.location
  resource_group_name          = azurerm_resource_group.this.name
  container_app_environment_id = azurerm_container_app_environment.factories.id

  replica_timeout_in_seconds = each.value.replica_timeout_seconds
  # A crashed execution is not retried in place: its message lock lapses, the
  # message is redelivered (up to max_delivery_count) and KEDA starts a fresh
  # execution, while the coordinator's reaper requeues the job's lease.
  replica_retry_limit = 0

  identity {
    type         = "UserAssigned"
    identity_ids = [azurerm_user_assigned_identity.factory[each.key].id]
  }

  event_trigger_config {
    # Each replica claims at most one job and exits (an empty subscription
    # means a clean exit), so an execution is done when all of them are.
    parallelism              = each.value.parallelism
    replica_completion_count = each.value.parallelism

    scale {
      min_executions              = 0
      max_executions              = each.value.max_executions
      polling_interval_in_seconds = each.value.polling_interval_seconds

      rules {
        name             = "dispatch-depth"
        custom_rule_type = "azure-servicebus"
        # An execution's replicas take one message each: one execution per
        # `parallelism` waiting messages (README, "Elastic pool scaling").
        metadata = {
          namespace        = azurerm_servicebus_namespace.this.name
          topicName        = azurerm_servicebus_topic.dispatch.name
          subscriptionName = azurerm_servicebus_subscription.pool[each.key].name
          messageCount     = tostring(each.value.parallelism)
        }
        identity_id = azurerm_user_assigned_identity.factory[each.key].id
      }
    }
  }

  secret {
    name  = local.factory_token_secret
    value = var.factory_tokens[each.key]
  }

  dynamic "registry" {
    for_each = var.container_registry == null ? [] : [var.container_registry.login_server]
    content {
      server   = registry.value
      identity = azurerm_user_assigned_identity.factory[each.key].id
    }
  }

  template {
    volume {
      name         = "fleet-secrets"
      storage_type = "Secret"
    }

    container {
      name   = "factory"
      image  = each.value.image
      args   = ["--once"]
      cpu    = each.value.cpu
      memory = "${each.value.cpu * 2}Gi"

      env {
        name  = "FLEET_URL"
        value = local.coordinator_url
      }
      env {
        name  = "FLEET_FACTORY_ID"
        value = each.key
      }
      volume_mounts {
        name = "fleet-secrets"
        path = local.factory_secrets_dir
      }
      env {
        name  = "FLEET_FACTORY_TOKEN_FILE"
        value = "${local.factory_secrets_dir}/${local.factory_token_secret}"
      }
      env {
        name  = "FLEET_TRANSPORT"
        value = "servicebus"
      }
      env {
        name  = "FLEET_SERVICEBUS_TOPIC"
        value = azurerm_servicebus_topic.dispatch.name
      }
      env {
        name  = "FLEET_SERVICEBUS_SUBSCRIPTION"
        value = azurerm_servicebus_subscription.pool[each.key].name
      }
      env {
        name  = "ServiceBus__fullyQualifiedNamespace"
        value = local.servicebus_fqdn
      }
      env {
        name  = "ServiceBus__credential"
        value = local.managed_identity_credential
      }
      env {
        name  = "ServiceBus__clientId"
        value = azurerm_user_assigned_identity.factory[each.key].client_id
      }
      env {
        # azidentity's DefaultAzureCredential picks the pool identity by this.
        name  = "AZURE_CLIENT_ID"
        value = azurerm_user_assigned_identity.factory[each.key].client_id
      }

      dynamic "env" {
        for_each = each.value.env
        content {
          name  = env.key
          value = env.value
        }
      }
    }
  }

  tags = merge(local.tags, { fleet-pool = each.key })

  # KEDA polls the subscription with the pool identity from the first minute.
  depends_on = [
    azurerm_role_assignment.factory_bus_receiver,
    azurerm_role_assignment.factory_bus_scaler,
    azurerm_role_assignment.factory_acr_pull,
    azurerm_servicebus_subscription_rule.target,
  ]
}
