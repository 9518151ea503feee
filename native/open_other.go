//go:build !(linux || darwin)

package native

import "errors"

func (l *Library) load(dev int) (*Backend, error) {
	return nil, errors.New(l.Name + ": not supported on this operating system")
}

func (l *Library) count() (int, error) {
	return 0, errors.New(l.Name + ": not supported on this operating system")
}
