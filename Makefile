# deliverysim: every target works on a fresh clone with only Go installed.
# Postgres-backed tests run when DELIVERYSIM_PG_DSN names a server, the
# local default server answers, or a Docker engine does; otherwise they
# skip, unless DELIVERYSIM_REQUIRE_PG=1.

GO           ?= go
SEEDS        ?= 1-500
TEST_TIMEOUT ?= 20m
RACE_TIMEOUT ?= 40m
BENCH_COUNT  ?= 3
BENCH_TIME   ?= 1s
BENCH_SWEEP_COUNT ?= 3
STATICCHECK  ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: all build test race run bench lint tidy chaos mutate

all: build test

build:
	$(GO) build ./...

# The tests find PostgreSQL as the CLI does: $$DELIVERYSIM_PG_DSN, else the
# local server at the default address if it answers (deliverysim pgwhich
# prints which, in one line), else a container if Docker answers, else
# they skip. The conformance package runs verbosely so the log shows, per
# backend (TestMemory*, TestPostgres*), that the suite ran and was not
# skipped. That line comes first (README promises it), so vet runs after
# it, inside the same silent recipe line.
test:
	@dsn="$$($(GO) run ./cmd/deliverysim pgwhich --say 'make test')" || exit 2; \
	export DELIVERYSIM_PG_DSN="$$dsn"; \
	echo "$(GO) vet ./..."; $(GO) vet ./... || exit 1; \
	echo "$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./... (conformance with -v)"; \
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v '/conformance$$') && \
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -v ./conformance/

race:
	$(GO) test -race -timeout $(RACE_TIMEOUT) ./...

# The main job: a seed sweep of the simulator on the embedded in-memory
# backend; no server needed. Any invariant violation exits non-zero and
# prints the command that replays it; so does a situation of the coverage
# catalogue that no seed reached.
run:
	$(GO) run ./cmd/deliverysim sweep --seeds $(SEEDS) --require-coverage

# A real-process soak: the reference engine as a child process, SIGKILLed,
# cut off from PostgreSQL and facing broken bots for CHAOS_DURATION, then
# judged by the checker. Needs the local PostgreSQL (or DELIVERYSIM_PG_DSN).
CHAOS_DURATION ?= 10m
CHAOS_KILLS    ?= 100
chaos:
	$(GO) run ./cmd/deliverysim chaos --duration $(CHAOS_DURATION) --kills $(CHAOS_KILLS) --settle 2m

# -count gives benchstat several samples per benchmark:
#   make bench > old.txt; (change something); make bench > new.txt
#   benchstat old.txt new.txt
# The bench package's replay sizes sweep and simulator week are whole
# runs, so they go once per sample (-benchtime 1x).
bench:
	@$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCH_TIME) -count $(BENCH_COUNT) -timeout 2h $$($(GO) list ./... | grep -v '/bench$$')
	@$(GO) test -run '^$$' -bench . -benchtime 1x -count $(BENCH_SWEEP_COUNT) -timeout 1h ./bench/

# staticcheck runs only if the Go toolchain can fetch it (it needs the
# module proxy); offline, lint is gofmt and vet, except under CI=true
# (.ci/run runs lint), where a missing staticcheck fails it.
lint:
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	@if $(GO) run $(STATICCHECK) -version >/dev/null 2>&1; then \
		echo "$(GO) run $(STATICCHECK) ./..."; $(GO) run $(STATICCHECK) ./...; \
	else \
		echo "lint: staticcheck unavailable (cannot fetch $(STATICCHECK)); skipped"; \
		if [ "$$CI" = true ]; then echo "lint: CI=true requires staticcheck"; exit 1; fi; \
	fi

tidy:
	$(GO) mod tidy

# Mutation analysis (outside `make test`: it takes minutes to hours): every
# mutant of the engine, receiver and memstore against the blind sweep
# (MUTATE_SEEDS seeds per mutant, those of the first 2000 that run its
# site), the scenarios and, for memstore, the
# conformance suite; prints the kill matrix and the kill rate per package.
MUTATE_SEEDS ?= 100
MUTATE_FLAGS ?=
mutate:
	$(GO) run ./cmd/deliverysim mutate --seeds $(MUTATE_SEEDS) $(MUTATE_FLAGS)
