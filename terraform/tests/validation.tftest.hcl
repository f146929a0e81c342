# Bad input is refused at plan time with a message naming the field, before
# Azure sees it.

mock_provider "azurerm" {
  source = "./tests/mocks"
}

variables {
  operator_token = "op-0123456789abcdef0123456789abcdef"
}

run "pool_name_must_fit_subscription_and_job_names" {
  command = plan
  variables {
    factory_pools = { "Linux_Pool" = { kind = "static" } }
  }
  expect_failures = [var.factory_pools]
}

run "pool_name_without_double_hyphen" {
  command = plan
  variables {
    factory_pools = { "linux--a" = { kind = "static" } }
  }
  expect_failures = [var.factory_pools]
}

run "pool_name_length_keeps_job_name_within_32" {
  command = plan
  variables {
    factory_pools = { "a-very-long-pool-name-x" = { kind = "static" } }
  }
  expect_failures = [var.factory_pools]
}

run "kind_is_static_or_elastic" {
  command = plan
  variables {
    factory_pools = { linux = { kind = "spot" } }
  }
  expect_failures = [var.factory_pools]
}

run "elastic_pool_needs_an_image" {
  command = plan
  variables {
    factory_pools = { linux = { kind = "elastic" } }
  }
  expect_failures = [var.factory_pools]
}

run "lock_duration_at_most_five_minutes" {
  command = plan
  variables {
    factory_pools = { linux = { kind = "static", lock_duration = "PT10M" } }
  }
  expect_failures = [var.factory_pools]
}

run "cpu_is_a_consumption_size" {
  command = plan
  variables {
    factory_pools = { linux = { kind = "elastic", image = "x/y:1", cpu = 3.3 } }
  }
  expect_failures = [var.factory_pools]
}

run "reserved_env_is_not_overridable" {
  command = plan
  variables {
    factory_pools = { linux = { kind = "elastic", image = "x/y:1", env = { FLEET_FACTORY_ID = "other" } } }
  }
  expect_failures = [var.factory_pools]
}

run "operator_token_is_long_enough" {
  command = plan
  variables {
    operator_token = "short"
  }
  expect_failures = [var.operator_token]
}

run "schedules_are_six_field_ncrontab" {
  command = plan
  variables {
    reaper_schedule = "*/15 * * * *"
  }
  expect_failures = [var.reaper_schedule]
}

run "prune_schedule_is_six_field_ncrontab" {
  command = plan
  variables {
    prune_schedule = "*/5 * * * *"
  }
  expect_failures = [var.prune_schedule]
}

run "prune_after_is_a_go_duration" {
  command = plan
  variables {
    prune_after = "7d"
  }
  expect_failures = [var.prune_after]
}

run "lease_ttl_is_a_go_duration" {
  command = plan
  variables {
    lease_ttl = "5 minutes"
  }
  expect_failures = [var.lease_ttl]
}

run "plan_sku_is_dedicated" {
  command = plan
  variables {
    function_plan_sku = "Y1"
  }
  expect_failures = [var.function_plan_sku]
}

run "name_prefix_is_short" {
  command = plan
  variables {
    name_prefix = "gigafactoryfleet"
  }
  expect_failures = [var.name_prefix]
}

run "token_for_unknown_pool_is_flagged" {
  command = plan
  variables {
    factory_pools  = { linux = { kind = "elastic", image = "x/y:1" } }
    factory_tokens = { linx = "ft-0123456789abcdef" }
  }
  expect_failures = [check.factory_tokens]
}

run "tag_names_follow_azure_rules" {
  command = plan
  variables {
    tags = { "team/name" = "x" }
  }
  expect_failures = [var.tags]
}

run "database_name_has_no_slash" {
  command = plan
  variables {
    cosmos_database_name = "fleet/prod"
  }
  expect_failures = [var.cosmos_database_name]
}

# A dispatch must outlive KEDA's polling interval plus the cold start of the
# execution started for it (README, "Elastic pool scaling").
run "dispatch_ttl_covers_polling_and_cold_start" {
  command = plan
  variables {
    redispatch_after = "2m"
    factory_pools = {
      linux = { kind = "elastic", image = "fleetacr.azurecr.io/factory:1.0.0", polling_interval_seconds = 30, cold_start_seconds = 120 }
    }
  }
  expect_failures = [azurerm_servicebus_subscription.pool, check.factory_tokens]
}

run "dispatch_ttl_parses_compound_durations" {
  command = plan
  variables {
    redispatch_after = "2m30s"
    factory_pools = {
      linux = { kind = "elastic", image = "fleetacr.azurecr.io/factory:1.0.0", polling_interval_seconds = 30, cold_start_seconds = 120 }
      mac-1 = { kind = "static", polling_interval_seconds = 3600, cold_start_seconds = 3600 }
    }
  }
  expect_failures = [check.factory_tokens]

  assert {
    condition     = local.dispatch_ttl_seconds == 150
    error_message = "2m30s is 150 seconds; a static pool is not held to the elastic bound."
  }
}
