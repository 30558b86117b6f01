#!/usr/bin/env bash
# `make demo` and `make demo-down`. up: the dev cluster; with a real node
# (as root: Cloister's pods then really run) the operator installed in it
# by `cloister install --reconcile` as users install it (its chart, CRDs,
# webhooks, the default SGXPlugin and LAS), else the CRDs and
# cloister-operator running beside the cluster with its kubeconfig (the
# simulated nodes run no pods, so no webhooks); the CEXPlugin sample; all
# until HEALTHY; the NitroEnclaveDeployment sample until SCHEDULED 1/1; then CAS: with a real node, the journey as resources (a
# CAS CR initialised through the API server, a SignedPolicy registered, a
# pod that attests through its node's LAS and runs with its certificate);
# without one, a local cloister-cas (simulation allowed) initialised, a
# policy registered, one attestation with the cloister CLI. down: stops
# everything and removes the cluster.
# Running `up` again replaces the operator with the freshly built one.
set -euo pipefail
cd "$(dirname "$0")/.."

CLOISTER=bin/cloister
OPERATOR=bin/cloister-operator
STATE=${CLOISTER_CACHE_DIR:-.cache}/demo
PIDFILE=$STATE/operator.pid
CAS_BIN=bin/cloister-cas
CAS_DIR=$STATE/cas
CAS_PIDFILE=$STATE/cas.pid
CAS_URL=https://127.0.0.1:${CAS_PORT:-8081}
IMAGES=${CLOISTER_CACHE_DIR:-.cache}/images

kube() { "$TOOLS/kubectl" --kubeconfig "$KUBECONFIG_PATH" "$@"; }

# pid_of PIDFILE NAME: the pid in the file, if it is still NAME (a pid may
# have been reused since).
pid_of() {
	[ -f "$1" ] || return 1
	local pid
	pid=$(cat "$1")
	[ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q "$2" || return 1
	echo "$pid"
}

operator_pid() { pid_of "$PIDFILE" cloister-operator; }

# stop PIDFILE NAME: SIGTERM, then SIGKILL after 30 s.
stop() {
	local pid
	if pid=$(pid_of "$1" "$2"); then
		kill "$pid"
		for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	fi
	rm -f "$1"
}

stop_operator() { stop "$PIDFILE" cloister-operator; }

cas() { "$CLOISTER" cas "$@" --cas "$CAS_URL" --cas-ca "$CAS_DIR/state/tls.crt"; }

# policy_doc: the demo policy, owned by $CAS_DIR/owner.pub.pem.
policy_doc() {
	cat <<-EOF
		version: cloister.dev/policy/v1
		name: default/demo
		owners:
		  keys:
		  - |
	EOF
	sed 's/^/    /' "$CAS_DIR/owner.pub.pem"
	cat <<-EOF
		allowSimulation: true   # sim evidence: this machine has no TEE
		services:
		- name: web
		  attestation: {identities: []}
		  certificate: {sans: [web.demo.svc], validity: 24h}
		  env: {API_TOKEN: "{{ .Secrets.apiToken.Hex }}"}
		  secrets: [apiToken]
		secrets:
		- {name: apiToken, kind: symmetric-key}
	EOF
}

# wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds.
wait_for() {
	local what=$1 secs=$2 i
	shift 2
	for i in $(seq 1 $((secs * 2))); do
		"$@" >/dev/null 2>&1 && return 0
		# Said every 5 s: a newcomer sees the demo is alive.
		[ $((i % 10)) -eq 0 ] && echo "  still waiting for $what ($((i / 2))s)"
		sleep 0.5
	done
	echo "timed out waiting for $what" >&2
	return 1
}

# demo_cas_in_cluster: the SCONE journey as resources on the real node.
demo_cas_in_cluster() {
	mkdir -p "$CAS_DIR"
	# First, so that CAS pins the LAS node keys from its start.
	echo "LAS with simulated evidence (no SGX here): the operator reads each node's key and publishes it to the simulated CASes"
	kube patch las/las --type=merge -p '{"spec":{"simulation":true}}' >/dev/null
	wait_for "LAS with simulation" 120 sh -c "'$TOOLS/kubectl' --kubeconfig '$KUBECONFIG_PATH' get pods -n cloister-system -l app.kubernetes.io/name=cloister-las -o jsonpath='{.items[*].spec.containers[0].args}' | grep -q -- --simulation"
	kube wait --for=jsonpath='{.status.state}'=HEALTHY --timeout=120s las/las >/dev/null
	echo "Creating a CAS resource (simulation: no TEE here; persistence on the real node's storage)"
	kube apply -f - <<-EOF
		apiVersion: services.cloister.dev/v1beta1
		kind: CAS
		metadata: {name: cas, namespace: default}
		spec:
		  simulation: true
		  imagePullPolicy: IfNotPresent
		  nodeSelector: {cloister.dev/real-node: "true"}   # the simulated nodes run no pods
		  persistence: {enabled: true, size: 1Gi}
	EOF
	wait_for "CAS to run" 180 sh -c "'$TOOLS/kubectl' --kubeconfig '$KUBECONFIG_PATH' get cas cas -o jsonpath='{.status.casState}' | grep -qx 'uninitialized\|ready\|recovery'"
	kube get cas cas
	kube get cas cas -o jsonpath='{range .status.conditions[?(@.type=="IsHealthy")]}  {.reason}: {.message}{"\n"}{end}'
	[ -f "$CAS_DIR/recovery-owner.pem" ] || "$CLOISTER" policy keygen --out "$CAS_DIR/recovery-owner.pem" >"$CAS_DIR/recovery-owner.pub.pem"
	[ -f "$CAS_DIR/owner.pem" ] || "$CLOISTER" policy keygen --out "$CAS_DIR/owner.pem" >"$CAS_DIR/owner.pub.pem"
	case "$(kube get cas cas -o jsonpath='{.status.casState}')" in
	uninitialized)
		echo "cloister cas init --cluster default/cas (through the API server: no LoadBalancer)"
		"$CLOISTER" cas init --cluster default/cas --insecure-simulated-cas --kubeconfig "$KUBECONFIG_PATH" \
			--recovery-owner "$CAS_DIR/recovery-owner.pub.pem" --threshold 1 --out "$CAS_DIR/shares.json" ;;
	recovery)
		"$CLOISTER" cas recover --cluster default/cas --insecure-simulated-cas --kubeconfig "$KUBECONFIG_PATH" \
			--shares "$CAS_DIR/shares.json" --key "$CAS_DIR/recovery-owner.pem" ;;
	esac
	kube wait --for=jsonpath='{.status.state}'=HEALTHY --timeout=120s cas/cas >/dev/null
	kube get cas cas
	echo
	# Signed once: a signature differs each time, and a SignedPolicy's spec
	# cannot change, so a second demo applies the same resource again. The
	# policy is named within the resource's namespace, default.
	if ! grep -q 'name: default/demo$' "$CAS_DIR/signedpolicy-cluster.yaml" 2>/dev/null; then
		policy_doc >"$CAS_DIR/policy.yaml"
		"$CLOISTER" policy sign --key "$CAS_DIR/owner.pem" --version 1 --cas-address cas.default.svc:8081 --name demo "$CAS_DIR/policy.yaml" >"$CAS_DIR/signedpolicy-owner.yaml"
		# A new name: the board (the recovery owner, by default) approves it.
		"$CLOISTER" policy sign --key "$CAS_DIR/recovery-owner.pem" "$CAS_DIR/signedpolicy-owner.yaml" >"$CAS_DIR/signedpolicy-cluster.yaml"
	fi
	kube apply -f "$CAS_DIR/signedpolicy-cluster.yaml"
	kube wait --for=jsonpath='{.status.state}'=HEALTHY --timeout=60s spol/demo >/dev/null
	kube get spol demo
	echo
	# CAS takes the pod's simulated evidence only from the LAS keys the
	# operator read from the LAS pods and published to it.
	wait_for "CAS to pin its node's LAS key" 240 sh -c "'$TOOLS/kubectl' --kubeconfig '$KUBECONFIG_PATH' get cas cas -o jsonpath='{.status.simulationKeys}' | grep -q sha256:"
	echo "A pod that attests through its node's LAS, trusting CAS by the simulation key the operator published"
	local cas_ip cli_image pause_image
	cas_ip=$(kube get pod cas-cas-0 -o jsonpath='{.status.podIP}')
	cli_image=$(awk '$1=="cloister"{print $2}' "$IMAGES/pinned.txt")
	pause_image=$(awk '$1=="cloister-pause"{print $2}' "$IMAGES/pinned.txt")
	kube delete pod web --ignore-not-found >/dev/null
	kube apply -f - <<-EOF
		apiVersion: v1
		kind: Pod
		metadata: {name: web, namespace: default}
		spec:
		  nodeSelector: {cloister.dev/real-node: "true"}
		  # The dev cluster has no DNS: the Service's name points at CAS's pod.
		  hostAliases: [{ip: "$cas_ip", hostnames: [cas.default.svc]}]
		  initContainers:
		  - name: attest
		    image: $cli_image
		    imagePullPolicy: Never
		    args: [cas, attest, --cas, "https://cas.default.svc:8081", --insecure-simulated-cas,
		           --cas-sim-key, /run/cloister-cas/cas.pem, --policy, default/demo,
		           --service, web, --las, "http://\$(HOST_IP):18766", --out, /run/cloister]
		    env: [{name: HOST_IP, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}]
		    volumeMounts: [{name: tls, mountPath: /run/cloister}, {name: cas-keys, mountPath: /run/cloister-cas, readOnly: true}]
		  containers:
		  - name: web
		    image: $pause_image
		    imagePullPolicy: Never
		    volumeMounts: [{name: tls, mountPath: /run/cloister, readOnly: true}]
		  volumes: [{name: tls, emptyDir: {medium: Memory}}, {name: cas-keys, configMap: {name: cas-cas-simulation}}]
	EOF
	kube wait --for=jsonpath='{.status.phase}'=Running --timeout=120s pod/web >/dev/null
	kube logs web -c attest
	kube get pod web -o wide
	echo
	demo_workloads "$cas_ip" "$pause_image"
}

# demo_workloads: the sim ConfidentialRuntime on the real node, then a
# plain Pod made confidential: generate, apply, set; it starts with its
# mesh certificate.
demo_workloads() {
	local cas_ip=$1 pause_image=$2 ws=$STATE/shop
	echo "A ConfidentialRuntime on the real node (sim: runc underneath, insecure): the handler goes into its containerd"
	"$CLOISTER" dev confidential-runtime | kube apply -f - >/dev/null
	kube wait --for=jsonpath='{.status.state}'=HEALTHY --timeout=120s ccr/sim >/dev/null
	kube get ccr sim
	mkdir -p "$ws/resources"
	# The images are on the node, not in a registry: the digest cache pins
	# them (generate --offline refuses anything it cannot pin from it).
	awk 'BEGIN{printf "{"} {split($2, r, "@"); printf "%s\"%s\": \"%s\"", (NR>1 ? ", " : ""), r[1], $2} END{print "}"}' \
		"$IMAGES/pinned.txt" >"$ws/image-digests.json"
	# And their configurations, so the guest's policy pins what they run.
	cp "$IMAGES/image-configs.json" "$ws/image-configs.json"
	cat >"$ws/resources/shop.yaml" <<-EOF
		# A plain Pod marked confidential (runtimeClassName: cloister-cc).
		apiVersion: v1
		kind: Pod
		metadata: {name: shop, namespace: default}
		spec:
		  runtimeClassName: cloister-cc
		  hostAliases: [{ip: "$cas_ip", hostnames: [cas.default.svc]}]
		  containers:
		  - name: shop
		    image: ${pause_image%@*}
		    resources: {limits: {memory: 32Mi}}
	EOF
	echo "cloister generate --reference-values sim: initializer, pinned images, runtime class, policy annotation, manifest.yaml"
	kube get cas cas -o jsonpath='{.status.simulationKey}' >"$ws/cas-sim.pem"
	"$CLOISTER" generate --reference-values sim --cas-sim-key "$ws/cas-sim.pem" --offline --kubeconfig "$KUBECONFIG_PATH" \
		--workspace "$ws" "$ws/resources"
	kube delete pod shop --ignore-not-found >/dev/null
	kube apply -f "$ws/resources/shop.yaml" >/dev/null
	echo "cloister set --cluster default/cas: the manifest is a CAS policy; the pod's initializer attests and gets its certificate"
	"$CLOISTER" set --cluster default/cas --insecure-simulated-cas --kubeconfig "$KUBECONFIG_PATH" --workspace "$ws" \
		--board-key "$CAS_DIR/recovery-owner.pem" "$ws/resources"
	kube wait --for=jsonpath='{.status.phase}'=Running --timeout=120s pod/shop >/dev/null
	kube logs shop -c cloister-initializer | tail -n 1
	kube get pod shop -o wide
}

# demo_cas: a local CAS (its seed in a file, simulation allowed), one
# recovery owner, a sample policy signed by its owner, one attestation.
demo_cas() {
	stop "$CAS_PIDFILE" cloister-cas
	mkdir -p "$CAS_DIR/state"
	# The developer's simulation key: CAS takes simulated evidence signed
	# by it alone, so nothing else on the machine can forge a quote.
	[ -f "$CAS_DIR/sim.pem" ] || "$CLOISTER" policy keygen --out "$CAS_DIR/sim.pem" >"$CAS_DIR/sim.pub.pem"
	echo "Starting cloister-cas on $CAS_URL (log: $CAS_DIR/cas.log)"
	nohup "$CAS_BIN" --listen "127.0.0.1:${CAS_PORT:-8081}" --state-dir "$CAS_DIR/state" \
		--sealer "file:$CAS_DIR/state/seed" --simulation --sim-keys "$CAS_DIR/sim.pub.pem" >"$CAS_DIR/cas.log" 2>&1 &
	echo $! >"$CAS_PIDFILE"
	for _ in $(seq 1 100); do
		grep -q '"serving CAS"' "$CAS_DIR/cas.log" 2>/dev/null && break
		sleep 0.1
	done
	if ! grep -q '"serving CAS"' "$CAS_DIR/cas.log"; then
		echo "cloister-cas did not start; its log:" >&2
		cat "$CAS_DIR/cas.log" >&2
		exit 1
	fi
	if [ ! -f "$CAS_DIR/shares.json" ]; then
		[ -f "$CAS_DIR/recovery-owner.pem" ] || "$CLOISTER" policy keygen --out "$CAS_DIR/recovery-owner.pem" >"$CAS_DIR/recovery-owner.pub.pem"
		cas init --recovery-owner "$CAS_DIR/recovery-owner.pub.pem" --threshold 1 --out "$CAS_DIR/shares.json" \
			--init-token-file "$CAS_DIR/state/init-token"
	fi
	[ -f "$CAS_DIR/owner.pem" ] || "$CLOISTER" policy keygen --out "$CAS_DIR/owner.pem" >"$CAS_DIR/owner.pub.pem"
	policy_doc >"$CAS_DIR/policy.yaml"
	# Signed where CAS says the document goes: version 1, or the current
	# version's own place when a demo before registered it already.
	"$CLOISTER" policy sign --key "$CAS_DIR/owner.pem" --cas-address "$CAS_URL" \
		--cas "$CAS_URL" --cas-ca "$CAS_DIR/state/tls.crt" "$CAS_DIR/policy.yaml" >"$CAS_DIR/signedpolicy-owner.yaml"
	# Version 1, a new name: the board (the recovery owner) approves it.
	"$CLOISTER" policy sign --key "$CAS_DIR/recovery-owner.pem" "$CAS_DIR/signedpolicy-owner.yaml" >"$CAS_DIR/signedpolicy.yaml"
	cas register "$CAS_DIR/signedpolicy.yaml"
	cas attest --policy default/demo --service web --sim --sim-key "$CAS_DIR/sim.pem" --out "$CAS_DIR/web"
}

# demo_vault: a Vault of three replicas in the sim runtime, unsealed by
# CAS: its owner makes the policy from its spec, signs it, the board
# approves the new name, and nobody initialises or unseals anything.
demo_vault() {
	local ws=$STATE/vault vault_image runtime_class
	mkdir -p "$ws"
	vault_image=$(awk '$1=="vault"{print $2}' "$IMAGES/pinned.txt")
	if [ -z "$vault_image" ]; then
		echo "no Vault image in $IMAGES/pinned.txt: make images builds it" >&2
		exit 1
	fi
	runtime_class=$(kube get ccr sim -o jsonpath='{.status.runtimeClassName}')
	echo "A Vault resource: three replicas of Vault v1.14.2 (MPL-2.0, built from its module) in the sim runtime, sealed by CAS"
	kube apply -f - <<-EOF
		apiVersion: services.cloister.dev/v1beta1
		kind: Vault
		metadata: {name: vault, namespace: default}
		spec:
		  image: $vault_image
		  imagePullPolicy: IfNotPresent
		  nodeSelector: {cloister.dev/real-node: "true"}
		  cas: {name: cas}
		  runtimeClassName: $runtime_class
		  replicas: 3
		  policy:
		    owners:
		    - |
		$(sed 's/^/      /' "$CAS_DIR/owner.pub.pem")
	EOF
	wait_for "the Vault to publish its policy" 120 sh -c "'$TOOLS/kubectl' --kubeconfig '$KUBECONFIG_PATH' get vault vault -o jsonpath='{.status.policyDigest}' | grep -q ."
	if ! kube get spol vault >/dev/null 2>&1; then
		echo "cloister vault policy default/vault: the owner makes the policy from the spec and signs it; the board approves its name"
		"$CLOISTER" vault policy default/vault --kubeconfig "$KUBECONFIG_PATH" >"$ws/policy.yaml"
		"$CLOISTER" policy sign --key "$CAS_DIR/owner.pem" --version 1 --cas-address cas.default.svc:8081 --name vault "$ws/policy.yaml" >"$ws/signedpolicy-owner.yaml"
		"$CLOISTER" policy sign --key "$CAS_DIR/recovery-owner.pem" "$ws/signedpolicy-owner.yaml" >"$ws/signedpolicy.yaml"
		kube apply -f "$ws/signedpolicy.yaml"
	fi
	if ! wait_for "the Vault to be HEALTHY" 300 sh -c "'$TOOLS/kubectl' --kubeconfig '$KUBECONFIG_PATH' get vault vault -o jsonpath='{.status.state}' | grep -qx HEALTHY"; then
		kube describe vault vault >&2 || true
		exit 1
	fi
	kube get vault vault -o wide
}

up() {
	# --real-node says why it cannot (not root, no runc) and goes on without.
	"$CLOISTER" dev up --real-node
	TOOLS=$("$CLOISTER" dev tools)
	KUBECONFIG_PATH=$("$CLOISTER" dev kubeconfig)
	if [ -n "$("$CLOISTER" dev operator-flags)" ]; then
		stop_operator # one a demo without a real node left
		echo "Installing the operator on the real node: cloister install --reconcile -c default (the samples go to namespace default)"
		"$CLOISTER" install --reconcile --verbose --kubeconfig "$KUBECONFIG_PATH" -c default
		sgx=sgx/sgxplugin las=las/las
	else
		echo "No real node, so no node runs pods: the operator runs beside the cluster (no webhooks);"
		echo "as root, make demo installs it in the cluster with cloister install."
		echo "Installing the CRDs"
		kube apply --server-side -f charts/cloister-operator/files/crds >/dev/null
		kube wait --for=condition=Established --timeout=60s -f charts/cloister-operator/files/crds >/dev/null
		kube create namespace cloister-system --dry-run=client -o yaml | kube apply -f - >/dev/null
		stop_operator
		mkdir -p "$STATE"
		echo "Starting cloister-operator (log: $STATE/operator.log)"
		OPERATOR_NAMESPACE=cloister-system KUBECONFIG="$KUBECONFIG_PATH" nohup "$OPERATOR" \
			--metrics-bind-address=127.0.0.1:18443 --health-probe-bind-address=127.0.0.1:18081 >"$STATE/operator.log" 2>&1 &
		echo $! >"$PIDFILE"
		kube apply -f config/samples/base_v1beta1_sgxplugin.yaml -f config/samples/base_v1beta1_las.yaml
		sgx=sgx/sgxplugin-sample las=las/las-sample
	fi

	echo "Applying the CEXPlugin sample"
	kube apply -f config/samples/base_v1beta1_cexplugin.yaml
	if ! kube wait --for=jsonpath='{.status.state}'=HEALTHY --timeout=120s "$sgx" cex/cexplugin-sample "$las" >/dev/null; then
		if [ -f "$PIDFILE" ]; then
			operator_pid >/dev/null || echo "cloister-operator is not running; the end of its log:" >&2
			tail -n 20 "$STATE/operator.log" >&2
		else
			kube logs -n cloister-system deploy/cloister-operator --tail=20 >&2 || true
		fi
		kube describe "$sgx" cex/cexplugin-sample "$las" >&2 || true
		exit 1
	fi
	echo
	kube get nodes -L cloister.dev/tee -L kubernetes.io/arch -L cloister.dev/real-node
	echo
	kube get sgx,cex,las
	echo
	echo "Applying the NitroEnclaveDeployment sample (its enclave pod goes to the simulated Nitro node)"
	kube apply -f config/samples/enclave_v1beta1_nitroenclavedeployment.yaml
	if ! kube wait --for=jsonpath='{.status.ready}'=1/1 --timeout=120s ned/nitroenclavedeployment-sample >/dev/null ||
		[ "$(kube get ned nitroenclavedeployment-sample -o jsonpath='{.status.status}')" != SCHEDULED ]; then
		kube describe ned nitroenclavedeployment-sample >&2 || true
		exit 1
	fi
	kube get ned
	echo
	if [ -n "$("$CLOISTER" dev operator-flags)" ]; then
		echo "Cloister's pods on the real node (containerd and runc, not simulated):"
		kube get pods -A -o wide --field-selector spec.nodeName=real
		echo
	fi
	if [ -n "$("$CLOISTER" dev operator-flags)" ]; then
		demo_cas_in_cluster
		echo
		demo_vault
		cas_hint="kubectl get cas,spol,las,vault; kubectl logs web -c attest"
	else
		demo_cas
		cas_hint="ls $CAS_DIR/web    # what the attested web service got"
	fi
	echo
	echo "The cluster, the operator and CAS keep running. Use them with:"
	echo "  export KUBECONFIG=$KUBECONFIG_PATH"
	echo "  kubectl describe $sgx"
	echo "  kubectl describe ned nitroenclavedeployment-sample"
	echo "  $CLOISTER install    # checks the operator and says what is wrong"
	echo "  $cas_hint"
	echo "Remove them with: make demo-down"
}

down() {
	stop "$CAS_PIDFILE" cloister-cas
	stop_operator
	"$CLOISTER" dev down
	rm -rf "$STATE"
}

case "${1:-}" in
up) up ;;
down) down ;;
*) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
