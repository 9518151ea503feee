package gemma3n

import "verdict/engine/model"

// The rows of a forward pass are the engine's (engine/model); a row's
// token also picks its per-layer embedding here.
type (
	Row   = model.Row
	Batch = model.Batch
	Hook  = model.Hook
)
