// Package devinfo owns what the dev cluster tells an installer about
// itself: a ConfigMap in kube-system (which only the cluster's admins
// write, unlike a node's own labels) naming its real node and the host
// folders the operator's charts must mount there. `cloister dev up` writes
// it; `cloister install` reads it, so that an install on the dev cluster
// needs no extra flags.
package devinfo

import (
	"errors"
	"fmt"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cloister-cc/cloister/internal/base/tee"
)

// Where the ConfigMap is.
const (
	Namespace = "kube-system"
	Name      = "cloister-dev-cluster"
)

// Keys of the ConfigMap.
const (
	keyRealNode   = "realNode"
	keyDevDir     = "hostDevDir"
	keyKubeletDir = "hostKubeletDir"
	keyAESMDir    = "hostAESMDir"
	keySysDir     = "hostSysDir"
	keyCDIDir     = "hostCDIDir"
)

// Info describes a dev cluster.
type Info struct {
	// RealNode is the real node's name; empty: the cluster has none, and
	// its simulated nodes run nothing.
	RealNode string
	// DevDir, KubeletDir, AESMDir, SysDir and CDIDir are the real node's
	// folders of fake TEE devices, of its kubelet, of an AESM socket (a
	// fake one, when a test serves it), its sysfs (a fake EPC) and its
	// container runtime's CDI specs.
	DevDir, KubeletDir, AESMDir, SysDir, CDIDir string
}

// ConfigMap is the ConfigMap `dev up` writes.
func (i Info) ConfigMap() *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: Name, Labels: map[string]string{"app.kubernetes.io/managed-by": "cloister-dev"}},
		Data:       map[string]string{keyRealNode: i.RealNode, keyDevDir: i.DevDir, keyKubeletDir: i.KubeletDir, keyAESMDir: i.AESMDir, keySysDir: i.SysDir, keyCDIDir: i.CDIDir},
	}
}

// FromConfigMap reads and checks the ConfigMap.
func FromConfigMap(cm *corev1.ConfigMap) (Info, error) {
	i := Info{RealNode: cm.Data[keyRealNode], DevDir: cm.Data[keyDevDir], KubeletDir: cm.Data[keyKubeletDir], AESMDir: cm.Data[keyAESMDir], SysDir: cm.Data[keySysDir], CDIDir: cm.Data[keyCDIDir]}
	if i.RealNode == "" {
		return i, nil
	}
	for key, dir := range map[string]string{keyDevDir: i.DevDir, keyKubeletDir: i.KubeletDir, keyAESMDir: i.AESMDir, keySysDir: i.SysDir, keyCDIDir: i.CDIDir} {
		if (key == keyAESMDir || key == keySysDir || key == keyCDIDir) && dir == "" {
			continue // written by an older `dev up`: the default applies
		}
		if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
			return Info{}, fmt.Errorf("ConfigMap %s/%s: %s %q is not a clean absolute path; run `cloister dev up` again to rewrite it", Namespace, Name, key, dir)
		}
	}
	return i, nil
}

// NodeSelector keeps the operator's pods on the real node.
func NodeSelector() map[string]string { return map[string]string{tee.LabelRealNode: "true"} }

// Values are the operator chart's values for the dev cluster: the real
// node's folders, and its pods on the real node.
func (i Info) Values() map[string]any {
	host := map[string]any{"devDir": i.DevDir, "kubeletDir": i.KubeletDir}
	if i.AESMDir != "" {
		host["aesmDir"] = i.AESMDir
	}
	if i.SysDir != "" {
		host["sysDir"] = i.SysDir
	}
	if i.CDIDir != "" {
		host["cdiDir"] = i.CDIDir
	}
	selector := map[string]any{}
	for k, v := range NodeSelector() {
		selector[k] = v
	}
	return map[string]any{
		"host":         host,
		"nodeSelector": selector,
	}
}

// ErrNoRealNode: a dev cluster whose nodes are all simulated runs no pod,
// the operator's included.
var ErrNoRealNode = errors.New("this dev cluster has no real node, and its simulated nodes run nothing: no node can run the operator")
