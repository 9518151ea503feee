//go:build linux || darwin

// Package sessiontest is test support for the layers above engine/session
// (the app, the CLI): the fake backends of native/nativetest, under the
// session's names, so that their tests reach the compute core only through
// the session, as their code does (build/layering_test.go).
package sessiontest

import (
	"testing"

	"verdict/engine/session"
	"verdict/native/nativetest"
)

// UnimplementedGPU installs and opens, as CUDA device 3, a GPU backend
// whose every pass fails as unimplemented (nativetest.Unimplemented): a GPU
// without the towers' kernels, as far as a tower can tell. It skips the
// test where there is no C compiler.
func UnimplementedGPU(t testing.TB) *session.Backend {
	t.Helper()
	return nativetest.Unimplemented(t)
}
