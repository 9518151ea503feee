/*
 * cpu_pool.c: a persistent pthread pool.
 *
 * One job runs at a time. The caller publishes it as a 64-bit ticket
 * (generation | task count | next task) and works on it too; threads claim
 * task indices by compare-and-swap on the ticket, so a thread that wakes up
 * late can never touch a finished job. Idle threads spin briefly, then sleep
 * on a condition variable. A call made while the pool is busy (another
 * goroutine) runs on its own thread: results do not depend on who runs what.
 */
#include "cpu_internal.h"

#include <pthread.h>
#include <sched.h>
#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TBITS 20
#define TMASK ((UINT64_C(1) << TBITS) - 1)
#define GSHIFT (2 * TBITS)
#define GMASK ((UINT64_C(1) << (64 - GSHIFT)) - 1)
#define SPIN_NS 100000 /* idle spin before sleeping */

static struct {
	_Atomic uint64_t ticket;
	_Atomic uint64_t done;
	_Atomic int sleepers;
	_Atomic int quit;
	_Atomic int busy;
	_Atomic int nthreads;
	/* The job: written by the caller before it publishes the ticket. */
	vk_task_fn fn;
	void *ctx;
	int64_t per, total;
	uint64_t gen;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	pthread_t *tids;
	int nworkers;
} P = {
	.nthreads = 1,
	.mu = PTHREAD_MUTEX_INITIALIZER,
	.cv = PTHREAD_COND_INITIALIZER,
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

static int64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* run_tasks claims and runs tasks of the job that ticket t belongs to (or a
 * later one) until none is left. */
static void run_tasks(uint64_t t)
{
	for (;;) {
		uint64_t nt = (t >> TBITS) & TMASK, nx = t & TMASK;
		if (nx >= nt)
			return;
		if (!atomic_compare_exchange_weak_explicit(&P.ticket, &t, t + 1,
		                                           memory_order_acq_rel,
		                                           memory_order_acquire))
			continue;
		/* Task nx is ours: the job cannot finish, or change, before we
		 * report it done. */
		int64_t lo = (int64_t)nx * P.per, hi = lo + P.per;
		if (hi > P.total)
			hi = P.total;
		for (int64_t i = lo; i < hi; i++)
			P.fn(P.ctx, i);
		atomic_fetch_add_explicit(&P.done, 1, memory_order_release);
		t = atomic_load_explicit(&P.ticket, memory_order_acquire);
	}
}

/* WORKER_NICE is the nice value of every thread that runs kernels (the
 * pool's and each caller's, from its first job on): the kernels yield to
 * interactive work (the app's own page on a machine of few cores) and
 * still take every idle core. Linux keeps nice per thread; a thread's
 * nice value cannot be raised back without privilege, so it stays. */
#define WORKER_NICE 5

static void lower_priority(void)
{
#if defined(__linux__)
	static _Thread_local int done;
	if (!done) {
		done = 1;
		setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), WORKER_NICE);
	}
#endif
}

static void *worker(void *arg)
{
	(void)arg;
	lower_priority();
	uint64_t seen = atomic_load(&P.ticket) >> GSHIFT;
	for (;;) {
		uint64_t t = atomic_load_explicit(&P.ticket, memory_order_acquire);
		if ((t >> GSHIFT) == seen && !atomic_load(&P.quit)) {
			int64_t start = now_ns();
			for (unsigned i = 1;; i++) {
				cpu_relax();
				t = atomic_load_explicit(&P.ticket, memory_order_acquire);
				if ((t >> GSHIFT) != seen || atomic_load(&P.quit))
					break;
				if ((i & 255) == 0 && now_ns() - start > SPIN_NS) {
					atomic_fetch_add(&P.sleepers, 1);
					pthread_mutex_lock(&P.mu);
					while (((t = atomic_load(&P.ticket)) >> GSHIFT) == seen &&
					       !atomic_load(&P.quit))
						pthread_cond_wait(&P.cv, &P.mu);
					pthread_mutex_unlock(&P.mu);
					atomic_fetch_sub(&P.sleepers, 1);
					break;
				}
			}
		}
		if (atomic_load(&P.quit))
			break;
		seen = t >> GSHIFT;
		run_tasks(t);
	}
	return NULL;
}

static void wake_all(void)
{
	if (atomic_load(&P.sleepers) > 0) {
		pthread_mutex_lock(&P.mu);
		pthread_cond_broadcast(&P.cv);
		pthread_mutex_unlock(&P.mu);
	}
}

void vk_pool_run(int64_t ntasks, vk_task_fn fn, void *ctx)
{
	if (ntasks <= 0)
		return;
	int idle = 0;
	if (ntasks == 1 || atomic_load(&P.nthreads) <= 1 ||
	    !atomic_compare_exchange_strong(&P.busy, &idle, 1)) {
		for (int64_t i = 0; i < ntasks; i++)
			fn(ctx, i);
		return;
	}
	int64_t per = (ntasks + (int64_t)TMASK - 1) / (int64_t)TMASK;
	uint64_t nt = (uint64_t)((ntasks + per - 1) / per);
	P.fn = fn;
	P.ctx = ctx;
	P.per = per;
	P.total = ntasks;
	P.gen = (P.gen + 1) & GMASK;
	atomic_store_explicit(&P.done, 0, memory_order_relaxed);
	uint64_t t = P.gen << GSHIFT | nt << TBITS;
	atomic_store(&P.ticket, t); /* seq_cst: pairs with sleepers */
	wake_all();
	run_tasks(t);
	/* Wait for tasks still running elsewhere; yield if that takes long (an
	 * oversubscribed machine may have descheduled their thread). */
	for (unsigned i = 0;
	     atomic_load_explicit(&P.done, memory_order_acquire) < nt; i++) {
		if (i < 20000)
			cpu_relax();
		else
			sched_yield();
	}
	atomic_store_explicit(&P.busy, 0, memory_order_release);
}

void vk_par(int64_t ntasks, double work, vk_task_fn fn, void *ctx)
{
	lower_priority();
	if (ntasks > 1 && work >= VK_PAR_MIN_WORK)
		vk_pool_run(ntasks, fn, ctx);
	else
		for (int64_t i = 0; i < ntasks; i++)
			fn(ctx, i);
}

void vk_pool_resize(int n)
{
	if (n < 1)
		n = 1;
	if (n > 1024)
		n = 1024;
	int idle = 0;
	while (!atomic_compare_exchange_weak(&P.busy, &idle, 1)) {
		idle = 0;
		sched_yield();
	}
	if (P.nworkers > 0) {
		atomic_store(&P.quit, 1);
		pthread_mutex_lock(&P.mu);
		pthread_cond_broadcast(&P.cv);
		pthread_mutex_unlock(&P.mu);
		for (int i = 0; i < P.nworkers; i++)
			pthread_join(P.tids[i], NULL);
		atomic_store(&P.quit, 0);
	}
	free(P.tids);
	P.tids = NULL;
	P.nworkers = 0;
	if (n > 1) {
		P.tids = calloc((size_t)n - 1, sizeof(pthread_t));
		/* Workers take no signals: the Go runtime handles them. */
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		for (int i = 0; P.tids && i < n - 1; i++) {
			if (pthread_create(&P.tids[i], NULL, worker, NULL) != 0)
				break;
			P.nworkers++;
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	atomic_store(&P.nthreads, P.nworkers + 1);
	atomic_store(&P.busy, 0);
}

int vk_pool_threads(void) { return atomic_load(&P.nthreads); }

static _Thread_local struct {
	void *p;
	size_t cap;
} scr[VK_SCRATCH_SLOTS];

/* A thread's scratch is freed when it exits (pool threads, and threads the
 * Go runtime lets go), through a key destructor. */
static pthread_key_t scr_key;
static pthread_once_t scr_once = PTHREAD_ONCE_INIT;

static void free_scratch(void)
{
	for (int i = 0; i < VK_SCRATCH_SLOTS; i++) {
		free(scr[i].p);
		scr[i].p = NULL;
		scr[i].cap = 0;
	}
}

static void scr_exit(void *unused)
{
	(void)unused;
	free_scratch();
}

static void scr_init(void) { pthread_key_create(&scr_key, scr_exit); }

void *vk_scratch(int slot, size_t bytes)
{
	if (scr[slot].cap < bytes) {
		pthread_once(&scr_once, scr_init);
		pthread_setspecific(scr_key, &scr_key);
		free(scr[slot].p);
		size_t cap = (bytes + 4095) & ~(size_t)4095;
		scr[slot].p = aligned_alloc(64, cap);
		if (!scr[slot].p) {
			fprintf(stderr, "native: out of memory (%zu bytes)\n", cap);
			abort();
		}
		scr[slot].cap = cap;
	}
	return scr[slot].p;
}
