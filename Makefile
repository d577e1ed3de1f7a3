# moat — the commands the README shows.
CARGO ?= cargo
QUICK ?=

.PHONY: build install run test bench bench-table bench-check bench-baseline pool-quality attack-table lint fmt ci

build:
	$(CARGO) build --release

# `moat` on PATH (~/.cargo/bin), built in release mode.
install:
	$(CARGO) install --locked --path crates/node

# A development node: built-in chain, prefunded keys, a block every 2 s, RPC on :8545.
run:
	$(CARGO) run --release -- --dev

test:
	$(CARGO) test --workspace

bench:
	$(CARGO) bench --workspace

bench-table:
	$(CARGO) build --release -p moat -p moat-state-bench
	$(CARGO) run --release -p moat-bench-table -- $(if $(QUICK),--quick,)

# The quick table against the committed baseline: fails on a row at 2x its baseline
# (machine speed aside, see tooling/bench-table/src/check.rs).
bench-check:
	$(CARGO) build --release -p moat -p moat-state-bench -p moat-bench-table
	./target/release/moat-bench-table --quick --check docs/bench-baseline.json

# Rewrites the baseline: commit it only with the reason and the figures before and after.
bench-baseline:
	$(CARGO) build --release -p moat -p moat-state-bench -p moat-bench-table
	./target/release/moat-bench-table --quick --json docs/bench-baseline.json

# Attack scenarios beside honest traffic against a moat dev node on loopback; with
# GETH=/path/to/geth also against geth's dev mode (RPC form). See docs/BENCHMARKS.md.
attack-table:
	$(CARGO) build --release -p moat -p moat-attack
	GETH=$(GETH) tooling/attack/attack-table.sh

# Block value from the pool against the ideal block of the same stream, five seeds.
pool-quality:
	$(CARGO) run --release -p moat-pool-quality -- --seeds 1,2,3,4,5
	$(CARGO) run --release -p moat-pool-quality -- --blobs --seeds 1,2,3,4,5

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all
