# Service Bus: the dispatch transport. One topic; one subscription per factory
# pool, filtered on the targetFactoryId the dispatcher stamps on each message.

locals {
  dispatch_topic = "fleet-dispatch"

  # Standard namespaces expose a data-plane host name only through the endpoint
  # URL ("https://<ns>.servicebus.windows.net:443/"); this keeps the suffix of
  # whichever cloud the namespace lives in.
  servicebus_fqdn = trimsuffix(trimsuffix(trimprefix(azurerm_servicebus_namespace.this.endpoint, "https://"), "/"), ":443")

  elastic_pools = { for name, pool in var.factory_pools : name => pool if pool.kind == "elastic" }

  # redispatch_after (a Go duration) in seconds: the coordinator's redispatch
  # age and the TTL of every dispatch message.
  dispatch_ttl_seconds = sum(concat([0], [
    for m in regexall("([0-9]+(?:\\.[0-9]+)?)(ms|s|m|h)", var.redispatch_after) :
    tonumber(m[0]) * { ms = 0.001, s = 1, m = 60, h = 3600 }[m[1]]
  ]))
}

resource "azurerm_servicebus_namespace" "this" {
  name                = local.names.servicebus
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  # Standard is the cheapest tier with topics and subscriptions.
  sku = "Standard"

  # Entra ID only: SAS keys (including RootManageSharedAccessKey) are refused.
  local_auth_enabled  = false
  minimum_tls_version = "1.2"

  tags = local.tags
}

resource "azurerm_servicebus_topic" "dispatch" {
  name         = local.dispatch_topic
  namespace_id = azurerm_servicebus_namespace.this.id

  # Message ids are jobId:dispatchEpoch: a publish retried after a lost ack is
  # dropped, while a re-dispatch (new epoch) still goes through.
  requires_duplicate_detection            = true
  duplicate_detection_history_time_window = var.duplicate_detection_window
}

resource "azurerm_servicebus_subscription" "pool" {
  for_each = var.factory_pools

  name                = each.key
  topic_id            = azurerm_servicebus_topic.dispatch.id
  max_delivery_count  = each.value.max_delivery_count
  lock_duration       = each.value.lock_duration
  default_message_ttl = each.value.message_ttl

  # An expired dispatch simply expires: the job stays queued in the store and
  # the coordinator's sweep re-dispatches it with a new epoch. Dead-lettering
  # it would only fill the dead-letter queue (it counts toward the topic's
  # size). What does land there (past max_delivery_count, refused by a
  # factory, a filter error) the sweep drains with functions_bus_dead_letters.
  # shared/bus/servicebus provisions the same (tests/terraform_servicebus_test.go).
  dead_lettering_on_message_expiration      = false
  dead_lettering_on_filter_evaluation_error = true

  lifecycle {
    # KEDA sees a dispatch at most one polling interval after it is sent and
    # the execution it starts receives after its cold start: the message
    # must still be there (README, "Elastic pool scaling").
    precondition {
      condition     = each.value.kind != "elastic" || each.value.polling_interval_seconds + each.value.cold_start_seconds <= local.dispatch_ttl_seconds
      error_message = "Elastic pool ${each.key}: polling_interval_seconds (${each.value.polling_interval_seconds}) + cold_start_seconds (${each.value.cold_start_seconds}) exceeds redispatch_after (${var.redispatch_after}), the dispatch TTL: messages would expire before the execution started for them can receive. Raise redispatch_after or lower the other two."
    }
  }
}

# The only rule on each subscription (the provider deletes $Default, see
# providers.tf): messages stamped for this factory and nothing else.
resource "azurerm_servicebus_subscription_rule" "target" {
  for_each = var.factory_pools

  name            = "target-factory"
  subscription_id = azurerm_servicebus_subscription.pool[each.key].id
  filter_type     = "CorrelationFilter"

  correlation_filter {
    properties = {
      targetFactoryId = each.key
    }
  }
}

# The coordinator publishes dispatches to the topic.
resource "azurerm_role_assignment" "functions_bus_sender" {
  scope                = azurerm_servicebus_topic.dispatch.id
  role_definition_name = "Azure Service Bus Data Sender"
  principal_id         = azurerm_user_assigned_identity.functions.principal_id
  principal_type       = "ServicePrincipal"
}

# ...and its redispatch sweep drains each pool subscription's dead-letter
# queue (a sub-queue: receiving from it needs Data Receiver on the
# subscription), re-routing the jobs and emptying the queue. Granted per
# subscription, not on the topic, like the factories' own grants. Depth
# (runtime properties) would need the Manage right: not granted, so
# /fleet/metrics reports no subscription depth in Azure.
resource "azurerm_role_assignment" "functions_bus_dead_letters" {
  for_each = var.factory_pools

  scope                = azurerm_servicebus_subscription.pool[each.key].id
  role_definition_name = "Azure Service Bus Data Receiver"
  principal_id         = azurerm_user_assigned_identity.functions.principal_id
  principal_type       = "ServicePrincipal"
}

# A factory receives from its own subscription only: Service Bus RBAC accepts
# a topic subscription as a scope, the narrowest there is.
resource "azurerm_role_assignment" "factory_bus_receiver" {
  for_each = var.factory_pools

  scope                = azurerm_servicebus_subscription.pool[each.key].id
  role_definition_name = "Azure Service Bus Data Receiver"
  principal_id         = azurerm_user_assigned_identity.factory[each.key].principal_id
  principal_type       = "ServicePrincipal"
}

# The KEDA azure-servicebus scaler reads the subscription's message count
# through the management API, which demands the Manage right; Data Receiver
# does not carry it and no narrower built-in role does. Granted on the pool's
# own subscription only, and only to elastic pools (static hosts do not scale).
resource "azurerm_role_assignment" "factory_bus_scaler" {
  for_each = local.elastic_pools

  scope                = azurerm_servicebus_subscription.pool[each.key].id
  role_definition_name = "Azure Service Bus Data Owner"
  principal_id         = azurerm_user_assigned_identity.factory[each.key].principal_id
  principal_type       = "ServicePrincipal"
}
