/*
 * Durable files for the example drivers: a state file is replaced whole
 * (temporary file, fsync, rename, fsync of the directory), so a crash at any
 * instant leaves the old or the new document, never a torn one.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "drvkit/drvkit.h"

static int write_fd(int fd, const char *path, const char *data, size_t len, bool sync)
{
    size_t off = 0;
    while (off < len) {
        ssize_t n = write(fd, data + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            close(fd);
            return util_err_set(-e, "cannot write %s: %s", path, strerror(e));
        }
        off += (size_t)n;
    }
    if (sync && fsync(fd) < 0) {
        int e = errno;
        close(fd);
        return util_err_set(-e, "cannot fsync %s: %s", path, strerror(e));
    }
    if (close(fd) < 0)
        return util_err_set(-errno, "cannot close %s: %m", path);
    return 0;
}

int drvkit_write_file(const char *path, const char *data, size_t len, bool sync)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return util_err_set(-errno, "cannot create %s: %m", path);
    return write_fd(fd, path, data, len, sync);
}

int drvkit_sync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return util_err_set(-errno, "cannot open %s: %m", dir);
    int r = fsync(fd) < 0 ? util_err_set(-errno, "cannot fsync %s: %m", dir) : 0;
    close(fd);
    return r;
}

int drvkit_replace_file(const char *path, const char *data, size_t len, unsigned mode, bool sync)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash ? util_asprintf("%.*s", (int)(slash - path), path) : util_strdup(".");
    char *tmp = util_asprintf("%s/.%s.tmp", dir, slash ? slash + 1 : path);
    int r = 0;
    /* O_EXCL after an unlink: the mode is the one asked for, even when a
     * crash left a temporary file with other bits. */
    if (unlink(tmp) < 0 && errno != ENOENT)
        r = util_err_set(-errno, "cannot remove %s: %m", tmp);
    int fd = r < 0 ? -1 : open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, (mode_t)mode);
    if (r == 0 && fd < 0)
        r = util_err_set(-errno, "cannot create %s: %m", tmp);
    if (r == 0)
        r = write_fd(fd, tmp, data, len, sync);
    if (r == 0 && rename(tmp, path) < 0)
        r = util_err_set(-errno, "cannot rename %s: %m", tmp);
    if (r == 0 && sync)
        r = drvkit_sync_dir(*dir ? dir : "/");
    free(tmp);
    free(dir);
    return r;
}

int drvkit_read_file(const char *path, char **data, size_t *len)
{
    *data = NULL;
    *len = 0;
    FILE *f = fopen(path, "re");
    if (!f)
        return errno == ENOENT ? -ENOENT : util_err_set(-errno, "cannot read %s: %m", path);
    util_buf b = {0};
    char chunk[8192];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        util_buf_put(&b, chunk, n);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b.buf);
        return util_err_set(-EIO, "cannot read %s", path);
    }
    if (!b.buf)
        util_buf_put(&b, "", 0);
    *data = b.buf;
    *len = b.len;
    return 0;
}

int drvkit_mkdir_p(const char *path, unsigned mode)
{
    char *p = util_strdup(path);
    int r = 0;
    for (char *slash = p + 1;; slash++) {
        char c = *slash;
        if (c != '/' && c != '\0')
            continue;
        *slash = '\0';
        if (mkdir(p, (mode_t)mode) < 0 && errno != EEXIST) {
            r = -errno;
            break;
        }
        *slash = c;
        if (c == '\0')
            break;
    }
    free(p);
    if (r == 0) {
        struct stat st;
        if (stat(path, &st) < 0)
            r = -errno;
        else if (!S_ISDIR(st.st_mode))
            r = -ENOTDIR;
    }
    return r;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) < 0 && errno != ENOENT ? -errno : 0;
}

int drvkit_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : util_err_set(-errno, "cannot stat %s: %m", path);
    int r = nftw(path, remove_one, 16, FTW_DEPTH | FTW_PHYS);
    if (r != 0)
        return util_err_set(r < 0 ? r : -EIO, "cannot remove %s", path);
    return 0;
}
