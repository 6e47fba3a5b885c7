#!/usr/bin/env bash
# Install what the tests need (the first half of the README's test command, which .ci/run calls):
# Python packages from requirements-dev.txt; the system Chromium for the one real-browser test
# (Debian's package, installed with apt-get when missing and we may; no browser is ever downloaded
# by a test tool).
set -euo pipefail
cd "$(dirname "$0")/.."
pip install -q -r requirements-dev.txt
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
        || echo "scripts/install-test-deps.sh: could not install chromium; the browser test will be skipped" >&2
fi
