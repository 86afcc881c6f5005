# Switchboard. Two commands do all the set-up on a fresh machine:
#   make run    the server (a private PostgreSQL when DATABASE_URL is unset) plus a demo endpoint
#   make test   every test against real PostgreSQL, then lint
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin
GO     ?= go
BIN    := bin/switchboard
PG     := db/pgcluster.sh
TS     := tests/ts

# With DATABASE_URL unset, start the private cluster; the URLs below then point at it.
define with_db
if [ -z "$$DATABASE_URL" ]; then $(PG) start || exit 1; fi; \
admin=$${DATABASE_URL:-$$($(PG) url)}; \
app=$${DATABASE_URL:-$${admin%/postgres?*}/switchboard?sslmode=disable}
endef

PEER   := tests/bench/peer
SDK    := server/third_party/go-sdk
# Upstream tests that race on a loaded machine, patched or not ($(SDK)/SWITCHBOARD.md).
SDK_FLAKY := ^(TestStreamableStateful_DiscoverDoesNotLeakSession|TestServerTransportCleanup)$$

.PHONY: build sdk run test test-go lint bench clean-db

# go-sdk v1.8.0 from the module cache with switchboard's patches applied, where go.mod's replace
# points ($(SDK)/SWITCHBOARD.md); made again only when the patches change.
sdk:
	@GO=$(GO) $(SDK)/apply.sh

# The real-client tests' packages (official TypeScript SDK, conformance suite, a Node 22), from
# the committed lockfile; reinstalled when package.json or the lockfile changes.
$(TS)/node_modules/.package-lock.json: $(TS)/package.json $(TS)/package-lock.json
	npm ci --prefix $(TS) --no-audit --no-fund

build: sdk
	$(GO) build -o $(BIN) ./cmd/switchboard

run: build
	@$(with_db); export DATABASE_URL=$$app; \
	$(BIN) migrate && $(BIN) demo --check-addr && exec $(BIN) serve

# tests/sdk is its own module (go-sdk v1.8.0 as released, the reference client), so ./... does
# not reach it: it runs after the rest, and so do upstream's own tests of the patched go-sdk
# (mcp, jsonrpc and the internal packages, from the release's _test.go files). The
# load-balancer tests (tests/e2e, tests/sdk) need HAProxy and the OAuth browser test Chromium:
# both installed from Debian when missing. The test template and per-test databases are dropped
# afterwards, pass or fail.
test: build $(TS)/node_modules/.package-lock.json
	@$(with_db); export SWITCHBOARD_TEST_DATABASE_URL=$$admin; unset DATABASE_URL; \
	hap=$$(tests/lb/ensure-haproxy.sh) || exit 1; export SWITCHBOARD_HAPROXY=$$hap; \
	chr=$$(tests/ts/ensure-chromium.sh) || exit 1; export SWITCHBOARD_CHROMIUM=$$chr; \
	status=0; $(GO) test -count=1 -timeout 20m ./... || status=$$?; \
	(cd tests/sdk && $(GO) test -count=1 -timeout 5m ./...) || status=$$?; \
	(cd $(SDK)/v1.8.0 && $(GO) test -count=1 -timeout 10m -skip '$(SDK_FLAKY)' ./mcp ./jsonrpc ./internal/...) || status=$$?; \
	db/dropscratch.sh "$$admin"; \
	[ $$status = 0 ] && $(MAKE) --no-print-directory lint

lint: build
	$(GO) vet ./...
	cd tests/sdk && $(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	@$(with_db); SWITCHBOARD_TEST_DATABASE_URL=$$admin db/lint.sh

# The bench's peer (Graphile Worker and the Node 22 it needs), from its committed lockfile.
$(PEER)/node_modules/.package-lock.json: $(PEER)/package.json $(PEER)/package-lock.json
	npm ci --prefix $(PEER) --no-audit --no-fund

bench: build $(PEER)/node_modules/.package-lock.json
	@$(with_db); export SWITCHBOARD_TEST_DATABASE_URL=$$admin; unset DATABASE_URL; \
	$(GO) run ./tests/bench

clean-db:
	$(PG) stop; rm -rf .pgdata
