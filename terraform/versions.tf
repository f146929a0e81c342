terraform {
  # 1.7 is the first release with mock_provider, which the offline tests in
  # tests/ rely on.
  required_version = ">= 1.7.0"

  required_providers {
    azurerm = {
      source  = "hashicorp/azurerm"
      version = "~> 5.2"
    }
  }
}
