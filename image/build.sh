#!/usr/bin/env bash
# Builds the controller image deployster/controller:<version of Cargo.toml> from a static
# deployster binary, and prints its name. Needs cargo and the docker CLI; pulls nothing.
#   image/build.sh                 # deployster/controller:0.1.0
#   IMAGE=registry.local/deployster/controller:dev image/build.sh
#   PROFILE=dev image/build.sh     # the binary of cargo's dev profile: what the tests build, in
#                                  # a third of a release build's time; images to ship are release
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
image=${IMAGE:-deployster/controller:$version}
target=$(rustc -vV | sed -n 's/^host: //p')
profile=${PROFILE:-release}
# Cargo's dev profile writes to target/<triple>/debug; every other profile to its own name.
dir=$([[ $profile == dev ]] && echo debug || echo "$profile")
RUSTFLAGS='-C target-feature=+crt-static' cargo build --quiet --profile "$profile" --target "$target" -p deployster
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "target/$target/$dir/deployster" image/Dockerfile "$context/"
# The certificate authorities the controller checks registries (and API servers) against: the
# HTTP client of the registry reads the system's store, which a scratch image lacks.
bundle=/etc/ssl/certs/ca-certificates.crt
[[ -s $bundle ]] || { echo "image/build.sh: $bundle is missing: install ca-certificates" >&2; exit 1; }
cp "$bundle" "$context/"
mkdir -m 0700 "$context/tmp"
# The classic builder: BuildKit needs the buildx plugin, which a plain Docker engine may lack.
DOCKER_BUILDKIT=0 docker build --quiet --tag "$image" "$context" >&2
echo "$image"
