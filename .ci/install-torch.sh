#!/usr/bin/env bash
# Installs torch==VERSION into the venv VENV: the CPU build where it can be had, else whatever build pip's indexes
# serve (.ci/torch_choice.py decides where from, and says so on stderr). Prints the build installed, `cpu` or
# `cuda X.Y`, on stdout; pip's output shows only when it fails.
# Usage:  build=$(bash .ci/install-torch.sh VENV VERSION)    (PYTHON: the python that runs the decision)
set -euo pipefail
VENV="$1"
VERSION="$2"
HERE="$(cd "$(dirname "$0")" && pwd)"

args=$("${PYTHON:-python3}" "$HERE/torch_choice.py" torch-args "$VERSION")
mapfile -t ARGS <<<"$args"
out=$(mktemp)
if ! "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check ${args:+"${ARGS[@]}"} \
  "torch==$VERSION" >"$out" 2>&1; then
  grep -v "^WARNING: Location" "$out" >&2 || true
  rm -f "$out"
  exit 1
fi
rm -f "$out"
build=$("$VENV/bin/python" -W ignore "$HERE/torch_choice.py" build)
echo "[torch] torch $VERSION installed: $build build" >&2
echo "$build"
