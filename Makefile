# Berth's developer commands. `make help` lists them.
SHELL := bash
.DEFAULT_GOAL := help

FUZZTIME ?= 30s

.PHONY: help test test-short lint tidy demo bench chaos fuzz services-up services-down clean-cache

help: ## List the targets.
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-14s %s\n", $$1, $$2}'

test: ## The whole suite: starts PostgreSQL/SQS as needed, gofmt, vet, staticcheck, go test -race. What CI runs.
	@bash scripts/test.sh

test-short: ## Unit tests only (go test -short -race) in every module, no services; integration tests skip.
	@bash scripts/modules.sh go test -short -race -count=1 ./...

lint: ## gofmt, go vet and staticcheck, without services or tests.
	@bash scripts/test.sh lint

tidy: ## go mod tidy in every module (go.work lists them; docs/development.md, Modules).
	@bash scripts/modules.sh go mod tidy

demo: ## Run the demo (go run ./cmd/berth demo).
	go run ./cmd/berth demo

bench: ## Benchmarks (go test -bench .) in every module, no unit tests. Run `make services-up` and source .cache/test.env first for the integration ones.
	@bash scripts/modules.sh go test -run '^$$' -bench . ./...

chaos: ## Full-size chaos harness on PostgreSQL, SQLite and SQS (docs/reliability.md); `make services-up` first.
	@source .cache/test.env && for t in postgres sqlite sqs; do go run ./cmd/berth-chaos --transport $$t --messages 100000 --duration 10m || exit 1; done

fuzz: ## Every Fuzz target for FUZZTIME each (default 30s).
	@FUZZTIME=$(FUZZTIME) bash scripts/fuzz.sh

services-up: ## Start/find the test services for local work and write .cache/test.env to `source`.
	@bash scripts/services.sh up

services-down: ## Stop what services-up started.
	@bash scripts/services.sh down

clean-cache: services-down ## Remove .cache (emulator install, tools, logs).
	rm -rf .cache
