# Gigafactory fleet. `make run` starts the one-machine stack; `make test` runs
# every test CI runs.
GO ?= go
BIN := bin

.PHONY: all build demo screenshot test chaos fuzz fuzz-ci bench-scale vet lint fmt-check tidy-check staticcheck run bench package handler func-app azurite chromium test-tools agent-clis octokit

all: build

# The custom-handler binary the Functions host (or the local emulator) runs.
handler:
	$(GO) build -o $(BIN)/handler ./functions

build: handler
	$(GO) build -o $(BIN)/fleet-local ./local
	$(GO) build -o $(BIN)/fleet-demo ./local/demo
	$(GO) build -o $(BIN)/ ./infra/...

# The local stack: SQLite + the Functions host emulator running bin/handler.
run: build
	$(BIN)/fleet-local

# The demo (local/demo): the local stack, two factory processes running
# local/demo/engine.sh over a bare git repo under .fleet-demo/, and a few
# jobs (a DAG, a review-gated one, one that fails once, plain ones). It
# prints the console URL, the operator token and the `fleetctl top`
# command; Ctrl-C stops all of it. DEMO_FLAGS="-listen 127.0.0.1:0 -dir /tmp/d".
demo: build
	$(BIN)/fleet-demo -bin $(BIN) $(DEMO_FLAGS)

# The pictures of the console in docs/ (console.png is the README's): the
# pages of make demo's fleet, signed in as an operator, after its jobs
# settled (local/demo/shoot runs the demo on a free port and stops it).
screenshot: build chromium
	$(GO) run ./local/demo/shoot -bin $(BIN) -out docs

# The deployment zip: linux/amd64 handler, host.json, one folder per function.
DIST ?= dist
package:
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -o $(DIST)/handler ./functions
	$(GO) run ./infra/pack -root . -handler $(DIST)/handler -o $(DIST)/fleet-functions.zip

# The app laid out for Azure Functions Core Tools: cd dist/app && func start.
func-app:
	$(GO) build -o dist/app-handler ./functions
	$(GO) run ./infra/pack -root . -handler dist/app-handler -dir dist/app
	test -f dist/app/local.settings.json || cp local/local.settings.json.example dist/app/local.settings.json

# Azurite, the storage emulator `func start` needs for timers and the
# change-feed leases' host locks; installed from npm into a cache folder.
# `make test` uses the same installation for the artifact blob tests.
AZURITE_DIR ?= $(HOME)/.cache/fleet-azurite
AZURITE_VERSION ?= 3.35.0
azurite:
	test -x $(AZURITE_DIR)/node_modules/.bin/azurite || npm install --silent --no-audit --no-fund --prefix $(AZURITE_DIR) azurite@$(AZURITE_VERSION)
	$(AZURITE_DIR)/node_modules/.bin/azurite --silent --disableTelemetry --skipApiVersionCheck --blobHost 127.0.0.1 --queueHost 127.0.0.1 --tableHost 127.0.0.1 --location $(AZURITE_DIR)/data

vet:
	$(GO) vet ./...

# Every Go file as gofmt writes it (git's files: nothing generated or
# downloaded is looked at).
fmt-check:
	@bad=$$(git ls-files -z '*.go' | xargs -0 "$$($(GO) env GOROOT)/bin/gofmt" -l); \
	if [ -n "$$bad" ]; then echo "fmt-check: not gofmt'd (run gofmt -w):"; echo "$$bad"; exit 1; fi

# go.mod and go.sum must be what `go mod tidy` makes of the imports.
tidy-check:
	@$(GO) mod tidy -diff || { echo "tidy-check: go.mod/go.sum are not tidy; run go mod tidy"; exit 1; }

# staticcheck, pinned and installed into a cache folder by this target.
TOOLS_BIN ?= $(HOME)/.cache/fleet-tools/bin
STATICCHECK_VERSION ?= v0.8.2
STATICCHECK := $(TOOLS_BIN)/staticcheck-$(STATICCHECK_VERSION)
$(STATICCHECK):
	mkdir -p $(TOOLS_BIN)/tmp
	GOBIN=$(TOOLS_BIN)/tmp $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	mv $(TOOLS_BIN)/tmp/staticcheck $@

staticcheck: $(STATICCHECK)
	$(STATICCHECK) ./...

lint: vet fmt-check tidy-check staticcheck

# tests/azurite installs Azurite (npm) once, starts its blob service on a
# free loopback port for the run and stops it after: the blob store's
# conformance suite and the artifact tests run against it. Without npm they
# skip, except under CI=true, where they fail.
# -timeout: the black-box package (tests/) starts real stacks, factories and
# browsers, one after another on two cores; it takes about 500 s on an idle
# machine, too close to go test's default 10 min per package once anything
# else runs beside it.
TEST_TIMEOUT ?= 20m
test: lint tf-check-if-available test-tools
	$(GO) run ./tests/azurite -dir $(AZURITE_DIR) -version $(AZURITE_VERSION) -- $(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(MAKE) --no-print-directory fuzz-ci

# Fuzzing: every Fuzz target of the module (found by name in the test
# files), each for FUZZTIME. Their seed corpora run in every `go test`;
# `make test` also fuzzes each for FUZZTIME_CI. A crasher is saved under
# the package's testdata/fuzz/<target>/ (commit it: it becomes a seed that
# go test re-runs) and its path printed; any crasher fails the target.
# make test fuzzes by execution count, not time: with a duration, Go 1.26's
# coordinator can fail a target with a bare "context deadline exceeded" when
# the time runs out while a worker is mid-call on a loaded machine
# (golang/go#75804, fixed in Go 1.27); a count has no deadline to race. The
# targets that run a whole HTTP handler per input get fewer executions.
FUZZTIME ?= 60s
FUZZTIME_CI ?= 50000x
FUZZ_SLOW ?= FuzzRequestBodies FuzzResumeIDs FuzzParsePosition
FUZZTIME_CI_SLOW ?= 3000x
fuzz:
	@set -u; failed=""; \
	for t in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs grep -h -o '^func Fuzz[A-Za-z0-9_]*' | sed 's/^func //' | sort -u); do \
		dir=$$(grep -rl --include='*_test.go' "^func $$t(" . | head -1 | xargs dirname); \
		ft="$(FUZZTIME)"; case " $(FUZZ_SLOW) " in *" $$t "*) ft="$(or $(FUZZTIME_SLOW),$(FUZZTIME))";; esac; \
		echo "fuzz: $$t in $$dir for $$ft"; \
		log=$$(mktemp); \
		if $(GO) test -run '^$$' -fuzz "^$$t\$$" -fuzztime "$$ft" "$$dir" >"$$log" 2>&1; then \
			grep -E '^fuzz: elapsed' "$$log" | tail -1; \
		else \
			cat "$$log"; failed="$$failed $$t"; \
			grep -o 'testdata/fuzz/[^ ]*' "$$log" | sed "s|^|fuzz: crasher $$dir/|"; \
		fi; \
		rm -f "$$log"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: FAILED:$$failed"; exit 1; fi; echo "fuzz: no crashers"

fuzz-ci:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=$(FUZZTIME_CI) FUZZTIME_SLOW=$(FUZZTIME_CI_SLOW)

# Tools the black-box tests drive, installed with apt-get when missing:
# Debian's chromium for the web console's browser test (tests/console_test.go)
# and tmux for the `fleetctl top` test (tests/top_test.go).
# Without them those tests skip, except under CI=true, where installing must
# succeed and the tests fail rather than skip.
test-tools: chromium tmux agent-clis octokit

# GitHub's official OpenAPI descriptions (REST and webhook payloads), pinned,
# from npm into a cache folder: the GitHub adapter's tests validate every
# request it sends, every answer it reads and every webhook payload the
# tests send against them (shared/forge/github/githubtest/octokit). Without
# npm those tests skip, except under CI=true, where they fail.
OCTOKIT_DIR ?= $(HOME)/.cache/fleet-octokit
OCTOKIT_OPENAPI_VERSION ?= 23.0.2
OCTOKIT_WEBHOOKS_VERSION ?= 12.1.0
octokit:
	@test "$$(node -p 'require("$(OCTOKIT_DIR)/node_modules/@octokit/openapi/package.json").version' 2>/dev/null)" = $(OCTOKIT_OPENAPI_VERSION) && \
	  test "$$(node -p 'require("$(OCTOKIT_DIR)/node_modules/@octokit/openapi-webhooks/package.json").version' 2>/dev/null)" = $(OCTOKIT_WEBHOOKS_VERSION) || \
	{ echo "octokit: installing @octokit/openapi@$(OCTOKIT_OPENAPI_VERSION) and @octokit/openapi-webhooks@$(OCTOKIT_WEBHOOKS_VERSION) (npm)"; \
	  npm install --silent --no-audit --no-fund --prefix $(OCTOKIT_DIR) \
	    @octokit/openapi@$(OCTOKIT_OPENAPI_VERSION) @octokit/openapi-webhooks@$(OCTOKIT_WEBHOOKS_VERSION) || \
	  { if [ "$$CI" = true ]; then echo "octokit: npm install failed, and CI=true needs it"; exit 1; fi; \
	    echo "octokit: could not install; the tests that need it will skip"; }; }

# The real coding-agent CLIs, pinned, from npm into a cache folder: the
# tests run the real Claude Code CLI whole against a scripted Messages API
# on loopback (tests/internal/messagesapi), and check that the presets'
# command lines are ones the real CLIs accept. Without npm those tests
# skip, except under CI=true, where they fail.
AGENT_CLIS_DIR ?= $(HOME)/.cache/fleet-agent-clis
CLAUDE_CODE_VERSION ?= 2.1.197
CODEX_VERSION ?= 0.171.0
agent-clis:
	@test -x $(AGENT_CLIS_DIR)/node_modules/.bin/claude -a -x $(AGENT_CLIS_DIR)/node_modules/.bin/codex && \
	  $(AGENT_CLIS_DIR)/node_modules/.bin/claude --version | grep -q '^$(CLAUDE_CODE_VERSION) ' && \
	  $(AGENT_CLIS_DIR)/node_modules/.bin/codex --version | grep -q ' $(CODEX_VERSION)$$' || \
	{ echo "agent-clis: installing @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION) and @openai/codex@$(CODEX_VERSION) (npm)"; \
	  npm install --silent --no-audit --no-fund --prefix $(AGENT_CLIS_DIR) \
	    @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION) @openai/codex@$(CODEX_VERSION) || \
	  { if [ "$$CI" = true ]; then echo "agent-clis: npm install failed, and CI=true needs them"; exit 1; fi; \
	    echo "agent-clis: could not install; the tests that need them will skip"; }; }

chromium:
	@$(call apt_tool,chromium,chromium)

tmux:
	@$(call apt_tool,tmux,tmux)

# apt_tool(command, package): install package unless command is on PATH.
define apt_tool
command -v $(1) >/dev/null 2>&1 || { \
	echo "$(1): installing Debian package $(2) (apt-get)"; \
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2) >/dev/null; } || \
	{ if [ "$$CI" = true ]; then echo "$(1): could not install $(2), and CI=true needs it"; exit 1; fi; \
	  echo "$(1): could not install $(2); the tests that need it will skip"; }; }
endef

# The chaos campaign (tests/chaos): the real local stack, 8 factory
# processes and 2,000 jobs under scheduled faults (factory kill -9 and
# SIGSTOP, handler kill, stack and broker restart, store faults, network
# faults); non-zero when a job is lost, double-assigned, shipped from a
# stale epoch or moved illegally, a budget-capped product spends past its
# ceiling beyond the reservations, or a fault kind was never injected.
# `make test` runs a short one (TestChaosShort). Smaller: make chaos CHAOS_FLAGS="-factories 3 -jobs 100 -faults 60s".
chaos:
	$(GO) run ./tests/chaos $(CHAOS_FLAGS)

# Performance figures on the real local stack, with their targets
# (tests/bench/README.md). Smoke run: make bench BENCH_FLAGS="-jobs 200 -idle 5s".
bench:
	$(GO) run ./tests/bench $(BENCH_FLAGS)

# How the cost of a claim and of a dispatch grows with the queue: 1,000
# factories and 1k / 10k / 100k queued jobs, in process over SQLite
# (tests/benchscale). Smoke run: make bench-scale BENCH_SCALE_FLAGS="-sizes 1000 -factories 50".
bench-scale:
	$(GO) run ./tests/benchscale $(BENCH_SCALE_FLAGS)

# --- Terraform (terraform/; see terraform/README.md) ---------------------------
# tf-check runs offline: the azurerm provider comes from a filesystem mirror
# built from source, because the registry is out of reach on CI machines.
TERRAFORM ?= terraform
TF_DIR := terraform
AZURERM_VERSION := 5.2.0
# A commit just after the 5.2.0 release; about 8 minutes to build on 2 cores,
# once (go's build cache and the mirror keep it).
AZURERM_PSEUDO := v1.44.1-0.20260824201233-fae580791926
AZURERM_MODULE := github.com/hashicorp/terraform-provider-azurerm@$(AZURERM_PSEUDO)
TF_PLUGIN_DIR ?= $(HOME)/.cache/fleet-terraform/plugins
TF_PROVIDER = $(TF_PLUGIN_DIR)/registry.terraform.io/hashicorp/azurerm/$(AZURERM_VERSION)/$(shell $(GO) env GOOS)_$(shell $(GO) env GOARCH)/terraform-provider-azurerm_v$(AZURERM_VERSION)
GO_BIN_DIR = $(or $(shell $(GO) env GOBIN),$(shell $(GO) env GOPATH)/bin)
FUNCTIONS_ZIP := dist/fleet-functions.zip

.PHONY: tf-provider tf-check tf-check-if-available tf-plan tf-apply deploy

tf-provider: $(TF_PROVIDER)

# Waits for a build of the same provider already running (the [g] keeps
# pgrep from matching this shell), reuses a matching binary in GOBIN, and
# builds only when there is none.
$(TF_PROVIDER):
	@while pgrep -f '[g]o install $(AZURERM_MODULE)' >/dev/null 2>&1; do echo "tf-provider: waiting for the azurerm build already running"; sleep 15; done
	@if ! $(GO) version -m $(GO_BIN_DIR)/terraform-provider-azurerm 2>/dev/null | grep -q '$(AZURERM_PSEUDO)'; then \
		echo "tf-provider: building azurerm $(AZURERM_VERSION) from source (about 8 minutes on 2 cores, once)"; \
		$(GO) install $(AZURERM_MODULE); \
	fi
	@mkdir -p $(@D)
	@cp $(GO_BIN_DIR)/terraform-provider-azurerm $@.tmp.$$$$ && mv -f $@.tmp.$$$$ $@
	@echo "tf-provider: mirror ready in $(TF_PLUGIN_DIR)"

# fmt on the source; init/validate/test on a throwaway copy, so the offline
# lock file and plugin-dir setting never land in terraform/ (a real init
# against the registry would then reject the lock file's checksums).
tf-check: tf-provider
	$(TERRAFORM) -chdir=$(TF_DIR) fmt -check -recursive -diff
	@set -e; work=$$(mktemp -d); trap 'rm -rf "$$work"' EXIT; \
	cp -R $(TF_DIR)/. "$$work/"; \
	rm -rf "$$work/.terraform" "$$work/.terraform.lock.hcl" "$$work"/*.tfstate* "$$work"/*.tfplan "$$work"/terraform.tfvars "$$work"/*.auto.tfvars; \
	echo "$(TERRAFORM) init -backend=false -plugin-dir=$(TF_PLUGIN_DIR)"; \
	$(TERRAFORM) -chdir="$$work" init -backend=false -input=false -plugin-dir=$(TF_PLUGIN_DIR) >"$$work/init.log" 2>&1 || { cat "$$work/init.log"; exit 1; }; \
	echo "$(TERRAFORM) validate"; $(TERRAFORM) -chdir="$$work" validate; \
	echo "$(TERRAFORM) test"; $(TERRAFORM) -chdir="$$work" test

tf-check-if-available:
	@if command -v $(TERRAFORM) >/dev/null 2>&1; then $(MAKE) --no-print-directory tf-check; \
	else echo "tf-check: skipped, $(TERRAFORM) is not on PATH (install Terraform >= 1.7 to check terraform/)"; fi

# Deploying (network and `az login` needed): Terraform provisions, then the
# handler zip is published separately; terraform/README.md explains why.
tf-plan:
	$(TERRAFORM) -chdir=$(TF_DIR) init -input=false
	$(TERRAFORM) -chdir=$(TF_DIR) plan -input=false

tf-apply:
	$(TERRAFORM) -chdir=$(TF_DIR) init -input=false
	$(TERRAFORM) -chdir=$(TF_DIR) apply

deploy: package
	@command -v az >/dev/null 2>&1 || { echo "deploy: the Azure CLI (az) is not on PATH"; exit 1; }
	@set -e; \
	rg=$$($(TERRAFORM) -chdir=$(TF_DIR) output -raw resource_group_name); \
	app=$$($(TERRAFORM) -chdir=$(TF_DIR) output -raw function_app_name); \
	url=$$($(TERRAFORM) -chdir=$(TF_DIR) output -raw coordinator_url); \
	echo "deploy: $(FUNCTIONS_ZIP) -> $$app ($$rg)"; \
	az functionapp deployment source config-zip --resource-group "$$rg" --name "$$app" --src $(FUNCTIONS_ZIP); \
	echo "deploy: waiting for $$url/api/healthz"; \
	curl -fsS --retry 20 --retry-delay 6 --retry-all-errors "$$url/api/healthz" >/dev/null; \
	echo "deploy: $$url is up"
