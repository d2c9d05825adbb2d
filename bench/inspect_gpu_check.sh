#!/usr/bin/env bash
# inspect's GPU side on the H200, in one command (about 2 minutes, at most 4):
#   1. pytest -m gpu tests/test_inspect_gpu_record.py: recorded lane addresses against the host's indexing for
#      transposes (dense and padded), a loop past the sample bound, a histogram with shared atomics, float4
#      loads/stores in 64 KiB of dynamic shared memory, generic loads (shared and global), ldmatrix; results
#      unchanged bit for bit; ncu per line for the naive transpose (32 wavefronts per column read, ideal 1)
#   2. bench/bench_inspect_overhead.py: a 4096^2 tiled SGEMM with and without the recording (default sample)
# Writes $OUT/log.txt, $OUT/pytest.txt, $OUT/inspect_overhead.json and $OUT/ncu/ (the ncu source page the
# per-line test parsed).
# Usage: OUT=dir bash bench/inspect_gpu_check.sh
set -u
export PYTHONUNBUFFERED=1  # run from the repo root: python3 -m finds smemtile and bench there
OUT=${OUT:-inspect_out}
mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; ncu --version | tail -1; } > "$OUT/log.txt" 2>&1
t0=$(date +%s)
SMEMTILE_INSPECT_SAVE="$OUT" timeout 170 python3 -m pytest -q -n 0 -p no:cacheprovider -m gpu -rA \
  tests/test_inspect_gpu_record.py > "$OUT/pytest.txt" 2>&1
echo "== pytest -m gpu tests/test_inspect_gpu_record.py: exit $? in $(( $(date +%s) - t0 )) s" >> "$OUT/log.txt"
tail -3 "$OUT/pytest.txt" >> "$OUT/log.txt"
t0=$(date +%s)
timeout 60 python3 -m bench.bench_inspect_overhead --out "$OUT/inspect_overhead.json" > /dev/null 2>> "$OUT/log.txt"
echo "== bench_inspect_overhead: exit $? in $(( $(date +%s) - t0 )) s" >> "$OUT/log.txt"
cat "$OUT/log.txt"
