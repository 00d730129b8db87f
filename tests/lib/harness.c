/*
 * See harness.h. Children are tracked in a fixed table; an atexit hook
 * kills whatever is left so that a failed assertion never leaves a server
 * running behind the test.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

extern char **environ;

#define MAX_CHILDREN 64

static pid_t children[MAX_CHILDREN];
static char tmpdir[PATH_MAX];
static bool hooked;

static void cleanup(void)
{
    th_stop_all();
    if (tmpdir[0]) {
        char *cmd = util_asprintf("rm -rf '%s'", tmpdir);
        if (system(cmd) != 0)
            fprintf(stderr, "harness: could not remove %s\n", tmpdir);
        free(cmd);
        tmpdir[0] = '\0';
    }
}

static void hook(void)
{
    if (!hooked) {
        hooked = true;
        atexit(cleanup);
    }
}

pid_t th_spawn(char *const argv[], char *const env[])
{
    hook();
    size_t n_env = 0, n_extra = 0;
    while (environ[n_env])
        n_env++;
    while (env && env[n_extra])
        n_extra++;
    char **all = util_calloc(n_env + n_extra + 1, sizeof(char *));
    for (size_t i = 0; i < n_env; i++)
        all[i] = environ[i];
    for (size_t i = 0; env && i < n_extra; i++)
        all[n_env + i] = env[i];
    pid_t pid = -1;
    int r = posix_spawn(&pid, argv[0], NULL, NULL, argv, all);
    free(all);
    if (r != 0) {
        fprintf(stderr, "harness: cannot start %s: %s\n", argv[0], strerror(r));
        return -1;
    }
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] == 0) {
            children[i] = pid;
            break;
        }
    }
    return pid;
}

int th_stop(pid_t pid, int sig)
{
    int status = 0;
    if (pid <= 0)
        return -1;
    kill(pid, sig);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] == pid)
            children[i] = 0;
    return status;
}

void th_stop_all(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++)
        if (children[i] > 0)
            th_stop(children[i], SIGKILL);
}

const char *th_tmpdir(void)
{
    hook();
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof(tmpdir), "%s/csitest.XXXXXX", base && *base ? base : "/tmp");
        if (!mkdtemp(tmpdir)) {
            perror("mkdtemp");
            abort();
        }
    }
    return tmpdir;
}

char *th_build_path(const char *rel)
{
    /* Test binaries live in <build>/tests/<suite>/; rel is from <build>. */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        abort();
    self[n] = '\0';
    for (int up = 0; up < 3; up++) {
        char *slash = strrchr(self, '/');
        if (!slash)
            abort();
        *slash = '\0';
    }
    return util_asprintf("%s/%s", self, rel);
}

int th_threads_named(const char *name, long *tid)
{
    if (tid)
        *tid = -1;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return -1;
    int n = 0;
    const struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char path[300], comm[64] = "";
        snprintf(path, sizeof(path), "/proc/self/task/%s/comm", de->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        if (fgets(comm, sizeof(comm), f))
            comm[strcspn(comm, "\n")] = '\0';
        fclose(f);
        if (strcmp(comm, name) == 0) {
            n++;
            if (tid)
                *tid = strtol(de->d_name, NULL, 10);
        }
    }
    closedir(d);
    return n;
}

bool th_wait_until(bool (*cond)(void *), void *ud, util_duration timeout)
{
    util_duration end = util_now_mono() + timeout;
    for (;;) {
        if (cond(ud))
            return true;
        if (util_now_mono() >= end)
            return false;
        util_sleep(20 * UTIL_MS);
    }
}

pid_t th_kube_lite(char *const args[], char **url, char **kubeconfig)
{
    static int seq;
    const char *dir = th_tmpdir();
    char *bin = th_build_path("bin/kube-lite");
    int n = __atomic_add_fetch(&seq, 1, __ATOMIC_RELAXED);
    char *out = util_asprintf("%s/kube-lite-%d.out", dir, n);
    *kubeconfig = util_asprintf("%s/kube-lite-%d.kubeconfig", dir, n);
    *url = NULL;
    /* A shell redirects stdout to a file we can read the ready line from. */
    char *cmd =
        util_asprintf("exec '%s' --listen 127.0.0.1:0 --write-kubeconfig '%s'", bin, *kubeconfig);
    for (size_t i = 0; args && args[i]; i++) {
        char *next = util_asprintf("%s '%s'", cmd, args[i]);
        free(cmd);
        cmd = next;
    }
    char *full = util_asprintf("%s > '%s'", cmd, out);
    free(cmd);
    char *argv[] = {"/bin/sh", "-c", full, NULL};
    pid_t pid = th_spawn(argv, NULL);
    free(full);
    free(bin);
    for (int i = 0; pid > 0 && i < 500 && !*url; i++) {
        FILE *f = fopen(out, "r");
        char line[256] = "";
        if (f) {
            if (fgets(line, sizeof(line), f) && strncmp(line, "kube-lite: serving on ", 22) == 0) {
                line[strcspn(line, "\n")] = '\0';
                *url = util_strdup(line + 22);
            }
            fclose(f);
        }
        if (!*url)
            util_sleep(10 * UTIL_MS);
    }
    free(out);
    if (!*url) {
        th_stop(pid, SIGKILL);
        free(*kubeconfig);
        *kubeconfig = NULL;
        return -1;
    }
    return pid;
}
