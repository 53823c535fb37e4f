#!/usr/bin/env bash
# Builds the built-in types' images from a static deployster binary:
# deployster/directory:local and deployster/file:local. PROFILE=dev builds the binary in cargo's
# dev profile (as the tests do; a release build is the default), as image/build.sh does.
set -euo pipefail
cd "$(dirname "$0")/../.."
target=$(rustc -vV | sed -n 's/^host: //p')
profile=${PROFILE:-release}
dir=$([[ $profile == dev ]] && echo debug || echo "$profile")
RUSTFLAGS='-C target-feature=+crt-static' cargo build --quiet --profile "$profile" --target "$target" -p deployster
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "target/$target/$dir/deployster" examples/docker/Dockerfile "$context/"
for type in directory file; do
    docker build --target "$type" -t "deployster/$type:local" "$context"
done
