/* cpu_isa_neon.c: the AArch64 NEON kernel set (NEON is part of AArch64). */
#include "cpu_internal.h"

#if defined(VK_HAVE_NEON_BUILD)

#include <math.h>

#include "cpu_vec_neon.h"

#include "cpu_math_impl.h"

#include "cpu_linear_impl.h"

#include "cpu_attention_impl.h"

#include "cpu_elementwise_impl.h"

#include "cpu_sparse_impl.h"

#include "cpu_table_impl.h"

#else
typedef int vk_no_neon; /* not an arm64 build */
#endif
