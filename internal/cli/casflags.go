package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/attest"
	casclient "github.com/cloister-cc/cloister/internal/cas/client"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/cas/wire"
)

// casFlags are how every cas command reaches CAS (an address, or a CAS
// resource through the API server) and trusts it (a pinned certificate,
// or its evidence).
type casFlags struct {
	url, ca, cluster, identity string
	kubeconfig, kubeContext    string
	insecureSimulated          bool
	simKey                     string
	initTokenFile              string
	testRoots                  string
	// pod, with --cluster, is the one replica to reach (set by commands
	// that reach each replica in turn); empty: whichever answers.
	pod string
}

// addInitToken adds the flag of the commands that may initialise CAS.
func (f *casFlags) addInitToken(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.initTokenFile, "init-token-file", "", "the init token CAS was started with (a standalone CAS writes init-token in its state folder); --cluster reads it from the CAS resource's Secret")
}

// initToken is the init token from --init-token-file, or for --cluster
// from the Secret the operator made for the CAS resource.
func (f *casFlags) initToken(ctx context.Context) (string, error) {
	if f.initTokenFile != "" {
		raw, err := os.ReadFile(f.initTokenFile)
		if err != nil {
			return "", fmt.Errorf("--init-token-file: %w", err)
		}
		return strings.TrimSpace(string(raw)), nil
	}
	if f.cluster == "" {
		return "", errors.New("--init-token-file is required: the init token CAS was started with (init-token in a standalone CAS's state folder)")
	}
	cl, err := f.clusterOf()
	if err != nil {
		return "", err
	}
	return cl.InitToken(ctx)
}

// clusterOf is the CAS resource of --cluster, reached through the API
// server of --kubeconfig.
func (f *casFlags) clusterOf() (*conn.Cluster, error) {
	ref, err := conn.ParseRef(f.cluster)
	if err != nil {
		return nil, fmt.Errorf("--cluster: %w", err)
	}
	cfg, err := restConfig(f.kubeconfig, f.kubeContext)
	if err != nil {
		return nil, err
	}
	return &conn.Cluster{Config: cfg, Ref: ref}, nil
}

func (f *casFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVarP(&f.url, "cas", "c", "", "CAS address, https://HOST:PORT")
	fl.StringVar(&f.cluster, "cluster", "", "a CAS resource, NAMESPACE/NAME, reached through the API server (port-forward): no LoadBalancer needed")
	fl.StringVar(&f.ca, "cas-ca", "", "PEM certificate to trust for CAS's TLS (its tls.crt, or a CA that issued it)")
	fl.StringVar(&f.identity, "cas-identity", "", "trust CAS by its evidence: a file (YAML or JSON) with the attestation policy CAS's evidence must meet (identities, acceptTCB)")
	fl.BoolVar(&f.insecureSimulated, "insecure-simulated-cas", false, "trust a CAS that vouches for itself with simulated evidence (no TEE), signed by its pinned simulation key: insecure, development only")
	fl.StringVar(&f.simKey, "cas-sim-key", "", "with --insecure-simulated-cas and --cas: the PEM public key CAS signs its simulated evidence with (simulation.pub.pem in a standalone CAS's state folder; "+conn.CASKeyItem+" in a CAS resource's ConfigMap cas-NAME-simulation); --cluster takes it from the resource's status")
	fl.StringVar(&f.testRoots, flagTestRoots, "", "INSECURE, tests only: with --cas-identity, a PEM file of test roots (SEV-SNP ARK and ASK) CAS's evidence may chain to: a fake confidential VM's")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file for --cluster (default: $KUBECONFIG, then ~/.kube/config)")
	fl.StringVar(&f.kubeContext, "context", "", "kubeconfig context for --cluster")
}

// client connects as the flags say; done ends a port-forward.
func (f *casFlags) client(ctx context.Context, s Streams) (c *casclient.Client, done func(), err error) {
	done = func() {}
	if (f.url == "") == (f.cluster == "") {
		return nil, done, errors.New("say where CAS is: --cas https://HOST:PORT or --cluster NAMESPACE/NAME (a CAS resource)")
	}
	if f.simKey != "" && (!f.insecureSimulated || f.cluster != "") {
		return nil, done, errors.New("--cas-sim-key goes with --insecure-simulated-cas and --cas (--cluster takes the key from the CAS resource)")
	}
	if f.ca == "" && f.identity == "" && !f.insecureSimulated {
		return nil, done, errors.New("say how to trust CAS: --cas-ca FILE (its certificate), --cas-identity FILE (the evidence it must show) or --insecure-simulated-cas (development)")
	}
	if f.insecureSimulated && f.url != "" && f.simKey == "" && f.ca == "" {
		return nil, done, fmt.Errorf("--insecure-simulated-cas with --cas: name CAS's simulation key with --cas-sim-key FILE (simulation.pub.pem in a standalone CAS's state folder; %s in a CAS resource's ConfigMap cas-NAME-simulation): any key signs a simulated quote", conn.CASKeyItem)
	}
	url := f.url
	var dial casclient.DialFunc
	var simKey string
	if f.cluster != "" {
		var res *servicesv1beta1.CAS
		if url, dial, done, res, err = f.forward(ctx); err != nil {
			return nil, func() {}, err
		}
		simKey = res.Status.SimulationKey
		if f.insecureSimulated && res.Spec.Simulation && simKey == "" {
			return nil, done, fmt.Errorf("--cluster %s: the operator has not published CAS's simulation key yet (status.simulationKey)", f.cluster)
		}
	} else if f.simKey != "" {
		raw, err := os.ReadFile(f.simKey)
		if err != nil {
			return nil, done, fmt.Errorf("--cas-sim-key: %w", err)
		}
		simKey = string(raw)
	}
	defer func() {
		if err != nil {
			done()
		}
	}()
	t := conn.Trust{InsecureSimulated: f.insecureSimulated, SimKey: simKey, Warn: s.Err}
	if f.ca != "" {
		if t.CA, err = os.ReadFile(f.ca); err != nil {
			return nil, done, fmt.Errorf("--cas-ca: %w", err)
		}
	}
	if f.identity != "" {
		data, err := os.ReadFile(f.identity)
		if err != nil {
			return nil, done, fmt.Errorf("--cas-identity: %w", err)
		}
		p, err := wire.ParseCASPolicy(data)
		if err != nil {
			return nil, done, fmt.Errorf("--cas-identity %s: %w", f.identity, err)
		}
		t.Expect = *p
	}
	if t.TestRoots, err = loadTestRoots(s, f.testRoots); err != nil {
		return nil, done, err
	}
	c, err = t.Client(ctx, url, dial)
	switch {
	case err != nil && f.ca != "":
		return nil, done, fmt.Errorf("--cas-ca: %w", err)
	case attest.CheckOf(err) == attest.CheckSimulation:
		return nil, done, fmt.Errorf("%w (to trust it anyway, for development: --insecure-simulated-cas)", err)
	case err != nil:
		return nil, done, err
	}
	return c, done, nil
}

// forward finds the CAS resource of --cluster and port-forwards to its
// pod (--pod's, or whichever replica takes it).
func (f *casFlags) forward(ctx context.Context) (string, casclient.DialFunc, func(), *servicesv1beta1.CAS, error) {
	cl, err := f.clusterOf()
	if err != nil {
		return "", nil, nil, nil, err
	}
	cas, pods, err := cl.Replicas(ctx)
	if err != nil {
		return "", nil, nil, nil, fmt.Errorf("--cluster %w", err)
	}
	if f.pod != "" {
		pods = []string{f.pod}
	}
	url, dial, stop, err := cl.Forward(ctx, pods)
	if err != nil {
		return "", nil, nil, nil, fmt.Errorf("--cluster %w", err)
	}
	return url, dial, stop, cas, nil
}
