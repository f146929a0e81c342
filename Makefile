# Gigafactory fleet. `make run` starts the one-machine stack; `make test` runs
# every test CI runs.
GO ?= go
BIN := bin

.PHONY: all build test vet run bench

all: build

build:
	$(GO) build -o $(BIN)/ ./...

vet:
	$(GO) vet ./...

test: vet
	$(GO) test -race -count=1 ./...
