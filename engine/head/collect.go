package head

import (
	"context"
	"fmt"

	"verdict/engine/model"
	"verdict/engine/scorer"
)

// Collect scores every labelled example with the json backend and computes
// its decisions' features, each decision labelled from the example (-1
// where it has no label). progress, when set, hears done of total after
// each example.
func Collect(ctx context.Context, sc *scorer.Scorer, s *scorer.Schema, examples []scorer.Example, opt scorer.Options, progress func(done, total int)) ([]Example, error) {
	if len(examples) == 0 {
		return nil, fmt.Errorf("head: no examples")
	}
	opt.Backend, opt.Head, opt.Calibration, opt.Temperature, opt.OnField = scorer.BackendJSON, nil, nil, 1, nil
	out := make([]Example, len(examples))
	for i, e := range examples {
		res, err := sc.Score(ctx, s, e.Text, opt)
		if err != nil {
			return nil, fmt.Errorf("head: example %d: %w", i+1, err)
		}
		labels, err := scorer.ExampleLabels(s, res, e)
		if err != nil {
			return nil, fmt.Errorf("head: example %d: %w", i+1, err)
		}
		ds, err := Features(ctx, sc, s, e.Text, res)
		if err != nil {
			return nil, fmt.Errorf("head: example %d: %w", i+1, err)
		}
		for j := range ds {
			if y, ok := labels[ds[j].Name]; ok {
				ds[j].Label = y
			}
		}
		out[i] = ds
		if progress != nil {
			progress(i+1, len(examples))
		}
	}
	return out, nil
}

// NewMeta is the identity of a head for model m (called name) and schema
// s, with the model's fingerprint.
func NewMeta(m model.Model, name string, s *scorer.Schema) (Meta, []float32, error) {
	fp, err := fingerprint(m)
	if err != nil {
		return Meta{}, nil, err
	}
	meta := Meta{ModelConfig: ModelHash(m), ModelName: name, Weights: string(m.Weights()), Group: m.Group(), Schema: SchemaHash(s)}
	for _, f := range s.Fields {
		meta.Fields = append(meta.Fields, f.Name)
	}
	return meta, fp, nil
}
