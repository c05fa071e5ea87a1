# Sourced by the GPU-session scripts: the wheel prelude of /work/shared/device/README.md where the
# packages are missing (the GPU image), and an importable `sglang` without an editable install.
if ls .whl/*.whl >/dev/null 2>&1 && ! python3 -c "import fastapi, zmq, msgspec, xgrammar" >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || exit 1
  export PYTHONPATH=/tmp/site:${PYTHONPATH:-}
fi
# The import package `sglang` is the repository root: a link named sglang pointing here makes it
# importable (spawned scheduler processes inherit PYTHONPATH).
if ! python3 -c "import sglang.srt" >/dev/null 2>&1; then
  mkdir -p /tmp/sgl_pkg && ln -sfn "$PWD" /tmp/sgl_pkg/sglang
  export PYTHONPATH=/tmp/sgl_pkg:$PWD:${PYTHONPATH:-}
fi
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
