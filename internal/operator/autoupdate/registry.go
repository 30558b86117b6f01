package autoupdate

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	corev1 "k8s.io/api/core/v1"

	"github.com/cloister-cc/cloister/internal/workload/imagesig"
)

// Limits on what a registry and a pull secret may hand the operator.
const (
	MaxTags         = 10000
	maxDockerConfig = 64 << 10
)

// Resolver reads the newest image of a line from its registry.
type Resolver struct {
	// Transport is the HTTP transport (nil: the default).
	Transport http.RoundTripper
}

// Result is the newest image of a line.
type Result struct {
	// Image is REPOSITORY:TAG@DIGEST.
	Image string
	// Newer says whether it is newer than the line's own tag.
	Newer bool
	// Source is the repository read.
	Source string
}

// Newest lists the line's repository's tags and resolves the newest of
// the line to its digest.
func (r *Resolver) Newest(ctx context.Context, l Line, keychain authn.Keychain) (Result, error) {
	repo, err := name.NewRepository(l.Repository)
	if err != nil {
		return Result{}, fmt.Errorf("repository %q: %w", l.Repository, err)
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(keychain), remote.WithPageSize(1000),
		remote.WithTransport(httpsOnly{r.transport()})}
	tags, err := remote.List(repo, opts...)
	if err != nil {
		return Result{}, fmt.Errorf("listing the tags of %s: %w", repo, err)
	}
	if len(tags) > MaxTags {
		return Result{}, fmt.Errorf("%s has %d tags, more than the %d autoUpdate reads", repo, len(tags), MaxTags)
	}
	tag, newer := l.Newest(tags)
	desc, err := remote.Head(repo.Tag(tag), opts...)
	if err != nil {
		return Result{}, fmt.Errorf("resolving %s:%s: %w", repo, tag, err)
	}
	return Result{Image: repo.String() + ":" + tag + "@" + desc.Digest.String(), Newer: newer, Source: repo.String()}, nil
}

// Verify checks that image (REPOSITORY:TAG@DIGEST) has a signature by pub
// in its registry (cosign's key-pair layout), read as Newest reads.
func (r *Resolver) Verify(ctx context.Context, image string, pub *ecdsa.PublicKey, keychain authn.Keychain) error {
	ref, err := name.NewDigest(image)
	if err != nil {
		return fmt.Errorf("image %q: %w", image, err)
	}
	return imagesig.Verify(ctx, ref, pub, remote.WithAuthFromKeychain(keychain), remote.WithTransport(httpsOnly{r.transport()}))
}

func (r *Resolver) transport() http.RoundTripper {
	if r.Transport == nil {
		return remote.DefaultTransport
	}
	return r.Transport
}

// httpsOnly refuses every request but HTTPS: go-containerregistry falls
// back to plain HTTP for registries on private addresses, loopback and
// .local names, where whoever sits on the path (the host, the network)
// would choose the image a service runs.
type httpsOnly struct{ next http.RoundTripper }

// ErrPlainHTTP: a registry that autoUpdate would have read in plain HTTP.
var ErrPlainHTTP = errors.New("autoUpdate reads registries over HTTPS only")

func (h httpsOnly) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme != "https" {
		return nil, fmt.Errorf("%w: %s would be read in plain %s", ErrPlainHTTP, req.URL.Host, strings.ToUpper(req.URL.Scheme))
	}
	return h.next.RoundTrip(req)
}

// Keychain is the credentials of kubernetes.io/dockerconfigjson pull
// secrets, in order: the first that names a registry is used for it.
// Secrets of another type, or that do not parse, are refused by name.
func Keychain(secrets []corev1.Secret) (authn.Keychain, error) {
	var chain configs
	for _, s := range secrets {
		if s.Type != corev1.SecretTypeDockerConfigJson {
			return nil, fmt.Errorf("pull secret %s is of type %s, not %s", s.Name, s.Type, corev1.SecretTypeDockerConfigJson)
		}
		data := s.Data[corev1.DockerConfigJsonKey]
		if len(data) > maxDockerConfig {
			return nil, fmt.Errorf("pull secret %s: more than %d bytes", s.Name, maxDockerConfig)
		}
		var cfg dockerConfig
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cfg); err != nil {
			// The decoder's error may quote the secret: say only where.
			return nil, fmt.Errorf("pull secret %s: %s is no docker configuration (auths by registry)", s.Name, corev1.DockerConfigJsonKey)
		}
		chain = append(chain, cfg)
	}
	return chain, nil
}

type dockerConfig struct {
	Auths map[string]dockerAuth `json:"auths"`
}

type dockerAuth struct {
	Auth          string `json:"auth,omitempty"`
	Username      string `json:"username,omitempty"`
	Password      string `json:"password,omitempty"`
	IdentityToken string `json:"identitytoken,omitempty"`
	RegistryToken string `json:"registrytoken,omitempty"`
	Email         string `json:"email,omitempty"`
}

type configs []dockerConfig

// Resolve finds the credentials of a registry: an entry keyed by its host,
// or by a URL of that host (as docker login writes them).
func (c configs) Resolve(target authn.Resource) (authn.Authenticator, error) {
	host := target.RegistryStr()
	for _, cfg := range c {
		for key, a := range cfg.Auths {
			k := strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
			if k, _, _ = strings.Cut(k, "/"); k != host {
				continue
			}
			ac := authn.AuthConfig{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}
			if a.Auth != "" {
				raw, err := base64.StdEncoding.DecodeString(a.Auth)
				user, pass, ok := strings.Cut(string(raw), ":")
				if err != nil || !ok {
					return nil, errors.New("a pull secret's auth is not base64 of user:password")
				}
				ac.Username, ac.Password = user, pass
			}
			return authn.FromConfig(ac), nil
		}
	}
	return authn.Anonymous, nil
}
