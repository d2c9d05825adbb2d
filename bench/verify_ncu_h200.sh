#!/usr/bin/env bash
# `smemtile verify --ncu` on every sample with a kernel section, on a GPU machine with ncu on PATH.
# Writes $OUT/<sample>.json (verify --json), $OUT/<sample>.txt (the text report of the same run, rendered from
# the JSON), $OUT/log.txt and $OUT/raw.tgz (ncu reports and their source/raw CSV pages).
# Usage: OUT=dir bash bench/verify_ncu_h200.sh [--discover]
set -u
export PYTHONUNBUFFERED=1  # run from the repo root: python3 -m finds smemtile and bench there
OUT=${OUT:-ncu_out}
mkdir -p "$OUT/raw"
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; ncu --version | tail -1; } > "$OUT/log.txt" 2>&1
if [ "${1:-}" = "--discover" ]; then
  # ncu alone on the runner (independent of the parser): the raw pages, to see their columns
  timeout 150 ncu --clock-control none -k regex:transpose --launch-count 1 --section SourceCounters \
    --import-source no -f -o /tmp/disc python3 -m smemtile.gpu.ncu --target samples/transpose_32x32.yaml \
    baseline '{"rows": 128, "cols": 128, "dtype": "f32"}' 0 /tmp/disc.json > "$OUT/raw/disc.log" 2>&1
  ncu -i /tmp/disc.ncu-rep --page source --csv --print-source sass > "$OUT/raw/disc_source.csv" 2>&1
  ncu -i /tmp/disc.ncu-rep --page raw --csv --print-units base > "$OUT/raw/disc_raw.csv" 2>&1
  head -c 3000 "$OUT/raw/disc_source.csv" >> "$OUT/log.txt"
fi
for s in transpose_32x32 sgemm_float4 stencil_halo; do
  t0=$(date +%s)
  timeout 240 python3 -m smemtile verify "samples/$s.yaml" --ncu --json --ncu-save "$OUT/raw" \
    > "$OUT/$s.json" 2> "$OUT/raw/$s.err"
  echo "== $s: exit $? in $(( $(date +%s) - t0 )) s" >> "$OUT/log.txt"
  cat "$OUT/raw/$s.err" >> "$OUT/log.txt"
  COLUMNS=170 python3 -c "import json, sys; from smemtile.report.verify import render; render(json.load(open(sys.argv[1])))" \
    "$OUT/$s.json" > "$OUT/$s.txt" 2>> "$OUT/log.txt"
done
tar czf "$OUT/raw.tgz" -C "$OUT" raw && rm -rf "$OUT/raw"
