// Package convert writes a Gemma 3n text decoder in the files other
// runtimes read, and checks such files against the checkpoint they came
// from: WriteGGUF makes the gemma3n GGUF file llama.cpp's converter and
// quantiser make (the layout is engine/gemma3n/gguf's, the container
// engine/weights/ggufwrite's), WriteCheckpoint the safetensors checkpoint
// llama.cpp's converter takes; Logits runs a file or a checkpoint on one
// token sequence and Reference.Compare holds a GGUF file's tensors against
// the checkpoint's. It is the engine's side of `verdict verify-gguf`
// (build/gguf-check.sh runs it), which the app reaches only through here.
package convert
