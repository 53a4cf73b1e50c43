#!/usr/bin/env bash
# The wheels the lent GPU machine lacks, for its Python (CPython 3.12, manylinux x86_64), into
# .whl/ at the repository root (git-ignored; the device tool's `carry` takes it along).
#
# The machine has PyTorch with CUDA, nvidia-ml-py, psutil, prometheus-client and numpy, and no
# network.  It lacks textual, which the monitor (and the GPU check's screenshot) needs: textual
# travels with what it requires, at the versions this virtualenv runs the test suite with, so
# the machine runs the combination tested here (its own rich or pygments, older or newer,
# are shadowed by ours on PYTHONPATH).  typing-extensions stays the machine's: torch needs it.
# traintop itself is not a wheel here: the device command installs it from the working tree
# that travels (`pip install --no-deps --no-build-isolation .`), so it is never stale.
#
# Usage (from the project's virtualenv, where the suite runs):  benchmarks/gpu_wheels.sh
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(textual rich pygments markdown-it-py mdurl mdit-py-plugins linkify-it-py platformdirs)
LIMIT_BYTES=$((16 * 1024 * 1024))  # of the 64 MiB the tree may weigh with what it carries

pins=$(python3 - "${PACKAGES[@]}" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version

try:
    print(" ".join(f"{name}=={version(name)}" for name in sys.argv[1:]))
except PackageNotFoundError as exc:
    sys.exit(f"gpu_wheels: {exc.name} is not installed here: run from the project's virtualenv")
EOF
)

rm -rf .whl
mkdir .whl
# shellcheck disable=SC2086  # one argument per pin
python3 -m pip download --quiet --no-deps --only-binary=:all: --dest .whl \
    --python-version 3.12 --implementation cp --abi cp312 \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform any $pins

count=$(find .whl -type f -name '*.whl' | wc -l)
bytes=$(du -sb .whl | cut -f1)
if [ "$count" -ne "${#PACKAGES[@]}" ] || [ "$bytes" -gt "$LIMIT_BYTES" ]; then
    echo "gpu_wheels: $count wheels, $bytes bytes in .whl/ (want ${#PACKAGES[@]}, <= $LIMIT_BYTES)" >&2
    exit 1
fi
echo "gpu_wheels: $count wheels, $((bytes / 1024)) KiB in .whl/: $pins"
