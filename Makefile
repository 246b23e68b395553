# Tether — the two commands that matter: `make run` and `make test`.
GO       ?= go
BIN      ?= bin/tether
LISTEN   ?= 127.0.0.1:8080
DATA     ?= ./data
AGENT    ?= demo
BENCHTIME ?= 1s
NPM      ?= npm
WEB      := gateway/web

.PHONY: run cluster build test chromium node-deps bench bench-micro bench-resume vet tidy-check staticcheck fmt fuzz clean

## run: a single node on $(LISTEN), data in $(DATA), dev tokens on, the demo engine
## (a slow search tool, so the page at http://$(LISTEN)/ shows tools running)
run: build
	$(BIN) serve --listen $(LISTEN) --data $(DATA) --dev-tokens --agent $(AGENT)

## cluster: three nodes on 127.0.0.1 (HTTP 8081-8083, gossip 7947-7949, data in
## $(DATA)/node-N), replicas 2, the demo page on each; Ctrl-C stops them cleanly.
## They share a JWT secret (fresh each time, or CLUSTER_JWT) so a token from any
## node's /dev/token works on all of them.
CLUSTER_JWT ?= $(shell od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
cluster: build
	@echo "three nodes (Ctrl-C stops them):"
	@for i in 1 2 3; do echo "  node-$$i  http://127.0.0.1:808$$i/   ws://127.0.0.1:808$$i/v1/ws"; done
	@trap 'wait' INT TERM; \
	for i in 1 2 3; do \
		join=""; [ $$i -gt 1 ] && join="--join 127.0.0.1:7947"; \
		$(BIN) serve --listen 127.0.0.1:808$$i --gossip 127.0.0.1:794$$((6+$$i)) $$join --node-id node-$$i \
			--data $(DATA)/node-$$i --jwt-secret $(CLUSTER_JWT) --dev-tokens --agent $(AGENT) --replicas 2 & \
		sleep 0.5; \
	done; \
	wait

## build: the tether binary in bin/
build:
	$(GO) build -o $(BIN) ./cmd/tether

## test: go vet, the tidy and staticcheck checks, then every test with the race
## detector; the browser tests and the Node tests of tether-ai.js in gateway/web
## must run (TETHER_BROWSER_TESTS=1, TETHER_NODE_TESTS=1), so Chromium and the
## npm packages are installed first
test: chromium node-deps tidy-check staticcheck
	$(GO) vet ./...
	TETHER_BROWSER_TESTS=1 TETHER_NODE_TESTS=1 $(GO) test -race -count=1 -timeout 9m ./...

## node-deps: the npm packages of gateway/web's tests (the AI SDK, esbuild), installed
## from package-lock.json with `npm ci` when node_modules is missing or older than the lock
node-deps: $(WEB)/node_modules/.package-lock.json

$(WEB)/node_modules/.package-lock.json: $(WEB)/package-lock.json
	@command -v $(NPM) >/dev/null 2>&1 || { echo "the tests of gateway/web need node (20.10+) and npm on PATH"; exit 1; }
	cd $(WEB) && $(NPM) ci --no-audit --no-fund
	@touch $@

## chromium: Debian's chromium for the browser tests, installed with apt-get when missing
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
		echo "installing Debian's chromium for the browser tests (apt-get)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium; }

## bench: a short load run against one local node (drops, silences, expiries, two SIGKILLs);
## prints the summary, writes bin/bench.json and bin/bench.html; exit 1 on any violation
bench: build
	$(BIN) bench --local 1 --sessions 200 --duration 30s --window 5s --kill-every 12s --down 1s \
		--json bin/bench.json --html bin/bench.html

## bench-micro: the Go micro-benchmarks (numbers for the README's performance table)
bench-micro:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -timeout 20m ./...

## fuzz: a short run of each fuzz target
fuzz:
	$(GO) test -run '^$$' -fuzz FuzzDecodeEntry -fuzztime 30s ./wal/record/
	$(GO) test -run '^$$' -fuzz FuzzFastDecodeMatches -fuzztime 30s ./wal/record/
	$(GO) test -run '^$$' -fuzz FuzzSkipValueMatchesTokens -fuzztime 30s ./wal/record/
	$(GO) test -run '^$$' -fuzz FuzzValueRoundTrip -fuzztime 30s ./wal/record/
	$(GO) test -run '^$$' -fuzz FuzzClientFrame -fuzztime 30s ./gateway/
	$(GO) test -run '^$$' -fuzz FuzzDecodeOnceMatches -fuzztime 30s ./gateway/
	$(GO) test -run '^$$' -fuzz FuzzDecodeFlatMatches -fuzztime 30s ./gateway/
	$(GO) test -run '^$$' -fuzz FuzzFastEncoding -fuzztime 30s ./gateway/
	$(GO) test -run '^$$' -fuzz FuzzFrameStoredReadBack -fuzztime 30s ./gateway/
	$(GO) test -run '^$$' -fuzz FuzzStoredIsTheDecodedMessage -fuzztime 30s ./gateway/internal/jsonenc/
	$(GO) test -run '^$$' -fuzz FuzzAppendString -fuzztime 30s ./gateway/internal/jsonenc/

vet:
	$(GO) vet ./...

## tidy-check: fails when `go mod tidy` would change go.mod or go.sum (it prints the diff)
tidy-check:
	@out=$$($(GO) mod tidy -diff) && [ -z "$$out" ] || { echo "$$out"; echo "go.mod/go.sum are not tidy: run go mod tidy"; exit 1; }

## staticcheck: honnef.co/go/tools at a pinned version, installed into bin/tools on first use
STATICCHECK_VERSION ?= v0.8.2
TOOLS ?= $(CURDIR)/bin/tools
$(TOOLS)/staticcheck-$(STATICCHECK_VERSION):
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	cp $(TOOLS)/staticcheck $@
staticcheck: $(TOOLS)/staticcheck-$(STATICCHECK_VERSION)
	$(TOOLS)/staticcheck-$(STATICCHECK_VERSION) ./...

## bench-resume: BenchmarkResume with Centrifugo recovering the same entries in the same
## run (issue 20's yardstick); Centrifugo is built at a pinned version into bin/tools on first use
CENTRIFUGO_VERSION ?= v6.9.1
RESUMETIME ?= 500x
$(TOOLS)/centrifugo-$(CENTRIFUGO_VERSION):
	GOBIN=$(TOOLS) $(GO) install github.com/centrifugal/centrifugo/v6@$(CENTRIFUGO_VERSION)
	cp $(TOOLS)/centrifugo $@
bench-resume: $(TOOLS)/centrifugo-$(CENTRIFUGO_VERSION)
	TETHER_BENCH_CENTRIFUGO_BIN=$(TOOLS)/centrifugo-$(CENTRIFUGO_VERSION) \
		$(GO) test -run '^$$' -bench 'BenchmarkResume$$' -benchtime $(RESUMETIME) -timeout 20m ./bench/

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
