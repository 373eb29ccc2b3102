# Two commands a fresh machine needs: `make demo` and `make test`.
#
# `make test` tests what users install: it builds the wheel (and sdist) into
# dist/, installs the wheel into a fresh virtual environment outside the
# source tree, and runs the test suite against that environment's commands.
# `make demo` installs the same wheel into .venv and profiles a workload.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TOOLS  := $(VENV)/.tools-stamp
PIP    := --quiet --disable-pip-version-check

.PHONY: test demo install dist clean

$(TOOLS):
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install $(PIP) 'build>=1.0'
	@touch $(TOOLS)

# Always rebuilt: a wheel older than the tree would test the wrong code.
dist: $(TOOLS)
	rm -rf dist
	$(BIN)/python -m build --outdir dist . > build.log 2>&1 || { cat build.log; exit 1; }
	@rm -f build.log

install: dist
	$(BIN)/python -m pip install $(PIP) --force-reinstall --no-deps dist/*.whl
	$(BIN)/python -m pip install $(PIP) "$$(ls dist/*.whl)"

test: dist
	@set -e; \
	venv=$$(mktemp -d "$${TMPDIR:-/tmp}/q-tools-test.XXXXXX"); \
	trap 'rm -rf "$$venv"' EXIT; \
	chmod 755 "$$venv"; \
	$(PYTHON) -m venv "$$venv"; \
	"$$venv/bin/python" -m pip install $(PIP) "$$(ls dist/*.whl)[test]"; \
	echo "testing $$(ls dist/*.whl) installed in $$venv"; \
	Q_WHEEL="$$(realpath dist/*.whl)" Q_REQUIRE_WHEEL=1 \
	    "$$venv/bin/python" -m pytest -q -p no:cacheprovider tests

demo: install
	@PATH="$(CURDIR)/$(BIN):$$PATH" sh tests/workloads/demo.sh

clean:
	rm -rf $(VENV) build dist *.egg-info demo-out
