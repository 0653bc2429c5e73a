# Moonbase: `make run` serves the default functions/ and cron/ on 127.0.0.1:8080;
# `make test` runs the whole suite (unit tests + end-to-end tests against the real binary).
SHELL := /bin/bash
APT_PACKAGES := libsqlite3-dev liblua5.4-dev libmicrohttpd-dev libsodium-dev libssl-dev libwslay-dev libcurl4-openssl-dev libpq-dev pkg-config python3-venv sqlite3 curl
BENCH_APT_PACKAGES := wrk linux-perf valgrind binutils
# The PostgreSQL tests' throw-away cluster (tests/pg/cluster.sh) runs Debian's PostgreSQL 15.
PG_TEST_APT_PACKAGES := postgresql-15
# The dashboard's browser tests: headless Chromium and its WebDriver (Selenium comes from PyPI).
TEST_APT_PACKAGES := chromium chromium-driver $(PG_TEST_APT_PACKAGES)
VENV := .venv
PY := $(VENV)/bin/python
SWIFT_FLAGS ?=

.PHONY: all deps test-deps apt-install venv build release run run-example test unit e2e bench check chaos clean dashboard-assets

all: build

# Installs the Debian packages that are missing (root or sudo), never reinstalls.
deps:
	@$(MAKE) --no-print-directory apt-install PKGS="$(APT_PACKAGES)"

test-deps:
	@$(MAKE) --no-print-directory apt-install PKGS="$(APT_PACKAGES) $(TEST_APT_PACKAGES)"

apt-install:
	@missing=""; for p in $(PKGS); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

# Python test tooling lives in a virtual environment (Debian's system pip refuses installs).
$(VENV)/.stamp: tests/requirements.txt
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r tests/requirements.txt
	touch $@

venv: deps $(VENV)/.stamp

build: deps
	swift build $(SWIFT_FLAGS)

release: deps
	swift build -c release $(SWIFT_FLAGS)

run: release
	.build/release/moonbase serve --host 127.0.0.1 --port 8080 --data ./data --functions ./functions --cron ./cron

# An example app (examples/APP) on 127.0.0.1:8080 with its own data folder: make run-example APP=pals
run-example:
	@test -n "$(APP)" -a -d "examples/$(APP)/functions" || { echo "usage: make run-example APP=crags|notes|pals" >&2; exit 2; }
	@$(MAKE) --no-print-directory release
	.build/release/moonbase serve --host 127.0.0.1 --port 8080 --data ./data-$(APP) --functions examples/$(APP)/functions --cron examples/$(APP)/cron

check: build
	.build/debug/moonbase check functions

# The dashboard's files are embedded in the binary by a generated Swift file.
dashboard-assets:
	python3 dashboard/embed.py

# End-to-end tests first (they use the debug binary), the swift test summary line last.
test: test-deps venv
	python3 dashboard/embed.py --check
	swift build --build-tests $(SWIFT_FLAGS)
	MOONBASE_BIN=$(CURDIR)/.build/debug/moonbase $(PY) -m pytest -q tests/docs tests/e2e tests/cron; rc=$$?; \
	  if [ $$rc -ne 0 ] && [ $$rc -ne 5 ]; then exit $$rc; fi
	# The end-to-end suite again with every server on PostgreSQL (a throw-away cluster, started
	# and stopped by the run; tests about SQLite itself are marked sqlite_only).
	MOONBASE_TEST_BACKEND=postgres MOONBASE_BIN=$(CURDIR)/.build/debug/moonbase $(PY) -m pytest -q tests/e2e tests/cron
	MOONBASE_BIN=$(CURDIR)/.build/debug/moonbase $(PY) tests/chaos/chaos.py --short --seed 1
	swift test --skip-build $(SWIFT_FLAGS)

unit: deps
	@$(MAKE) --no-print-directory apt-install PKGS="$(PG_TEST_APT_PACKAGES)"
	swift test $(SWIFT_FLAGS)

e2e: test-deps venv
	swift build $(SWIFT_FLAGS)
	MOONBASE_BIN=$(CURDIR)/.build/debug/moonbase $(PY) -m pytest -q tests/e2e

# Hardening run: over 50,000 fuzzed requests, Lua abuses, 1,100 slow senders, 20 kill -9
# cycles under write load, disk full on a tmpfs (as root). Prints its figures; exit 1 on a failed check.
chaos: deps venv
	swift build $(SWIFT_FLAGS)
	MOONBASE_BIN=$(CURDIR)/.build/debug/moonbase $(PY) tests/chaos/chaos.py --full $(if $(SEED),--seed $(SEED))

# Beside PocketBase (request log off and on) and nginx + Lua; `perf` (linux-perf) profiles W1, W2, W6.
# BENCH_POSTGRES=1 adds the PostgreSQL leg (a throw-away PostgreSQL 15 cluster; see bench/run.sh).
bench: deps release
	@$(MAKE) --no-print-directory apt-install PKGS="$(BENCH_APT_PACKAGES)"
	@if [ "$${BENCH_POSTGRES:-0}" = 1 ]; then $(MAKE) --no-print-directory apt-install PKGS="$(PG_TEST_APT_PACKAGES)"; fi
	bash bench/run.sh

clean:
	rm -rf .build $(VENV)
