#!/usr/bin/env bash
# Stage an older commit's studio package for an A/B on the lent H200: `bash scripts/gpu/stage-ab.sh REV` writes
# .gpu/ab/studio.tar.gz (ignored by git); then `bash scripts/gpu/run.sh quick-ab` with carry
# [".gpu/c5", ".whl", ".gpu/ab"] runs the same bench with REV's package and with the working tree's, back to back
# on one machine (machines differ: figures from two of them do not compare).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: stage-ab.sh REV" >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
cd "$root"
rev=$(git rev-parse --short "$1")
mkdir -p .gpu/ab
git archive --format=tar.gz -o .gpu/ab/studio.tar.gz "$rev" studio
echo "$rev" > .gpu/ab/rev
du -sh .gpu/ab/studio.tar.gz
