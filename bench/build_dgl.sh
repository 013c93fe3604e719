#!/usr/bin/env bash
# Build DGL, the second peer of bench/train_epoch.py's epoch (``--dgl``), into its own virtual
# environment: DGL's torch is not the project's, so neither the project's .venv nor CI see it.
#
#   bash bench/build_dgl.sh                      # -> .venv-dgl (~3 min, 2 GB), then:
#   .venv/bin/python -m bench.train_epoch --dgl .venv-dgl/bin/python ...
#
# The venv sits beside .venv (git-ignored), not under bench/, which the docs check copies.
# Why this way (facts of 2026-12-07, from PyPI's simple index):
# - dgl 2.2.x on PyPI has macOS and Windows wheels only; the newest Linux x86_64 wheel is
#   dgl 2.1.0 (manylinux1, cp38-cp312, CPU-only). It ships its torch glue (tensoradapter,
#   graphbolt, dgl_sparse) for torch 2.0.0-2.2.1 only, so torch is pinned to 2.2.1, which
#   needs numpy < 2.
# - PyPI's torch 2.2.1 Linux wheel is the CUDA 12.1 build (the +cpu wheels live on PyTorch's own
#   index, which this network does not reach), and its deps are ~2.5 GB of nvidia-* wheels.
#   torch is installed with --no-deps instead; its CUDA libraries (libcudart, libcublas, cudnn,
#   nccl, ...) are then missing at load time (libtorch.so links libtorch_cuda.so), so this
#   script compiles a stub for each missing soname into torch/lib ($ORIGIN is on its RPATH):
#   every CUDA symbol torch imports, as a function returning 100 (cudaErrorNoDevice). With no
#   GPU torch asks only cudaGetDeviceCount (-> 0 devices, torch.cuda.is_available() False);
#   the CPU kernels live in libtorch_cpu.so and never call a stub.
# - dgl and torch's pure-Python deps are pinned (versions of the day for Python 3.11 and
#   numpy 1.26); a re-run skips what is installed. Any failure: one line on stderr, exit 1.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
VENV=${1:-$REPO/.venv-dgl}
PYTHON=${PYTHON:-python3}
TORCH=2.2.1
DGL=2.1.0
DEPS=(numpy==1.26.4 scipy==1.13.1 networkx==3.3 requests==2.32.3 tqdm==4.66.4 psutil==5.9.8
      filelock==3.15.4 typing-extensions==4.12.2 sympy==1.12.1 mpmath==1.3.0 jinja2==3.1.4
      MarkupSafe==2.1.5 fsspec==2024.6.1 urllib3==2.2.2 idna==3.7 charset-normalizer==3.3.2
      certifi==2024.7.4 pydantic==2.8.2 pydantic-core==2.20.1 annotated-types==0.7.0
      pyyaml==6.0.1 torchdata==0.7.1 pandas==2.2.2 python-dateutil==2.9.0.post0 pytz==2024.1
      tzdata==2024.1 six==1.16.0)

fail() { echo "build_dgl: $*" >&2; exit 1; }
trap 'fail "line $LINENO: \"$BASH_COMMAND\" exited $?"' ERR

"$PYTHON" -c 'import sys; sys.exit(not (3, 8) <= sys.version_info[:2] <= (3, 12))' ||
    fail "dgl $DGL has wheels for CPython 3.8-3.12 only; set PYTHON to one"
test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
PIP=("$PY" -m pip install -q --disable-pip-version-check --no-deps)

installed() {  # installed PACKAGE VERSION: true when that exact version is there
    [ "$("$PY" -c "import importlib.metadata as m; print(m.version('$1'))" 2>/dev/null)" = "$2" ]
}
installed torch "$TORCH" || "${PIP[@]}" "torch==$TORCH" >"$VENV/pip.log" 2>&1 ||
    fail "pip could not install torch==$TORCH (a ~750 MB wheel from PyPI): see $VENV/pip.log"

TORCH_LIB=$("$PY" -c 'import importlib.util as u, os
print(os.path.join(os.path.dirname(u.find_spec("torch").origin), "lib"))')
# the CUDA sonames the import needs (libtorch_python.so and libtorch_global_deps.so, recursively)
MISSING=$(cd "$TORCH_LIB" && ldd libtorch_python.so libtorch_global_deps.so |
          awk '/not found/ {print $1}' | sort -u)
if [ -n "$MISSING" ]; then
    command -v gcc >/dev/null && command -v readelf >/dev/null ||
        fail "gcc and readelf (binutils) are needed to build the CUDA stubs"
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
    for f in "$TORCH_LIB"/*.so*; do
        readelf --dyn-syms -W "$f" | awk '$7 == "UND" {print $8}'
    done | sort -u >"$WORK/undefined"
    for so in $MISSING; do
        # torch imports these versioned (name@soname) except NCCL's, which carry no version
        { grep -F "@$so" "$WORK/undefined" | sed 's/@.*//' || true
          [ "$so" != libnccl.so.2 ] || grep -E '^nccl[A-Za-z0-9_]*$' "$WORK/undefined"; } |
            sort -u | awk '{printf "int %s(void) { return 100; }\n", $1}' >"$WORK/stub.c"
        echo "$so { global: *; };" >"$WORK/version.map"
        gcc -shared -fPIC -O1 -o "$TORCH_LIB/$so" "$WORK/stub.c" -Wl,-soname,"$so" \
            -Wl,--version-script="$WORK/version.map"
    done
fi

# --no-deps throughout (torch's own deps would pull the nvidia-* wheels): the closure, pinned
SPEC="dgl==$DGL ${DEPS[*]}"
[ "$(cat "$VENV/dgl-spec" 2>/dev/null)" = "$SPEC" ] || {
    "${PIP[@]}" $SPEC >"$VENV/pip.log" 2>&1 || fail "pip could not install $SPEC: see $VENV/pip.log"
    echo "$SPEC" >"$VENV/dgl-spec"; }

# the check the bench relies on: torch is CPU-only, DGL imports and samples a 2-hop block
"$PY" - <<'EOF' 2>"$VENV/check.log" || fail "the DGL check failed: see $VENV/check.log"
import os
import sys
os.environ.setdefault("DGLBACKEND", "pytorch")
import dgl
import torch

assert not torch.cuda.is_available()
g = dgl.graph((torch.tensor([1, 2, 3, 0]), torch.tensor([0, 0, 1, 2])), num_nodes=4)
sampler = dgl.dataloading.NeighborSampler([2, 2])
_, _, blocks = sampler.sample_blocks(g, torch.tensor([0]))
assert blocks[0].num_src_nodes() == 4, "node 0's 2-hop block reads all 4 nodes"
x = torch.randn(64, 64)
assert torch.allclose(x @ torch.eye(64), x), "a CPU matmul"
print(f"build_dgl: ok: {sys.prefix}: torch {torch.__version__} (CUDA stubbed, no GPU), "
      f"dgl {dgl.__version__}")
EOF
