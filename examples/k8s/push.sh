#!/usr/bin/env bash
# Builds the built-in types' images (examples/docker/build.sh), pushes them to REGISTRY
# (host[:port][/path], default localhost:5000) where the cluster pulls from, and prints
# examples/k8s/manifest.yaml naming them there, for kubectl:
#   examples/k8s/push.sh registry.example.com:5000 | kubectl apply -n team-a -f -
set -euo pipefail
registry=${1:-localhost:5000}
cd "$(dirname "$0")/../.."
examples/docker/build.sh >&2
for type in directory file; do
    docker tag "deployster/$type:local" "$registry/deployster/$type:local"
    docker push --quiet "$registry/deployster/$type:local" >&2
done
sed "s|localhost:5000/|$registry/|g" examples/k8s/manifest.yaml
