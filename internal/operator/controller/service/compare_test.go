package service

import (
	"testing"

	"sigs.k8s.io/yaml"
)

func parse(t *testing.T, s string) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := yaml.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestContradiction(t *testing.T) {
	desired := `
spec:
  template:
    spec:
      nodeSelector: {cloister.dev/sgx: "true"}
      containers:
      - name: las
        image: example.com/las:1
        ports: [{containerPort: 18766, hostPort: 18766}]
        resources: {limits: {sgx.cloister.dev/enclave: 1}}
      volumes: []
      tolerations: {}
`
	tests := []struct {
		name, live, want string
	}{
		{"live adds defaults", `
spec:
  revisionHistoryLimit: 10
  template:
    spec:
      nodeSelector: {cloister.dev/sgx: "true"}
      dnsPolicy: ClusterFirst
      containers:
      - name: las
        image: example.com/las:1
        terminationMessagePath: /dev/termination-log
        ports: [{containerPort: 18766, hostPort: 18766, protocol: TCP}]
        resources: {limits: {sgx.cloister.dev/enclave: "1"}}
`, ""},
		{"image edited", `
spec:
  template:
    spec:
      nodeSelector: {cloister.dev/sgx: "true"}
      containers:
      - name: las
        image: evil.example.com/las:6
        ports: [{containerPort: 18766, hostPort: 18766}]
        resources: {limits: {sgx.cloister.dev/enclave: "1"}}
`, ".spec.template.spec.containers[0].image"},
		{"container added", `
spec:
  template:
    spec:
      nodeSelector: {cloister.dev/sgx: "true"}
      containers:
      - {name: las, image: example.com/las:1, ports: [{containerPort: 18766, hostPort: 18766}], resources: {limits: {sgx.cloister.dev/enclave: "1"}}}
      - {name: sidecar, image: example.com/miner:1}
`, ".spec.template.spec.containers"},
		{"selector value changed", `
spec:
  template:
    spec:
      nodeSelector: {cloister.dev/sgx: "false"}
      containers:
      - {name: las, image: example.com/las:1, ports: [{containerPort: 18766, hostPort: 18766}], resources: {limits: {sgx.cloister.dev/enclave: "1"}}}
`, ".spec.template.spec.nodeSelector.cloister.dev/sgx"},
		{"resource removed", `
spec:
  template:
    spec:
      nodeSelector: {cloister.dev/sgx: "true"}
      containers:
      - {name: las, image: example.com/las:1, ports: [{containerPort: 18766, hostPort: 18766}], resources: {}}
`, ".spec.template.spec.containers[0].resources.limits"},
		{"wrong type", `{spec: "nope"}`, ".spec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := contradiction(parse(t, desired), parse(t, tt.live), ""); got != tt.want {
				t.Errorf("contradiction = %q, want %q", got, tt.want)
			}
		})
	}
}
