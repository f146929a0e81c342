# Shared naming and the resource group everything lives in.

data "azurerm_client_config" "current" {}

locals {
  # Globally unique names need a suffix; deriving it from the subscription and
  # resource group keeps it stable across applies without a random provider.
  suffix = coalesce(
    var.name_suffix,
    substr(sha256("${data.azurerm_client_config.current.subscription_id}/${var.resource_group_name}/${var.name_prefix}"), 0, 6),
  )

  names = {
    functions_identity = "${var.name_prefix}-id-functions"
    cosmos             = "${var.name_prefix}-cosmos-${local.suffix}"
    servicebus         = "${var.name_prefix}-sb-${local.suffix}"
    storage            = "${var.name_prefix}st${local.suffix}"
    key_vault          = "${var.name_prefix}-kv-${local.suffix}"
    function_app       = "${var.name_prefix}-func-${local.suffix}"
    service_plan       = "${var.name_prefix}-plan"
    log_analytics      = "${var.name_prefix}-log"
    app_insights       = "${var.name_prefix}-appi"
    container_env      = "${var.name_prefix}-cae"
  }

  tags = merge({ application = "gigafactory-fleet", managed-by = "terraform" }, var.tags)

  # Identity-based connections select a user-assigned identity with these.
  managed_identity_credential = "managedidentity"
}

resource "azurerm_resource_group" "this" {
  name     = var.resource_group_name
  location = var.location
  tags     = local.tags
}
