/*
 * env.h: the comparison switches' reading of the environment (host code).
 */
#pragma once
#include <cstdlib>
#include <cstring>

/* env_is: whether the environment variable name is set to val. */
static inline bool env_is(const char *name, const char *val)
{
	const char *e = getenv(name);
	return e && strcmp(e, val) == 0;
}
