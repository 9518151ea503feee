/* cpu_isa_avx2.c: the x86 AVX2+FMA kernel set. The target pragma gives every
 * function here __attribute__((target("avx2,fma"))); cpu_api.c only selects
 * this set when __builtin_cpu_supports reports both. */
#include "cpu_internal.h"

#if defined(VK_HAVE_AVX2_BUILD)

#include <math.h>

#pragma GCC target("avx2,fma")

#include "cpu_vec_avx2.h"

#include "cpu_math_impl.h"

#include "cpu_linear_impl.h"

#include "cpu_attention_impl.h"

#include "cpu_elementwise_impl.h"

#include "cpu_sparse_impl.h"

#include "cpu_table_impl.h"

#else
typedef int vk_no_avx2; /* not an x86 build */
#endif
