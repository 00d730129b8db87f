/*
 * Request counts of one caller from kube-apiserver's audit log, for the
 * benchmark helpers run against the real control plane
 * (hack/kubernetes/cluster.sh writes DIR/logs/audit.log: one JSON line per
 * finished request, level Metadata, stages RequestReceived and
 * ResponseStarted omitted). kube-lite's /metrics gives the same counts
 * (apiserver_request_total by verb, resource, code) for every caller at
 * once; here only the lines whose user.username is the sidecar's are
 * counted, so the benchmark's own requests are not in them at all.
 *
 * One difference remains: a watch is logged when it ends, kube-lite counts
 * it when it starts; the sidecars' watches stay open during a run, so
 * neither counts them in a phase.
 *
 * The reader keeps its offset and reads only complete new lines, so each
 * snapshot costs what was appended since the previous one.
 */
#ifndef BENCH_AUDIT_H
#define BENCH_AUDIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

struct audit_reader {
    const char *path;
    const char *user;
    long off;
};

typedef void (*audit_add_fn)(void *ud, const char *verb, const char *resource, int code);

static const char *audit_str(json_object *o, const char *k1, const char *k2)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, k1, &v))
        return NULL;
    if (k2 && !json_object_object_get_ex(v, k2, &v))
        return NULL;
    return json_object_get_type(v) == json_type_string ? json_object_get_string(v) : NULL;
}

/* Calls add for each new request of r->user; returns the lines read, -1
 * when the file cannot be read. */
static int audit_read(struct audit_reader *r, audit_add_fn add, void *ud)
{
    FILE *f = fopen(r->path, "r");
    if (!f)
        return -1;
    if (fseek(f, r->off, SEEK_SET) != 0) {
        fclose(f);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int n = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] != '\n')
            break; /* being written: read it next time */
        r->off += len;
        n++;
        json_object *o = json_tokener_parse(line);
        if (!o)
            continue;
        const char *user = audit_str(o, "user", "username");
        const char *stage = audit_str(o, "stage", NULL);
        if (user && strcmp(user, r->user) == 0 &&
            (!stage || strcmp(stage, "ResponseComplete") == 0 || strcmp(stage, "Panic") == 0)) {
            const char *verb = audit_str(o, "verb", NULL);
            const char *res = audit_str(o, "objectRef", "resource");
            json_object *st = NULL, *code = NULL;
            int c = 0;
            if (json_object_object_get_ex(o, "responseStatus", &st) &&
                json_object_object_get_ex(st, "code", &code))
                c = json_object_get_int(code);
            add(ud, verb ? verb : "", res ? res : "", c);
        }
        json_object_put(o);
    }
    free(line);
    fclose(f);
    return n;
}

#endif
