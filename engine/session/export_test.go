package session

// setFault makes replica i's passes ask f first (a device failing: f's
// error is the pass's); nil ends it.
func (s *Session) setFault(i int, f func() error) {
	p := s.set.parts[i].s
	if f == nil {
		p.fault.Store(nil)
		return
	}
	p.fault.Store(&f)
}
