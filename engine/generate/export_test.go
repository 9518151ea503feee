package generate

// SetLoopsAlways makes greedy generation take the device-loop path on any
// backend (the CPU runs its body from the host) and returns the undo.
func SetLoopsAlways(on bool) func() {
	was := loopsAlways
	loopsAlways = on
	return func() { loopsAlways = was }
}

// LoopSteps is the tokens one device loop decodes.
const LoopSteps = loopSteps
