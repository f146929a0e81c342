# Logs and telemetry: one Log Analytics workspace for Functions (through
# Application Insights) and Container Apps.

resource "azurerm_log_analytics_workspace" "this" {
  name                = local.names.log_analytics
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  sku                 = "PerGB2018"
  retention_in_days   = var.log_retention_days
  tags                = local.tags
}

resource "azurerm_application_insights" "this" {
  name                = local.names.app_insights
  location            = azurerm_resource_group.this.location
  resource_group_name = azurerm_resource_group.this.name
  workspace_id        = azurerm_log_analytics_workspace.this.id
  application_type    = "other"

  # Telemetry only from Entra-authenticated senders (the Functions identity).
  local_authentication_enabled = false

  tags = local.tags
}

resource "azurerm_role_assignment" "functions_telemetry" {
  scope                = azurerm_application_insights.this.id
  role_definition_name = "Monitoring Metrics Publisher"
  principal_id         = azurerm_user_assigned_identity.functions.principal_id
  principal_type       = "ServicePrincipal"
}
