#!/usr/bin/env bash
# Local demo: installs what is missing, builds dscache, ingests a synthetic image dataset
# (about 60 MB: 20000 samples of image u8 3x32x32 + label i64) and verifies it with inspect.
# Usage: deploy/local/demo.sh            (DEMO_DIR=... to place the data, default .demo/)
#        DEMO_SAMPLES=N deploy/local/demo.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
demo_dir=${DEMO_DIR:-$root/.demo}
samples=${DEMO_SAMPLES:-20000}
build=${DEMO_BUILD_DIR:-$root/build}
step() { printf '\n== %s ==\n' "$*"; }
die() { echo "demo: $*" >&2; exit 1; }

step "setup: packages"
bash deploy/local/setup.sh || die "package setup failed (see above)"

step "build ($build)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || die "cmake configure failed"
cmake --build "$build" -j "$(nproc)" >/dev/null || die "build failed: run 'cmake --build $build' to see why"
cli=$build/bin/dscache
[ -x "$cli" ] || die "$cli was not built"
echo "built $cli ($("$cli" --version))"

step "ingest: $samples synthetic samples (image u8 3x32x32, label i64) -> $demo_dir/cifar-synth"
mkdir -p "$demo_dir"
"$cli" ingest synthetic -o "$demo_dir/cifar-synth" --name cifar-synth --samples "$samples" \
    --field image:u8:3x32x32 --field label:i64 --seed 1 --compress lz4 \
    --shard-size 16M --chunk-size 1M

step "inspect: every shard and chunk"
"$cli" inspect "$demo_dir/cifar-synth"

step "done"
echo "dataset ready in $demo_dir/cifar-synth"
