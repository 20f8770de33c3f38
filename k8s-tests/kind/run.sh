#!/usr/bin/env bash
# npm run k8s:kind — the end-to-end suite on a kind cluster (needs Docker, kind, helm 3.8+/4, kubectl).
# Creates the cluster, installs ingress-nginx with k8s-tests/ingress-nginx-values.yaml, builds the
# image and loads it into kind, installs the chart with chart/values-dev.yaml (in-chart PostgreSQL)
# plus k8s-tests/values-e2e.yaml, runs `helm test`, then the suite against http://localhost with the
# Ingress host. Cases 6 and 7 use kubectl. The cluster is deleted at the end (KEEP_CLUSTER=1 keeps it;
# then wait a minute before running the suite again: the rate-limit case needs a fresh counter).
set -euo pipefail
cd "$(dirname "$0")/../.."

CLUSTER="${KIND_CLUSTER:-social-posts-e2e}"
NAMESPACE=social-posts-dev
RELEASE=social-posts
IMAGE=social-posts:e2e
# The last release of the 4.14 line (controller v1.14.5), the version k8s-tests/local/nginx-config.ts follows.
INGRESS_NGINX_CHART_VERSION=4.14.5
HELM="${HELM:-helm}"
KUBECTL="${KUBECTL:-kubectl}"
CONTEXT="kind-${CLUSTER}"

step() { printf '\n== %s\n' "$*"; }

for tool in docker kind "$HELM" "$KUBECTL"; do
  command -v "$tool" >/dev/null || { echo "k8s:kind needs $tool on PATH" >&2; exit 1; }
done

tear_down() {
  local code=$?
  if [ "${KEEP_CLUSTER:-0}" = 1 ]; then
    echo "kept cluster $CLUSTER (kind delete cluster --name $CLUSTER)"
  else
    step "tear-down: kind delete cluster --name $CLUSTER"
    kind delete cluster --name "$CLUSTER" || true
  fi
  exit "$code"
}

step "kind cluster $CLUSTER"
if ! kind get clusters | grep -qx "$CLUSTER"; then
  kind create cluster --name "$CLUSTER" --config k8s-tests/kind/cluster.yaml --wait 120s
fi
trap tear_down EXIT INT TERM
k() { "$KUBECTL" --context "$CONTEXT" "$@"; }
h() { "$HELM" --kube-context "$CONTEXT" "$@"; }

step "ingress-nginx $INGRESS_NGINX_CHART_VERSION (limit-req-status-code 429, hostPort)"
h upgrade --install ingress-nginx ingress-nginx \
  --repo https://kubernetes.github.io/ingress-nginx --version "$INGRESS_NGINX_CHART_VERSION" \
  --namespace ingress-nginx --create-namespace \
  --values k8s-tests/ingress-nginx-values.yaml --wait --timeout 5m
k -n ingress-nginx rollout status deployment/ingress-nginx-controller --timeout=180s

step "image $IMAGE, loaded into kind"
docker build -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

step "chart: values-dev.yaml + k8s-tests/values-e2e.yaml, in-chart PostgreSQL"
h upgrade --install "$RELEASE" chart --namespace "$NAMESPACE" --create-namespace \
  --values chart/values-dev.yaml --values k8s-tests/values-e2e.yaml \
  --set image.repository=social-posts --set image.tag=e2e --set image.pullPolicy=Never \
  --wait --timeout 10m
k -n "$NAMESPACE" rollout status "statefulset/$RELEASE-postgresql" --timeout=300s
k -n "$NAMESPACE" rollout status "deployment/$RELEASE" --timeout=300s

step "helm test"
h test "$RELEASE" --namespace "$NAMESPACE" --timeout 5m

HOST="$(k -n "$NAMESPACE" get ingress "$RELEASE" -o jsonpath='{.spec.rules[0].host}')"
ORIGINS="$(k -n "$NAMESPACE" get configmap "$RELEASE" -o jsonpath='{.data.CORS_ALLOWED_ORIGINS}')"
# ingress-nginx syncs a new Ingress within seconds; wait until it routes the host.
for _ in $(seq 1 60); do
  code="$(curl -s -o /dev/null -w '%{http_code}' -H "Host: $HOST" http://localhost/healthz/ready || true)"
  [ "$code" = 200 ] && break
  sleep 2
done

step "the suite against http://localhost, Host $HOST"
REPORT="$(mktemp)"
status=0
K8S_BASE_URL=http://localhost K8S_HOST="$HOST" K8S_ALLOWED_ORIGINS="$ORIGINS" \
  K8S_DRIVER=kind K8S_NAMESPACE="$NAMESPACE" K8S_RELEASE="$RELEASE" K8S_KUBE_CONTEXT="$CONTEXT" \
  KUBECTL="$(command -v "$KUBECTL")" KUBECONFIG="${KUBECONFIG:-$HOME/.kube/config}" \
  K8S_REPORT_FILE="$REPORT" \
  npx jest -c k8s-tests/jest.config.js --runInBand || status=$?
[ -s "$REPORT" ] && npx tsx k8s-tests/report.ts "$REPORT"
rm -f "$REPORT"
exit "$status"
