#!/usr/bin/env bash
# Wheels that a GPU host without a package registry needs beside its own CUDA torch, numpy, pytest, httpx,
# pandas, pillow, typer, huggingface_hub and tokenizers, in two sets, each within one call's 64 MiB beside
# the checkout (scripts/gpu_checks.sh installs the set of its mode; carry the one folder the call needs):
#
#   .whl/engine/  the engine, its tests and benchmarks: transformers pinned as in requirements.txt (the
#                 host's own is older), soundfile (with cffi, which transformers imports whenever soundfile
#                 is installed), soxr, jiwer, plotly
#   .whl/app/     the same, and the app's: gradio and its server (fastapi, uvicorn, pydantic, ...),
#                 gradio_client and openai for the clients. A call that starts a fresh machine needs nothing
#                 from the one before.
#
# Versions are this checkout's (requirements.txt and the development environment it was tested in). Three
# wheels are carried without what these runs never load, or a set would not fit (the checkout is ~25 MiB):
# transformers without its models other than Whisper (and the few whose modules Whisper's import), plotly
# without its Jupyter extension, widget bundle, offline plotly.js and sample data (the app sends figures as
# JSON), gradio without what a server driven through its API never serves (no browser runs there): the
# server-side rendering bundle for Node.js (which the host lacks), the demo media, the browser's ffmpeg
# and the precompressed .br copies of the page's scripts.
set -euo pipefail
cd "$(dirname "$0")/.."
ENGINE=(
    transformers==5.23.0 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12 soxr==1.1.0 jiwer==4.0.0
    rapidfuzz==3.14.6 plotly==7.1.0
)
APP=(
    gradio==6.31.0 gradio_client==2.7.2 hf-gradio==0.4.1 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.54.0
    pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
    typing_extensions==4.16.0 annotated-doc==0.0.7 opentelemetry-api==1.45.2 python-multipart==0.0.34
    orjson==3.13.0 brotli==1.2.1 groovy==0.1.2 pydub==0.25.1 pytz==2026.6 safehttpx==0.1.7
    semantic-version==2.10.0 tomlkit==0.14.0 anyio==4.16.0 sniffio==1.3.1 idna==3.20
    openai==3.54.0 jiter==0.19.0 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5
)
WHISPER_MODULES="auto|whisper|bart|mbart|wav2vec2|gpt2|encoder_decoder|speech_encoder_decoder"
LEFT_OUT_TRANSFORMERS="^transformers/models/(?!__init__\.py$|($WHISPER_MODULES)/)"
LEFT_OUT_PLOTLY="^plotly/(labextension/|package_data/(widgetbundle\.js|plotly\.min\.js|datasets/))|^plotly-[^/]*\.data/"
LEFT_OUT_GRADIO="^gradio/(templates/node/|media_assets/|templates/frontend/static/ffmpeg/)|\.br$"
BUDGET=$((63 * 1024 * 1024))  # what one call carries, less a MiB for files added to the checkout later

download() {  # download FOLDER PACKAGE...: one version of each (two would stop the install there)
    local folder=$1
    shift
    rm -rf "$folder"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
        -d "$folder" "$@"
}

trim() {  # trim WHEEL REGEX: the wheel without the files whose path matches, its RECORD without their lines
    python3 - "$1" "$2" <<'PYTHON'
import re
import sys
import zipfile
from pathlib import Path

wheel, left_out = Path(sys.argv[1]), re.compile(sys.argv[2])
trimmed = wheel.with_suffix(".trimmed")
with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(trimmed, "w", zipfile.ZIP_DEFLATED) as target:
    for item in source.infolist():
        if left_out.search(item.filename):
            continue
        data = source.read(item)
        if item.filename.endswith(".dist-info/RECORD"):
            lines = data.decode().splitlines(keepends=True)
            data = "".join(line for line in lines if not left_out.search(line.split(",", 1)[0])).encode()
        target.writestr(item, data)
trimmed.replace(wheel)
PYTHON
}

tree_bytes() {  # what travels with every call: tracked files and untracked ones git does not ignore
    { git ls-files -z; git ls-files -z -o --exclude-standard; } | xargs -0 du -cb 2>/dev/null |
        awk '/\ttotal$/ {sum += $1} END {print sum + 0}'
}

download .whl/engine "${ENGINE[@]}"
download .whl/app "${ENGINE[@]}" "${APP[@]}"
for set in engine app; do
    trim .whl/$set/transformers-*.whl "$LEFT_OUT_TRANSFORMERS"
    trim .whl/$set/plotly-*.whl "$LEFT_OUT_PLOTLY"
done
trim .whl/app/gradio-*.whl "$LEFT_OUT_GRADIO"
tree=$(tree_bytes)
status=0
for set in engine app; do
    bytes=$(du -cb .whl/$set/*.whl | tail -1 | cut -f1)
    echo "$set: $(ls .whl/$set/*.whl | wc -l) wheels, $((bytes >> 20)) MiB; with the checkout's" \
        "$((tree >> 20)) MiB: $(((bytes + tree) >> 20)) of the 63 MiB this script allows a call"
    if [ $((bytes + tree)) -gt "$BUDGET" ]; then
        echo "  too large to carry beside the checkout" >&2
        status=1
    fi
done
exit $status
