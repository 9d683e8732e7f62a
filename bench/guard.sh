#!/usr/bin/env bash
# The regression guard on a check's cost (issue 29, part 5): the marginal
# instructions of one embedded check, one Redis check and one batch item on
# each store, counted by bench/cost.sh under callgrind, against the counts
# kept in bench/cost-guard.tsv. It fails when one grew more than 5 % over
# its kept count: a change that costs more updates the file in the same
# commit, and says why. It guards the instruction count, not the time.
#
#   bash bench/guard.sh             # the binary of the Dockerfile's image, built from this tree
#   bash bench/guard.sh BINARY      # a binary of your own (a release build)
#   UPDATE=1 bash bench/guard.sh    # measure, and write the counts into the file
#
# A row's count is marginal: (total at N=1200 - total at N=200) / 1000, so
# startup, which is the same in both runs, falls out. The counts move by
# about 1 % between runs here (the runtime's idle work); 5 % is the margin.
# Without a BINARY it counts the shipped binary, the one the Dockerfile
# builds (fat LTO, one codegen unit): scripts/test.sh runs it after the
# Docker tests, whose image is then already built, so CI compiles nothing
# more for it.
set -euo pipefail
cd "$(dirname "$0")/.."
KEPT=bench/cost-guard.tsv
SLACK=${SLACK:-1.05}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

BINARY=${1:-}
if [ -z "$BINARY" ]; then
  command -v docker >/dev/null || { echo "guard: docker is needed to build the image's binary (or pass a BINARY)" >&2; exit 1; }
  bash tests/docker/standins.sh >/dev/null
  docker build -q -t ratekeeper:latest . >/dev/null
  container=$(docker create ratekeeper:latest)
  docker cp -q "$container:/usr/local/bin/ratekeeper" "$TMP/ratekeeper"
  docker rm "$container" >/dev/null
  BINARY=$TMP/ratekeeper
fi

for n in 200 1200; do
  N=$n RULES="fixed batch" TSV="$TMP/counts.tsv" OUT="$TMP/cost-$n.md" \
    bash bench/cost.sh "$BINARY" >/dev/null
done

# counts.tsv: store, rule, N, the program's total instructions, Redis usec.
# The marginal count per check (per batch item: a batch request carries 10).
python3 - "$TMP/counts.tsv" "$KEPT" "$SLACK" "${UPDATE:-}" <<'PY'
import sys
counts, kept_path, slack, update = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
totals = {}
for line in open(counts):
    store, rule, n, total, _ = line.split("\t")
    totals[(store, rule, int(n))] = float(total)
names = {("memory", "fixed"): "embedded_check", ("redis", "fixed"): "redis_check",
         ("memory", "batch"): "embedded_batch_item", ("redis", "batch"): "redis_batch_item"}
measured = {name: (totals[(s, r, 1200)] - totals[(s, r, 200)]) / 1000 for (s, r), name in names.items()}
if update:
    with open(kept_path, "w") as f:
        f.write("# Marginal instructions per check, counted by bench/guard.sh (callgrind) on the\n")
        f.write("# image's binary. bench/guard.sh fails when one grows more than 5 % over this.\n")
        f.write("# Update it (UPDATE=1 bash bench/guard.sh) in the commit that changes the cost.\n")
        for name, value in measured.items():
            f.write(f"{name}\t{value:.0f}\n")
    print(f"guard: wrote {kept_path}")
kept = {}
for line in open(kept_path):
    if line.strip() and not line.startswith("#"):
        name, value = line.split()
        kept[name] = float(value)
failed = []
for name, value in measured.items():
    ratio = value / kept[name]
    verdict = "ok" if ratio <= slack else "GREW"
    print(f"guard: {name}: {value:.0f} instructions, kept {kept[name]:.0f}, {ratio:.3f}x {verdict}")
    if ratio > slack:
        failed.append(name)
if failed:
    print(f"guard: {', '.join(failed)} grew more than {100 * (slack - 1):.0f} % over {kept_path}: "
          "make it cheaper, or run UPDATE=1 bash bench/guard.sh and commit the file with the reason", file=sys.stderr)
    sys.exit(1)
PY
