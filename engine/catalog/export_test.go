package catalog

// Differ is differ, for the tests.
var Differ = differ

// WithRows bounds opt's forward passes to n rows, for the tests.
func WithRows(opt Options, n int) Options {
	opt.rows = n
	return opt
}

// Clone is State.clone, for the tests.
func (s *State) Clone() *State { return s.clone() }

// Forced is State.forced, for the tests: the forced run after the walk so
// far, whether it ends with STOP, and the legal set it ends at.
func (s *State) Forced() (tokens []int32, done bool, final []int32) {
	var r forcedRun
	s.forced(&r)
	return r.tokens, r.done, r.final
}
