// A program's request (the browser mode's /v1 API): the loaded model held
// for one scoring or generation, outside the page's run history. Program
// requests and the page's run share the model through its scheduler: they
// run at once, their passes merged a step at a time.

package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"

	"verdict/app/inputs"
	"verdict/engine/models"
	"verdict/engine/session"
	"verdict/media"
)

// ErrLoading is returned while the model is still loading.
var ErrLoading = errors.New("the model is still loading")

// ModelMismatchError says that a request named a model other than the
// loaded one.
type ModelMismatchError struct{ Want, Loaded string }

func (e *ModelMismatchError) Error() string {
	return fmt.Sprintf("model %q is not the loaded model (%s): load it in the app first, or leave the model out", e.Want, e.Loaded)
}

// Direct is the model held for one program request; Close gives it back.
type Direct struct {
	// Session is the loaded model.
	Session *session.Session
	// Info describes it.
	Info ModelInfo

	runs    *Runs
	cancel  context.CancelFunc
	release func()
}

// Direct takes the loaded model for one request of a program, which must
// name the loaded model (its spec or name, or "builtin") or none. Any
// number run at once, beside the page's run (the scheduler bounds how many
// wait). It fails with ErrNoModel or ErrLoading without a ready model, or a
// *ModelMismatchError. The returned context, derived from ctx, is
// cancelled by Close, at shutdown and when the model is replaced.
func (s *Runs) Direct(ctx context.Context, model string) (*Direct, context.Context, error) {
	l, release, err := s.models.acquire()
	if err != nil {
		return nil, nil, err
	}
	if model != "" && model != l.info.Spec && model != l.info.Name && !(model == models.Builtin && l.info.Builtin) {
		release()
		return nil, nil, &ModelMismatchError{Want: model, Loaded: l.info.Spec}
	}
	s.mu.Lock()
	dctx, cancel := context.WithCancel(ctx)
	d := &Direct{Session: l.s, Info: l.info, runs: s, cancel: cancel, release: release}
	if s.directs == nil {
		s.directs = map[*Direct]struct{}{}
	}
	s.directs[d] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	s.log.WithField("model", l.info.Name).Debug("program request started")
	return d, dctx, nil
}

// Close ends the request: it cancels its context, gives the model back and
// frees the run slot. Calling it again does nothing.
func (d *Direct) Close() {
	s := d.runs
	s.mu.Lock()
	if _, ok := s.directs[d]; !ok {
		s.mu.Unlock()
		return
	}
	delete(s.directs, d)
	s.mu.Unlock()
	d.cancel()
	d.release()
	s.wg.Done()
	s.log.WithFields(logrus.Fields{"model": d.Info.Name}).Debug("program request ended")
}

// CanTake checks that the model has the towers in's media need.
func (d *Direct) CanTake(in *media.Input) error {
	return canTake(&loaded{s: d.Session, info: d.Info}, in)
}

// Prepare runs the model's towers on in (see inputs.PrepareContext).
func (d *Direct) Prepare(ctx context.Context, in *media.Input) (*inputs.Prepared, error) {
	return d.runs.prepare(ctx, d.Session, in, nil)
}

// cancelDirect cancels the program requests in progress.
func (s *Runs) cancelDirect() {
	s.mu.Lock()
	ds := make([]*Direct, 0, len(s.directs))
	for d := range s.directs {
		ds = append(ds, d)
	}
	s.mu.Unlock()
	for _, d := range ds {
		d.cancel()
	}
}
