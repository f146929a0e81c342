provider "azurerm" {
  # Cosmos DB, Service Bus and the storage account all run with key auth off,
  # so the provider must reach storage data planes with Entra ID, never keys.
  storage_use_azuread = true

  # azurerm 5.x registers no resource providers by default; a fresh
  # subscription needs these before the first apply succeeds. Registering
  # needs subscription-level rights, so it can be switched off.
  resource_providers_to_register = var.register_resource_providers ? local.resource_providers : []

  features {
    servicebus {
      # A new subscription comes with a $Default rule (1=1) that would deliver
      # every dispatch to every factory; each pool gets its own correlation
      # rule instead.
      auto_delete_subscription_default_rule = true
    }

    key_vault {
      # The vault holds only the operator token; leave nothing soft-deleted
      # behind that would block re-creating the same name.
      purge_soft_delete_on_destroy    = true
      recover_soft_deleted_key_vaults = true
    }

    resource_group {
      # Never delete a resource group that holds resources Terraform did not
      # create (for example something added by hand in the portal).
      prevent_deletion_if_contains_resources = true
    }
  }
}

locals {
  resource_providers = [
    "Microsoft.App",
    "Microsoft.DocumentDB",
    "Microsoft.Insights",
    "Microsoft.KeyVault",
    "Microsoft.ManagedIdentity",
    "Microsoft.OperationalInsights",
    "Microsoft.ServiceBus",
    "Microsoft.Storage",
    "Microsoft.Web",
  ]
}
