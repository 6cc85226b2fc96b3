#!/usr/bin/env bash
# Builds (idempotently) the environment the runtime-guard tests run in, and prints the path of its python
# on the last line of stdout. Everything lives under ~/.cache/specguard so reruns are fast:
#   venv-runtime/        torch 2.13.0 (the CPU build where it can be had) + vLLM 0.33.0 + flashinfer-python
#                        0.7.2.post1 (both --no-deps) + the light packages their attention-backend and speculator
#                        modules import, + specguard's test deps
#   vllm-0.28.0/         vLLM 0.28.0's code (--no-deps, --target), put first on PYTHONPATH by the tests that
#                        reproduce the first seed against the old draft-metadata helper
#   flashinfer-0.7.4/    flashinfer-python 0.7.4's code (--no-deps, --target), put first on PYTHONPATH by the test
#                        that runs the FlashInfer-dependent runtime tests a second time on it
#                        (tests/runtime/test_flashinfer_next.py)
#   sglang-0.5.23-rt/    SGLang 0.5.23's code and the modules its ForwardBatch, plugin loader and FlashInfer
#                        backend import (--no-deps, --target), put first on PYTHONPATH by the SGLang guard tests
#                        (tests/runtime_sglang), which run it in subprocesses of the venv's python
#   wheels/              the vLLM / FlashInfer / SGLang wheels (downloaded once when missing, `pip download --no-deps`)
# Usage:  PY=$(bash .ci/runtime-env.sh | tail -n1); "$PY" -m pip install -e ".[test]"; "$PY" -m pytest
# (tests find vLLM 0.28.0 at $SPECGUARD_CACHE/vllm-0.28.0 or $SPECGUARD_VLLM_OLD_PATH, and flashinfer-python 0.7.4 at
# $SPECGUARD_CACHE/flashinfer-0.7.4 or $SPECGUARD_FLASHINFER_NEXT_PATH; all logs go to stderr)
# Where torch comes from: a CPU wheel in PIP_FIND_LINKS, else the CPU index (SPECGUARD_TORCH_INDEX_URL, by default
# PyTorch's own) where it answers, else whatever build pip's own indexes serve: .ci/torch_choice.py decides.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"

SG_CACHE="${SPECGUARD_CACHE:-$HOME/.cache/specguard}"
VENV="$SG_CACHE/venv-runtime"
WHEELS="$SG_CACHE/wheels"
OLD_VLLM="$SG_CACHE/vllm-0.28.0"
TORCH_VERSION="2.13.0"
VLLM_NEW="0.33.0"
VLLM_OLD="0.28.0"
FLASHINFER="0.7.2.post1"
# The newest flashinfer-python the guard is assessed on besides the pinned one (specguard/runtime/coverage.py
# ASSESSED); its code goes in a folder of its own, like vLLM 0.28.0's.
FLASHINFER_NEXT="0.7.4"
NEXT_FLASHINFER="$SG_CACHE/flashinfer-$FLASHINFER_NEXT"
SGLANG="0.5.23"
SGLANG_RT="$SG_CACHE/sglang-$SGLANG-rt"
# What importing 0.5.23's forward_batch_info, plugins and FlashInfer backends pulls in besides torch and the
# venv's packages (found by importing them here). torchvision is the public build: on a CPU torch its compiled
# ops cannot load, and tests/runtime_sglang/sglang_env.py declares the two op schemas its import registers.
SGLANG_DEPS=("orjson==3.13.0" "triton==3.9.0" "ipython==9.18.1" "traitlets==5.16.1" "torchvision==0.28.0"
  "dill==0.4.1" "sentencepiece==0.2.3" "compressed-tensors==0.20.1" "loguru==0.7.3" "gguf==0.19.0")
# Bump when the package set below changes, so an old venv is rebuilt rather than trusted.
STAMP_VERSION="2"

# specguard's own test needs (the analyzer tests run in this venv too).
TEST_PACKAGES=("pydantic>=2.5" "libcst>=1.1" "pytest>=8" "hypothesis>=6.100" "jsonschema>=4.20" "pyyaml>=6"
  "pre-commit>=3.5" "numpy<2.3" "packaging" "typing_extensions")
# Light, torch-free packages (installed with their own deps) that vLLM's config, logger, plugin loader,
# kv-cache interface, FlashInfer MLA backend and gpu speculator modules import at module level.
LIGHT_WITH_DEPS=("regex" "cachetools" "psutil" "pyzmq" "msgspec" "cloudpickle" "cbor2" "pybase64" "uvloop"
  "py-cpuinfo" "prometheus_client" "pillow" "einops" "partial-json-parser" "requests" "tqdm" "nvidia-ml-py"
  "aiohttp" "openai" "opentelemetry-api" "fastapi<0.137.0,>=0.133.0" "transformers<5.21.0,>=5.16.1")
# Their requirements would drag in torch/triton/CUDA wheels; their imported code needs none of that here.
LIGHT_NO_DEPS=("apache-tvm-ffi==0.1.11" "xgrammar==0.2.8" "llguidance<1.8.0,>=1.7.0" "openai-harmony")

log() { echo "[runtime-env] $*" >&2; }
# pip quietly, showing its output only when it fails (and then failing the script).
pipq() {
  local out
  out=$(mktemp)
  if ! "$VENV/bin/python" -m pip install --quiet -c "$VENV/torch-constraint.txt" "$@" >"$out" 2>&1; then
    grep -v "^WARNING: Location" "$out" >&2 || true
    rm -f "$out"
    return 1
  fi
  rm -f "$out"
}

PYTHON_BIN="${PYTHON:-python3}"
mkdir -p "$SG_CACHE" "$WHEELS"

stamp="$VENV/.specguard-stamp"
want_stamp="$STAMP_VERSION torch=$TORCH_VERSION vllm=$VLLM_NEW flashinfer=$FLASHINFER ${TEST_PACKAGES[*]} ${LIGHT_WITH_DEPS[*]} ${LIGHT_NO_DEPS[*]}"

fetch_wheel() { # name version -> path of the wheel in $WHEELS
  local name="$1" version="$2" fname
  fname=$(ls "$WHEELS"/"${name//-/_}"-"$version"-*.whl 2>/dev/null | head -n1 || true)
  if [[ -z "$fname" ]]; then
    log "downloading $name==$version (no deps)"
    "$VENV/bin/python" -m pip download --quiet --no-deps --only-binary=:all: -d "$WHEELS" "$name==$version" >&2
    fname=$(ls "$WHEELS"/"${name//-/_}"-"$version"-*.whl | head -n1)
  fi
  echo "$fname"
}

if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want_stamp" ]]; then
  log "building $VENV"
  rm -rf "$VENV"
  "$PYTHON_BIN" -m venv "$VENV"
  # torch first and alone, at the pinned version: the CPU build where it can be had (smaller, and all the tests
  # need), else the build the indexes serve. The constraint keeps every later resolution on that torch.
  echo "torch==$TORCH_VERSION" > "$VENV/torch-constraint.txt"
  PYTHON="$PYTHON_BIN" bash "$HERE/install-torch.sh" "$VENV" "$TORCH_VERSION" >/dev/null
  pipq "${TEST_PACKAGES[@]}" "${LIGHT_WITH_DEPS[@]}"
  pipq --no-deps "${LIGHT_NO_DEPS[@]}"
  vllm_whl=$(fetch_wheel vllm "$VLLM_NEW")
  fi_whl=$(fetch_wheel flashinfer-python "$FLASHINFER")
  pipq --no-deps "$vllm_whl" "$fi_whl"
  echo "$want_stamp" > "$stamp"
else
  log "reusing $VENV"
fi

old_stamp="$OLD_VLLM/.specguard-stamp"
if [[ ! -f "$old_stamp" || "$(cat "$old_stamp")" != "vllm=$VLLM_OLD" ]]; then
  log "installing vLLM $VLLM_OLD code into $OLD_VLLM"
  rm -rf "$OLD_VLLM"
  old_whl=$(fetch_wheel vllm "$VLLM_OLD")
  "$VENV/bin/python" -m pip install --quiet --no-deps --no-compile --target "$OLD_VLLM" "$old_whl" >&2
  echo "vllm=$VLLM_OLD" > "$old_stamp"
fi

next_stamp="$NEXT_FLASHINFER/.specguard-stamp"
if [[ ! -f "$next_stamp" || "$(cat "$next_stamp")" != "flashinfer-python=$FLASHINFER_NEXT" ]]; then
  log "installing flashinfer-python $FLASHINFER_NEXT code into $NEXT_FLASHINFER"
  rm -rf "$NEXT_FLASHINFER"
  next_whl=$(fetch_wheel flashinfer-python "$FLASHINFER_NEXT")
  # compiled once here (about 10 s): the test processes run with PYTHONDONTWRITEBYTECODE in CI, and each of the three
  # that import it would otherwise compile FlashInfer's modules again
  "$VENV/bin/python" -m pip install --quiet --no-deps --target "$NEXT_FLASHINFER" "$next_whl" >&2
  echo "flashinfer-python=$FLASHINFER_NEXT" > "$next_stamp"
fi

sglang_stamp="$SGLANG_RT/.specguard-stamp"
want_sglang="sglang=$SGLANG ${SGLANG_DEPS[*]}"
if [[ ! -f "$sglang_stamp" || "$(cat "$sglang_stamp")" != "$want_sglang" ]]; then
  log "installing SGLang $SGLANG code and its import-time modules into $SGLANG_RT"
  rm -rf "$SGLANG_RT"
  sglang_whl=$(fetch_wheel sglang "$SGLANG")
  "$VENV/bin/python" -m pip install --quiet --no-deps --target "$SGLANG_RT" "$sglang_whl" \
    "${SGLANG_DEPS[@]}" >&2
  echo "$want_sglang" > "$sglang_stamp"
fi

export SPECGUARD_TEST_PYTHON="$VENV/bin/python"
export SPECGUARD_SGLANG_RT_PATH="$SGLANG_RT"
export SPECGUARD_VLLM_OLD_PATH="$OLD_VLLM"
export SPECGUARD_FLASHINFER_NEXT_PATH="$NEXT_FLASHINFER"
echo "$SPECGUARD_TEST_PYTHON"
