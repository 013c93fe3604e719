#!/usr/bin/env bash
# Build the peers the benches compare gnnpipe with -- torch-scatter and torch-sparse *with* METIS --
# into a separate virtual environment, so the project's .venv (and CI) never depend on them.
#
#   bash bench/build_peers.sh /work/peer-venv          # ~25-40 min of one core, then:
#   /work/peer-venv/bin/python -m bench.sampler --cache /tmp/gnnpipe-bench
#
# Why this way:
# - torch-scatter 2.1.2 and torch-sparse 0.6.18 are source distributions on PyPI; they compile
#   against the installed torch, hence --no-build-isolation after torch is in the venv.
# - torch-sparse's METIS (WITH_METIS=1) passes int64_t* to METIS, so it needs a METIS built with
#   64-bit idx_t. Debian's libmetis-dev has 32-bit idx_t (compile error in metis_cpu.cpp). The
#   pymetis sdist bundles METIS 5 + GKlib with IDXTYPEWIDTH 64: compiled here into a static PIC
#   libmetis.a (~15 s of CPU), which the torch-sparse extensions link in.
# Environment: TORCH_SPEC (default torch==2.13.0), TORCH_PIP_ARGS, JOBS (MAX_JOBS, default 1).
# Time: the 25-40 min are of an idle core. Each compile unit (torch-scatter 7, torch-sparse ~25)
# gets only its share of a busy machine: at a load average of 9-10 on 2 cores torch-scatter took
# ~50 min (2026-12-04). A re-run resumes: torch and packages already installed are skipped.
set -euo pipefail

VENV=${1:?usage: bash bench/build_peers.sh VENV_DIR}
REPO=$(cd "$(dirname "$0")/.." && pwd)
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

test -x "$VENV/bin/python" || python3 -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install ${TORCH_PIP_ARGS:-} "$TORCH_SPEC"
"$PY" -m pip install -e "$REPO"

# METIS with 64-bit idx_t, from the METIS sources pymetis ships
"$PY" -m pip download --no-deps --no-binary pymetis -d "$WORK" pymetis
tar -xzf "$WORK"/pymetis-*.tar.gz -C "$WORK"
METIS_SRC=$(echo "$WORK"/pymetis-*/src/metis)
grep -q "define IDXTYPEWIDTH 64" "$METIS_SRC/include/metis.h" || {
    echo "build_peers: $METIS_SRC/include/metis.h does not set IDXTYPEWIDTH 64" >&2; exit 1; }
METIS="$VENV/metis"
mkdir -p "$METIS/lib" "$METIS/include" "$WORK/obj"
cp "$METIS_SRC/include/metis.h" "$METIS/include/"
for f in "$METIS_SRC"/GKlib/*.c "$METIS_SRC"/libmetis/*.c; do
    # GKlib and libmetis both have graph.c, util.c, ...: prefix objects with their folder
    obj="$WORK/obj/$(basename "$(dirname "$f")")_$(basename "$f" .c).o"
    gcc -O3 -DNDEBUG -fPIC -D_GNU_SOURCE -I"$METIS_SRC/GKlib" -I"$METIS_SRC/include" \
        -I"$METIS_SRC/libmetis" -c "$f" -o "$obj"
done
ar rcs "$METIS/lib/libmetis.a" "$WORK"/obj/*.o

export MAX_JOBS=${JOBS:-1}
"$PY" -m pip install --no-build-isolation torch-scatter
CPATH="$METIS/include" LIBRARY_PATH="$METIS/lib" WITH_METIS=1 \
    "$PY" -m pip install --no-build-isolation torch-sparse

# the check the benches rely on: PyG sees torch-sparse, and its METIS runs
"$PY" - <<'EOF'
import torch
import torch_geometric.typing as t
import torch_sparse  # noqa: F401

assert t.WITH_TORCH_SPARSE, "PyG does not see torch-sparse"
ring = torch.tensor([0, 2, 4, 6, 8, 10, 12]), torch.tensor([1, 5, 0, 2, 1, 3, 2, 4, 3, 5, 4, 0])
parts = torch.ops.torch_sparse.partition2(ring[0], ring[1], None, None, 2, False)
print(f"torch-sparse {torch_sparse.__version__} with METIS: 6-ring in 2 parts -> {parts.tolist()}")
EOF
