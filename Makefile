# The two commands of the README: `make run` and `make test`. Everything the project needs is
# installed from here (virtualenv from PyPI, system tools from Debian), never by hand.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check -q
CONFIG ?= config/server.properties

.PHONY: run test bench tools clean

$(PY):
	python3 -m venv $(VENV)

$(VENV)/.run-deps: pyproject.toml | $(PY)
	$(PIP) install -e .
	touch $@

$(VENV)/.test-deps: pyproject.toml | $(PY)
	$(PIP) install -e '.[test,bench]'
	touch $@ $(VENV)/.run-deps

run: $(VENV)/.run-deps
	$(VENV)/bin/offsetd serve $(CONFIG)

# System tools the suite drives: kcat (Debian package). Installed when missing, as root or via sudo.
tools:
	@command -v kcat >/dev/null 2>&1 || { \
	  echo "installing kcat (Debian package)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq kcat >/dev/null; }

test: $(VENV)/.test-deps tools
	$(PY) -m pytest -q

bench: $(VENV)/.test-deps
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) data
