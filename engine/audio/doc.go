// Package audio is Gemma 3n's audio path as Hugging Face transformers
// computes it (float32):
//
//   - Features: the log-mel feature extractor (Gemma3nAudioFeatureExtractor)
//     of a mono 16 kHz clip, [T, 128] with a frame mask.
//   - Tower.Encode: the conformer encoder (model.audio_tower): subsampling
//     convolutions with cumulative group norm, conformer blocks (feed-forward,
//     local attention with relative positions, light convolution), every 4th
//     frame kept; [N, 1536] with N ≈ 6.25 per second of audio.
//   - Tower.Embed / Tower.HardEmbed: the audio embedder (model.embed_audio),
//     soft path for encoder rows and hard path for audio-vocabulary ids
//     (≥ 262272), into the text decoder's embedding space.
//   - Tower.SoftTokens: all of the above for one clip, padded to the 188 rows
//     that replace a prompt's 188 <audio_soft_token> (262273) placeholders.
//
// Merging into the decoder (transformers' Gemma3nModel.forward): every id ≥
// Cfg.VocabOffset (262272) takes HardEmbed(id) instead of embed_tokens·√H
// (this covers <end_of_audio>); then the placeholders, in order, take the
// rows of SoftTokens. <start_of_audio> (256000) is an ordinary text token.
//
// Masks are true for real frames and rows (transformers' audio encoder uses
// the opposite sense). The hot loops run in package native (C, threaded);
// the feature extractor is Go. The tests compare with transformers on
// testdata/gemma3n-audio-preprocess.tar.gz (real speech),
// testdata/gemma3n-synthetic-tiny.tar.gz (a tiny tower) and
// testdata/gemma3n-synthetic-audiofull.tar.gz (the full-size tower).
package audio
