# Two commands do all set-up:  `make example` (build the example benchmark) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
CORES ?= all
# pytest-xdist workers for `make test` (tests/conftest.py keeps tests that share state on one worker)
TEST_WORKERS ?= 2
# What set-up installs. The stamp is named after the content of pyproject.toml and of these two lines
# and has no prerequisite, so file times never matter: a fresh clone (newer pyproject.toml) linking an
# installed .venv of the same requirements installs nothing; other requirements, another stamp.
EXTRAS := test,slurm,k8s,mteb
NO_DEPS := beir>=2.2,<3
STAMP := $(VENV)/.installed-$(shell { cat pyproject.toml; echo '$(EXTRAS) $(NO_DEPS)'; } | sha256sum | cut -c1-12)

.PHONY: example example-offline test test-heavy lint dryrun clean-example

# one line per step with the seconds since set-up began; pip prints its own progress in between
$(STAMP):
	@set -e; t0=$$(date +%s); step() { echo "== set-up [$$(( $$(date +%s) - t0 )) s] $$*"; }; \
	step "1/6 virtual environment $(VENV)"; test -x $(PY) || python3 -m venv $(VENV); \
	step "2/6 upgrading pip"; $(PY) -m pip install --upgrade pip; \
	step "3/6 installing benchmaker with extras [$(EXTRAS)] (pip; the longest step: torch and friends)"; \
	$(PY) -m pip install -e '.[$(EXTRAS)]'; \
	step "4/6 installing $(NO_DEPS) without its dependencies (tests/test_export_ir.py; pyproject's test extra)"; \
	$(PY) -m pip install --no-deps '$(NO_DEPS)'; \
	step "5/6 compiling ranx's metric functions once per user (docs/evaluate.md; minutes on 2 cores)"; \
	$(PY) -m benchmaker.evaluate.warm; \
	step "6/6 compiling the planner's search once per installation (docs/planner.md)"; \
	$(PY) -m benchmaker.plan.warm; \
	rm -f $(VENV)/.installed-* && touch $(STAMP); step "done: $(STAMP)"

## Build the example benchmark end to end (no API key; downloads CLIP weights on first use).
example: $(STAMP)
	$(VENV)/bin/snakemake --cores $(CORES)
	@echo "Benchmark written to results/example-bench/ (open results/example-bench/summary/report.html)"

## The same with a random tiny CLIP built locally: no download at all (a smoke test, not a benchmark).
example-offline: $(STAMP)
	$(PY) -m benchmaker.tinyclip .cache/tiny-clip
	HF_HUB_OFFLINE=1 $(VENV)/bin/snakemake --cores $(CORES) --configfile config/config.yaml config/offline.yaml
	@echo "Smoke-test benchmark written to results/example-bench-offline/ (open results/example-bench-offline/summary/report.html)"

## Run the test suite (unit tests, workflow tests on a tiny corpus, fake OpenAI/Hub/S3 servers).
test: $(STAMP)
	@# the judge audit's labelling page is tested in the system Chromium: installed here where we can
	@if ! command -v chromium >/dev/null 2>&1 && [ -z "$$BENCHMAKER_CHROMIUM" ] && [ "$$(id -u)" = 0 ] \
	    && command -v apt-get >/dev/null 2>&1; then \
	  echo "installing chromium for tests/test_audit_page.py (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; \
	fi
	HF_HUB_OFFLINE=1 $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

## The heavy tests the default run deselects (each over 4 minutes: cluster controller recovery, kill series).
test-heavy: $(STAMP)
	HF_HUB_OFFLINE=1 $(PY) -m pytest -m heavy

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/snakemake --lint
	$(VENV)/bin/snakefmt --check Snakefile rules

dryrun: $(STAMP)
	$(VENV)/bin/snakemake -n --cores 2
