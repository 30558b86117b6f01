package install

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"helm.sh/helm/v4/pkg/kube"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/cloister-cc/cloister/charts"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/dev/image"
	"github.com/cloister-cc/cloister/internal/operator/release"
	"github.com/cloister-cc/cloister/internal/workload/imagesig"
)

// releases adapts release.Manager to what install needs.
type releases struct{ *release.Manager }

func (r releases) Latest(ns, name string) (string, error) {
	rel, err := r.Manager.Latest(ns, name)
	if err != nil || rel == nil || rel.Info == nil {
		return "", err
	}
	return string(rel.Info.Status), nil
}

// Connect fills in the installer's cluster clients for cfg and the
// embedded operator chart.
func (in *Installer) Connect(cfg *rest.Config) error {
	scheme, err := Scheme()
	if err != nil {
		return err
	}
	if in.Client, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		return err
	}
	m, err := release.NewManager(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	// As the Helm CLI: `helm list` shows the release, and `helm upgrade`
	// after cloister install (or the reverse) owns the same fields, so
	// server-side apply sees no conflict between the two.
	m.SetDriver("secret")
	kube.ManagedFieldsManager = "helm"
	in.Releases = releases{m}
	if in.Chart, err = charts.Load("cloister-operator"); err != nil {
		return err
	}
	in.Want.CRDs, err = CRDFiles(in.Chart)
	return err
}

// VerifyImages checks the signatures of the operator image and of the
// service images set in values, before anything is deployed.
func VerifyImages(ctx context.Context, keyFile, operatorImage string, values map[string]any) (string, error) {
	data, err := os.ReadFile(keyFile)
	if err != nil {
		return "", err
	}
	pub, err := imagesig.ParsePublicKey(data)
	if err != nil {
		return "", err
	}
	images := []string{operatorImage}
	if set, ok := values["images"].(map[string]any); ok {
		for _, k := range []string{"devicePlugin", "las", "cas"} {
			if v, ok := set[k].(string); ok && v != "" {
				images = append(images, v)
			}
		}
	}
	for _, img := range images {
		ref, err := name.NewDigest(img)
		if err != nil {
			return "", fmt.Errorf("refusing to deploy %s: only an image named by digest can be verified: %w", img, err)
		}
		if err := imagesig.Verify(ctx, ref, pub, remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return "", fmt.Errorf("refusing to deploy: %w", err)
		}
	}
	// Only the key goes into the chart, whatever else the file holds.
	return keyfile.PublicPEM(pub)
}

// ReleaseImage pins the operator image of a release to its digest,
// reading only the manifest's digest from the registry.
func ReleaseImage(ctx context.Context, registry, version string) (string, error) {
	tag, err := name.NewTag(image.Ref(registry, "cloister-operator", version))
	if err != nil {
		return "", fmt.Errorf("release %q: %w", version, err)
	}
	desc, err := remote.Head(tag, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain))
	if err != nil {
		return "", fmt.Errorf("looking up the operator image %s: %w", tag, err)
	}
	return tag.Context().Digest(desc.Digest.String()).String(), nil
}
