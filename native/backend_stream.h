/*
 * backend_stream.h: a backend's streams (part of backend.h): the order of
 * its work, transfers, sync and its errors, and recorded graphs and loops.
 *
 * Operations are enqueued on a stream, in order; their results are visible
 * to later operations of the same stream at once and to the host after
 * download and sync. Operations never allocate memory the caller can see
 * and keep no pointer after the stream has run them.
 */
#ifndef VERDICT_BACKEND_STREAM_H
#define VERDICT_BACKEND_STREAM_H

#include "backend_buffer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* sync's error for an operation the backend does not implement yet (the
 * towers' on a GPU backend that has not got them): the caller may run that
 * work on another backend. */
enum { VD_EUNIMPL = 1005 };

/* Every entry is required; graph_begin and loop_begin may refuse. */
typedef struct {
	/* Streams and transfers (asynchronous on the stream); sync waits for
	 * the stream and returns 0, or a backend error code. */
	vd_stream *(*stream_new)(vd_backend *b);
	void (*stream_free)(vd_stream *s);
	void (*upload)(vd_stream *s, void *dst, const void *host, size_t bytes);
	void (*download)(vd_stream *s, void *host, const void *src, size_t bytes);
	void (*copy)(vd_stream *s, void *dst, const void *src, size_t bytes);
	int (*sync)(vd_stream *s);

	/* Graphs: a stream's operations recorded once and replayed. Between
	 * graph_begin (0, or nonzero where the backend cannot record, as the
	 * CPU's) and graph_end the stream's operations are recorded, not run;
	 * graph_end returns the recording, or NULL when recording failed (an
	 * operation that must wait for the host, say): nothing ran and the
	 * stream's error is as before graph_begin. graph_run replays it on the
	 * stream with the tensors it was recorded with, reading their contents
	 * at replay time: a caller changes a replay's inputs by writing the
	 * same buffers. */
	int (*graph_begin)(vd_stream *s);
	void *(*graph_end)(vd_stream *s);
	void (*graph_run)(vd_stream *s, void *g);
	void (*graph_free)(vd_backend *b, void *g);

	/* Loops: a body of operations recorded once and run on the device
	 * until a condition clears, with no host work between iterations.
	 * loop_begin starts recording the body as graph_begin does (0, or
	 * nonzero where the backend cannot record: the CPU's); the body ends
	 * with loop_while; graph_end returns the loop, and one graph_run of it
	 * runs the body, then runs it again while cond[0] != 0 and iter[0] <
	 * limit (I32 [1, 1] each, read after every run). Outside a loop's
	 * recording loop_while does nothing. The body's own bookkeeping
	 * (loop_rows, loop_emit) are operations (backend_ops.h). */
	int (*loop_begin)(vd_stream *s);
	void (*loop_while)(vd_stream *s, vd_tensor cond, vd_tensor iter, int64_t limit);
} vd_stream_fns;

#ifdef __cplusplus
}
#endif

#endif
