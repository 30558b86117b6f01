package aesm

import "fmt"

// Code is AESM's error code (aesm_error_t in Intel's PSW,
// psw/ae/inc/internal/aesm_error.h).
type Code uint32

// The codes LAS tells apart; every other is reported by number and name.
const (
	Success              Code = 0
	UnexpectedError      Code = 1
	NoDeviceError        Code = 2
	ParameterError       Code = 3
	ServiceStopped       Code = 17
	Busy                 Code = 18
	OutOfMemory          Code = 21
	MsgError             Code = 22
	SGXDeviceUnavailable Code = 24
	OutOfEPC             Code = 29
	ServiceUnavailable   Code = 30
	UnrecognizedPlatform Code = 31
	ECDSAIDMismatch      Code = 32
	UnsupportedAttKeyID  Code = 38
	AttKeyNotInitialized Code = 42
	AttKeyCertDataBad    Code = 43
	NoPlatformCertData   Code = 44
	InvalidReport        Code = 47
)

var codeNames = [...]string{
	"SUCCESS", "UNEXPECTED_ERROR", "NO_DEVICE_ERROR", "PARAMETER_ERROR", "EPIDBLOB_ERROR",
	"EPID_REVOKED_ERROR", "GET_LICENSETOKEN_ERROR", "SESSION_INVALID", "MAX_NUM_SESSION_REACHED",
	"PSDA_UNAVAILABLE", "EPH_SESSION_FAILED", "LONG_TERM_PAIRING_FAILED", "NETWORK_ERROR",
	"NETWORK_BUSY_ERROR", "PROXY_SETTING_ASSIST", "FILE_ACCESS_ERROR", "SGX_PROVISION_FAILED",
	"SERVICE_STOPPED", "BUSY", "BACKEND_SERVER_BUSY", "UPDATE_AVAILABLE", "OUT_OF_MEMORY_ERROR",
	"MSG_ERROR", "THREAD_ERROR", "SGX_DEVICE_NOT_AVAILABLE", "ENABLE_SGX_DEVICE_FAILED",
	"PLATFORM_INFO_BLOB_INVALID_SIG", "SERVICE_NOT_AVAILABLE", "KDF_MISMATCH", "OUT_OF_EPC",
	"SERVICE_UNAVAILABLE", "UNRECOGNIZED_PLATFORM", "ECDSA_ID_MISMATCH",
	"PATHNAME_BUFFER_OVERFLOW_ERROR", "ERROR_STORED_KEY", "PUB_KEY_ID_MISMATCH",
	"INVALID_PCE_SIG_SCHEME", "ATT_KEY_BLOB_ERROR", "UNSUPPORTED_ATT_KEY_ID",
	"UNSUPPORTED_LOADING_POLICY", "INTERFACE_UNAVAILABLE", "PLATFORM_LIB_UNAVAILABLE",
	"ATT_KEY_NOT_INITIALIZED", "ATT_KEY_CERT_DATA_INVALID", "NO_PLATFORM_CERT_DATA",
	"ERROR_REPORT", "ENCLAVE_LOST", "INVALID_REPORT", "ENCLAVE_LOAD_ERROR",
	"UNABLE_TO_GENERATE_QE_REPORT", "KEY_CERTIFICATION_ERROR", "CONFIG_UNSUPPORTED",
}

func (c Code) String() string {
	if int(c) < len(codeNames) {
		return "AESM_" + codeNames[c]
	}
	return fmt.Sprintf("AESM error %d", uint32(c))
}

// Problem is what a code means for LAS: which of its conditions fails.
type Problem int

const (
	// ProblemNone: no error.
	ProblemNone Problem = iota
	// ProblemOther: AESM failed in a way LAS cannot name better.
	ProblemOther
	// ProblemNoSocket: AESM's socket cannot be reached.
	ProblemNoSocket
	// ProblemNoECDSAKey: AESM has no ECDSA (DCAP) attestation key: the
	// DCAP quoting enclave or its library is not installed, or AESM
	// serves EPID only.
	ProblemNoECDSAKey
	// ProblemNotRegistered: the quoting enclave has no PCK certificate
	// for this platform: it is not registered with Intel's PCS, or the
	// node's PCCS does not serve its certificate.
	ProblemNotRegistered
	// ProblemNoDevice: AESM cannot reach the SGX device.
	ProblemNoDevice
)

// Problem classifies the code.
func (c Code) Problem() Problem {
	switch c {
	case UnsupportedAttKeyID, AttKeyNotInitialized, ECDSAIDMismatch:
		return ProblemNoECDSAKey
	case NoPlatformCertData, AttKeyCertDataBad, UnrecognizedPlatform:
		return ProblemNotRegistered
	case NoDeviceError, SGXDeviceUnavailable:
		return ProblemNoDevice
	}
	return ProblemOther
}

// Error is a request AESM answered with an error code.
type Error struct {
	Op   string // the request: InitQuoteEx, GetQuoteEx, ...
	Code Code
}

func (e *Error) Error() string { return fmt.Sprintf("aesm %s: %s (%d)", e.Op, e.Code, uint32(e.Code)) }
