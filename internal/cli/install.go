package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"helm.sh/helm/v4/pkg/strvals"

	"github.com/cloister-cc/cloister/internal/base/kubeconfig"
	"github.com/cloister-cc/cloister/internal/dev/cluster/devinfo"
	"github.com/cloister-cc/cloister/internal/dev/image"
	"github.com/cloister-cc/cloister/internal/operator/install"
)

func newInstall(s Streams) *cobra.Command {
	var (
		kubeconfig, kubeContext, create, pluginPath, verifyKey string
		dcapKey, dcapFile                                      string
		setVersion, imageRegistry                              string
		reconcile, update, verbose, plugin                     bool
		sets                                                   []string
		creds                                                  install.Credentials
		timeout                                                time.Duration
	)
	in := &install.Installer{Poll: 250 * time.Millisecond}
	cmd := &cobra.Command{
		Use:   "install [--reconcile] [--update] [-n NAMESPACE] [flags]",
		Short: "Check the operator in a cluster; with --reconcile, install or repair it",
		Long: "install checks that Cloister's operator and what it needs are in place: the namespace,\n" +
			"the CRDs at this version, the operator's Helm release and Deployment with the expected\n" +
			"image, the webhooks serving with a valid caBundle, pull secrets, and the default\n" +
			"SGXPlugin and LAS HEALTHY. It prints one line per problem and exits 1 if there is any.\n" +
			"--reconcile repairs what it found (installing or upgrading the embedded chart with the\n" +
			"Helm SDK); --update redeploys even when all is well, rolling a new operator image.",
		Example: "  cloister install\n  cloister install --reconcile --verbose\n" +
			"  cloister install --reconcile --username U --access-token T --email E\n  cloister install --plugin",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if dcapKey != "" {
				_, _ = fmt.Fprintln(s.Err, "warning: --dcap-api puts the key in the process list and your shell's history; --dcap-api-file FILE keeps it out")
			}
			key, err := readDCAPKey(dcapKey, dcapFile)
			if err != nil {
				return err
			}
			if (dcapKey != "" || dcapFile != "") && !reconcile {
				return errors.New("--dcap-api and --dcap-api-file store the key at a reconcile: add --reconcile")
			}
			in.DCAPKey = key
			if plugin {
				if err := installPlugin(s, pluginPath); err != nil {
					return err
				}
			}
			if setVersion != "" {
				if cmd.Flags().Changed("image") {
					return errors.New("--image and --set-version: choose one")
				}
				img, err := install.ReleaseImage(ctx, imageRegistry, setVersion)
				if err != nil {
					return fmt.Errorf("--set-version: %w", err)
				}
				_, _ = fmt.Fprintf(s.Err, "operator %s: %s\n", setVersion, img)
				in.Want.Image = img
			}
			if in.Want.Image == "" {
				return errors.New("this cloister names no operator image (it was not built by make build): give --image REPOSITORY@sha256:DIGEST")
			}
			if (creds.Username == "") != (creds.Token == "") {
				return errors.New("--username and --access-token go together")
			}
			if creds.Username != "" {
				in.Credentials = &creds
			}
			values := map[string]any{}
			for _, set := range sets {
				if err := strvals.ParseInto(set, values); err != nil {
					return fmt.Errorf("--set %q: %w", set, err)
				}
			}
			in.Values, in.Timeout = values, timeout
			if verifyKey != "" {
				pem, err := install.VerifyImages(ctx, verifyKey, in.Want.Image, values)
				if err != nil {
					return err
				}
				// The operator holds autoUpdate's images to the same key.
				values["imageSignatureKey"] = pem
			}
			if verbose {
				start := time.Now()
				in.Progress = func(format string, args ...any) {
					_, _ = fmt.Fprintf(s.Err, "[%5.1fs] "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
				}
			}
			if err := connectInstaller(in, kubeconfig, kubeContext); err != nil {
				return err
			}
			if create != "" {
				if err := install.ManageNamespace(ctx, in.Client, create); err != nil {
					return err
				}
				_, _ = fmt.Fprintf(s.Out, "namespace %s exists, and the operator may deploy there\n", create)
				if in.DCAPKey != "" {
					if err := install.WriteDCAPKey(ctx, in.Client, create, in.DCAPKey); err != nil {
						return err
					}
				}
			}
			return runInstall(ctx, s, in, reconcile, update)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
	fl.StringVar(&kubeContext, "context", "", "kubeconfig context")
	fl.BoolVarP(&reconcile, "reconcile", "r", false, "repair every problem found")
	fl.BoolVarP(&update, "update", "u", false, "redeploy the operator and update its image even when all is well")
	fl.StringVarP(&in.Want.Namespace, "namespace", "n", "cloister-system", "the operator's namespace")
	fl.StringVarP(&create, "create", "c", "", "also create this namespace, or mark it if it exists, for the operator to deploy a CAS or another service in")
	fl.StringVarP(&dcapKey, "dcap-api", "d", "", "the Intel DCAP API key (32 hex digits; zeros: none, as on Azure), kept in the Secret "+install.DCAPSecretName+" for a CAS that fetches Intel collateral; prefer --dcap-api-file")
	fl.StringVar(&dcapFile, "dcap-api-file", "", "a file holding the Intel DCAP API key (see --dcap-api)")
	fl.StringVar(&creds.Server, "registry", "ghcr.io", "registry the pull secret is for")
	fl.StringVar(&creds.Username, "username", "", "registry user: create or refresh the pull secret "+install.PullSecretName)
	fl.StringVar(&creds.Token, "access-token", "", "registry access token (read) of --username")
	fl.StringVar(&creds.Email, "email", "", "email of --username")
	fl.BoolVar(&in.Want.OnlyOperator, "only-operator", false, "only the operator: no default SGXPlugin and LAS")
	fl.BoolVar(&in.Want.NoSGXPlugin, "no-sgxplugin", false, "no default SGXPlugin (another SGX device plugin runs)")
	fl.BoolVar(&plugin, "plugin", false, "install this binary as the kubectl plugin "+install.PluginName)
	fl.StringVar(&pluginPath, "plugin-path", "", "where to write the kubectl plugin (default: the last writable folder on PATH)")
	fl.BoolVarP(&verbose, "verbose", "v", false, "print what is being done")
	fl.StringVar(&in.Want.Image, "image", install.OperatorImage, "the operator image, by digest")
	fl.StringArrayVar(&sets, "set", nil, "a value of the operator chart, KEY=VALUE (as helm --set)")
	fl.StringVar(&setVersion, "set-version", "", "install the operator of this release (its image tag), pinned to the digest the registry gives now")
	fl.StringVar(&imageRegistry, "image-registry", image.DefaultRegistry, "where --set-version looks up the operator image")
	fl.StringVar(&verifyKey, "verify-image-signatures", "", "public key (PEM, ECDSA P-256, as cosign.pub): refuse to deploy an operator image (or --set images.*) without a valid signature by it in its registry")
	fl.DurationVar(&timeout, "timeout", 3*time.Minute, "how long to wait for the operator, and then for the default CRs to be HEALTHY")
	return cmd
}

// noRealNodeFix says how to get a dev cluster a node that runs pods.
const noRealNodeFix = "as root, run `make images` and `cloister dev up --real-node`, or run cloister-operator beside the cluster (docs/install.md, \"Reference: the operator in depth\")"

func runInstall(ctx context.Context, s Streams, in *install.Installer, reconcile, update bool) error {
	var problems []install.Problem
	var err error
	if reconcile || update {
		problems, err = in.Reconcile(ctx, update)
	} else {
		problems, err = in.Check(ctx)
	}
	if errors.Is(err, devinfo.ErrNoRealNode) {
		return fmt.Errorf("%w; %s", err, noRealNodeFix)
	}
	noNode := false
	for _, p := range problems {
		_, _ = fmt.Fprintln(s.Out, p)
		noNode = noNode || p.Message == devinfo.ErrNoRealNode.Error()
	}
	if noNode {
		_, _ = fmt.Fprintln(s.Out, noRealNodeFix)
		return &ExitError{Code: 1}
	}
	if in.GaveUp != nil {
		_, _ = fmt.Fprintf(s.Out, "gave up: %v\n", in.GaveUp)
	}
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		switch {
		case !reconcile && !update:
			_, _ = fmt.Fprintln(s.Out, "cloister install --reconcile repairs these")
		case slices.ContainsFunc(problems, func(p install.Problem) bool { return p.Part == install.PartPullSecret }):
			_, _ = fmt.Fprintln(s.Out, "a pull secret is written from --username, --access-token and --email")
		}
		return &ExitError{Code: 1}
	}
	_, _ = fmt.Fprintf(s.Out, "all is well: the operator (%s) runs in %s with its CRDs and webhooks\n", in.Want.Image, in.Want.Namespace)
	return nil
}

func installPlugin(s Streams, path string) error {
	if path == "" {
		dir, err := install.PluginDir(os.Getenv("PATH"))
		if err != nil {
			return fmt.Errorf("%w (--plugin-path)", err)
		}
		path = filepath.Join(dir, install.PluginName)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if err := install.InstallPlugin(self, path); err != nil {
		return err
	}
	_, _ = fmt.Fprintf(s.Out, "kubectl plugin installed: %s (kubectl cloister ...)\n", path)
	return nil
}

// connectInstaller fills in's cluster clients and the embedded chart from
// the cluster of the kubeconfig file path.
func connectInstaller(in *install.Installer, path, kubeContext string) error {
	cfg, err := kubeconfig.RESTConfig(path, kubeContext)
	if err != nil {
		return err
	}
	return in.Connect(cfg)
}
