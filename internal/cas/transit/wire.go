package transit

import (
	"encoding/base64"
	"fmt"

	"github.com/cloister-cc/cloister/internal/base/strictjson"
)

// EncryptRequest is what Vault's transit seal writes to encrypt (PUT
// /v1/MOUNT/encrypt/KEY): nothing else is taken.
type EncryptRequest struct {
	// Plaintext is base64 (standard, padded).
	Plaintext string `json:"plaintext"`
}

// DecryptRequest is what it writes to decrypt (PUT /v1/MOUNT/decrypt/KEY).
type DecryptRequest struct {
	Ciphertext string `json:"ciphertext"`
}

// Response is Vault's answer shape (a secret's data): "ciphertext" for an
// encryption, "plaintext" (base64) for a decryption.
type Response struct {
	Data map[string]string `json:"data"`
}

// ErrorResponse is Vault's error shape, which its client shows.
type ErrorResponse struct {
	Errors []string `json:"errors"`
}

// MaxRequest bounds a request's body: a ciphertext of MaxPlaintext bytes
// and its JSON.
var MaxRequest = int64(maxCiphertext + 64)

// DecodeEncrypt reads an encryption request: its plaintext, decoded.
func DecodeEncrypt(body []byte) ([]byte, error) {
	if int64(len(body)) > MaxRequest {
		return nil, fmt.Errorf("request: %d bytes, more than %d", len(body), MaxRequest)
	}
	var req EncryptRequest
	if err := strictjson.Unmarshal(body, &req); err != nil {
		return nil, fmt.Errorf("request: %w", err)
	}
	plaintext, err := base64.StdEncoding.Strict().DecodeString(req.Plaintext)
	if err != nil {
		return nil, fmt.Errorf("plaintext: not standard base64: %w", err)
	}
	if len(plaintext) > MaxPlaintext {
		return nil, fmt.Errorf("plaintext: %d bytes, more than %d", len(plaintext), MaxPlaintext)
	}
	return plaintext, nil
}

// DecodeDecrypt reads a decryption request: its ciphertext's key version
// and sealed bytes (ParseCiphertext).
func DecodeDecrypt(body []byte) (version int, blob []byte, err error) {
	if int64(len(body)) > MaxRequest {
		return 0, nil, fmt.Errorf("request: %d bytes, more than %d", len(body), MaxRequest)
	}
	var req DecryptRequest
	if err := strictjson.Unmarshal(body, &req); err != nil {
		return 0, nil, fmt.Errorf("request: %w", err)
	}
	return ParseCiphertext(req.Ciphertext)
}
