// Command cloister-operator runs Cloister's controllers; see internal/operator.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/cloister-cc/cloister/internal/base/startup"
	"github.com/cloister-cc/cloister/internal/base/version"
	"github.com/cloister-cc/cloister/internal/operator"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
	"github.com/cloister-cc/cloister/internal/operator/release"
	"github.com/cloister-cc/cloister/internal/operator/webhookcert"
	"github.com/cloister-cc/cloister/internal/workload/imagesig"
)

// The default images pinned by digest, set at link time by make build
// (hack/images -operator-ldflags); a plain go build names them by tag.
var devicePluginImage, lasImage, casImage, nodeInstallerImage, enclaveImage, initializerImage string

func main() { startup.Main("cloister-operator", run) }

func run(ctx context.Context) error {
	v := version.Get()
	opts := operator.Options{Namespace: os.Getenv("OPERATOR_NAMESPACE")}
	if opts.Namespace == "" {
		opts.Namespace = "cloister-system"
	}
	fs := flag.NewFlagSet("cloister-operator", flag.ContinueOnError)
	fs.StringVar(&opts.MetricsBindAddress, "metrics-bind-address", ":8443",
		"address of the metrics endpoint (HTTPS with Kubernetes authn/authz unless --metrics-secure=false); 0 disables it")
	fs.BoolVar(&opts.SecureMetrics, "metrics-secure", true, "serve metrics over HTTPS, for authenticated and authorized clients only")
	fs.StringVar(&opts.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&opts.LeaderElect, "leader-elect", false, "elect a leader among replicas (lease in $OPERATOR_NAMESPACE)")
	fs.StringVar(&opts.Images.DevicePlugin, "device-plugin-image", cmp.Or(devicePluginImage, "ghcr.io/cloister-cc/cloister-device-plugin:"+v.Version),
		"default image of the SGX and CEX device plugins")
	fs.StringVar(&opts.Images.LAS, "las-image", cmp.Or(lasImage, "ghcr.io/cloister-cc/cloister-las:"+v.Version), "default image of LAS")
	fs.StringVar(&opts.Images.CAS, "cas-image", cmp.Or(casImage, "ghcr.io/cloister-cc/cloister-cas:"+v.Version), "default image of CAS")
	fs.StringVar(&opts.Images.NodeInstaller, "node-installer-image", cmp.Or(nodeInstallerImage, "ghcr.io/cloister-cc/cloister-node-installer:"+v.Version),
		"default image of the confidential runtime's node installer")
	fs.StringVar(&opts.Images.Enclave, "enclave-image", cmp.Or(enclaveImage, "ghcr.io/cloister-cc/cloister-enclave:"+v.Version),
		"default image of a NitroEnclaveDeployment's enclave pods")
	fs.StringVar(&opts.Images.Initializer, "initializer-image", cmp.Or(initializerImage, "ghcr.io/cloister-cc/cloister-initializer:"+v.Version),
		"the initializer of the confidential pods the operator makes (a Vault's), pinned by digest: it is part of their pod policy")
	fs.StringVar(&opts.Host.DevDir, "host-dev-dir", service.DefaultHostPaths.DevDir,
		"host folder of the TEE device nodes, mounted into the device plugins and LAS (the dev cluster's real node has fake ones elsewhere)")
	fs.StringVar(&opts.Host.KubeletDir, "host-kubelet-dir", service.DefaultHostPaths.KubeletDir,
		"the kubelet's root directory on the nodes (its pod-resources socket is in it)")
	fs.StringVar(&opts.Host.AESMDir, "host-aesm-dir", service.DefaultHostPaths.AESMDir,
		"host folder of Intel's AESM socket (aesm.socket), mounted into LAS without simulation")
	fs.StringVar(&opts.Host.SysDir, "host-sys-dir", service.DefaultHostPaths.SysDir,
		"the nodes' sysfs, where the SGX plugin reads the EPC and the Nitro plugin the CPUs (the dev cluster's real node has a fake one)")
	fs.StringVar(&opts.Host.CDIDir, "host-cdi-dir", service.DefaultHostPaths.CDIDir,
		"the container runtime's CDI spec folder on the nodes, where the DRA drivers write what a claim's containers get")
	fs.DurationVar(&opts.InterruptedReleaseAfter, "interrupted-release-after", release.DefaultStaleAfter,
		"how long a Helm release may stay pending-install/upgrade before it is taken as left by a killed operator and recovered")
	fs.IntVar(&opts.Webhook.Port, "webhook-port", 0, "port of the admission webhooks (HTTPS); 0 serves none")
	fs.StringVar(&opts.Webhook.Host, "webhook-host", "", "address the webhooks listen on; empty: every address")
	fs.StringVar(&opts.Webhook.CertSecret, "webhook-cert-secret", "cloister-operator-webhook-cert",
		"Secret in $OPERATOR_NAMESPACE holding the webhooks' CA and serving certificate")
	fs.StringVar(&opts.Webhook.DNSName, "webhook-dns-name", "",
		"the name the API server calls the webhooks by (default: cloister-operator-webhook.$OPERATOR_NAMESPACE.svc)")
	fs.DurationVar(&opts.Webhook.CertValidity, "webhook-cert-validity", webhookcert.DefaultValidity,
		"lifetime of the webhooks' serving certificate; it is renewed with a third left")
	fs.BoolVar(&opts.Webhook.CertManager, "webhook-cert-manager", false,
		"cert-manager issues the serving certificate into the Secret and injects the CA; the operator only serves it")
	fs.StringVar(&opts.Webhook.CertDir, "webhook-cert-dir", filepath.Join(os.TempDir(), "cloister-webhook-certs"),
		"folder the serving certificate is written to as it changes")
	var imageKey string
	fs.StringVar(&imageKey, "image-signature-key", "",
		"public key (PEM, ECDSA P-256, as cosign.pub) whose signature an image autoUpdate chooses must carry in its registry; without it autoUpdate takes no image")
	log, err := startup.ParseFlags(fs, os.Args[1:], os.Stderr)
	if err != nil {
		return err
	}
	if imageKey != "" {
		data, err := os.ReadFile(imageKey)
		if err != nil {
			return err
		}
		if opts.ImageSignatureKey, err = imagesig.ParsePublicKey(data); err != nil {
			return fmt.Errorf("--image-signature-key %s: %w", imageKey, err)
		}
	}
	opts.Webhook.DNSName = cmp.Or(opts.Webhook.DNSName, "cloister-operator-webhook."+opts.Namespace+".svc")
	if err := opts.Host.Validate(); err != nil {
		return err
	}
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))

	cfg, err := ctrl.GetConfig() // in the cluster, or $KUBECONFIG outside it
	if err != nil {
		return fmt.Errorf("finding the cluster: %w", err)
	}
	mgr, err := operator.New(ctx, cfg, opts, log)
	if err != nil {
		return err
	}
	log.Info("starting cloister-operator", "version", v.Version, "commit", v.Commit, "namespace", opts.Namespace)
	return mgr.Start(ctx)
}
