package cli

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/cloister-cc/cloister/internal/attest"
	"github.com/cloister-cc/cloister/internal/attest/refvalues"
	"github.com/cloister-cc/cloister/internal/attest/verify"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/base/kubeconfig"
	"github.com/cloister-cc/cloister/internal/base/version"
	"github.com/cloister-cc/cloister/internal/cas/wire"
	"github.com/cloister-cc/cloister/internal/cas/witness"
	"github.com/cloister-cc/cloister/internal/dev/image"
	"github.com/cloister-cc/cloister/internal/mesh/annotation"
	"github.com/cloister-cc/cloister/internal/workload/generate"
	workloadmanifest "github.com/cloister-cc/cloister/internal/workload/manifest"
	"github.com/cloister-cc/cloister/internal/workload/runtimeclass"
)

// InitializerImage is the initializer generate injects, pinned by digest
// at link time (make build); empty in a plain go build.
var InitializerImage string

// MeshImage is the service mesh (cloister-mesh) generate injects into
// pods with a service mesh annotation, pinned like InitializerImage.
var MeshImage string

type generateFlags struct {
	platform, referenceFile, policyName, casAddress, dir string
	testRoots                                            string
	witnessPolicy, witnessMaxAge                         string
	casIdentity, casSimKey                               string
	initializer, mesh, runtimeClass, overhead            string
	addOwners                                            []string
	disableUpdates, skipInit, skipMesh, fixResources     bool
	resourceClaims                                       bool
	offline, explain                                     bool
	kubeconfig, kubeContext                              string
	overheadGiven                                        bool
}

func newGenerate(s Streams) *cobra.Command {
	f := &generateFlags{}
	cmd := &cobra.Command{
		Use:   "generate --reference-values sim|FILE [flags] PATH...",
		Short: "Make the pods of Kubernetes YAML confidential and write the CAS manifest of their policies",
		Long: "Rewrites, in place, every pod template whose runtimeClassName is cloister-cc in the YAML\n" +
			"files and folders given (- reads standard input and writes standard output): the\n" +
			"initializer as first init container with an in-memory volume at /cloister, images pinned\n" +
			"to digests, the versioned runtime class, memory requests equal to limits, and the pod's\n" +
			"policy as its io.katacontainers.config.hypervisor.cc_init_data annotation. Pods with a\n" +
			"service mesh annotation (" + annotation.IngressAnnotation + ", " + annotation.EgressAnnotation + ",\n" +
			"or Contrast's names) also get the mesh: an init container that redirects inbound TCP to\n" +
			"the proxy, and the proxy as a native sidecar. Writes\n" +
			"manifest.yaml: a CAS policy whose services are the workloads, identified by their policy\n" +
			"digests. Makes workload-owner.pem (may update the manifest) and seedshare-owner.pem\n" +
			"(recovers CAS) on first run. Running it again on its output changes nothing.\n\n" +
			"With --reference-values sgx, the pods run Gramine SGX enclaves under their node's own runtime:\n" +
			"the enclave's container (annotation " + generate.EnclaveAnnotation + ", default the only one) gets the SGX\n" +
			"device, its enclave's size as EPC (annotation " + generate.EnclaveSizeAnnotation + ", default " + generate.DefaultEnclaveSize + ") and the\n" +
			"node's AESM socket, and the workspace gets gramine.SERVICE.toml: the lines its Gramine manifest\n" +
			"needs for the initializer to attest from inside the enclave and become the application. The\n" +
			"CAS manifest pins the enclave once its values are given (reference-values compute --platform sgx).",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			f.overheadGiven = cmd.Flags().Changed("runtime-overhead")
			return f.run(cmd.Context(), s, args)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.platform, "reference-values", "", "sim (insecure, runc; LAS vouches for the pod), sgx (Gramine enclaves; without a values file, writes what their Gramine manifests need and no CAS manifest), or a reference values file of snp, tdx or sgx values (cloister reference-values compute writes one)")
	fl.StringVar(&f.referenceFile, "reference-values-file", "", "with --reference-values snp, tdx or sgx: the reference values file")
	fl.StringVar(&f.policyName, "policy", "workloads", "the manifest's policy name in CAS")
	fl.StringVar(&f.casAddress, "cas-address", defaultCASAddress, "where the initializers reach CAS (SERVICE.NAMESPACE.svc:PORT)")
	fl.StringVar(&f.casIdentity, "cas-identity", "", "the attestation policy (YAML or JSON: identities, acceptTCB) CAS's evidence must meet for the initializers to trust it; sim trusts a simulated CAS")
	fl.StringVar(&f.casSimKey, "cas-sim-key", "", "sim: the PEM public key the simulated CAS signs its evidence with, which the initializers pin (a CAS resource's status.simulationKey; simulation.pub.pem in a standalone CAS's state folder)")
	fl.StringVar(&f.dir, "workspace", ".", "folder of manifest.yaml, the owner keys and the image digest cache")
	fl.StringSliceVar(&f.addOwners, "add-workload-owner-key", nil, "another public key (PEM) that may update the manifest")
	fl.BoolVar(&f.disableUpdates, "disable-updates", false, "no workload owners: the manifest can never be changed")
	fl.BoolVar(&f.skipInit, "skip-initializer", false, "do not inject the initializer (or annotate a pod template "+generate.SkipInitializerAnnotation+": \"true\")")
	fl.BoolVar(&f.skipMesh, "skip-service-mesh", false, "do not inject the service mesh into pods with a "+annotation.IngressAnnotation+" or "+annotation.EgressAnnotation+" annotation")
	fl.BoolVar(&f.fixResources, "fix-resources", false, "set memory requests to the limits instead of refusing pods whose requests differ")
	fl.BoolVar(&f.resourceClaims, "resource-claims", false, "ask for SGX, CryptoExpress and Nitro devices by DRA ResourceClaimTemplates instead of extended resources in limits")
	fl.BoolVar(&f.offline, "offline", false, "ask no registry: images must name digests (or be in the digest cache)")
	fl.BoolVar(&f.explain, "explain", false, "change nothing: say in plain words what the guest allows each confidential pod of the generated YAML given")
	fl.StringVar(&f.initializer, "initializer-image", InitializerImage, "the initializer image")
	fl.StringVar(&f.mesh, "mesh-image", MeshImage, "the service mesh image (cloister-mesh)")
	fl.StringVar(&f.testRoots, verify.TestRootsFlag, "", "INSECURE, tests only: a PEM file of test roots (SEV-SNP ARK and ASK, or an SGX root) CAS's evidence may chain to, for the initializers: a fake TEE's")
	fl.StringVar(&f.witnessPolicy, "witness-policy", "", "the witnesses whose recent cosignatures of CAS's transparency log the initializers require before the pods start (witness NAME KEY URL, group, quorum lines; default: "+workloadmanifest.WitnessPolicyFile+" in the workspace, when there): a CAS whose state was rolled back is refused")
	fl.StringVar(&f.witnessMaxAge, "witness-max-age", "", "with a witness policy: how old the cosignatures may be (default 2h)")
	fl.StringVar(&f.runtimeClass, "runtime-class", "", "the runtime class to run the pods with (default: the one this version installs for the platform)")
	fl.StringVar(&f.overhead, "runtime-overhead", "256Mi", "the runtime class's memory overhead per pod, for the VM memory report (default: the installed RuntimeClass's, with --kubeconfig)")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "a cluster whose installed RuntimeClass gives the runtime overhead")
	fl.StringVar(&f.kubeContext, "context", "", "the kubeconfig context of --kubeconfig")
	return cmd
}

func (f *generateFlags) run(ctx context.Context, s Streams, paths []string) error {
	if f.explain {
		return generate.Explain(s.Out, paths)
	}
	platform, ref, err := f.referenceValues()
	if err != nil {
		return err
	}
	expect, simKey, err := f.casExpect(platform)
	if err != nil {
		return err
	}
	if f.disableUpdates && len(f.addOwners) > 0 {
		return errors.New("--disable-updates and --add-workload-owner-key: choose one")
	}
	added, err := readPublicKeys("--add-workload-owner-key", f.addOwners)
	if err != nil {
		return err
	}
	cfg := generate.RunConfig{
		Platform: platform, Reference: ref, Workspace: f.dir, Paths: paths, Offline: f.offline,
		AddedOwnerKeys: added, DisableUpdates: f.disableUpdates, Version: version.Get().Version,
		In: s.In, Out: s.Out, Err: s.Err,
		Options: generate.Options{
			RuntimeClass:     f.runtimeClass,
			InitializerImage: f.initializer,
			MeshImage:        f.mesh,
			SkipServiceMesh:  f.skipMesh,
			CAS:              f.casAddress,
			CASExpect:        expect,
			CASSimKey:        simKey,
			Policy:           f.policyName,
			SkipInitializer:  f.skipInit,
			FixResources:     f.fixResources,
			ResourceClaims:   f.resourceClaims,
		},
		Overhead: func(ctx context.Context, class string) (int64, error) { return f.runtimeOverhead(ctx, s, class) },
	}
	if cfg.Options.InitializerImage == "" {
		if cfg.Options.InitializerImage, err = releaseImage("cloister-initializer"); err != nil {
			return fmt.Errorf("the initializer image (--initializer-image): %w", err)
		}
	}
	// Without a default, only pods with a mesh need --mesh-image.
	if cfg.Options.MeshImage == "" {
		var why error
		if cfg.Options.MeshImage, why = releaseImage("cloister-mesh"); why != nil {
			cfg.NoMeshImage = fmt.Errorf("give one with --mesh-image: %w", why)
		}
	}
	if f.testRoots != "" {
		roots, err := verify.LoadTestRootsFlag(f.testRoots, s.Err)
		if err != nil {
			return err
		}
		for _, r := range roots {
			cfg.Options.TestRoots += string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.Raw}))
		}
	}
	if cfg.Options.WitnessPolicy, err = f.witnesses(); err != nil {
		return err
	}
	cfg.Options.WitnessMaxAge = f.witnessMaxAge
	return generate.Run(ctx, cfg)
}

// witnesses is the text of the witness policy the initializers require:
// --witness-policy's, or the workspace's; "" for none.
func (f *generateFlags) witnesses() (string, error) {
	if f.witnessMaxAge != "" {
		if d, err := time.ParseDuration(f.witnessMaxAge); err != nil || d < 0 {
			return "", fmt.Errorf("--witness-max-age %q: a duration such as 2h", f.witnessMaxAge)
		}
	}
	file := f.witnessPolicy
	if file == "" {
		file = filepath.Join(f.dir, workloadmanifest.WitnessPolicyFile)
		if _, err := os.Stat(file); err != nil {
			if f.witnessMaxAge != "" {
				return "", errors.New("--witness-max-age goes with a witness policy (--witness-policy, or witness-policy in the workspace)")
			}
			return "", nil
		}
	}
	p, err := witness.ReadPolicy(file)
	if err != nil {
		return "", fmt.Errorf("--witness-policy: %w", err)
	}
	return string(p.Text()), nil
}

// casExpect is the initializers' expectation of CAS's evidence, JSON,
// and for a simulated CAS the key it signs its evidence with (PEM).
func (f *generateFlags) casExpect(platform runtimeclass.Platform) (expect, simKey string, err error) {
	var p attest.Policy
	if f.casIdentity != "" {
		data, err := os.ReadFile(f.casIdentity)
		if err != nil {
			return "", "", fmt.Errorf("--cas-identity: %w", err)
		}
		parsed, err := wire.ParseCASPolicy(data)
		if err != nil {
			return "", "", fmt.Errorf("--cas-identity %s: %w", f.casIdentity, err)
		}
		p = *parsed
	} else if platform != runtimeclass.Sim {
		return "", "", fmt.Errorf("--cas-identity: required for %s: the evidence CAS must show the initializers (its measurement)", platform)
	}
	// Simulated pods talk to a simulated CAS: both are the development
	// setup the platform names.
	p.AllowSimulation = platform == runtimeclass.Sim
	switch {
	case p.AllowSimulation && f.casSimKey == "":
		return "", "", errors.New("--cas-sim-key: required for sim: the key the simulated CAS signs its evidence with, which the initializers pin (kubectl get cas NAME -o jsonpath='{.status.simulationKey}')")
	case !p.AllowSimulation && f.casSimKey != "":
		return "", "", fmt.Errorf("--cas-sim-key: only for sim, whose CAS is simulated; %s pods trust CAS by its measurement (--cas-identity)", platform)
	case p.AllowSimulation:
		raw, err := os.ReadFile(f.casSimKey)
		if err != nil {
			return "", "", fmt.Errorf("--cas-sim-key: %w", err)
		}
		if _, err := keyfile.ParsePublic(raw); err != nil {
			return "", "", fmt.Errorf("--cas-sim-key %s: %w", f.casSimKey, err)
		}
		simKey = string(raw)
	}
	b, err := json.Marshal(p)
	return string(b), simKey, err
}

// referenceValues are the platform and its values: a platform's name
// (sim; snp or tdx with --reference-values-file), or a reference values
// file, whose values name the platform.
func (f *generateFlags) referenceValues() (runtimeclass.Platform, *refvalues.File, error) {
	flag, path := "--reference-values-file", f.referenceFile
	platform, err := runtimeclass.ParsePlatform(f.platform)
	if f.platform == string(runtimeclass.SGX) {
		platform, err = runtimeclass.SGX, nil
	}
	if err != nil {
		if _, statErr := os.Stat(f.platform); f.platform == "" || statErr != nil {
			return "", nil, fmt.Errorf("--reference-values: %w, or a reference values file (cloister reference-values compute)", err)
		}
		if f.referenceFile != "" {
			return "", nil, errors.New("--reference-values FILE and --reference-values-file: give one file")
		}
		flag, path = "--reference-values", f.platform
	}
	if path == "" {
		return platform, nil, nil
	}
	data, err := readBounded(strings.TrimPrefix(flag, "--"), path, refvalues.MaxFile)
	if err != nil {
		return "", nil, err
	}
	ref, err := refvalues.Parse(data)
	if err != nil {
		return "", nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	held := ref.Platforms() // Parse refuses a file of none
	fromFile := runtimeclass.Platform(held[0])
	switch {
	case len(held) > 1:
		return "", nil, fmt.Errorf("%s %s: values for %s: give one platform's", flag, path, strings.Join(held, " and "))
	case flag == "--reference-values":
		platform = fromFile
	case platform != fromFile:
		return "", nil, fmt.Errorf("%s %s: %s values for platform %s", flag, path, fromFile, platform)
	}
	return platform, ref, nil
}

// runtimeOverhead is the memory every pod's VM pays beside its
// containers, in MiB: as given, else the installed RuntimeClass's (with
// a kubeconfig), else the default, said so.
func (f *generateFlags) runtimeOverhead(ctx context.Context, s Streams, class string) (int64, error) {
	if f.overheadGiven || f.kubeconfig == "" {
		q, err := resource.ParseQuantity(f.overhead)
		if err != nil {
			return 0, fmt.Errorf("--runtime-overhead: %w", err)
		}
		if !f.overheadGiven {
			_, _ = fmt.Fprintf(s.Err, "warning: the VM memory counts a runtime overhead of %s per pod, the default: --kubeconfig reads RuntimeClass %s's, --runtime-overhead sets it\n", f.overhead, class)
		}
		return q.Value() >> 20, nil
	}
	cfg, err := kubeconfig.RESTConfig(f.kubeconfig, f.kubeContext)
	if err != nil {
		return 0, fmt.Errorf("--kubeconfig: %w", err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	rc, err := cs.NodeV1().RuntimeClasses().Get(ctx, class, metav1.GetOptions{})
	if err != nil {
		return 0, fmt.Errorf("reading the runtime overhead from RuntimeClass %s: %w (is its ConfidentialRuntime installed? --runtime-overhead sets it instead)", class, err)
	}
	if rc.Overhead == nil {
		return 0, nil
	}
	mem := rc.Overhead.PodFixed[corev1.ResourceMemory]
	return mem.Value() >> 20, nil
}

// releaseImage is the image of a Cloister binary at this CLI's release,
// for a CLI built without pinned images: `go install ...@vX.Y.Z` records
// the release in the binary's build information. A plain `go build` in a
// checkout records none, and no image of a development build is
// published, so there is no default to give.
func releaseImage(name string) (string, error) { return releaseImageAt(name, version.Get().Version) }

func releaseImageAt(name, v string) (string, error) {
	if !semver.IsValid(v) || module.IsPseudoVersion(v) || semver.Build(v) != "" {
		return "", fmt.Errorf("this cloister (version %s) was built without pinned images and is no release: "+
			"build it with make build, which pins the images it builds, or install a release "+
			"(go install github.com/cloister-cc/cloister/cmd/cloister@vX.Y.Z), or name the image", v)
	}
	return image.Ref(image.DefaultRegistry, name, v), nil
}
