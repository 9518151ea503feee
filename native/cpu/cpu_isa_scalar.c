/* cpu_isa_scalar.c: the portable kernel set (any CPU; NEON on arm64 where
 * the compiler vectorises the lane loops). */
#include "cpu_internal.h"

#include <math.h>

#include "cpu_vec_scalar.h"

#include "cpu_math_impl.h"

#include "cpu_linear_impl.h"

#include "cpu_attention_impl.h"

#include "cpu_elementwise_impl.h"

#include "cpu_sparse_impl.h"

#include "cpu_table_impl.h"
