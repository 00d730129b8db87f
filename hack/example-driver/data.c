/*
 * data: what makes the driver's volumes hold data. A snapshot keeps a copy
 * of its volume's folder, a clone or a restore starts from its source's;
 * with --mount, NodeStage and NodePublish bind-mount the volume's folder
 * (or, for a block volume, its backing file) where the CO asks.
 *
 * The mount table of this process's mount namespace is the truth about
 * what is mounted: state.json says where the CO staged and published, and
 * every call makes the mount table agree (a node restart that lost the
 * mounts is mended by the CO's next NodeStage/NodePublish).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "driver.h"
#include "obs/obs.h"

/* ---- copies ----------------------------------------------------------------------------- */

/* Copies one regular file, keeping its holes: a block volume's backing
 * file is as large as the volume and mostly never written. */
static int copy_file(const char *src, const char *dst, mode_t mode)
{
    int in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -errno;
    int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode & 07777);
    if (out < 0) {
        int e = -errno;
        close(in);
        return e;
    }
    int rc = 0;
    struct stat st;
    if (fstat(in, &st) < 0)
        rc = -errno;
    off_t pos = 0;
    static const size_t CHUNK = 1 << 20;
    char *buf = rc == 0 ? util_calloc(1, CHUNK) : NULL;
    while (rc == 0 && pos < st.st_size) {
        off_t data = lseek(in, pos, SEEK_DATA);
        if (data < 0) {
            if (errno != ENXIO)
                rc = -errno;
            break; /* ENXIO: only a hole is left */
        }
        off_t hole = lseek(in, data, SEEK_HOLE);
        if (hole < 0) {
            rc = -errno;
            break;
        }
        for (pos = data; rc == 0 && pos < hole;) {
            size_t want = (size_t)(hole - pos) < CHUNK ? (size_t)(hole - pos) : CHUNK;
            ssize_t n = pread(in, buf, want, pos);
            if (n <= 0) {
                rc = n < 0 ? -errno : -EIO;
                break;
            }
            for (ssize_t done = 0; rc == 0 && done < n;) {
                ssize_t w = pwrite(out, buf + done, (size_t)(n - done), pos + done);
                if (w < 0)
                    rc = -errno;
                else
                    done += w;
            }
            pos += n;
        }
    }
    free(buf);
    if (rc == 0 && ftruncate(out, st.st_size) < 0)
        rc = -errno;
    if (close(out) < 0 && rc == 0)
        rc = -errno;
    close(in);
    return rc;
}

static int copy_entries(const char *src, const char *dst, int depth)
{
    if (depth > 64)
        return -ELOOP;
    DIR *dir = opendir(src);
    if (!dir)
        return -errno;
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (errno = 0, e = readdir(dir)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char *from = util_asprintf("%s/%s", src, e->d_name);
        char *to = util_asprintf("%s/%s", dst, e->d_name);
        struct stat st;
        if (lstat(from, &st) < 0) {
            rc = -errno;
        } else if (S_ISDIR(st.st_mode)) {
            if (mkdir(to, st.st_mode & 07777) < 0)
                rc = -errno;
            else
                rc = copy_entries(from, to, depth + 1);
        } else if (S_ISREG(st.st_mode)) {
            rc = copy_file(from, to, st.st_mode);
        } else if (S_ISLNK(st.st_mode)) {
            char target[PATH_MAX];
            ssize_t n = readlink(from, target, sizeof(target) - 1);
            if (n < 0) {
                rc = -errno;
            } else {
                target[n] = '\0';
                if (symlink(target, to) < 0)
                    rc = -errno;
            }
        }
        /* Sockets, fifos and devices a workload left are not data. */
        free(from);
        free(to);
    }
    if (rc == 0 && errno)
        rc = -errno;
    closedir(dir);
    return rc;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

int drv_remove_tree(const char *path)
{
    if (nftw(path, remove_entry, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

int drv_copy_tree(const char *src, const char *dst)
{
    /* Into a fresh folder beside dst, renamed into place when whole: a
     * crash halfway leaves no half-filled volume or snapshot behind. */
    char *tmp = util_asprintf("%s.partial", dst);
    int rc = drv_remove_tree(tmp);
    if (rc == 0 && mkdir(tmp, 0755) < 0)
        rc = -errno;
    if (rc == 0)
        rc = copy_entries(src, tmp, 0);
    if (rc == 0 && drv_remove_tree(dst) == 0 && rename(tmp, dst) < 0)
        rc = -errno;
    if (rc < 0) {
        drv_remove_tree(tmp);
        rc = util_err_set(rc, "cannot copy %s to %s: %s", src, dst, strerror(-rc));
    }
    free(tmp);
    return rc;
}

/* ---- mounts ------------------------------------------------------------------------------ */

/* A mountinfo path with its octal escapes (\040 for a space) undone, in
 * place. */
static void unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r;) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 4;
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
}

int drv_mounted_at(const char *path, bool *mounted)
{
    *mounted = false;
    char real[PATH_MAX];
    if (!realpath(path, real))
        return errno == ENOENT ? 0 : util_err_set(-errno, "cannot resolve %s: %m", path);
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return util_err_set(-errno, "cannot read /proc/self/mountinfo: %m");
    char *line = NULL;
    size_t cap = 0;
    while (!*mounted && getline(&line, &cap, f) > 0) {
        /* id parent major:minor root mount-point options ... */
        char *save = NULL, *field = strtok_r(line, " ", &save);
        for (int i = 1; field && i < 5; i++)
            field = strtok_r(NULL, " ", &save);
        if (field) {
            unescape(field);
            *mounted = strcmp(field, real) == 0;
        }
    }
    free(line);
    fclose(f);
    return 0;
}

static int needs_privilege(int e, const char *what, const char *src, const char *dst)
{
    if (e == EPERM || e == EACCES)
        return util_err_set(-e, "cannot %s %s at %s: %s (--mount needs CAP_SYS_ADMIN)", what, src,
                            dst, strerror(e));
    return util_err_set(-e, "cannot %s %s at %s: %s", what, src, dst, strerror(e));
}

int drv_bind_mount(const char *src, const char *dst, bool readonly)
{
    bool there = false;
    int rc = drv_mounted_at(dst, &there);
    if (rc < 0 || there)
        return rc; /* the CO asked again: what is mounted stays */
    if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
        return needs_privilege(errno, "bind-mount", src, dst);
    /* A bind mount takes MS_RDONLY only on a remount of itself. */
    if (readonly && mount(NULL, dst, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) < 0) {
        int e = errno;
        umount2(dst, MNT_DETACH);
        return needs_privilege(e, "make read-only the mount of", src, dst);
    }
    obs_v(5, "mounted %s at %s%s", src, dst, readonly ? " read-only" : "");
    return 0;
}

int drv_unmount(const char *path)
{
    /* Every mount stacked there goes: a CO that asked twice may have made
     * two. */
    for (int i = 0; i < 16; i++) {
        bool there = false;
        int rc = drv_mounted_at(path, &there);
        if (rc < 0 || !there)
            return rc;
        if (umount2(path, 0) < 0)
            return util_err_set(-errno, "cannot unmount %s: %m", path);
        obs_v(5, "unmounted %s", path);
    }
    return util_err_set(-EBUSY, "cannot unmount %s: still mounted after 16 unmounts", path);
}

int drv_block_file(const drv_volume *v, char **out)
{
    *out = util_asprintf("%s/" DRV_BLOCK_FILE, v->path);
    int fd = open(*out, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || ftruncate(fd, v->capacity) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return util_err_set(-e, "cannot make the backing file %s: %s", *out, strerror(e));
    }
    close(fd);
    return 0;
}
