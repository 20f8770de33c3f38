#!/usr/bin/env bash
# npm run k8s:kind — the end-to-end suite on a kind cluster (needs Docker, kind, helm 3.8+/4, kubectl).
# Creates the cluster, installs ingress-nginx with k8s-tests/ingress-nginx-values.yaml, builds the
# image and loads it into kind, installs the chart with chart/values-dev.yaml (in-chart PostgreSQL)
# plus k8s-tests/values-e2e.yaml, runs `helm test`, then the suite against http://localhost with the
# Ingress host. Cases 6 and 7 use kubectl. The cluster is deleted at the end (KEEP_CLUSTER=1 keeps it;
# then wait a minute before running the suite again: the rate-limit case needs a fresh counter).
#
# --gateway: the chart's Gateway API path instead of ingress-nginx: the Gateway API CRDs (standard
# channel, the release manifest of kubernetes-sigs/gateway-api), NGINX Gateway Fabric from its
# published Helm chart with k8s-tests/nginx-gateway-fabric-values.yaml (its chart brings the
# RateLimitPolicy and ProxySettingsPolicy CRDs), the Gateway of k8s-tests/gateway.yaml, and the
# chart with k8s-tests/values-e2e-gateway.yaml (gateway.enabled). The suite runs with
# K8S_PROXY=nginx-gateway-fabric.
#
# --cnpg: the production database topology: the CloudNativePG operator from its release manifest
# (CNPG_VERSION, the release whose CRDs tests/chart/schemas/ vendors), the chart with
# k8s-tests/values-e2e-cnpg.yaml (a Cluster of three instances with synchronous replication, a
# Pooler in transaction mode), and the suite with K8S_DATABASE=cnpg: case 6 hibernates the Cluster,
# case 10 deletes the primary's pod mid-load.
set -euo pipefail
cd "$(dirname "$0")/../.."

CLUSTER="${KIND_CLUSTER:-social-posts-e2e}"
NAMESPACE=social-posts-dev
RELEASE=social-posts
IMAGE=social-posts:e2e
# The last release of the 4.14 line (controller v1.14.5), the version k8s-tests/local/nginx-config.ts follows.
INGRESS_NGINX_CHART_VERSION=4.14.5
# NGINX Gateway Fabric 2.6.7 is built against Gateway API v1.5.1 (its go.mod).
GATEWAY_API_VERSION=v1.5.1
NGINX_GATEWAY_FABRIC_CHART_VERSION=2.6.7
# The CloudNativePG release of the vendored CRDs (tests/chart/cnpg.test.ts checks they agree).
CNPG_VERSION=1.30.0
GATEWAY_NAME=social-posts-e2e
GATEWAY_NAMESPACE=nginx-gateway
MODE=ingress-nginx
DATABASE=in-chart
for arg in "$@"; do
  case "$arg" in
    --gateway) MODE=nginx-gateway-fabric ;;
    --cnpg) DATABASE=cnpg ;;
    *) echo "unknown argument $arg (--gateway, --cnpg)" >&2; exit 2 ;;
  esac
done
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

CHART_VALUES=(--values chart/values-dev.yaml --values k8s-tests/values-e2e.yaml)
if [ "$MODE" = ingress-nginx ]; then
  step "ingress-nginx $INGRESS_NGINX_CHART_VERSION (limit-req-status-code 429, hostPort)"
  h upgrade --install ingress-nginx ingress-nginx \
    --repo https://kubernetes.github.io/ingress-nginx --version "$INGRESS_NGINX_CHART_VERSION" \
    --namespace ingress-nginx --create-namespace \
    --values k8s-tests/ingress-nginx-values.yaml --wait --timeout 5m
  k -n ingress-nginx rollout status deployment/ingress-nginx-controller --timeout=180s
else
  # Both controllers would want the node's port 80: a cluster kept from an Ingress run must go.
  if k get namespace ingress-nginx >/dev/null 2>&1; then
    echo "cluster $CLUSTER runs ingress-nginx; delete it first (kind delete cluster --name $CLUSTER)" >&2
    exit 1
  fi
  step "Gateway API $GATEWAY_API_VERSION CRDs (standard channel)"
  k apply --server-side -f \
    "https://github.com/kubernetes-sigs/gateway-api/releases/download/$GATEWAY_API_VERSION/standard-install.yaml"
  step "NGINX Gateway Fabric $NGINX_GATEWAY_FABRIC_CHART_VERSION (one nginx, hostPort 80)"
  h upgrade --install nginx-gateway-fabric oci://ghcr.io/nginx/charts/nginx-gateway-fabric \
    --version "$NGINX_GATEWAY_FABRIC_CHART_VERSION" \
    --namespace "$GATEWAY_NAMESPACE" --create-namespace \
    --values k8s-tests/nginx-gateway-fabric-values.yaml --wait --timeout 5m
  step "Gateway $GATEWAY_NAMESPACE/$GATEWAY_NAME (k8s-tests/gateway.yaml)"
  k apply -f k8s-tests/gateway.yaml
  # The controller provisions the Gateway's nginx Deployment; Programmed means it serves.
  k -n "$GATEWAY_NAMESPACE" wait --for=condition=Programmed "gateway/$GATEWAY_NAME" --timeout=300s
  CHART_VALUES+=(--values k8s-tests/values-e2e-gateway.yaml)
fi

if [ "$DATABASE" = cnpg ]; then
  step "CloudNativePG $CNPG_VERSION (its release manifest, as docs/src/installation_upgrade.md installs it)"
  k apply --server-side -f \
    "https://raw.githubusercontent.com/cloudnative-pg/cloudnative-pg/release-${CNPG_VERSION%.*}/releases/cnpg-$CNPG_VERSION.yaml"
  k -n cnpg-system rollout status deployment/cnpg-controller-manager --timeout=300s
  # No Barman Cloud plugin nor object store here: the backup objects need both (k8s:local runs them).
  CHART_VALUES+=(--values k8s-tests/values-e2e-cnpg.yaml --set backup.enabled=false)
fi

step "image $IMAGE, loaded into kind"
docker build -t "$IMAGE" .
kind load docker-image "$IMAGE" --name "$CLUSTER"

step "chart: ${CHART_VALUES[*]} ($DATABASE database)"
# No --wait: with CloudNativePG the API pods wait for the Cluster's Secrets, which the waits below cover.
h upgrade --install "$RELEASE" chart --namespace "$NAMESPACE" --create-namespace "${CHART_VALUES[@]}" \
  --set image.repository=social-posts --set image.tag=e2e --set image.pullPolicy=Never
if [ "$DATABASE" = cnpg ]; then
  # The names the chart gives them (cnpg.cluster.name and cnpg.pooler.name empty): <release>-db and
  # <release>-db-pooler-rw; the Pooler's PgBouncers run as a Deployment of the Pooler's name.
  k -n "$NAMESPACE" wait --for=condition=Ready "cluster/$RELEASE-db" --timeout=900s
  k -n "$NAMESPACE" rollout status "deployment/$RELEASE-db-pooler-rw" --timeout=300s
  # Reads on standbys (cnpg.reads, more than one instance): the ro Pooler, <release>-db-pooler-ro.
  k -n "$NAMESPACE" rollout status "deployment/$RELEASE-db-pooler-ro" --timeout=300s
else
  k -n "$NAMESPACE" rollout status "statefulset/$RELEASE-postgresql" --timeout=300s
fi
k -n "$NAMESPACE" rollout status "deployment/$RELEASE" --timeout=600s

step "helm test"
h test "$RELEASE" --namespace "$NAMESPACE" --timeout 5m

if [ "$MODE" = ingress-nginx ]; then
  HOST="$(k -n "$NAMESPACE" get ingress "$RELEASE" -o jsonpath='{.spec.rules[0].host}')"
else
  HOST="$(k -n "$NAMESPACE" get httproute "$RELEASE" -o jsonpath='{.spec.hostnames[0]}')"
  # A route or policy the controller did not accept would leave the limit out silently.
  # wait_accepted OBJECT STATUS-LIST: routes report under .status.parents, policies under .status.ancestors.
  wait_accepted() {
    local accepted=""
    for _ in $(seq 1 60); do
      accepted="$(k -n "$NAMESPACE" get "$1" \
        -o jsonpath="{.status.$2[0].conditions[?(@.type==\"Accepted\")].status}")"
      [ "$accepted" = True ] && return 0
      sleep 2
    done
    echo "$1 was not accepted:" >&2
    k -n "$NAMESPACE" describe "$1" >&2
    exit 1
  }
  wait_accepted "httproute/$RELEASE" parents
  wait_accepted "httproute/$RELEASE-auth" parents
  wait_accepted "ratelimitpolicy/$RELEASE-auth" ancestors
  wait_accepted "proxysettingspolicy/$RELEASE" ancestors
fi
ORIGINS="$(k -n "$NAMESPACE" get configmap "$RELEASE" -o jsonpath='{.data.CORS_ALLOWED_ORIGINS}')"
# The controller syncs new routes within seconds; wait until it routes the host.
for _ in $(seq 1 60); do
  code="$(curl -s -o /dev/null -w '%{http_code}' -H "Host: $HOST" http://localhost/healthz/ready || true)"
  [ "$code" = 200 ] && break
  sleep 2
done

step "the suite against http://localhost ($MODE), Host $HOST"
REPORT="$(mktemp -d)"
status=0
K8S_BASE_URL=http://localhost K8S_HOST="$HOST" K8S_ALLOWED_ORIGINS="$ORIGINS" \
  K8S_DRIVER=kind K8S_PROXY="$MODE" K8S_DATABASE="$DATABASE" K8S_NAMESPACE="$NAMESPACE" K8S_RELEASE="$RELEASE" K8S_KUBE_CONTEXT="$CONTEXT" \
  KUBECTL="$(command -v "$KUBECTL")" KUBECONFIG="${KUBECONFIG:-$HOME/.kube/config}" \
  K8S_REPORT_DIR="$REPORT" \
  npx jest --selectProjects k8s --runInBand --verbose || status=$?
npx tsx k8s-tests/report.ts "$REPORT"
rm -rf "$REPORT"
exit "$status"
