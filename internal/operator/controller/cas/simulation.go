package cas

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	basev1beta1 "github.com/cloister-cc/cloister/api/base/v1beta1"
	"github.com/cloister-cc/cloister/api/common"
	servicesv1beta1 "github.com/cloister-cc/cloister/api/services/v1beta1"
	"github.com/cloister-cc/cloister/internal/base/keyfile"
	"github.com/cloister-cc/cloister/internal/cas/conn"
	"github.com/cloister-cc/cloister/internal/operator/controller/service"
)

// pendingKeys are simulation keys made for CASes whose status does not
// hold them yet. A key goes into the CAS pod's Secret only once the
// status write that publishes it succeeded: a pass on a stale copy of
// the CAS, whose write conflicts, then changes no Secret, and the Secret
// and status.simulationKey never disagree.
type pendingKeys struct {
	mu   sync.Mutex
	byID map[types.UID]*pendingKey
}

type pendingKey struct {
	private []byte // PEM
	public  string // PEM
}

func (p *pendingKeys) get(uid types.UID) *pendingKey {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byID[uid]
}

func (p *pendingKeys) set(uid types.UID, k *pendingKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byID == nil {
		p.byID = map[types.UID]*pendingKey{}
	}
	if k == nil {
		delete(p.byID, uid)
	} else {
		p.byID[uid] = k
	}
}

func newPendingKey() (*pendingKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return nil, err
	}
	return &pendingKey{
		private: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}),
		public:  string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})),
	}, nil
}

// simulation publishes a simulated CAS's keys. Its own simulation key is
// made here: the private half only in a Secret the CAS pod mounts, the
// public half in status.simulationKey (which the operator and the CLI
// pin) and in the ConfigMap (which pods mount to pin it). The ConfigMap
// also names the keys whose workload evidence CAS takes: its LAS nodes'
// and spec.simulationKeys.
func (k *Kind) simulation(ctx context.Context, c *servicesv1beta1.CAS) error {
	if !c.Spec.Simulation {
		c.Status.SimulationKey, c.Status.SimulationKeys = "", nil
		k.keys.set(c.UID, nil)
		return nil
	}
	pend := k.keys.get(c.UID)
	switch {
	case pend != nil && c.Status.SimulationKey == pend.public:
		// The status holds the key: now the pod may get it, after the
		// ConfigMap, so that a pod the Secret lets start finds the keys.
		if err := k.publish(ctx, c); err != nil {
			return err
		}
		if err := k.upsertSecret(ctx, c, pend.private); err != nil {
			return err
		}
		k.keys.set(c.UID, nil)
		return nil
	case c.Status.SimulationKey == "":
		if pend == nil {
			var err error
			if pend, err = newPendingKey(); err != nil {
				return err
			}
			k.keys.set(c.UID, pend)
		}
		c.Status.SimulationKey = pend.public
		return nil // the Secret and ConfigMap follow once the status is written
	default:
		k.keys.set(c.UID, nil)
		// The key's Secret is there, unless someone deleted it: then a
		// new key, published in the same pass (the old one is gone).
		fresh, err := newPendingKey()
		if err != nil {
			return err
		}
		created, err := k.createSecret(ctx, c, fresh.private)
		if err != nil {
			return err
		}
		if created {
			c.Status.SimulationKey = fresh.public
		}
	}
	return k.publish(ctx, c)
}

func (k *Kind) secret(c *servicesv1beta1.CAS, private []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: k.owned(c, conn.SimulationKeySecret(c.Name)),
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{conn.SimulationKeyKey: private},
	}
}

func (k *Kind) createSecret(ctx context.Context, c *servicesv1beta1.CAS, private []byte) (bool, error) {
	sec := k.secret(c, private)
	err := k.Writer.Create(ctx, sec)
	if apierrors.IsAlreadyExists(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("making CAS's simulation key (Secret %s/%s): %w", sec.Namespace, sec.Name, err)
	}
	return true, nil
}

func (k *Kind) upsertSecret(ctx context.Context, c *servicesv1beta1.CAS, private []byte) error {
	created, err := k.createSecret(ctx, c, private)
	if err != nil || created {
		return err
	}
	sec := k.secret(c, private)
	patch, err := service.OwnedPatch(sec.ObjectMeta, sec.Data)
	if err != nil {
		return err
	}
	if err := k.Writer.Patch(ctx, sec, client.RawPatch(types.MergePatchType, patch)); err != nil {
		return fmt.Errorf("replacing CAS's simulation key (Secret %s/%s): %w", sec.Namespace, sec.Name, err)
	}
	return nil
}

// publish writes the ConfigMap: CAS's own key, and the keys CAS takes
// workload evidence from.
func (k *Kind) publish(ctx context.Context, c *servicesv1beta1.CAS) error {
	workloads, err := k.workloadKeys(ctx, c)
	if err != nil {
		return err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: k.owned(c, conn.SimulationConfigMap(c.Name)),
		Data:       map[string]string{conn.CASKeyItem: c.Status.SimulationKey, conn.WorkloadKeysItem: workloads},
	}
	if err := service.PatchOrCreate(ctx, k.Writer, cm, cm.Data); err != nil {
		return fmt.Errorf("publishing CAS's simulation keys (ConfigMap %s/%s): %w", cm.Namespace, cm.Name, err)
	}
	return nil
}

// workloadKeys is the PEM text of the keys whose simulated workload
// evidence CAS takes, each after a line naming it: the simulation keys of
// every LAS node the operator read, then spec.simulationKeys. A named key
// that is not a P-256 public key is an error naming it.
func (k *Kind) workloadKeys(ctx context.Context, c *servicesv1beta1.CAS) (string, error) {
	var lases basev1beta1.LASList
	if err := k.Reader.List(ctx, &lases); err != nil {
		return "", fmt.Errorf("listing LAS: %w", err)
	}
	var b strings.Builder
	for _, l := range lases.Items {
		nodes := make([]string, 0, len(l.Status.Nodes))
		for node := range l.Status.Nodes {
			nodes = append(nodes, node)
		}
		slices.Sort(nodes)
		for _, node := range nodes {
			if key := l.Status.Nodes[node].SimulationKey; key != "" {
				if _, err := keyfile.ParsePublic([]byte(key)); err == nil {
					fmt.Fprintf(&b, "# LAS %s, node %s\n%s", l.Name, node, key)
				}
			}
		}
	}
	for i, key := range c.Spec.SimulationKeys {
		pub, err := keyfile.ParsePublic([]byte(key))
		if err != nil {
			return "", fmt.Errorf("spec.simulationKeys[%d]: %w: give a PEM P-256 public key (cloister policy keygen prints one)", i, err)
		}
		der, err := x509.MarshalPKIXPublicKey(pub)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&b, "# spec.simulationKeys[%d]\n%s", i, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
	}
	return b.String(), nil
}

// owned is the metadata of an object CAS c owns.
func (k *Kind) owned(c *servicesv1beta1.CAS, name string) metav1.ObjectMeta {
	yes := true
	return metav1.ObjectMeta{Name: name, Namespace: c.Namespace,
		Labels: map[string]string{"app.kubernetes.io/name": "cloister-cas", "app.kubernetes.io/instance": c.Name,
			common.LabelManagedBy: common.ManagedByOperator},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: servicesv1beta1.GroupVersion.String(), Kind: "CAS",
			Name: c.Name, UID: c.UID, Controller: &yes, BlockOwnerDeletion: &yes}}}
}
