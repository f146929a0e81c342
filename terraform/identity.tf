# One user-assigned identity for the Functions app and one per factory pool.
# User-assigned (not system-assigned) so role assignments exist before the
# workloads that use them, and so a pool keeps its grants across re-creation
# of its job.

resource "azurerm_user_assigned_identity" "functions" {
  name                = local.names.functions_identity
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  tags                = local.tags
}

resource "azurerm_user_assigned_identity" "factory" {
  for_each = var.factory_pools

  name                = "${var.name_prefix}-id-factory-${each.key}"
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  tags                = merge(local.tags, { fleet-pool = each.key, fleet-pool-kind = each.value.kind })
}
