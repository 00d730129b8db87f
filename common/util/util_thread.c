/*
 * Threads that come and go with the work: one that leaves for good hands
 * glibc's per-thread malloc cache back only once it has exited, so the
 * trim that returns a burst's pages to the kernel must wait for that exit.
 */
#include "util.h"

#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <semaphore.h>

/* What the leaving thread hands its helper: its handle, and a semaphore
 * saying the helper copied it (the struct is on the leaver's stack). */
struct leaving {
    pthread_t th;
    sem_t copied;
};

/* Detached: joins the thread that left, whose cache is then back in the
 * arenas, and hands the pages that freed to the kernel. */
static void *trim_after_exit(void *arg)
{
    struct leaving *l = arg;
    pthread_t th = l->th;
    sem_post(&l->copied);
    pthread_join(th, NULL);
    malloc_trim(0);
    return NULL;
}

void util_thread_leave_trimmed(void)
{
    struct leaving l = {.th = pthread_self()};
    sem_init(&l.copied, 0, 0);
    pthread_t helper;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 64u << 10);
    if (pthread_create(&helper, &a, trim_after_exit, &l) == 0) {
        while (sem_wait(&l.copied) < 0 && errno == EINTR)
            ;
    } else {
        pthread_detach(l.th); /* no trim, but no thread left unjoined */
    }
    pthread_attr_destroy(&a);
    sem_destroy(&l.copied);
}
