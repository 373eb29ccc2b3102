# Two commands a fresh machine needs: `make demo` and `make test`.
#
# `make test` tests what users install: it builds the wheel (and sdist) into
# dist/, installs the wheel into a fresh virtual environment outside the
# source tree, and runs the test suite against that environment's commands.
# `make demo` installs the same wheel into .venv and profiles a workload.
# `make check` is the edit loop: the fast suites (unit and viewer, no perf
# needed) against an editable install in .venv, then `make lint`: ruff, and
# mypy over the package as it installs (qtools.*).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
TOOLS  := $(VENV)/.tools-stamp
PIP    := --quiet --disable-pip-version-check

.PHONY: test demo install dist clean check lint editable

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

editable: $(TOOLS)
	$(BIN)/python -m pip install $(PIP) -e '.[test,dev]'

check: editable
	$(BIN)/python -m pytest -q -p no:cacheprovider tests/unit tests/viewer
	@$(MAKE) --no-print-directory lint

# mypy sees the folders as the package they install as: qtools.common,
# qtools.qformat, qtools.daemon and qtools.viewer, through links in a
# directory of its own.
lint: editable
	$(BIN)/ruff check common qformat daemon viewer
	@set -e; tree=$$(mktemp -d); trap 'rm -rf "$$tree"' EXIT; mkdir "$$tree/qtools"; \
	for top in common qformat daemon viewer; do ln -s "$(CURDIR)/$$top" "$$tree/qtools/$$top"; done; \
	cp pyproject.toml "$$tree/"; cd "$$tree" && MYPYPATH="$$tree" "$(CURDIR)/$(BIN)/mypy" -p qtools

demo: install
	@PATH="$(CURDIR)/$(BIN):$$PATH" sh tests/workloads/demo.sh

clean:
	rm -rf $(VENV) build dist *.egg-info demo-out
