#!/bin/sh
# A pull request's preview and the approval after its merge, as a CI job runs them (the commands,
# no CI vendor's syntax). CI's kubeconfig needs only the chart's preview-requester ClusterRole
# bound in the namespace to preview; the approval after the merge is a maintainer's (patch on
# manifests).
#   examples/preview/ci.sh preview   # on the pull request: plan.md for its comment
#   examples/preview/ci.sh approve   # after the merge synced: apply exactly the plan reviewed
set -eu
NAMESPACE=${NAMESPACE:-team}
here=$(dirname "$0")

case "${1:-}" in
preview)
    # 0: nothing to do, 2: changes pending (post the comment), 1: an error (fail the check).
    status=0
    deployster preview app -n "$NAMESPACE" -f "$here/app.yaml" --output markdown > plan.md || status=$?
    [ "$status" -eq 1 ] && { cat plan.md; exit 1; }
    # The reviewed plan id, kept with the pull request (an artifact, or the comment itself).
    sed -n 's/.*--plan \([0-9a-f]*\)`.*/\1/p' plan.md > plan-id.txt
    cat plan.md
    ;;
approve)
    # After the merge synced: approved only if the controller's plan is the one reviewed.
    deployster approve app -n "$NAMESPACE" --plan "$(cat plan-id.txt)"
    ;;
*)
    echo "usage: $0 preview|approve" >&2
    exit 2
    ;;
esac
