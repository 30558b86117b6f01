#!/usr/bin/env bash
# `make demo` and `make demo-down`. up: the dev cluster, Cloister's CRDs,
# cloister-operator running outside the cluster with the cluster's
# kubeconfig (as a developer runs it), and the SGXPlugin, CEXPlugin and LAS
# samples until they are HEALTHY. down: stops the operator and removes the cluster.
# Running `up` again replaces the operator with the freshly built one.
set -euo pipefail
cd "$(dirname "$0")/.."

CLOISTER=bin/cloister
OPERATOR=bin/cloister-operator
STATE=${CLOISTER_CACHE_DIR:-.cache}/demo
PIDFILE=$STATE/operator.pid

kube() { "$TOOLS/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

operator_pid() {
	[ -f "$PIDFILE" ] || return 1
	local pid
	pid=$(cat "$PIDFILE")
	# Only our operator: a pid may have been reused since.
	[ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q cloister-operator || return 1
	echo "$pid"
}

stop_operator() {
	local pid
	if pid=$(operator_pid); then
		kill "$pid"
		for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$PIDFILE"
}

up() {
	"$CLOISTER" dev up
	TOOLS=$("$CLOISTER" dev tools)
	KUBECONFIG_PATH=$("$CLOISTER" dev kubeconfig)
	echo "Installing the CRDs"
	kube apply --server-side -f config/crd/bases >/dev/null
	kube wait --for=condition=Established --timeout=60s -f config/crd/bases >/dev/null
	kube create namespace cloister-system --dry-run=client -o yaml | kube apply -f - >/dev/null

	stop_operator
	mkdir -p "$STATE"
	echo "Starting cloister-operator (log: $STATE/operator.log)"
	OPERATOR_NAMESPACE=cloister-system KUBECONFIG="$KUBECONFIG_PATH" nohup "$OPERATOR" \
		--metrics-bind-address=127.0.0.1:18443 --health-probe-bind-address=127.0.0.1:18081 \
		>"$STATE/operator.log" 2>&1 &
	echo $! >"$PIDFILE"

	echo "Applying the SGXPlugin, CEXPlugin and LAS samples"
	kube apply -f config/samples/base_v1beta1_sgxplugin.yaml -f config/samples/base_v1beta1_cexplugin.yaml \
		-f config/samples/base_v1beta1_las.yaml
	if ! kube wait --for=jsonpath='{.status.state}'=HEALTHY --timeout=120s sgx/sgxplugin-sample cex/cexplugin-sample las/las-sample >/dev/null; then
		operator_pid >/dev/null || echo "cloister-operator is not running; the end of its log:" >&2
		tail -n 20 "$STATE/operator.log" >&2
		kube describe sgx/sgxplugin-sample cex/cexplugin-sample las/las-sample >&2 || true
		exit 1
	fi
	echo
	kube get nodes -L cloister.dev/tee -L kubernetes.io/arch
	echo
	kube get sgx,cex,las
	echo
	echo "The cluster and the operator keep running. Use them with:"
	echo "  export KUBECONFIG=$KUBECONFIG_PATH"
	echo "  kubectl describe sgx sgxplugin-sample"
	echo "Remove them with: make demo-down"
}

down() {
	stop_operator
	"$CLOISTER" dev down
	rm -rf "$STATE"
}

case "${1:-}" in
up) up ;;
down) down ;;
*) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
