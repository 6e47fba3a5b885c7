#!/usr/bin/env bash
# The test command (README; .ci/run calls it): install what the tests need, then run them.
# Python packages from requirements-dev.txt; the system Chromium for the one real-browser test
# (Debian's package, installed with apt-get when missing and we may; no browser is ever downloaded
# by a test tool). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
pip install -q -r requirements-dev.txt
if ! command -v chromium >/dev/null && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
        || echo "scripts/test.sh: could not install chromium; the browser test will be skipped" >&2
fi
python -m pytest -q "$@"
