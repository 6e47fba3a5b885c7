#!/usr/bin/env bash
# Wheels that a GPU host without a package registry needs beside its own CUDA torch, numpy and pytest.
# They go to .whl/ (git-ignored); scripts/gpu_checks.sh installs them there into /tmp/site.
# transformers is pinned as in requirements.txt (the host's own may be older); soundfile needs cffi,
# which transformers imports whenever soundfile is installed.
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl  # one version of each package: two would stop the install there
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .whl \
    transformers==5.23.0 soundfile==0.14.0 soxr==1.1.0 jiwer==4.0.0 rapidfuzz==3.14.6 plotly==7.1.0 \
    cffi==2.1.1 pycparser==3.12
du -sh .whl
