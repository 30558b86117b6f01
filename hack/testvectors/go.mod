// Module testvectors pins the Go modules whose published test data is the
// real attestation evidence Cloister's verifier tests check: go.sum holds
// their hashes, so the go command verifies what it downloads into the
// module cache. Nothing here is built, and the files are never copied into
// the repository: internal/attest/attesttest reads them from the module
// cache at test time.
module github.com/cloister-cc/cloister/hack/testvectors

go 1.26.0

// SGX DCAP quote v3 and TDX quote v4 from real hardware, with their Intel
// PCS collateral (common/sgx/pcs/testdata, Apache-2.0).
require github.com/oasisprotocol/oasis-core/go v0.2505.0
