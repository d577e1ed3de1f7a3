# moat — the commands the README shows.
CARGO ?= cargo
QUICK ?=
MINUTES ?= 30

.PHONY: build install run test bench bench-table bench-check bench-baseline pool-quality attack-table soak plots lint fmt ci fuzz fuzz-smoke fuzz-seeds

build:
	$(CARGO) build --release

# `moat` on PATH (~/.cargo/bin), built in release mode.
install:
	$(CARGO) install --locked --path .

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

# A soak: moat for MINUTES (30) under mixed load (RPC txs, a gossiping peer, engine API
# blocks, reorgs), its RSS, fds, threads and pool size over time; with GETH=/path/to/geth,
# go-ethereum beside it under the same load. Output and CSVs in /tmp/soak (SOAK_DIR).
soak:
	$(CARGO) build --release -p moat -p moat-soak
	MINUTES=$(MINUTES) GETH=$(GETH) NODE_ARGS="$(NODE_ARGS)" tooling/soak/soak.sh

# Block value from the pool against the ideal block of the same stream, five seeds.
pool-quality:
	$(CARGO) run --release -p moat-pool-quality -- --seeds 1,2,3,4,5
	$(CARGO) run --release -p moat-pool-quality -- --blobs --seeds 1,2,3,4,5

# docs/BENCHMARKS.md's plots: docs/plots/*.svg from docs/plots/data/*.json and
# docs/bench-baseline.json (moat-plots, tooling/plots).
plots:
	$(CARGO) run -q -p moat-plots

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all

# Coverage-guided fuzzing of every decoder of outside bytes (fuzz/, a cargo-fuzz project:
# nightly and `cargo install cargo-fuzz`). Each target runs FUZZ_SECONDS in turn, from
# its seeds (fuzz/corpus/, read only) and what earlier runs found (fuzz/work/); a crash
# leaves its input in fuzz/artifacts/<target>/ and fails the run once all have run.
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?= $(sort $(basename $(notdir $(wildcard fuzz/fuzz_targets/*.rs))))
FUZZ_FLAGS = --sanitizer none --debug-assertions

fuzz:
	$(CARGO) +nightly fuzz build $(FUZZ_FLAGS)
	@failed=""; for t in $(FUZZ_TARGETS); do \
	  mkdir -p fuzz/work/$$t; \
	  echo "== $$t ($(FUZZ_SECONDS) s)"; \
	  $(CARGO) +nightly fuzz run $(FUZZ_FLAGS) $$t fuzz/work/$$t fuzz/corpus/$$t -- \
	    -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 || failed="$$failed $$t"; \
	done; \
	if [ -n "$$failed" ]; then echo "crashed:$$failed (inputs in fuzz/artifacts/)"; exit 1; fi

fuzz-smoke:
	$(MAKE) fuzz FUZZ_SECONDS=10

# Rewrites the seed corpus from moat's own encoders.
fuzz-seeds:
	cd fuzz && $(CARGO) +nightly run --example seeds -- corpus
