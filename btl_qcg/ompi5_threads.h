/*
 * The part of Open MPI 5's threads framework that its development headers
 * name but Debian 13's libopenmpi-dev (5.0.7) does not install: the
 * pthreads component's headers, which opal_config.h designates
 * (MCA_threads_*_base_include_HEADER) and every BTL reaches through
 * btl.h -> mpool.h -> opal_free_list.h -> opal/mca/threads/mutex.h.
 *
 * ompi_compat.h points those macros here only when the headers they name
 * are missing.  Only types and static inline functions: the types are the
 * ones libopen-pal was built with (its threads component is pthreads, the
 * only one on Linux), so opal_mutex_t and every structure embedding it has
 * the library's layout; ompi_compat_check() compares the sizes with the
 * library's classes at run time.  Our own code uses only lock, trylock and
 * unlock (OPAL_THREAD_LOCK, opal_mutex_trylock); the rest is what the
 * installed headers call in their own inline functions.
 */
#ifndef BTL_QCG_OMPI5_THREADS_H
#define BTL_QCG_OMPI5_THREADS_H

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>

/* mutex (threads_pthreads_mutex.h) */
typedef pthread_mutex_t opal_thread_internal_mutex_t;
#define OPAL_THREAD_INTERNAL_MUTEX_INITIALIZER PTHREAD_MUTEX_INITIALIZER
#define OPAL_THREAD_INTERNAL_RECURSIVE_MUTEX_INITIALIZER PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP

static inline int opal_thread_internal_mutex_init(opal_thread_internal_mutex_t *m, bool recursive)
{
    pthread_mutexattr_t attr;
    int rc;

    if (!recursive)
        return pthread_mutex_init(m, NULL) == 0 ? 0 : -1;
    if (pthread_mutexattr_init(&attr) != 0)
        return -1;
    rc = pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    if (rc == 0)
        rc = pthread_mutex_init(m, &attr);
    pthread_mutexattr_destroy(&attr);
    return rc == 0 ? 0 : -1;
}

static inline void opal_thread_internal_mutex_lock(opal_thread_internal_mutex_t *m)
{
    (void)pthread_mutex_lock(m);
}

/* 0: taken; 1: held by someone else (opal_mutex_trylock's contract). */
static inline int opal_thread_internal_mutex_trylock(opal_thread_internal_mutex_t *m)
{
    return pthread_mutex_trylock(m) == 0 ? 0 : 1;
}

static inline void opal_thread_internal_mutex_unlock(opal_thread_internal_mutex_t *m)
{
    (void)pthread_mutex_unlock(m);
}

static inline void opal_thread_internal_mutex_destroy(opal_thread_internal_mutex_t *m)
{
    (void)pthread_mutex_destroy(m);
}

/* condition variables (same header) */
typedef pthread_cond_t opal_thread_internal_cond_t;
#define OPAL_THREAD_INTERNAL_COND_INITIALIZER PTHREAD_COND_INITIALIZER

static inline int opal_thread_internal_cond_init(opal_thread_internal_cond_t *c)
{
    return pthread_cond_init(c, NULL) == 0 ? 0 : -1;
}

static inline void opal_thread_internal_cond_wait(opal_thread_internal_cond_t *c,
                                                  opal_thread_internal_mutex_t *m)
{
    (void)pthread_cond_wait(c, m);
}

static inline void opal_thread_internal_cond_broadcast(opal_thread_internal_cond_t *c)
{
    (void)pthread_cond_broadcast(c);
}

static inline void opal_thread_internal_cond_signal(opal_thread_internal_cond_t *c)
{
    (void)pthread_cond_signal(c);
}

static inline void opal_thread_internal_cond_destroy(opal_thread_internal_cond_t *c)
{
    (void)pthread_cond_destroy(c);
}

/* threads (threads_pthreads_threads.h): threads.h declares this one and
   uses pthread_t in opal_thread_t itself. */
static inline void opal_thread_yield(void)
{
    (void)sched_yield();
}

/* thread-specific data (threads_pthreads_tsd.h) */
typedef pthread_key_t opal_tsd_key_t;

static inline int opal_tsd_key_delete(opal_tsd_key_t key)
{
    return pthread_key_delete(key) == 0 ? 0 : -1;
}

static inline int opal_tsd_set(opal_tsd_key_t key, void *value)
{
    return pthread_setspecific(key, value) == 0 ? 0 : -1;
}

static inline int opal_tsd_get(opal_tsd_key_t key, void **valuep)
{
    *valuep = pthread_getspecific(key);
    return 0;
}

#endif
