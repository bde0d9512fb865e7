#!/usr/bin/env bash
# A cold CI run, measured: `.ci/run` on a clean clone of HEAD with every cache empty (Go modules,
# Go build cache, pip, our built binaries and buildah's image store), each output line stamped with
# the seconds since the start. Usage: hack/cold-ci.sh [DIR] (default: a new directory under /tmp).
# Not cold: apt packages already installed on the machine (Slurm, buildah, debootstrap: ~20 s of apt).
set -euo pipefail
top=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
dir=${1:-$(mktemp -d /tmp/ssb-cold.XXXXXX)}
git clone -q "$top" "$dir/src"
export XDG_CACHE_HOME=$dir/cache GOMODCACHE=$dir/gomod GOCACHE=$dir/gobuild PIP_CACHE_DIR=$dir/pip
start=$SECONDS
set +e
(cd "$dir/src" && .ci/run) 2>&1 | while IFS= read -r line; do printf '%5d %s\n' $((SECONDS - start)) "$line"; done | tee "$dir/log"
rc=${PIPESTATUS[0]}
echo "cold CI: rc=$rc, $((SECONDS - start)) s (log: $dir/log)"
exit "$rc"
