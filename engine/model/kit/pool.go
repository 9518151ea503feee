package kit

import "sync"

// MaxIdle is the most idle Execs a Pool keeps (their scratch committed);
// more released at once after a burst are closed.
const MaxIdle = 2

// Pool holds a model's idle Execs of type X. Its zero value is empty and
// ready; a view of a model with its own pool takes a new Pool.
type Pool[X any] struct {
	mu   sync.Mutex
	idle []X
}

// Get returns an idle Exec, or one newX makes when none is idle.
func (p *Pool[X]) Get(newX func() (X, error)) (X, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		x := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return x, nil
	}
	p.mu.Unlock()
	return newX()
}

// Put takes x back, or closes it with closeX when MaxIdle are idle.
func (p *Pool[X]) Put(x X, closeX func(X)) {
	p.mu.Lock()
	keep := len(p.idle) < MaxIdle
	if keep {
		p.idle = append(p.idle, x)
	}
	p.mu.Unlock()
	if !keep {
		closeX(x)
	}
}

// Close closes the idle Execs with closeX and empties the pool.
func (p *Pool[X]) Close(closeX func(X)) {
	p.mu.Lock()
	for _, x := range p.idle {
		closeX(x)
	}
	p.idle = nil
	p.mu.Unlock()
}
