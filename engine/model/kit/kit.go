// Package kit is the plumbing every model family's Exec repeats, written
// once: the output heads over a backend stream (Head), the pool of idle
// Execs (Pool) and the values kept with an Exec (Keeper). A family embeds
// or holds these, parameterised by what differs (its head weights,
// soft-cap, vocabulary, scratch and forward pass); its arithmetic stays its
// own.
package kit
