# moat — the commands the README shows.
CARGO ?= cargo
QUICK ?=

.PHONY: build run test bench bench-table lint fmt ci

build:
	$(CARGO) build --release

# Until the node runs, `run` decodes a sample transaction (the EIP-155 example).
run:
	$(CARGO) run --release -- tx decode --fork Prague 0xf86c098504a817c800825208943535353535353535353535353535353535353535880de0b6b3a76400008025a028ef61340bd939bc2195fe537567866003e1a15d3c71ff63e1590620aa636276a067cbe9d8997f761aecb703304b3800ccf555c9f3dc64214b297fb1966a3b6d83

test:
	$(CARGO) test --workspace

bench:
	$(CARGO) bench --workspace

bench-table:
	$(CARGO) run --release -p moat-bench-table -- $(if $(QUICK),--quick,)

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all
