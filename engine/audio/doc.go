// Package audio is Gemma 3n's audio path as Hugging Face transformers
// computes it: the log-mel feature extractor (Gemma3nAudioFeatureExtractor),
// the conformer audio tower (model.audio_tower) and the audio embedder
// (model.embed_audio) that turns its output into soft tokens for the text
// decoder.
package audio
