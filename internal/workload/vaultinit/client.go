package vaultinit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// What an attested workload of the Vault's namespace does with what the
// bootstrap configured: log in with its CAS certificate (the API's TLS
// client certificate) under ClientsRole, then read and write the KV
// engine at KVMount.

// Login logs in with the TLS client certificate under role; the API then
// calls Vault with the token it got.
func (v *API) Login(ctx context.Context, role string) error {
	var out struct {
		Auth struct {
			ClientToken string `json:"client_token"`
		} `json:"auth"`
	}
	if err := v.do(ctx, http.MethodPost, "/v1/auth/cert/login", map[string]string{"name": role}, &out); err != nil {
		return err
	}
	if out.Auth.ClientToken == "" {
		return errors.New("login: Vault answered no token")
	}
	v.token = out.Auth.ClientToken
	return nil
}

// PutSecret writes data as the newest version of the KV secret at path.
func (v *API) PutSecret(ctx context.Context, path string, data map[string]string) error {
	return v.do(ctx, http.MethodPut, "/v1/"+KVMount+"/data/"+path, map[string]any{"data": data}, nil)
}

// Secret reads the newest version of the KV secret at path.
func (v *API) Secret(ctx context.Context, path string) (map[string]string, error) {
	var out struct {
		Data struct {
			Data map[string]string `json:"data"`
		} `json:"data"`
	}
	if err := v.do(ctx, http.MethodGet, "/v1/"+KVMount+"/data/"+path, nil, &out); err != nil {
		return nil, err
	}
	if out.Data.Data == nil {
		return nil, fmt.Errorf("secret %s: no data", path)
	}
	return out.Data.Data, nil
}
