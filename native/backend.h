/*
 * backend.h: Verdict's compute backend interface.
 *
 * A backend is a table of C functions (vd_backend) over memory it owns:
 * buffers it allocates or binds, tensors that point into them, and streams
 * that order its work. The engine calls nothing else, so a backend built as
 * a separate shared library (CUDA) and loaded at run time can stand in for
 * the CPU one compiled into the binary; package native finds backends
 * through a registry of drivers by name (native.Register), not by a switch.
 *
 * The table has four parts, each in a header of its own:
 *
 *   device  backend_device.h  what it runs on (info, limits);
 *   buffer  backend_buffer.h  its memory (alloc, release, bind, unbind),
 *                             element types and tensors;
 *   stream  backend_stream.h  the order of its work: transfers, sync and
 *                             its errors, recorded graphs and loops;
 *   op      backend_ops.h     the operations, with their operand types.
 *
 * Every entry of the first three is required. An entry of the op table may
 * be NULL: the caller runs that operation on the CPU backend instead
 * (vd_supports says which are there), so a new backend (ROCm, Metal) can
 * start with a few operations.
 */
#ifndef VERDICT_BACKEND_H
#define VERDICT_BACKEND_H

#include "backend_buffer.h"
#include "backend_device.h"
#include "backend_ops.h"
#include "backend_stream.h"

#ifdef __cplusplus
extern "C" {
#endif

/* VD_ABI changes whenever the table or its operands do. */
#define VD_ABI 19

struct vd_backend {
	int abi;          /* VD_ABI */
	const char *name; /* e.g. "cpu" */
	void *state;      /* the backend's own */

	vd_device_fns device;
	vd_buffer_fns buffer;
	vd_stream_fns stream;
	vd_ops op; /* entries may be NULL */
};

/* vd_supports reports whether b runs operation op (an enum vd_op) itself:
 * its entry in b->op is set. */
static inline int vd_supports(const vd_backend *b, int op)
{
	return op >= 0 && op < VD_OP_COUNT && ((void *const *)&b->op)[op] != NULL;
}

/* vd_required_missing returns the 1-based index of the first NULL entry
 * of the required parts (device, buffer, stream, in that order), 0 when
 * there is none. */
static inline int vd_required_missing(const vd_backend *b)
{
	void *const *f = (void *const *)&b->device;
	int n = (int)((offsetof(vd_backend, op) - offsetof(vd_backend, device)) / sizeof(void *));
	for (int i = 0; i < n; i++)
		if (!f[i])
			return i + 1;
	return 0;
}

/* vd_cpu_backend returns the CPU backend (compiled into the binary). */
vd_backend *vd_cpu_backend(void);

#ifdef __cplusplus
}
#endif

#endif
