# Inputs. Everything has a working default except operator_token, so a first
# `terraform apply` asks for one value and stands up the whole coordinator.

variable "location" {
  description = "Azure region for every resource (one region: a serverless Cosmos DB account cannot span several)."
  type        = string
  default     = "westeurope"

  validation {
    condition     = can(regex("^[a-z][a-z0-9]+$", var.location))
    error_message = "location must be an Azure region name such as \"westeurope\" (lower case, no spaces)."
  }
}

variable "resource_group_name" {
  description = "Name of the resource group Terraform creates to hold the fleet."
  type        = string
  default     = "rg-fleet"

  validation {
    condition     = can(regex("^[-\\w\\.\\(\\)]{0,89}[-\\w\\(\\)]$", var.resource_group_name))
    error_message = "resource_group_name must be 1-90 letters, digits, '-', '_', '.', '(' or ')' and must not end with '.'."
  }
}

variable "name_prefix" {
  description = "Short prefix for every resource name. Container Apps Job names are \"<prefix>-<pool>\" and must stay within 32 characters, hence the limit."
  type        = string
  default     = "fleet"

  validation {
    condition     = can(regex("^[a-z][a-z0-9]{1,9}$", var.name_prefix))
    error_message = "name_prefix must be 2-10 lower-case letters or digits, starting with a letter."
  }
}

variable "name_suffix" {
  description = "Suffix that makes globally unique names (Cosmos DB, Service Bus, storage, Key Vault, Function App) unique. Null derives a stable 6-character suffix from the subscription and resource group."
  type        = string
  default     = null

  validation {
    condition     = var.name_suffix == null || can(regex("^[a-z0-9]{3,6}$", coalesce(var.name_suffix, "-")))
    error_message = "name_suffix must be 3-6 lower-case letters or digits."
  }
}

variable "tags" {
  description = "Tags added to every resource that supports them."
  type        = map(string)
  default     = {}

  validation {
    condition = alltrue([
      for k, v in var.tags : length(k) >= 1 && length(k) <= 512 && length(v) <= 256 && !can(regex("[<>%&\\\\?/]", k))
    ])
    error_message = "Tag names must be 1-512 characters without < > % & \\ ? /, and values at most 256 characters."
  }
}

variable "register_resource_providers" {
  description = "Register the Azure resource providers the fleet uses (needs subscription-level rights). Set false when an administrator has already registered them."
  type        = bool
  default     = true
}

# --- Cosmos DB ---------------------------------------------------------------

variable "cosmos_database_name" {
  description = "Cosmos DB SQL database that holds every fleet container (FLEET_COSMOS_DATABASE)."
  type        = string
  default     = "fleet"

  validation {
    condition     = can(regex("^[^/\\\\#?\\s]{1,255}$", var.cosmos_database_name))
    error_message = "cosmos_database_name must be 1-255 characters without '/', '\\', '#', '?' or whitespace."
  }
}

variable "cosmos_serverless" {
  description = "Run the Cosmos DB account serverless (pay per request, scales to zero). False provisions shared autoscale throughput on the database instead."
  type        = bool
  default     = true
}

variable "cosmos_autoscale_max_throughput" {
  description = "Maximum autoscale RU/s shared by all containers when cosmos_serverless is false. Ignored for serverless accounts."
  type        = number
  default     = 1000

  validation {
    condition     = var.cosmos_autoscale_max_throughput >= 1000 && var.cosmos_autoscale_max_throughput % 1000 == 0
    error_message = "cosmos_autoscale_max_throughput must be a multiple of 1000, at least 1000."
  }
}

variable "cosmos_consistency_level" {
  description = "Default consistency of the Cosmos DB account. Session is enough: every CAS goes through the item's _etag."
  type        = string
  default     = "Session"

  validation {
    condition     = contains(["Strong", "BoundedStaleness", "Session", "ConsistentPrefix", "Eventual"], var.cosmos_consistency_level)
    error_message = "cosmos_consistency_level must be one of Strong, BoundedStaleness, Session, ConsistentPrefix, Eventual."
  }
}

# --- Service Bus -------------------------------------------------------------

variable "duplicate_detection_window" {
  description = "Duplicate-detection window of the fleet-dispatch topic (ISO 8601). Dispatch message ids are jobId:dispatchEpoch, so a re-dispatch is never mistaken for a duplicate."
  type        = string
  default     = "PT10M"

  validation {
    condition     = (can(regex("^PT([0-9]+H)?([0-9]+M)?([0-9]+S)?$", var.duplicate_detection_window)) && var.duplicate_detection_window != "PT") || can(regex("^P[1-7]D$", var.duplicate_detection_window))
    error_message = "duplicate_detection_window must be an ISO 8601 duration of at most 7 days, e.g. PT10M."
  }
}

# --- Factories ---------------------------------------------------------------

variable "factory_pools" {
  description = <<-EOT
    Factories that receive dispatches, keyed by factory id (the value the
    coordinator stamps into targetFactoryId, and the Service Bus subscription
    name). kind = "static" is a long-running host outside Terraform: it gets a
    subscription and an identity. kind = "elastic" is a Container Apps Job that
    scales from zero on its subscription's depth and runs one job per execution.
    Elastic-only fields: image, parallelism (replicas per execution, each
    running `--once`), max_executions, cpu (memory is
    2 GiB per vCPU, the Consumption ratio), replica_timeout_seconds,
    polling_interval_seconds, cold_start_seconds (the longest an execution
    may take from KEDA's decision until it receives: image pull, start,
    cloning FLEET_REPO_URLS; polling_interval_seconds + cold_start_seconds
    must not exceed redispatch_after, the dispatch TTL), env (extra
    non-secret environment).
    Subscription fields: max_delivery_count, lock_duration (at most PT5M),
    message_ttl (an upper bound: each dispatch carries its own, shorter TTL;
    expired dispatches are dropped, not dead-lettered, and the coordinator's
    sweep re-dispatches the job).
  EOT
  type = map(object({
    kind                     = string
    image                    = optional(string)
    parallelism              = optional(number, 1)
    max_executions           = optional(number, 10)
    cpu                      = optional(number, 1)
    replica_timeout_seconds  = optional(number, 3600)
    polling_interval_seconds = optional(number, 30)
    cold_start_seconds       = optional(number, 120)
    env                      = optional(map(string), {})
    max_delivery_count       = optional(number, 5)
    lock_duration            = optional(string, "PT1M")
    message_ttl              = optional(string, "PT1H")
  }))
  default = {}

  validation {
    # Each name is a Service Bus subscription name and, for elastic pools, the
    # tail of a Container Apps Job name ("<prefix>-<name>", 32 characters max).
    condition = alltrue([
      for name in keys(var.factory_pools) :
      can(regex("^[a-z][a-z0-9-]{0,18}[a-z0-9]$", name)) && !strcontains(name, "--")
    ])
    error_message = "factory_pools keys must be 2-20 lower-case letters, digits or single hyphens, starting with a letter and ending with a letter or digit."
  }

  validation {
    condition     = alltrue([for p in values(var.factory_pools) : contains(["static", "elastic"], p.kind)])
    error_message = "factory_pools[*].kind must be \"static\" or \"elastic\"."
  }

  validation {
    condition     = alltrue([for p in values(var.factory_pools) : p.kind != "elastic" || try(length(trimspace(p.image)) > 0, false)])
    error_message = "Every elastic pool needs an image (the factory agent container image)."
  }

  validation {
    condition = alltrue([
      for p in values(var.factory_pools) :
      p.parallelism >= 1 && p.parallelism <= 100 && floor(p.parallelism) == p.parallelism &&
      p.max_executions >= 1 && p.max_executions <= 1000 && floor(p.max_executions) == p.max_executions
    ])
    error_message = "factory_pools[*].parallelism must be a whole number in 1-100 and max_executions a whole number in 1-1000."
  }

  validation {
    condition     = alltrue([for p in values(var.factory_pools) : contains([0.25, 0.5, 0.75, 1, 1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4], p.cpu)])
    error_message = "factory_pools[*].cpu must be a Container Apps Consumption size: 0.25-2 in steps of 0.25, or 2.5, 3, 3.5, 4."
  }

  validation {
    condition = alltrue([
      for p in values(var.factory_pools) :
      p.replica_timeout_seconds >= 60 && p.replica_timeout_seconds <= 86400 &&
      p.polling_interval_seconds >= 5 && p.polling_interval_seconds <= 3600
    ])
    error_message = "factory_pools[*].replica_timeout_seconds must be in 60-86400 and polling_interval_seconds in 5-3600."
  }

  validation {
    condition     = alltrue([for p in values(var.factory_pools) : p.cold_start_seconds >= 0 && p.cold_start_seconds <= 3600])
    error_message = "factory_pools[*].cold_start_seconds must be in 0-3600."
  }

  validation {
    condition     = alltrue([for p in values(var.factory_pools) : p.max_delivery_count >= 1 && p.max_delivery_count <= 2000 && floor(p.max_delivery_count) == p.max_delivery_count])
    error_message = "factory_pools[*].max_delivery_count must be a whole number in 1-2000."
  }

  validation {
    # Service Bus caps the peek-lock at five minutes.
    condition     = alltrue([for p in values(var.factory_pools) : can(regex("^PT(([5-9]|[1-5][0-9])S|[1-5]M)$", p.lock_duration))])
    error_message = "factory_pools[*].lock_duration must be PT5S-PT59S or PT1M-PT5M."
  }

  validation {
    condition = alltrue([
      for p in values(var.factory_pools) :
      can(regex("^P([0-9]+D)?(T([0-9]+H)?([0-9]+M)?([0-9]+S)?)?$", p.message_ttl)) && !contains(["P", "PT"], p.message_ttl) && !endswith(p.message_ttl, "T")
    ])
    error_message = "factory_pools[*].message_ttl must be an ISO 8601 duration such as PT1H or P1D."
  }

  validation {
    # These are set by Terraform from the deployment itself.
    condition = alltrue(flatten([
      for p in values(var.factory_pools) : [
        for k in keys(p.env) :
        !startswith(k, "ServiceBus__") && !contains([
          "AZURE_CLIENT_ID", "FLEET_URL", "FLEET_FACTORY_ID", "FLEET_FACTORY_TOKEN", "FLEET_FACTORY_TOKEN_FILE", "FLEET_TRANSPORT",
          "FLEET_SERVICEBUS_TOPIC", "FLEET_SERVICEBUS_SUBSCRIPTION",
        ], k)
      ]
    ]))
    error_message = "factory_pools[*].env must not set FLEET_URL, FLEET_FACTORY_ID, FLEET_FACTORY_TOKEN(_FILE), FLEET_TRANSPORT, FLEET_SERVICEBUS_TOPIC, FLEET_SERVICEBUS_SUBSCRIPTION, AZURE_CLIENT_ID or ServiceBus__*: Terraform sets them."
  }
}

variable "factory_tokens" {
  description = "Factory tokens by pool name, as returned by POST /api/fleet/factories/enroll. Each elastic pool's job is created once its token is here (the token exists only after the coordinator is up). Stored as a Container Apps secret."
  type        = map(string)
  default     = {}
  sensitive   = true

  validation {
    condition     = alltrue([for t in values(var.factory_tokens) : length(t) >= 16])
    error_message = "Every factory token must be at least 16 characters."
  }
}

variable "container_registry" {
  description = "Azure Container Registry that holds the factory image. When set, each elastic pool pulls with its own identity (AcrPull on this registry). Null pulls anonymously (public image)."
  type = object({
    id           = string
    login_server = string
  })
  default = null

  validation {
    condition     = var.container_registry == null || can(regex("(?i)^/subscriptions/[^/]+/resourceGroups/[^/]+/providers/Microsoft\\.ContainerRegistry/registries/[^/]+$", var.container_registry.id))
    error_message = "container_registry.id must be the resource ID of an Azure Container Registry."
  }
}

# --- Functions app -----------------------------------------------------------

variable "function_plan_sku" {
  description = "Dedicated (App Service) plan SKU for the Function App. Dedicated because it keeps Always On (timers and the change feed keep running), needs no Azure Files content share (so storage runs without keys) and takes a zip deploy authenticated with Entra ID."
  type        = string
  default     = "B1"

  validation {
    condition     = can(regex("^(B[1-3]|S[1-3]|P[0-3]v3|P[1-5]mv3)$", var.function_plan_sku))
    error_message = "function_plan_sku must be a Linux dedicated SKU: B1-B3, S1-S3, P0v3-P3v3 or P1mv3-P5mv3."
  }
}

variable "operator_token" {
  description = "Operator bearer token for the /api/fleet routes (FLEET_OPERATOR_TOKEN). Stored only in Key Vault; the Function App reads it through a Key Vault reference."
  type        = string
  sensitive   = true

  validation {
    condition     = length(var.operator_token) >= 32 && length(regexall("\\s", var.operator_token)) == 0
    error_message = "operator_token must be at least 32 characters with no whitespace (e.g. `openssl rand -hex 32`)."
  }
}

variable "github_token" {
  description = "GitHub token the coordinator opens, updates and merges pull requests with (read/write pull requests and contents), for products with a forge. Stored only in Key Vault; the Function App reads it through a Key Vault reference (FLEET_GITHUB_TOKEN). Empty: no forge client."
  type        = string
  default     = ""
  sensitive   = true

  validation {
    condition     = var.github_token == "" || (length(var.github_token) >= 20 && length(regexall("\\s", var.github_token)) == 0)
    error_message = "github_token must be empty or a token of at least 20 characters with no whitespace."
  }
}

variable "github_webhook_secret" {
  description = "Secret GitHub signs webhook deliveries to /api/fleet/forge/github with. Stored only in Key Vault; read through a Key Vault reference (FLEET_GITHUB_WEBHOOK_SECRET). Empty: the route answers 503."
  type        = string
  default     = ""
  sensitive   = true

  validation {
    condition     = var.github_webhook_secret == "" || length(var.github_webhook_secret) >= 16
    error_message = "github_webhook_secret must be empty or at least 16 characters."
  }
}

variable "github_api_url" {
  description = "GitHub's REST API (FLEET_GITHUB_API_URL): https://api.github.com, or a GitHub Enterprise Server's https://<host>/api/v3."
  type        = string
  default     = "https://api.github.com"

  validation {
    condition     = can(regex("^https://[^/\\s]+", var.github_api_url))
    error_message = "github_api_url must be an https URL."
  }
}

variable "reaper_schedule" {
  description = "NCRONTAB (six fields, seconds first) of the lease reaper timer (FLEET_REAPER_SCHEDULE)."
  type        = string
  default     = "2-59/15 * * * * *"

  validation {
    condition     = length(split(" ", trimspace(var.reaper_schedule))) == 6
    error_message = "reaper_schedule must be an NCRONTAB expression with six fields (seconds first)."
  }
}

variable "redispatch_schedule" {
  description = "NCRONTAB of the re-dispatch sweep timer (FLEET_REDISPATCH_SCHEDULE)."
  type        = string
  default     = "8-59/30 * * * * *"

  validation {
    condition     = length(split(" ", trimspace(var.redispatch_schedule))) == 6
    error_message = "redispatch_schedule must be an NCRONTAB expression with six fields (seconds first)."
  }
}

variable "gc_schedule" {
  description = "NCRONTAB of the branch/worktree GC timer (FLEET_GC_SCHEDULE)."
  type        = string
  default     = "13 0 * * * *"

  validation {
    condition     = length(split(" ", trimspace(var.gc_schedule))) == 6
    error_message = "gc_schedule must be an NCRONTAB expression with six fields (seconds first)."
  }
}

variable "echo_schedule" {
  description = "NCRONTAB of the tracker echo sweep timer, which re-drives due webhook deliveries (FLEET_ECHO_SCHEDULE)."
  type        = string
  default     = "1-59/5 * * * * *"

  validation {
    condition     = length(split(" ", trimspace(var.echo_schedule))) == 6
    error_message = "echo_schedule must be an NCRONTAB expression with six fields (seconds first)."
  }
}

variable "prune_schedule" {
  description = "NCRONTAB of the stale-factory prune timer, which deregisters static factories silent past prune_after (FLEET_PRUNE_SCHEDULE)."
  type        = string
  default     = "9 */5 * * * *"

  validation {
    condition     = length(split(" ", trimspace(var.prune_schedule))) == 6
    error_message = "prune_schedule must be an NCRONTAB expression with six fields (seconds first)."
  }
}

variable "forge_schedule" {
  description = "NCRONTAB of the forge sweep timer, which retries pull request syncs the forge failed once their backoff is over (FLEET_FORGE_SCHEDULE)."
  type        = string
  default     = "4 * * * * *"
  validation {
    condition     = length(split(" ", trimspace(var.forge_schedule))) == 6
    error_message = "forge_schedule must be an NCRONTAB expression with six fields (seconds first)."
  }
}

variable "prune_after" {
  description = "How long a static factory may stay silent (and hold no lease) before the prune timer deregisters it, a Go duration (FLEET_PRUNE_AFTER). Elastic pools are never pruned."
  type        = string
  default     = "168h"

  validation {
    condition     = can(regex("^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$", var.prune_after))
    error_message = "prune_after must be a Go duration such as 168h (Go has no day unit)."
  }
}

variable "lease_ttl" {
  description = "Job lease time-to-live, a Go duration (FLEET_LEASE_TTL)."
  type        = string
  default     = "5m"

  validation {
    condition     = can(regex("^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$", var.lease_ttl))
    error_message = "lease_ttl must be a Go duration such as 5m or 90s."
  }
}

variable "redispatch_after" {
  description = "Age after which a queued job's dispatch is considered lost and re-sent, a Go duration (FLEET_REDISPATCH_AFTER). It is also every dispatch message's TTL, so it must cover an elastic pool's polling interval plus its cold start (checked at plan; README, \"Elastic pool scaling\")."
  type        = string
  default     = "5m"

  validation {
    condition     = can(regex("^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$", var.redispatch_after))
    error_message = "redispatch_after must be a Go duration such as 2m."
  }
}

# --- Monitoring and storage --------------------------------------------------

variable "log_retention_days" {
  description = "Log Analytics retention in days (Functions and Container Apps logs)."
  type        = number
  default     = 30

  validation {
    condition     = var.log_retention_days >= 30 && var.log_retention_days <= 730
    error_message = "log_retention_days must be in 30-730."
  }
}

variable "storage_replication_type" {
  description = "Replication of the storage account that holds the Functions host state and artifacts."
  type        = string
  default     = "LRS"

  validation {
    condition     = contains(["LRS", "ZRS", "GRS", "GZRS", "RAGRS", "RAGZRS"], var.storage_replication_type)
    error_message = "storage_replication_type must be one of LRS, ZRS, GRS, GZRS, RAGRS, RAGZRS."
  }
}
