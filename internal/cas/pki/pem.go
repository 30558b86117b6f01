package pki

import "encoding/pem"

// CertPEM is a DER certificate in PEM.
func CertPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
