/*
 * backend_buffer.h: a backend's memory (part of backend.h): element
 * types, tensors, and the buffer part of the table.
 *
 * Tensors are plain descriptors: the address of their first element in the
 * backend's memory (host or device), a second address for a q4 tensor's
 * scales and offsets, the element type and a row-major [rows, cols] shape.
 */
#ifndef VERDICT_BACKEND_BUFFER_H
#define VERDICT_BACKEND_BUFFER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vd_backend vd_backend;
typedef struct vd_stream vd_stream;

enum { VD_F32 = 0, VD_BF16 = 1, VD_Q4 = 2, VD_I32 = 3 };

typedef struct {
	void *data;    /* first element */
	void *aux;     /* q4: scales and offsets [rows, cols/group, 2] */
	int32_t dtype; /* VD_* */
	int32_t group; /* q4: columns per group (a power of two >= 32) */
	int64_t rows, cols;
} vd_tensor;

/* Memory. alloc returns NULL when out of memory; bind makes host memory
 * (weights: a mapped file, a packed arena) usable by operations, without a
 * copy where the backend can read host memory. Every entry is required. */
typedef struct {
	void *(*alloc)(vd_backend *b, size_t bytes);
	void (*release)(vd_backend *b, void *p, size_t bytes);
	void *(*bind)(vd_backend *b, void *host, size_t bytes);
	void (*unbind)(vd_backend *b, void *p, void *host, size_t bytes);
} vd_buffer_fns;

#ifdef __cplusplus
}
#endif

#endif
