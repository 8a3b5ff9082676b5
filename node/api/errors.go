package api

import (
	"errors"
	"fmt"
	"net/http"
)

// Code names a kind of API failure. It travels with the error over HTTP,
// so a Client returns an error that matches the same sentinel (with
// errors.Is) as the in-process node does.
type Code string

// The codes, each with its HTTP status (see Status).
const (
	CodeBadRequest      Code = "bad_request"      // the caller's input is wrong; the message says which field
	CodeUnauthorized    Code = "unauthorized"     // no or wrong API token
	CodeForbidden       Code = "forbidden"        // a read-only token, or a request from a page of another origin
	CodeNoGPUs          Code = "no_gpus"          // the node is a buyer only
	CodeUnknownOrder    Code = "unknown_order"    // no such order of this node
	CodeUnknownLease    Code = "unknown_lease"    // no such lease of this node
	CodeUnknownEvidence Code = "unknown_evidence" // no such evidence
	CodeLeaseState      Code = "lease_state"      // the lease cannot do that now (e.g. close reserved time early)
	CodeCreditLimit     Code = "credit_limit"     // the buyer's credit limit is reached
	CodeExecutor        Code = "executor"         // the provider does not allow the executor asked for
	CodeAttestFailed    Code = "attest_failed"    // the provider's attestation did not verify
	CodeUnreachable     Code = "unreachable"      // a peer the request needs could not be reached
	CodeTimeout         Code = "timeout"          // the request's deadline passed, or it was cancelled
	CodeInternal        Code = "internal"         // anything else
)

// Status is the HTTP status a code is served with.
func (c Code) Status() int {
	switch c {
	case CodeBadRequest, CodeExecutor:
		return http.StatusBadRequest
	case CodeUnauthorized:
		return http.StatusUnauthorized
	case CodeForbidden:
		return http.StatusForbidden
	case CodeNoGPUs, CodeUnknownOrder, CodeUnknownLease, CodeUnknownEvidence:
		return http.StatusNotFound
	case CodeLeaseState:
		return http.StatusConflict
	case CodeCreditLimit:
		return http.StatusPaymentRequired
	case CodeAttestFailed, CodeUnreachable:
		return http.StatusBadGateway
	case CodeTimeout:
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// Error is an API failure: a code and a message safe to show. Any *Error
// matches (errors.Is) the sentinel of its code, so
//
//	errors.Is(err, api.ErrUnknownLease)
//
// holds both in-process and through a Client. In-process, Unwrap also
// reaches the cause (for example a market sentinel).
type Error struct {
	Code    Code
	Message string
	cause   error
}

func (e *Error) Error() string { return e.Message }

// Unwrap is the cause the node saw, in-process; nil through a Client.
func (e *Error) Unwrap() error { return e.cause }

// Is matches any *Error of the same code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code
}

// The sentinels, one per code callers act on.
var (
	ErrBadRequest      = &Error{Code: CodeBadRequest, Message: "bad request"}
	ErrUnauthorized    = &Error{Code: CodeUnauthorized, Message: "missing or wrong API token (see <repo>/api.token)"}
	ErrForbidden       = &Error{Code: CodeForbidden, Message: "forbidden"}
	ErrNoGPUs          = &Error{Code: CodeNoGPUs, Message: "node: this node has no GPUs"}
	ErrUnknownOrder    = &Error{Code: CodeUnknownOrder, Message: "node: no such order of this node"}
	ErrUnknownLease    = &Error{Code: CodeUnknownLease, Message: "node: no such lease of this node"}
	ErrUnknownEvidence = &Error{Code: CodeUnknownEvidence, Message: "node: no such evidence"}
	ErrLeaseState      = &Error{Code: CodeLeaseState, Message: "node: the lease cannot do that now"}
	ErrCreditLimit     = &Error{Code: CodeCreditLimit, Message: "node: credit limit reached"}
	ErrExecutor        = &Error{Code: CodeExecutor, Message: "node: executor not allowed by this provider"}
	ErrAttestFailed    = &Error{Code: CodeAttestFailed, Message: "node: attestation challenge failed"}
	ErrUnreachable     = &Error{Code: CodeUnreachable, Message: "node: peer unreachable"}
	ErrTimeout         = &Error{Code: CodeTimeout, Message: "node: request timed out"}
	ErrInternal        = &Error{Code: CodeInternal, Message: "node: internal error"}
)

// Errorf is an error of code c with a formatted message. A %w verb keeps
// its operand as the cause.
func Errorf(c Code, format string, args ...any) *Error {
	err := fmt.Errorf(format, args...)
	return &Error{Code: c, Message: err.Error(), cause: errors.Unwrap(err)}
}

// BadRequest is a CodeBadRequest error with a formatted message.
func BadRequest(format string, args ...any) *Error { return Errorf(CodeBadRequest, format, args...) }

// Wrap gives err the code c, keeping err as its cause and its message. An
// err that already has a code keeps it; nil stays nil.
func Wrap(c Code, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return &Error{Code: c, Message: err.Error(), cause: err}
}

// CodeOf is the code of err's first *Error, or CodeInternal.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeInternal
}

// WireError is the JSON body of every failed API call.
type WireError struct {
	Error string `json:"error"`
	Code  Code   `json:"code"`
}

// FromWire is the error a client returns for a failed call's body.
func FromWire(w WireError) error {
	if w.Code == "" {
		w.Code = CodeInternal
	}
	return &Error{Code: w.Code, Message: w.Error}
}
