#!/usr/bin/env bash
# Builds the built-in types' images from a static deployster binary:
# deployster/directory:local and deployster/file:local.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=$(rustc -vV | sed -n 's/^host: //p')
RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --target "$target" -p deployster
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "target/$target/release/deployster" examples/docker/Dockerfile "$context/"
for type in directory file; do
    docker build --target "$type" -t "deployster/$type:local" "$context"
done
