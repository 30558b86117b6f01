package policy

import (
	"bytes"
	"fmt"
	"text/template"
)

// SecretFields are what a template may read of a secret, by kind:
// keys as raw bytes, hex or base64; certificates as PEM.
var SecretFields = map[string][]string{
	SymmetricKey: {"Raw", "Hex", "Base64"},
	Plain:        {"Raw", "Hex", "Base64"},
	ECDSACert:    {"Cert", "Key", "Chain"},
	RSACert:      {"Cert", "Key", "Chain"},
}

// TemplateData is what env and file templates are executed with:
// .Secrets.NAME.FIELD, .WorkloadSecret.FIELD (a symmetric key's fields)
// and .CAS.
type TemplateData struct {
	Secrets map[string]map[string]string
	// WorkloadSecret is nil for a service without a workloadSecretID, so
	// a template that reads it fails.
	WorkloadSecret map[string]string
	CAS            CASData
}

// CASData is what a template may read of the CAS that renders it.
type CASData struct {
	// ServerName is the name CAS serves its workloads' TLS under (its
	// trust domain, cas-HEX.cloister), with a certificate from its root
	// CA: what a workload that calls CAS (a Vault's transit seal,
	// tls_server_name) checks, in a file CAS delivers, so no host can
	// change it.
	ServerName string
}

// Render executes one env or file template; a reference to a secret the
// service may not read, or a field its kind lacks, is an error.
func Render(name, text string, data TemplateData) (string, error) {
	t, err := template.New(name).Option("missingkey=error").Parse(text)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", err
	}
	return b.String(), nil
}

// checkTemplates renders every template with placeholders for the
// secrets the service lists, so a typo or a secret it may not read fails
// when the policy is registered, not when a workload starts.
func (s *Service) checkTemplates(secrets map[string]*Secret) []error {
	placeholders := func(kind string) map[string]string {
		fields := map[string]string{}
		for _, f := range SecretFields[kind] {
			fields[f] = "x"
		}
		return fields
	}
	data := TemplateData{Secrets: map[string]map[string]string{}, CAS: CASData{ServerName: "x"}}
	for _, name := range s.Secrets {
		if sec := secrets[name]; sec != nil {
			data.Secrets[name] = placeholders(sec.Kind)
		}
	}
	if s.WorkloadSecretID != "" {
		data.WorkloadSecret = placeholders(SymmetricKey)
	}
	const hint = "a service reads only the secrets it lists, and .WorkloadSecret only with a workloadSecretID"
	var errs []error
	for k, v := range s.Env {
		if _, err := Render("env "+k, v, data); err != nil {
			errs = append(errs, fmt.Errorf("env %s: %w (%s)", k, err, hint))
		}
	}
	for p, v := range s.Files {
		if _, err := Render("file "+p, v, data); err != nil {
			errs = append(errs, fmt.Errorf("files %s: %w (%s)", p, err, hint))
		}
	}
	return errs
}
