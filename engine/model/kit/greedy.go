package kit

import (
	"slices"

	"verdict/engine/model"
	"verdict/native"
)

// GreedyLooper is a family's Loop as GreedyDecode drives it.
type GreedyLooper interface {
	// IDs are the tokens the loop feeds its rows, one a row.
	IDs() native.Tensor
	// RunDevice records (or replays) the loop with step as its head; false
	// when the backend does not record loops.
	RunDevice(step func(h native.Tensor), running native.Tensor, key any) (bool, error)
	// RunHost runs the loop's steps from the host.
	RunHost(step func(h native.Tensor), running native.Tensor) (int, error)
	// Close ends the loop, each cache having taken in fed[i] tokens.
	Close(fed []int) error
}

// GreedyBufs are a greedy loop's device buffers: the loop's iteration
// counter, the chosen tokens (rows × steps), each row's stopped flag, the
// count of rows still running (the loop's condition) and the stop tokens
// (model.MaxStops of them).
type GreedyBufs struct {
	Iter, Out, Done, Cond, Stop native.Tensor
}

// greedyBody names the greedy loop's body among the recorded loops.
type greedyBody struct{}

// GreedyDecode is DecodeGreedy as a loop, for every family: row i feeds
// next[i], then each token the head's argmax (dense: the logits of hidden
// states h) chooses, LoopEmit keeping it and counting the rows not
// stopped; the loop runs on the device where the backend records loops,
// else from the host. It returns each row's tokens, ending at its first
// stop token (kept), and closes l with the tokens each cache took in.
func GreedyDecode(st *native.Stream, l GreedyLooper, b GreedyBufs, dense func(native.Tensor) native.Tensor,
	next, stop []int32, steps int) ([][]int32, error) {
	n := len(next)
	fed := make([]int, n)
	defer func() { l.Close(fed) }()
	hStop := make([]int32, model.MaxStops)
	for i := range hStop {
		hStop[i] = -1
	}
	copy(hStop, stop)
	st.UploadI32(l.IDs(), slices.Clone(next)) // next may sit in memory with Go pointers
	st.UploadI32(b.Stop, hStop)
	st.UploadI32(b.Done.Sub(0, 1, n), make([]int32, n))
	st.UploadI32(b.Cond, []int32{int32(n)})
	out, done := b.Out.Sub(0, 1, n*steps), b.Done.Sub(0, 1, n)
	step := func(h native.Tensor) {
		ids := l.IDs()
		st.Argmax(ids.View(n, 1), dense(h))
		st.LoopEmit(&native.LoopEmit{N: n, Steps: steps, Iter: b.Iter, IDs: ids, Stop: b.Stop, Out: out, Done: done, Cond: b.Cond})
	}
	ok, err := l.RunDevice(step, b.Cond, greedyBody{})
	if err == nil && !ok {
		_, err = l.RunHost(step, b.Cond)
	}
	if err != nil {
		return nil, err
	}
	it := []int32{0}
	toks := make([]int32, n*steps)
	st.DownloadI32(it, b.Iter)
	st.DownloadI32(toks, out)
	if err := st.Sync(); err != nil {
		return nil, err
	}
	ran := min(max(int(it[0]), 0), steps)
	res := make([][]int32, n)
	for i := range res {
		row := toks[i*steps : i*steps+ran]
		for j, id := range row {
			if slices.Contains(stop, id) {
				row = row[:j+1]
				break
			}
		}
		res[i] = slices.Clone(row)
		fed[i] = len(row)
	}
	return res, nil
}
