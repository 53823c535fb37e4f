#!/usr/bin/env bash
# Builds what a release ships into DIST (default target/dist), each with its SHA-256 in
# SHA256SUMS:
#   deployster-<version>-<target>                 a static binary (no libc needed where it runs)
#   deployster-controller-<version>.image.tar     the controller image (`docker load -i` it, then
#                                                 push it where your cluster pulls from)
#   deployster-<version>.tgz                      the Helm chart (`helm install deployster <tgz>`)
# Needs cargo, the docker CLI and engine, and helm (HELM names it, else `helm` on PATH); fails
# naming what is missing. PROFILE=dev builds the dev profile instead of release (the tests do:
# a third of the time; what ships is release).
#   image/release.sh && (cd target/dist && sha256sum -c SHA256SUMS)
set -euo pipefail
cd "$(dirname "$0")/.."
fail() { echo "image/release.sh: $*" >&2; exit 1; }
command -v cargo >/dev/null || fail "cargo is needed (install Rust with rustup)"
command -v docker >/dev/null || fail "the docker CLI is needed for the controller image"
docker info >/dev/null 2>&1 || fail "the Docker engine does not answer: the controller image is built by it"
helm=${HELM:-helm}
"$helm" version >/dev/null 2>&1 || fail "helm is needed to package the chart ($helm does not run; set HELM)"
command -v sha256sum >/dev/null || fail "sha256sum is needed (coreutils)"

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
target=$(rustc -vV | sed -n 's/^host: //p')
profile=${PROFILE:-release}
dir=$([[ $profile == dev ]] && echo debug || echo "$profile")
dist=${DIST:-target/dist}
mkdir -p "$dist"
dist=$(cd "$dist" && pwd)
rm -f "$dist"/deployster-* "$dist/SHA256SUMS"

# The image's binary and the one shipped alone are the same build.
image=$(PROFILE=$profile IMAGE="deployster/controller:$version" image/build.sh)
cp "target/$target/$dir/deployster" "$dist/deployster-$version-$target"
docker save --output "$dist/deployster-controller-$version.image.tar" "$image"
"$helm" package charts/deployster --version "$version" --app-version "$version" --destination "$dist" >/dev/null
[[ -s $dist/deployster-$version.tgz ]] || fail "helm package wrote no $dist/deployster-$version.tgz"
(cd "$dist" && sha256sum "deployster-$version-$target" "deployster-controller-$version.image.tar" \
    "deployster-$version.tgz" > SHA256SUMS)
echo "$dist"
