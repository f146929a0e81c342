# Every factory pool gets its own filtered subscription and identity; every
# elastic pool whose token is known gets a Container Apps Job whose KEDA rule
# watches that subscription with that identity.

mock_provider "azurerm" {
  source = "./tests/mocks"
}

variables {
  operator_token = "op-0123456789abcdef0123456789abcdef"

  factory_pools = {
    mac-1 = {
      kind = "static"
    }
    linux = {
      kind           = "elastic"
      image          = "fleetacr.azurecr.io/factory:1.0.0"
      parallelism    = 2
      max_executions = 8
      cpu            = 2
      env            = { FLEET_CAPABILITIES = "os:linux,engine:claude,has:git" }
    }
    gpu = {
      kind               = "elastic"
      image              = "fleetacr.azurecr.io/factory-gpu:1.0.0"
      max_delivery_count = 3
      lock_duration      = "PT2M"
    }
    arm = {
      kind  = "elastic"
      image = "fleetacr.azurecr.io/factory:1.0.0"
    }
  }

  # arm has no token yet: its job must wait for one (and the factory_tokens
  # check says so, hence expect_failures on every run below).
  factory_tokens = {
    linux = "ft-linux-0123456789abcdef"
    gpu   = "ft-gpu-0123456789abcdef"
  }

  container_registry = {
    id           = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-shared/providers/Microsoft.ContainerRegistry/registries/fleetacr"
    login_server = "fleetacr.azurecr.io"
  }
}

# Distinct identities per pool, so "uses its own identity" is a real check.
override_resource {
  target = azurerm_user_assigned_identity.factory["mac-1"]
  values = {
    id           = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.ManagedIdentity/userAssignedIdentities/fleet-id-factory-mac-1"
    principal_id = "10000000-0000-4000-8000-0000000000a1"
    client_id    = "20000000-0000-4000-8000-0000000000a1"
  }
}

override_resource {
  target = azurerm_user_assigned_identity.factory["linux"]
  values = {
    id           = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.ManagedIdentity/userAssignedIdentities/fleet-id-factory-linux"
    principal_id = "10000000-0000-4000-8000-0000000000b2"
    client_id    = "20000000-0000-4000-8000-0000000000b2"
  }
}

override_resource {
  target = azurerm_user_assigned_identity.factory["gpu"]
  values = {
    id           = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.ManagedIdentity/userAssignedIdentities/fleet-id-factory-gpu"
    principal_id = "10000000-0000-4000-8000-0000000000c3"
    client_id    = "20000000-0000-4000-8000-0000000000c3"
  }
}

override_resource {
  target = azurerm_user_assigned_identity.factory["arm"]
  values = {
    id           = "/subscriptions/00000000-0000-4000-8000-000000000002/resourceGroups/rg-fleet/providers/Microsoft.ManagedIdentity/userAssignedIdentities/fleet-id-factory-arm"
    principal_id = "10000000-0000-4000-8000-0000000000d4"
    client_id    = "20000000-0000-4000-8000-0000000000d4"
  }
}

run "topic_deduplicates" {
  command = plan

  expect_failures = [check.factory_tokens]

  assert {
    condition     = azurerm_servicebus_topic.dispatch.name == "fleet-dispatch" && azurerm_servicebus_topic.dispatch.requires_duplicate_detection == true
    error_message = "The fleet-dispatch topic must have duplicate detection on."
  }
}

run "every_pool_has_a_filtered_subscription" {
  command = plan

  expect_failures = [check.factory_tokens]

  assert {
    condition     = toset(keys(azurerm_servicebus_subscription.pool)) == toset(keys(var.factory_pools))
    error_message = "Every pool, static or elastic, needs its own subscription."
  }

  assert {
    condition     = alltrue([for name, sub in azurerm_servicebus_subscription.pool : sub.name == name])
    error_message = "A pool's subscription is named after the pool."
  }

  assert {
    condition     = toset(keys(azurerm_servicebus_subscription_rule.target)) == toset(keys(var.factory_pools))
    error_message = "Every pool's subscription needs its correlation rule."
  }

  assert {
    condition = alltrue([
      for name, rule in azurerm_servicebus_subscription_rule.target :
      rule.filter_type == "CorrelationFilter" && rule.correlation_filter[0].properties == tomap({ targetFactoryId = name })
    ])
    error_message = "Each rule must be a correlation filter on targetFactoryId = the pool name, and nothing else."
  }

  assert {
    condition = alltrue([
      for name, sub in azurerm_servicebus_subscription.pool :
      sub.max_delivery_count == var.factory_pools[name].max_delivery_count && sub.lock_duration == var.factory_pools[name].lock_duration
    ])
    error_message = "Subscriptions take max delivery count and lock duration from the pool."
  }

  assert {
    condition = alltrue([
      for name, sub in azurerm_servicebus_subscription.pool :
      sub.dead_lettering_on_message_expiration == false && sub.dead_lettering_on_filter_evaluation_error == true
    ])
    error_message = "Expired dispatches expire (the sweep re-dispatches from the store); only undeliverable messages are dead-lettered."
  }

  assert {
    condition     = alltrue([for rule in azurerm_servicebus_subscription_rule.target : rule.name == "target-factory"])
    error_message = "The rule is named as shared/bus/servicebus provisions it (RuleName)."
  }

  assert {
    condition     = azurerm_servicebus_subscription.pool["gpu"].max_delivery_count == 3 && azurerm_servicebus_subscription.pool["gpu"].lock_duration == "PT2M" && azurerm_servicebus_subscription.pool["linux"].max_delivery_count == 5
    error_message = "Pool overrides and defaults of max_delivery_count / lock_duration."
  }
}

run "elastic_pools_scale_with_their_own_identity" {
  command = apply

  expect_failures = [check.factory_tokens]

  assert {
    condition     = toset(keys(azurerm_container_app_job.pool)) == toset(["linux", "gpu"])
    error_message = "Jobs exist for elastic pools with tokens only (not for static mac-1, not yet for tokenless arm)."
  }

  assert {
    condition     = output.elastic_pools_awaiting_token == tolist(["arm"])
    error_message = "A tokenless elastic pool is reported, not silently dropped."
  }

  assert {
    condition = alltrue([
      for name, job in azurerm_container_app_job.pool :
      job.event_trigger_config[0].scale[0].rules[0].custom_rule_type == "azure-servicebus" &&
      job.event_trigger_config[0].scale[0].rules[0].identity_id == azurerm_user_assigned_identity.factory[name].id &&
      job.event_trigger_config[0].scale[0].rules[0].metadata == tomap({
        namespace        = azurerm_servicebus_namespace.this.name
        topicName        = "fleet-dispatch"
        subscriptionName = name
        messageCount     = tostring(var.factory_pools[name].parallelism)
      })
    ])
    error_message = "Each job's KEDA rule watches its pool's subscription, authenticated with its pool's identity, one execution per parallelism messages."
  }

  assert {
    condition = (
      azurerm_container_app_job.pool["linux"].event_trigger_config[0].scale[0].rules[0].metadata["messageCount"] == "2" &&
      azurerm_container_app_job.pool["gpu"].event_trigger_config[0].scale[0].rules[0].metadata["messageCount"] == "1" &&
      azurerm_container_app_job.pool["gpu"].event_trigger_config[0].scale[0].polling_interval_in_seconds == 30
    )
    error_message = "A two-replica execution takes two messages, a one-replica execution one; KEDA polls every 30 s by default."
  }

  assert {
    condition = alltrue([
      for name, job in azurerm_container_app_job.pool :
      job.identity[0].type == "UserAssigned" && job.identity[0].identity_ids == toset([azurerm_user_assigned_identity.factory[name].id])
    ])
    error_message = "Each job runs as its own pool identity and no other."
  }

  assert {
    condition = (
      azurerm_container_app_job.pool["linux"].event_trigger_config[0].parallelism == 2 &&
      azurerm_container_app_job.pool["linux"].event_trigger_config[0].replica_completion_count == 2 &&
      azurerm_container_app_job.pool["linux"].event_trigger_config[0].scale[0].max_executions == 8 &&
      azurerm_container_app_job.pool["gpu"].event_trigger_config[0].parallelism == 1 &&
      azurerm_container_app_job.pool["gpu"].event_trigger_config[0].scale[0].max_executions == 10 &&
      azurerm_container_app_job.pool["linux"].event_trigger_config[0].scale[0].min_executions == 0
    )
    error_message = "Parallelism and max executions come from the pool; idle pools run nothing."
  }

  assert {
    condition = alltrue([
      for name, job in azurerm_container_app_job.pool :
      job.template[0].container[0].args == tolist(["--once"]) &&
      job.template[0].container[0].image == var.factory_pools[name].image
    ])
    error_message = "Each execution runs the pool image with --once."
  }

  assert {
    condition     = azurerm_container_app_job.pool["linux"].template[0].container[0].cpu == 2 && azurerm_container_app_job.pool["linux"].template[0].container[0].memory == "4Gi"
    error_message = "CPU from the pool, memory at the Consumption ratio of 2 GiB per vCPU."
  }

  assert {
    condition = alltrue([
      for name, job in azurerm_container_app_job.pool : alltrue([
        for k, v in {
          FLEET_URL                           = "https://fleet-func-mock.azurewebsites.net"
          FLEET_FACTORY_ID                    = name
          FLEET_TRANSPORT                     = "servicebus"
          FLEET_SERVICEBUS_TOPIC              = "fleet-dispatch"
          FLEET_SERVICEBUS_SUBSCRIPTION       = name
          ServiceBus__fullyQualifiedNamespace = "fleet-sb-mock.servicebus.windows.net"
          ServiceBus__credential              = "managedidentity"
          ServiceBus__clientId                = azurerm_user_assigned_identity.factory[name].client_id
          AZURE_CLIENT_ID                     = azurerm_user_assigned_identity.factory[name].client_id
        } : length([for e in job.template[0].container[0].env : e if e.name == k && e.value == v]) == 1
      ])
    ])
    error_message = "Factory environment: coordinator URL, factory id, transport, namespace and the pool identity's client id."
  }

  assert {
    condition = alltrue([
      for name, job in azurerm_container_app_job.pool :
      length([for e in job.template[0].container[0].env : e if e.name == "FLEET_FACTORY_TOKEN"]) == 0 &&
      length([for e in job.template[0].container[0].env : e if e.name == "FLEET_FACTORY_TOKEN_FILE" && e.value == "/run/fleet-secrets/factory-token"]) == 1 &&
      length([for v in job.template[0].volume : v if v.name == "fleet-secrets" && v.storage_type == "Secret"]) == 1 &&
      length([for m in job.template[0].container[0].volume_mounts : m if m.name == "fleet-secrets" && m.path == "/run/fleet-secrets"]) == 1 &&
      length([for s in job.secret : s if s.name == "factory-token" && s.value == var.factory_tokens[name]]) == 1
    ])
    error_message = "The factory token is the job's secret holding that pool's token, mounted as a file (FLEET_FACTORY_TOKEN_FILE), never in the environment."
  }

  assert {
    condition     = length([for e in azurerm_container_app_job.pool["linux"].template[0].container[0].env : e if e.name == "FLEET_CAPABILITIES" && e.value == "os:linux,engine:claude,has:git"]) == 1
    error_message = "Extra pool env reaches the container."
  }

  assert {
    condition = alltrue([
      for name, job in azurerm_container_app_job.pool :
      job.registry[0].server == "fleetacr.azurecr.io" && job.registry[0].identity == azurerm_user_assigned_identity.factory[name].id
    ])
    error_message = "Images are pulled with the pool identity."
  }
}

run "factory_grants_are_scoped_to_their_subscription" {
  command = apply

  expect_failures = [check.factory_tokens]

  assert {
    condition = alltrue([
      for name, ra in azurerm_role_assignment.factory_bus_receiver :
      ra.role_definition_name == "Azure Service Bus Data Receiver" &&
      ra.scope == azurerm_servicebus_subscription.pool[name].id &&
      ra.principal_id == azurerm_user_assigned_identity.factory[name].principal_id
    ]) && toset(keys(azurerm_role_assignment.factory_bus_receiver)) == toset(keys(var.factory_pools))
    error_message = "Every pool identity may receive from its own subscription only."
  }

  assert {
    condition = alltrue([
      for name, ra in azurerm_role_assignment.factory_bus_scaler :
      ra.scope == azurerm_servicebus_subscription.pool[name].id &&
      ra.principal_id == azurerm_user_assigned_identity.factory[name].principal_id
    ]) && toset(keys(azurerm_role_assignment.factory_bus_scaler)) == toset(["linux", "gpu", "arm"])
    error_message = "The KEDA grant goes to elastic pools only, on their own subscription."
  }

  assert {
    condition = alltrue([
      for name, ra in azurerm_role_assignment.functions_bus_dead_letters :
      ra.role_definition_name == "Azure Service Bus Data Receiver" &&
      ra.scope == azurerm_servicebus_subscription.pool[name].id &&
      ra.principal_id == azurerm_user_assigned_identity.functions.principal_id
    ]) && toset(keys(azurerm_role_assignment.functions_bus_dead_letters)) == toset(keys(var.factory_pools))
    error_message = "The coordinator may receive from every pool subscription (its sweep drains their dead-letter queues), scoped to each subscription."
  }

  assert {
    condition = length([
      for ra in concat(values(azurerm_role_assignment.factory_bus_scaler), values(azurerm_role_assignment.functions_bus_dead_letters), [azurerm_role_assignment.functions_bus_sender]) :
      ra if ra.principal_id == azurerm_user_assigned_identity.functions.principal_id && ra.role_definition_name == "Azure Service Bus Data Owner"
    ]) == 0
    error_message = "The coordinator gets no Manage right (Data Owner): it never reads depth in Azure."
  }

  assert {
    condition     = toset(keys(azurerm_role_assignment.factory_acr_pull)) == toset(["linux", "gpu", "arm"]) && alltrue([for ra in azurerm_role_assignment.factory_acr_pull : ra.role_definition_name == "AcrPull" && ra.scope == var.container_registry.id])
    error_message = "Elastic pool identities may pull from the registry, and only pull."
  }

  assert {
    condition     = length(azurerm_cosmosdb_sql_role_assignment.functions.principal_id) > 0 && !contains([for id in azurerm_user_assigned_identity.factory : id.principal_id], azurerm_cosmosdb_sql_role_assignment.functions.principal_id)
    error_message = "Factories get no Cosmos DB access: they talk to the coordinator over HTTP."
  }
}
