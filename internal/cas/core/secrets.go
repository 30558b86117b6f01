package core

import (
	"encoding/json"
	"fmt"

	"github.com/cloister-cc/cloister/internal/cas/policy"
	"github.com/cloister-cc/cloister/internal/cas/secret"
	"github.com/cloister-cc/cloister/internal/cas/store"
)

func secretKey(policyName, secret string) string { return policyName + "/" + secret }

// A new version keeps a secret's material while the secret stays as it
// was, and gets new material when the secret is new or its kind or size
// changed. Making material (a key pair) takes time, so it happens outside
// the registration lock and the store's transaction: secretsToMake says
// what a version needs, makeSecrets makes it, putSecrets stores it with
// the version.

// testHookMakeSecrets, set by tests only, runs as material is made.
var testHookMakeSecrets func(policy string)

// secretsToMake are the secrets of doc that need new material which made
// does not hold.
func (c *CAS) secretsToMake(k *keys, doc *policy.Document, made map[string]*secret.Material) ([]*policy.Secret, error) {
	var need []*policy.Secret
	err := k.enc.View(c.cfg.Store, func(etx store.Tx) error {
		for i := range doc.Secrets {
			sec := &doc.Secrets[i]
			raw, err := etx.Get(bucketSecrets, secretKey(doc.Name, sec.Name))
			if err != nil {
				return err
			}
			if m := made[sec.Name]; secret.Keeps(raw, sec) || (m != nil && m.Kind == sec.Kind && m.Size == sec.KeySize()) {
				continue
			}
			need = append(need, sec)
		}
		return nil
	})
	return need, err
}

// makeSecrets makes material for secrets; it holds no lock.
func (c *CAS) makeSecrets(doc *policy.Document, secrets []*policy.Secret) (map[string]*secret.Material, error) {
	if testHookMakeSecrets != nil {
		testHookMakeSecrets(doc.Name)
	}
	c.mu.RLock()
	k, err := c.ready()
	c.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	made := make(map[string]*secret.Material, len(secrets))
	for _, sec := range secrets {
		m, err := secret.Make(k.authority, doc.Name, sec, c.cfg.Clock.Now())
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", sec.Name, err)
		}
		made[sec.Name] = m
	}
	return made, nil
}

// putSecrets stores, in the version's transaction, the material of each
// secret of doc whose stored material no longer serves it.
func putSecrets(etx store.Tx, doc *policy.Document, made map[string]*secret.Material) error {
	for i := range doc.Secrets {
		sec := &doc.Secrets[i]
		raw, err := etx.Get(bucketSecrets, secretKey(doc.Name, sec.Name))
		if err != nil {
			return err
		}
		if secret.Keeps(raw, sec) {
			continue
		}
		m := made[sec.Name]
		if m == nil {
			return fmt.Errorf("secret %s: no material made for it", sec.Name) // secretsToMake said otherwise
		}
		b, err := json.Marshal(m)
		if err != nil {
			return err
		}
		if err := etx.Put(bucketSecrets, secretKey(doc.Name, sec.Name), b); err != nil {
			return err
		}
	}
	return nil
}
