/*
 * Test harness shared by the integration suites: child processes that are
 * always reaped (even when a test fails half-way), scratch directories,
 * and finding the binaries that sit next to the test.
 */
#ifndef CSISIDECAR_TEST_HARNESS_H
#define CSISIDECAR_TEST_HARNESS_H

#include <stdbool.h>
#include <sys/types.h>

#include "util/util.h"

/* Starts argv[0] with the current environment plus `env` ("K=V", NULL-ended,
 * may be NULL). The child is killed at exit if the test has not reaped it. */
pid_t th_spawn(char *const argv[], char *const env[]);
/* Sends `sig` and waits for the child; returns its wait status. */
int th_stop(pid_t pid, int sig);
/* Kills every child still running (also registered with atexit). */
void th_stop_all(void);
/* A fresh directory under $TMPDIR (or /tmp); removed at exit with its files. */
const char *th_tmpdir(void);
/* Path of a binary in the build tree's bin/ or tests/ directory. */
char *th_build_path(const char *rel);
/* Polls `cond` every 20 ms until true or `timeout` passes. */
bool th_wait_until(bool (*cond)(void *), void *ud, util_duration timeout);
/* How many threads of this process are named `name` (-1: /proc unreadable);
 * *tid (may be NULL) gets the TID of one of them, or -1 when none. */
int th_threads_named(const char *name, long *tid);

/*
 * Starts build/bin/kube-lite on 127.0.0.1 with a free port and `args`
 * (NULL-ended, may be NULL) and waits for its ready line. *url gets
 * "http(s)://127.0.0.1:PORT", *kubeconfig the path of the kubeconfig it
 * wrote (both malloc'ed). Returns the pid, or -1.
 */
pid_t th_kube_lite(char *const args[], char **url, char **kubeconfig);

#endif
