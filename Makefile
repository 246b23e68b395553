# Tether — the two commands that matter: `make run` and `make test`.
GO       ?= go
BIN      ?= bin/tether
LISTEN   ?= 127.0.0.1:8080
DATA     ?= ./data
AGENT    ?= echo
BENCHTIME ?= 1s

.PHONY: run build test bench bench-micro vet fmt fuzz clean

## run: a single node on $(LISTEN), data in $(DATA), dev tokens on, echo engine
run: build
	$(BIN) serve --listen $(LISTEN) --data $(DATA) --dev-tokens --agent $(AGENT)

## build: the tether binary in bin/
build:
	$(GO) build -o $(BIN) ./cmd/tether

## test: every test, with the race detector
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 9m ./...

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
	$(GO) test -run '^$$' -fuzz FuzzDecodeEntry -fuzztime 30s ./wal/
	$(GO) test -run '^$$' -fuzz FuzzClientFrame -fuzztime 30s ./gateway/

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
