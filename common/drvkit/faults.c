/*
 * Fault injection: per method, a delay, "fail the next N calls with this
 * gRPC code", and "exit abruptly at the N-th call, before or after it took
 * effect". Rules come from --fault at start-up and from the control file
 * <state-dir>/faults.json, which is looked at (one stat) on every call and
 * re-read when it changed, so a test can arm a fault in a running driver.
 *
 * Flag syntax (rules separated by ';', each "Method:rule"):
 *   CreateVolume:delay=500ms
 *   CreateVolume:fail=2:UNAVAILABLE:try again
 *   CreateVolume:crash=3:after            (":before" is the default)
 * File syntax:
 *   {"CreateVolume": {"delay_ms": 500,
 *                     "fail": {"count": 2, "code": "UNAVAILABLE", "message": "try again"},
 *                     "crash": {"at": 3, "when": "after"}}}
 *   {"CreateSnapshot": {"hold": true}}
 * "hold" (file only) keeps every call of the method waiting until the file
 * changes to rules without it: a test sees the state while a call is in
 * flight for as long as it needs, however slow the machine, where a delay
 * is a window a loaded machine can miss.
 * A (re)read file replaces every rule, flags' included, and restarts the
 * counts; removing the file clears all rules. Method names are the
 * driver's own (each driver passes its table), so the CSI and the COSI
 * example drivers share this code.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <json-c/json.h>

#include "csi/csi.h"
#include "drvkit/drvkit.h"
#include "kobj/kobj.h"
#include "obs/obs.h"

struct rule {
    util_duration delay;
    int fail_left;
    int fail_code;
    char *fail_msg;
    bool hold;
    int64_t crash_at; /* 0: no crash */
    bool crash_after;
    int64_t calls; /* since the rule was installed */
};

struct drvkit_faults {
    pthread_mutex_t mu;
    const char *const *methods;
    int n_methods;
    struct rule *rules; /* one per method */
    char *file;
    bool seen; /* the stamp below is of a file we read */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

static void rules_clear(struct rule *rules, int n)
{
    for (int i = 0; i < n; i++) {
        free(rules[i].fail_msg);
        memset(&rules[i], 0, sizeof(rules[i]));
    }
}

static int parse_count(const char *s, const char *what, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v <= 0 || v > INT32_MAX)
        return util_err_set(-EINVAL, "%s: want a positive count, got \"%s\"", what, s);
    *out = v;
    return 0;
}

static int set_fail(struct rule *r, int64_t count, const char *code_name, const char *msg,
                    const char *what)
{
    int code = 0;
    if (!code_name || csi_code_from_name(code_name, &code) < 0 || code == CSI_OK)
        return util_err_set(-EINVAL, "%s: unknown gRPC code \"%s\"", what,
                            code_name ? code_name : "");
    r->fail_left = (int)count;
    r->fail_code = code;
    free(r->fail_msg);
    r->fail_msg = util_strdup(msg && *msg ? msg : "injected failure");
    return 0;
}

static int method_index(const drvkit_faults *f, const char *name)
{
    for (int i = 0; i < f->n_methods; i++)
        if (strcmp(f->methods[i], name) == 0)
            return i;
    return -1;
}

/* One "Method:rule" of the --fault flag. */
static int parse_one(const drvkit_faults *f, struct rule *rules, char *spec)
{
    char *colon = strchr(spec, ':');
    if (!colon)
        return util_err_set(-EINVAL, "fault \"%s\": want Method:rule", spec);
    *colon = '\0';
    int m = method_index(f, spec);
    if (m < 0)
        return util_err_set(-EINVAL, "fault: unknown method \"%s\"", spec);
    char *rule = colon + 1;
    struct rule *r = &rules[m];
    if (util_has_prefix(rule, "delay=")) {
        if (util_duration_parse(rule + 6, &r->delay) < 0 || r->delay < 0)
            return util_err_set(-EINVAL, "fault %s: bad delay \"%s\"", spec, rule + 6);
        return 0;
    }
    if (util_has_prefix(rule, "fail=")) {
        char *count = rule + 5;
        char *code = strchr(count, ':');
        char *msg = NULL;
        if (code) {
            *code++ = '\0';
            msg = strchr(code, ':');
            if (msg)
                *msg++ = '\0';
        }
        int64_t n = 0;
        int rc = parse_count(count, spec, &n);
        return rc < 0 ? rc : set_fail(r, n, code, msg, spec);
    }
    if (util_has_prefix(rule, "crash=")) {
        char *count = rule + 6;
        char *when = strchr(count, ':');
        if (when)
            *when++ = '\0';
        if (when && strcmp(when, "before") != 0 && strcmp(when, "after") != 0)
            return util_err_set(-EINVAL, "fault %s: crash wants :before or :after", spec);
        r->crash_after = when && strcmp(when, "after") == 0;
        return parse_count(count, spec, &r->crash_at);
    }
    return util_err_set(-EINVAL, "fault %s: unknown rule \"%s\" (delay=, fail=, crash=)", spec,
                        rule);
}

static int parse_flag(const drvkit_faults *f, struct rule *rules, const char *text)
{
    char *copy = util_strdup(text);
    char *save = NULL;
    int r = 0;
    for (char *tok = strtok_r(copy, ";", &save); tok && r == 0; tok = strtok_r(NULL, ";", &save)) {
        while (*tok == ' ')
            tok++;
        if (*tok)
            r = parse_one(f, rules, tok);
    }
    free(copy);
    return r;
}

static int parse_file_rule(struct rule *r, const char *method, json_object *o)
{
    if (!kobj_typed(o, json_type_object))
        return util_err_set(-EINVAL, "%s: want an object", method);
    int64_t n = 0;
    if (kobj_int64(o, "delay_ms", &n) == 0)
        r->delay = n * UTIL_MS;
    json_object *v = kobj_get(o, "hold");
    if (v) {
        if (!kobj_typed(v, json_type_boolean))
            return util_err_set(-EINVAL, "%s: hold wants true or false", method);
        r->hold = kobj_bool(o, "hold", false);
    }
    v = kobj_get(o, "fail");
    if (v) {
        const char *code = kobj_str(v, "code");
        if (kobj_int64(v, "count", &n) < 0 || !code)
            return util_err_set(-EINVAL, "%s: fail wants count and code", method);
        if (n <= 0)
            return util_err_set(-EINVAL, "%s: fail count must be positive", method);
        int rc = set_fail(r, n, code, kobj_str(v, "message"), method);
        if (rc < 0)
            return rc;
    }
    v = kobj_get(o, "crash");
    if (v) {
        if (kobj_int64(v, "at", &n) < 0 || n <= 0)
            return util_err_set(-EINVAL, "%s: crash wants a positive \"at\"", method);
        r->crash_at = n;
        const char *w = kobj_get(v, "when") ? kobj_str(v, "when") : "before";
        if (!w || (strcmp(w, "before") != 0 && strcmp(w, "after") != 0))
            return util_err_set(-EINVAL, "%s: crash \"when\" is before or after", method);
        r->crash_after = strcmp(w, "after") == 0;
    }
    return 0;
}

static int parse_file(const drvkit_faults *f, struct rule *rules, const char *path)
{
    json_object *root = json_object_from_file(path);
    if (!root || !json_object_is_type(root, json_type_object)) {
        json_object_put(root);
        return util_err_set(-EINVAL, "%s is not a JSON object", path);
    }
    int r = 0;
    json_object_object_foreach(root, key, val)
    {
        int m = method_index(f, key);
        if (m < 0)
            r = util_err_set(-EINVAL, "unknown method \"%s\"", key);
        else
            r = parse_file_rule(&rules[m], key, val);
        if (r < 0)
            break;
    }
    json_object_put(root);
    return r;
}

/* Re-reads the control file when it changed. Called with f->mu held. */
static void check_file(drvkit_faults *f)
{
    struct stat st;
    if (stat(f->file, &st) < 0) {
        if (f->seen) {
            obs_info("%s removed: fault injection off", f->file);
            rules_clear(f->rules, f->n_methods);
            f->seen = false;
        }
        return;
    }
    if (f->seen && st.st_dev == f->dev && st.st_ino == f->ino && st.st_size == f->size &&
        st.st_mtim.tv_sec == f->mtime.tv_sec && st.st_mtim.tv_nsec == f->mtime.tv_nsec)
        return;
    f->seen = true;
    f->dev = st.st_dev;
    f->ino = st.st_ino;
    f->size = st.st_size;
    f->mtime = st.st_mtim;
    struct rule *fresh = util_calloc((size_t)f->n_methods, sizeof(*fresh));
    if (parse_file(f, fresh, f->file) < 0) {
        obs_warn("ignoring %s: %s", f->file, util_err_last());
        rules_clear(fresh, f->n_methods);
        free(fresh);
        return;
    }
    rules_clear(f->rules, f->n_methods);
    free(f->rules);
    f->rules = fresh;
    obs_info("fault injection rules loaded from %s", f->file);
}

int drvkit_faults_new(const char *const *methods, int n_methods, const char *spec, const char *file,
                      drvkit_faults **out)
{
    *out = NULL;
    drvkit_faults *f = util_calloc(1, sizeof(*f));
    pthread_mutex_init(&f->mu, NULL);
    f->methods = methods;
    f->n_methods = n_methods;
    f->rules = util_calloc((size_t)n_methods, sizeof(*f->rules));
    f->file = util_strdup(file);
    if (spec && *spec) {
        int r = parse_flag(f, f->rules, spec);
        if (r < 0) {
            drvkit_faults_free(f);
            return r;
        }
    }
    *out = f;
    return 0;
}

void drvkit_faults_free(drvkit_faults *f)
{
    if (!f)
        return;
    rules_clear(f->rules, f->n_methods);
    free(f->rules);
    pthread_mutex_destroy(&f->mu);
    free(f->file);
    free(f);
}

void drvkit_faults_on_call(drvkit_faults *f, int m, drvkit_fault_action *out)
{
    memset(out, 0, sizeof(*out));
    if (m < 0 || m >= f->n_methods)
        return;
    pthread_mutex_lock(&f->mu);
    check_file(f);
    /* A held call waits for the rules to change, ten minutes at most (a
     * test that forgot to release it still ends). */
    for (int waited = 0; f->rules[m].hold && waited < 12000; waited++) {
        pthread_mutex_unlock(&f->mu);
        util_sleep(50 * UTIL_MS);
        pthread_mutex_lock(&f->mu);
        check_file(f);
    }
    struct rule *r = &f->rules[m];
    r->calls++;
    out->delay = r->delay;
    if (r->crash_at && r->calls == r->crash_at) {
        out->crash_before = !r->crash_after;
        out->crash_after = r->crash_after;
    }
    if (r->fail_left > 0) {
        r->fail_left--;
        out->fail_code = r->fail_code;
        snprintf(out->fail_msg, sizeof(out->fail_msg), "%s", r->fail_msg);
    }
    pthread_mutex_unlock(&f->mu);
}
