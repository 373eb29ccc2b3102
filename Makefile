# Two commands a fresh machine needs: `make demo` and `make test`.
# Both create .venv when missing and install q-tools into it (with its test extra).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: test demo install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	@touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q tests

demo: $(STAMP)
	@PATH="$(CURDIR)/$(BIN):$$PATH" sh tests/workloads/demo.sh

clean:
	rm -rf $(VENV) build *.egg-info demo-out
