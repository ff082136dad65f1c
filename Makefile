# Strata — `make help` lists the targets.
SHELL := /bin/bash
GO ?= $(shell bash scripts/ensure-go.sh)
export STRATA_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/strata?sslmode=disable
export STRATA_REDIS_URL ?= redis://127.0.0.1:6379/0
GOTESTFLAGS ?= -race -count=1 -timeout 45m

.PHONY: console-screenshots deploy-test help run stores test test-compose test-redis-cluster test-short lint fmt vet build migrate bench clean docker-up docker-down compose-test soak soak-load

help: ## list the targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-12s\033[0m %s\n", $$1, $$2}'

stores: ## start Postgres (with pgvector) and Redis: docker compose if a Docker engine answers, else natively
	@bash scripts/stores.sh

run: stores ## start the stores, migrate, and serve the API on :8080 (prints the URL and an admin key)
	@if [ "$$(bash scripts/stores.sh --mode 2>/dev/null)" = docker ]; then \
		docker compose up --build server; \
	else \
		$(GO) run ./cmd/server; \
	fi

build: ## build bin/server and bin/strata
	$(GO) build -o bin/server ./cmd/server
	@if [ -d cmd/strata ]; then $(GO) build -o bin/strata ./cmd/strata; fi

migrate: stores ## apply migrations and exit
	$(GO) run ./cmd/server migrate

test: stores ## the whole suite against real Postgres, pgvector and Redis (race detector on)
	@bash scripts/test-deps.sh
	$(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$unformatted" ]; then echo "gofmt needed: $$unformatted"; exit 1; fi
	$(GO) test $(GOTESTFLAGS) ./...
	$(MAKE) --no-print-directory test-redis-cluster
	@GO=$(GO) bash scripts/fuzz.sh 3s
	@$(MAKE) --no-print-directory test-compose

test-compose: ## the compose proof inside make test: scripts/compose-test.sh as root (sudo otherwise), bounded to 30 min; STRATA_TEST_COMPOSE=0 skips it
	@if [ "$${STRATA_TEST_COMPOSE:-1}" = 0 ]; then \
		echo "compose proof SKIPPED (STRATA_TEST_COMPOSE=0): run 'make compose-test' as root before you ship a compose change"; \
	elif [ "$$(id -u)" = 0 ]; then \
		timeout 30m bash scripts/compose-test.sh; \
	else \
		timeout 30m sudo -E bash scripts/compose-test.sh; \
	fi

test-redis-cluster: ## the Redis-touching suites again, against a real 3-master Redis Cluster the tests start (docs/scaling.md)
	STRATA_TEST_REDIS=cluster $(GO) test $(GOTESTFLAGS) ./internal/working/ ./internal/keyvalue/ ./internal/turncontext/
	STRATA_TEST_REDIS=cluster $(GO) test $(GOTESTFLAGS) -run 'TestGDPRErasureResumesAfterKill|TestGDPRRectifyKV' ./internal/gdpr/
	STRATA_TEST_REDIS=cluster $(GO) test $(GOTESTFLAGS) -run 'TestWorking|TestKVHTTP|TestGDPRErasureEveryTier|TestGDPRExport' ./internal/httpapi/

soak: stores ## the slow reliability soak: crash/replica/fault tests with many more kills and ops, then every fuzz target for 60s
	STRATA_SOAK=1 $(GO) test -race -count=1 -timeout 60m -v -run 'TestCrashUnderLoad|TestTwoReplicas|TestFaults' ./internal/reliability/
	@GO=$(GO) bash scripts/fuzz.sh 60s

deploy-test: stores ## the rolling deploy, full length: three replicas of the previous release replaced by this tree's under load, then SIGTERM restarts, a SIGKILL, a Redis flush and a 10 s Postgres cut; prints a report, fails on any acknowledged write missing or duplicated (docs/reliability.md)
	STRATA_DEPLOY_TEST=full $(GO) test -count=1 -timeout 30m -v -run '^TestDeploy$$' ./internal/deploytest/

soak-load: stores ## the load test's 10-minute soak at 70 % of the measured maximum (p99 < 50 ms, 0 errors): docs/bench/soak.*
	@GO=$(GO) bash scripts/soak-load.sh

test-short: stores ## the suite without the slow tests
	$(GO) test -short -count=1 ./...

lint: fmt vet ## gofmt and go vet

fmt:
	gofmt -l -w $$(git ls-files '*.go')

vet:
	$(GO) vet ./...

bench: stores ## run the benchmarks against the raw-store floors; writes docs/benchmarks.md
	@bash scripts/bench.sh

docker-up: ## the whole stack in containers (needs a Docker engine)
	docker compose up -d --build

docker-down:
	docker compose down

compose-test: ## prove docker-compose.yml as root: stand-in images, up --build, all healthy, 30 s loadtest profile with 0 errors, down -v (scripts/compose-test.sh)
	@bash scripts/compose-test.sh

clean:
	rm -rf bin

console-screenshots: stores ## refresh docs/console/*.png: the web console's browser suite saves its main pages there
	@bash scripts/test-deps.sh
	CONSOLE_SCREENSHOTS=$(CURDIR)/docs/console $(GO) test -count=1 -run TestConsoleInChromium ./internal/consoletest/
