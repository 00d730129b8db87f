/*
 * Private to the kube config code (config.c, config_exec.c, config_file.c):
 * the structures and helpers the three files share. The public API is in
 * common/kube/kube.h.
 */
#ifndef CSISIDECAR_KUBE_CONFIG_INTERNAL_H
#define CSISIDECAR_KUBE_CONFIG_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>

#include "kube/kube.h"

#define MAX_SMALL_FILE (1 << 20) /* tokens, CA bundles, namespace */

/* A token file re-read whenever stat(2) says it changed (bound service
 * account tokens are rotated by the kubelet through an atomic symlink swap,
 * so inode, size and mtime all move). */
struct token_file {
    char *path;
    char *value; /* last good content, whitespace-trimmed; NULL before the first read */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

/* An exec credential plugin and its cached answer. */
struct exec_plugin {
    char *where;       /* "kubeconfig <file>: users[i].user.exec", for messages */
    char *api_version; /* EXEC_API_V1 or EXEC_API_V1BETA1 */
    char **argv;       /* command then args, NULL-ended */
    char **env;        /* "NAME=value" from the kubeconfig, NULL-ended */
    char *exec_info;   /* "KUBERNETES_EXEC_INFO=<ExecCredential JSON>" */
    /* Cache, under kube_config.mu. */
    bool have;
    char *token; /* NULL when the plugin gave only a certificate */
    time_t exp;  /* 0: never expires */
};

struct kube_config {
    char *server;
    char *ns;
    kube_tls tls; /* points at the strings below */
    char *ca_file, *ca_pem, *server_name, *cert_file, *cert_pem, *key_file, *key_pem;
    /* An exec plugin's previous certificate and key, kept for one more
     * rotation so that a kube_tls pointer read just before a rotation stays
     * valid while the caller copies it. */
    char *old_cert_pem, *old_key_pem;

    char *token;           /* static bearer token, or NULL */
    struct token_file tf;  /* tf.path NULL when none; wins over token */
    struct exec_plugin *x; /* NULL when none */
    pthread_mutex_t mu;    /* guards tf and x's cache and the exec certificate */
};

/* config.c: helpers */
char *kcfg_read_file(const char *path, size_t max, size_t *len, struct stat *st);
char *kcfg_resolve(const char *dir, const char *p);
char *kcfg_dir_of(const char *path);
char *kcfg_b64_decode(const char *in, size_t *out_len);
char *kcfg_b64_encode(const char *in, size_t n);
bool kcfg_looks_like_pem(const char *s, size_t n);
bool kcfg_parse_rfc3339(const char *s, time_t *out);

/* config.c: the config object and the token file */
kube_config *kcfg_config_new(void);
void kcfg_config_sync_tls(kube_config *c);
char *kcfg_normalize_server(const char *server, bool default_tls);
bool kcfg_is_https(const char *server);
int kcfg_token_file_refresh(struct token_file *tf, const char *where);

/* config_exec.c: the exec credential plugin */
void kcfg_exec_free(struct exec_plugin *x);
int kcfg_exec_refresh(kube_config *c, struct exec_plugin *x);

/* config_file.c: the kubeconfig file */
kube_config *kcfg_master_only(const char *master);
int kcfg_from_file(const char *path, const char *master, kube_config **out, bool *empty);

#endif
