# The two commands a newcomer needs:
#   make run    the whole product locally (Temporal dev server + UI, migrations, demo stock, API, worker)
#   make test   every test, against real Redis, Postgres and a Temporal dev server

# Temporal: one pinned server and Web UI server (tools/temporal/go.mod: go.temporal.io/server
# 1.32.2, github.com/temporalio/ui-server/v2 2.58.1), built from the module proxy into .tools/
# (git-ignored) from that one module, so their packages compile once:
#   .tools/temporal             our dev server (tools/temporal/main.go): `temporal server start-dev`,
#                               the server on SQLite with the Web UI in one process, for make run,
#                               the tests and the bench (the Temporal CLI's flags this repo uses)
#   .tools/temporal-server      the full server, .tools/temporal-sql-tool its schema tool and
#   .tools/temporal-ui-server   the Web UI server: the scale profile (make run-scale, scale tests)
# The first is built first; the other three then only link, at once (one server build cold,
# 5-6 minutes on 2 idle cores; seconds warm; 40-170 MB each).
TEMPORAL := .tools/temporal
# Stripe's own API mock: the payments tests check our requests against Stripe's OpenAPI spec.
STRIPE_MOCK_VERSION := v0.203.0
STRIPE_MOCK := .tools/stripe-mock

.PHONY: run test tools build vet

# Go: the modules name their toolchain (`toolchain go1.27.3` in go.mod), whose standard library
# fixes the twelve vulnerabilities make vulncheck finds in Go 1.26.8's net/http, crypto/tls and
# crypto/x509. Debian's and the official images' Go set GOTOOLCHAIN=local, which ignores that
# line; auto lets the go command fetch the named toolchain from the module proxy once (a 76 MB
# zip, checked against the checksum database) and use it for every build and test here.
export GOTOOLCHAIN := auto
# Independent builds run at once (the Temporal tools, stripe-mock, the product's vet): make
# runs up to three recipes in parallel; each go build parallelises within itself too.
MAKEFLAGS += -j3
TEMPORAL_SERVER := .tools/temporal-server
TEMPORAL_SQL_TOOL := .tools/temporal-sql-tool
TEMPORAL_UI_SERVER := .tools/temporal-ui-server
TEMPORAL_MODULE := tools/temporal/go.mod tools/temporal/go.sum

run: $(TEMPORAL) build
	./bin/checkout dev

# make test runs three things at once, and fails if any fails:
#   - every package with -race, two at a time (go test -p, the cores). scale runs among
#     them: its Temporal server (32 at most) and four product processes (8 each) stay under
#     70 Postgres connections, and no other package needs more than about 10 of
#     max_connections (100); the fault suite runs Postgres clusters of its own;
#   - the saga explorer's 10,000 seeds without -race. The -race run above explores the
#     first EXPLORE_RACE_SEEDS of them: the race detector needs a few schedules, the search
#     needs many, and -race makes each three times slower (docs/testing.md);
#   - tools/compose and tools/temporal, modules of their own (the latter's test checks our dev
#     server's store; -vet=off: vet would analyse every server package first, minutes cold).
EXPLORE_RACE_SEEDS := 1000
TEST_ENV := TEMPORAL_CLI=$(CURDIR)/$(TEMPORAL) STRIPE_MOCK=$(CURDIR)/$(STRIPE_MOCK)

test: tools vet
	@echo "go test -race ./... (EXPLORE_SEEDS=$(EXPLORE_RACE_SEEDS)), the explorer's 10,000 seeds, tools/compose and tools/temporal, at once"
	@$(TEST_ENV) EXPLORE_SEEDS=$(EXPLORE_RACE_SEEDS) go test -count=1 -race -timeout 30m ./... & race=$$!; \
	$(TEST_ENV) go test -count=1 -timeout 30m -run '^TestExploreSagaInterleavings$$' ./workflows/ & explore=$$!; \
	(cd tools/compose && go test -count=1 ./...) & compose=$$!; \
	(cd tools/temporal && go test -count=1 -vet=off ./...) & devserver=$$!; \
	status=0; for job in $$race $$explore $$compose $$devserver; do wait $$job || status=1; done; exit $$status

# workflowcheck (the SDK's contrib tool, pinned) fails on non-deterministic calls in workflow
# code: time.Now, goroutines, map iteration, I/O. About 20 s.
WORKFLOWCHECK_VERSION := v0.6.0

vet:
	go vet ./...
	cd bench && go vet ./...
	go run go.temporal.io/sdk/contrib/tools/workflowcheck@$(WORKFLOWCHECK_VERSION) ./workflows/

build:
	go build -o bin/checkout ./cmd/checkout

tools: $(TEMPORAL) $(STRIPE_MOCK) $(TEMPORAL_SERVER)
	@echo "tools: $$(./$(TEMPORAL) --version)"

$(STRIPE_MOCK):
	GOBIN=$(CURDIR)/.tools go install github.com/stripe/stripe-mock@$(STRIPE_MOCK_VERSION)

$(TEMPORAL): $(TEMPORAL_MODULE) tools/temporal/main.go
	mkdir -p .tools && cd tools/temporal && go build -o $(CURDIR)/$(TEMPORAL) .

# After the dev server, whose build compiled every package these share: three links at once.
$(TEMPORAL_SERVER): $(TEMPORAL_MODULE) | $(TEMPORAL)
	cd tools/temporal && { go build -o $(CURDIR)/$(TEMPORAL_SQL_TOOL) go.temporal.io/server/cmd/tools/sql & sql=$$!; \
		go build -o $(CURDIR)/$(TEMPORAL_UI_SERVER) github.com/temporalio/ui-server/v2/cmd/server & ui=$$!; \
		go build -o $(CURDIR)/$(TEMPORAL_SERVER) go.temporal.io/server/cmd/server && wait $$sql && wait $$ui; }

# The production shape on this machine, until Ctrl-C: the Temporal server on Postgres (4
# shards) with its Web UI on 8233, a Redis Cluster of 3 masters + 3 replicas on 7000-7005,
# 2 workers and 2 API replicas (8080, 8081). State in .local/scale/; see docs/scale.md.
.PHONY: run-scale
run-scale: $(TEMPORAL_SERVER) build
	tools/scale/run

# govulncheck and the Go vulnerability database it reads, pinned in tools/vulncheck/go.mod:
# golang.org/x/vuln v1.9.0, and golang.org/x/vulndb (the database's source) at its commit of
# 2026-11-05, whose OSV files makedb writes into the layout of `govulncheck -db file://`. Both
# come from the module proxy at build time; nothing is fetched at run time. About 20 s cold.
GOVULNCHECK := .tools/govulncheck
VULNDB := .tools/vulndb

$(GOVULNCHECK): tools/vulncheck/go.mod tools/vulncheck/go.sum
	cd tools/vulncheck && go build -o $(CURDIR)/$(GOVULNCHECK) golang.org/x/vuln/cmd/govulncheck

$(VULNDB)/index/db.json: tools/vulncheck/go.mod tools/vulncheck/go.sum tools/vulncheck/makedb/main.go
	cd tools/vulncheck && go run ./makedb -out $(CURDIR)/$(VULNDB)

# make vulncheck: govulncheck over the pinned tool builds of .tools/ (binary mode, printed
# only: their fixes are Temporal's, or a newer Go), then over the product module's packages
# (source mode, symbol level), failing on a vulnerability our code calls that
# tools/vulncheck/accepted.txt does not list, or on a line there that no longer applies.
# tools/vulncheck/gate prints each: ID, module, fix, a call path. About 30 s warm, most of it
# the product's call graph; docs/security.md#known-vulnerabilities.
VULNGATE := .tools/vulncheck-gate
VULNCHECK := $(GOVULNCHECK) -db file://$(CURDIR)/$(VULNDB) -format json
VULNCHECK_BINARIES := $(TEMPORAL) $(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL) $(TEMPORAL_UI_SERVER) $(STRIPE_MOCK)

.PHONY: vulncheck
vulncheck: tools $(GOVULNCHECK) $(VULNDB)/index/db.json $(VULNGATE)
	@mkdir -p .tools/vulncheck
	@for bin in $(VULNCHECK_BINARIES); do \
		echo "vulncheck: $$bin (printed, not failing)"; \
		$(VULNCHECK) -mode binary $$bin >.tools/vulncheck/$$(basename $$bin).json || exit 1; \
		$(VULNGATE) <.tools/vulncheck/$$(basename $$bin).json || exit 1; \
	done
	@echo "vulncheck: the product module, ./... (failing on a call tools/vulncheck/accepted.txt does not list)"
	@$(VULNCHECK) ./... >.tools/vulncheck/product.json
	@$(VULNGATE) -accepted tools/vulncheck/accepted.txt <.tools/vulncheck/product.json

$(VULNGATE): tools/vulncheck/go.mod tools/vulncheck/gate/main.go
	cd tools/vulncheck && go build -o $(CURDIR)/$(VULNGATE) ./gate

# The flash-sale benchmark: one run against local Redis, Postgres and a dev server it
# starts itself; writes BENCHMARKS.md and docs/bench/*.png. About 6 minutes on 2 cores.
# Phony: bench/ is also the program's folder.
.PHONY: bench
bench: $(TEMPORAL) $(TEMPORAL_SERVER)
	cd bench && go run . -out ../BENCHMARKS.md -charts ../docs/bench -temporal $(CURDIR)/$(TEMPORAL)
