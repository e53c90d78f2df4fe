# Convenience targets; each one does any set-up still missing (scripts/install is idempotent).
.PHONY: install demo test unit lint doctor fidelity clean-venv

install:
	bash scripts/install

demo:
	bash scripts/demo

test:
	bash scripts/test

unit:
	bash scripts/test --unit

lint:
	.venv/bin/ruff check .

doctor: install
	.venv/bin/testbed doctor

fidelity: install
	.venv/bin/testbed vm -- .venv/bin/python benchmarks/fidelity.py

clean-venv:
	rm -rf .venv
