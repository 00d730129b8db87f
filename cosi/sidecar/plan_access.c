/*
 * The BucketAccess decision: what one sync of a BucketAccess does, the
 * grant and revoke requests, and what a grant turns into: the BucketInfo
 * JSON and the Secret that carries it. Pure: no I/O, no clock, no global
 * state, no logging (the BucketInfo holds credentials).
 *
 * The BucketInfo is written by hand rather than through json-c, because
 * applications parse it with the field order, layout and escaping of Go's
 * json.Marshal, and an Azure token's expiry goes through Go's time.Parse
 * rules (reimplemented below for the one layout upstream uses).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cosi/sidecar/cosisidecar.h"
#include "kobj/kobj.h"

#define MSG_NOT_READY "BucketAccess can't be granted to Bucket not in Ready state"

static const char *nonempty(const json_object *o, const char *key)
{
    const char *s = kobj_str(o, key);
    return s && *s ? s : NULL;
}

const char *csc_access_class_name(const json_object *access)
{
    return nonempty(kobj_obj(access, "spec"), "bucketAccessClassName");
}

const char *csc_access_claim_name(const json_object *access)
{
    return nonempty(kobj_obj(access, "spec"), "bucketClaimName");
}

const char *csc_access_secret_name(const json_object *access)
{
    return nonempty(kobj_obj(access, "spec"), "credentialsSecretName");
}

const char *csc_access_recorded_bucket_id(const json_object *access)
{
    return nonempty(kobj_obj(kobj_meta(access), "annotations"), COSI_ANN_BUCKET_ID);
}

const char *csc_claim_bucket_name(const json_object *claim)
{
    return nonempty(kobj_obj(claim, "status"), "bucketName");
}

bool csc_class_is_ours(const char *driver, const json_object *access_class)
{
    const char *d = kobj_str(access_class, "driverName");
    return d && driver && csc_equal_fold(d, driver);
}

char *csc_account_name(const json_object *access)
{
    const char *uid = kobj_uid(access);
    return uid && *uid ? util_asprintf("%s%s", COSI_ACCOUNT_PREFIX, uid) : NULL;
}

/* ---- the decision ------------------------------------------------------------------------ */

static int refuse(csc_access_plan *p, const char *reason, char *message)
{
    p->action = CSC_ACCESS_REFUSE;
    p->event.reason = reason;
    p->event.message = message;
    return 0;
}

/* Why no bucket id is known for an access, in words for an Event. */
static char *no_bucket_why(const json_object *access, const json_object *claim,
                           const json_object *bucket)
{
    const char *cn = csc_access_claim_name(access);
    if (!claim)
        return csc_not_found(&KUBE_BUCKETCLAIM, cn ? cn : "");
    const char *bn = csc_claim_bucket_name(claim);
    if (!bn)
        return util_asprintf("BucketClaim %s has no bucketName", cn ? cn : "");
    if (!bucket)
        return csc_not_found(&KUBE_BUCKET, bn);
    return util_asprintf("Bucket %s has no bucketID", bn);
}

static int plan_revoke(const char *driver, const json_object *access, const json_object *cls,
                       const json_object *claim, const json_object *bucket, csc_access_plan *p)
{
    if (!kobj_has_finalizer(access, COSI_FINALIZER_ACCESS))
        return 0;
    /* Without the class, the Bucket tells whose access it is; with
     * neither, it may be another driver's: hands off. */
    bool ours = cls ? csc_class_is_ours(driver, cls) : bucket && csc_bucket_is_ours(driver, bucket);
    if (!ours)
        return 0;
    const char *account = nonempty(kobj_obj(access, "status"), "accountID");
    /* The bucket the grant was made on, as recorded before the driver was
     * asked: the Bucket may be gone by now (its deletion went ahead while
     * a cache lacked this access), or name another bucket. */
    const char *rec = csc_access_recorded_bucket_id(access);
    const char *bid = rec ? rec : bucket ? csc_bucket_id(bucket) : NULL;
    if (account && !bid) {
        char *why = no_bucket_why(access, claim, bucket);
        char *msg = util_asprintf("failed to revoke access: %s", why);
        free(why);
        return refuse(p, COSI_REASON_FAILED_REVOKE_ACCESS, msg);
    }
    if (!account && bid && !cls) {
        /* Our finalizer says a grant may have run; only the class could
         * repeat it to learn the account. */
        const char *cn = csc_access_class_name(access);
        char *nf = csc_not_found(&KUBE_BUCKETACCESSCLASS, cn ? cn : "");
        char *msg = util_asprintf("failed to revoke access: cannot learn the account: %s", nf);
        free(nf);
        return refuse(p, COSI_REASON_FAILED_REVOKE_ACCESS, msg);
    }
    p->action = CSC_ACCESS_REVOKE;
    p->bucket_id = bid;
    p->bucket_name = bid && bucket ? kobj_name(bucket) : NULL;
    p->account_id = account;
    p->regrant = !account && bid;
    return 0;
}

int csc_access_plan_make(const char *driver, const json_object *access,
                         const json_object *access_class, const json_object *claim,
                         const json_object *bucket, csc_access_plan *out)
{
    memset(out, 0, sizeof(*out));
    if (!kobj_typed(access, json_type_object))
        return util_err_set(-EINVAL, "a BucketAccess must be a JSON object");
    if (kobj_deleting(access))
        return plan_revoke(driver, access, access_class, claim, bucket, out);
    /* Granted with an account: done. Granted without one (upstream stops
     * there too) is granted again, which records the account. */
    json_object *st = kobj_obj(access, "status");
    if (kobj_bool(st, "accessGranted", false) && nonempty(st, "accountID"))
        return 0;
    const char *cn = csc_access_class_name(access);
    if (!access_class)
        return refuse(out, COSI_REASON_FAILED_GRANT_ACCESS,
                      cn ? csc_not_found(&KUBE_BUCKETACCESSCLASS, cn)
                         : util_strdup("resource name may not be empty"));
    if (!csc_class_is_ours(driver, access_class))
        return 0;
    if (!csc_access_secret_name(access))
        return refuse(out, COSI_REASON_FAILED_GRANT_ACCESS,
                      util_strdup("CredentialsSecretName not defined in the BucketAccess"));
    if (!claim || !csc_ready(claim) || !csc_claim_bucket_name(claim))
        return refuse(out, COSI_REASON_WAITING_FOR_BUCKET,
                      util_strdup("invalid bucket state: " MSG_NOT_READY));
    const char *auth = kobj_str(access_class, "authenticationType");
    if (auth && strcmp(auth, "IAM") == 0 &&
        !nonempty(kobj_obj(access, "spec"), "serviceAccountName"))
        return refuse(out, COSI_REASON_FAILED_GRANT_ACCESS,
                      util_strdup("ServiceAccountName required when AuthenticationType is IAM"));
    if (!bucket) {
        char *nf = csc_not_found(&KUBE_BUCKET, csc_claim_bucket_name(claim));
        char *msg = util_asprintf("failed to fetch bucket: %s", nf);
        free(nf);
        return refuse(out, COSI_REASON_FAILED_GRANT_ACCESS, msg);
    }
    const char *bid = csc_bucket_id(bucket);
    if (!csc_ready(bucket) || !bid)
        return refuse(out, COSI_REASON_WAITING_FOR_BUCKET,
                      util_asprintf(MSG_NOT_READY ": (isReady? %s), (ID empty? %s)",
                                    csc_ready(bucket) ? "true" : "false", bid ? "false" : "true"));
    out->action = CSC_ACCESS_GRANT;
    const char *rec = csc_access_recorded_bucket_id(access);
    out->record =
        !kobj_has_finalizer(access, COSI_FINALIZER_ACCESS) || !rec || strcmp(rec, bid) != 0;
    out->bucket_id = bid;
    out->bucket_name = kobj_name(bucket);
    return 0;
}

void csc_access_plan_clear(csc_access_plan *p)
{
    if (!p)
        return;
    free(p->event.message);
    memset(p, 0, sizeof(*p));
}

/* ---- requests ------------------------------------------------------------------------------ */

int csc_grant_request(const json_object *access, const json_object *access_class,
                      const char *bucket_id, Cosi__V1alpha1__DriverGrantBucketAccessRequest **out)
{
    *out = NULL;
    char *account = csc_account_name(access);
    if (!account || !bucket_id || !*bucket_id) {
        free(account);
        return util_err_set(-EINVAL, "BucketAccess %s: a grant needs a uid and a bucket id",
                            kobj_name(access) ? kobj_name(access) : "");
    }
    Cosi__V1alpha1__DriverGrantBucketAccessRequest *r = util_calloc(1, sizeof(*r));
    cosi__v1alpha1__driver_grant_bucket_access_request__init(r);
    r->bucket_id = util_strdup(bucket_id);
    r->name = account;
    const char *auth = kobj_str(access_class, "authenticationType");
    if (auth && strcmp(auth, "Key") == 0)
        r->authentication_type = COSI__V1ALPHA1__AUTHENTICATION_TYPE__Key;
    else if (auth && strcmp(auth, "IAM") == 0)
        r->authentication_type = COSI__V1ALPHA1__AUTHENTICATION_TYPE__IAM;
    r->parameters = csc_map_entries(
        kobj_obj(access_class, "parameters"),
        &cosi__v1alpha1__driver_grant_bucket_access_request__parameters_entry__descriptor,
        &r->n_parameters);
    *out = r;
    return 0;
}

int csc_revoke_request(const char *bucket_id, const char *account_id,
                       Cosi__V1alpha1__DriverRevokeBucketAccessRequest **out)
{
    *out = NULL;
    if (!bucket_id || !*bucket_id || !account_id || !*account_id)
        return util_err_set(-EINVAL, "a revoke needs a bucket id and an account id");
    Cosi__V1alpha1__DriverRevokeBucketAccessRequest *r = util_calloc(1, sizeof(*r));
    cosi__v1alpha1__driver_revoke_bucket_access_request__init(r);
    r->bucket_id = util_strdup(bucket_id);
    r->account_id = util_strdup(account_id);
    *out = r;
    return 0;
}

/* ---- the grant's answer, as Go's map reads it ---------------------------------------------- */

typedef Cosi__V1alpha1__DriverGrantBucketAccessResponse grant_resp;

static const char *key_of(const grant_resp *r, size_t i)
{
    return r->credentials[i] && r->credentials[i]->key ? r->credentials[i]->key : "";
}

/* Go decodes a map whose key repeats on the wire into one entry, the last
 * one read: the count is of distinct keys and lookups find the last. */
static size_t distinct_keys(const grant_resp *r)
{
    size_t n = 0;
    for (size_t i = 0; r && i < r->n_credentials; i++) {
        bool again = false;
        for (size_t j = i + 1; j < r->n_credentials && !again; j++)
            again = strcmp(key_of(r, i), key_of(r, j)) == 0;
        n += !again;
    }
    return n;
}

/* The last entry named `proto`; *found says whether there is one (its
 * details may still be absent). */
static const Cosi__V1alpha1__CredentialDetails *details(const grant_resp *r, const char *proto,
                                                        bool *found)
{
    *found = false;
    const Cosi__V1alpha1__CredentialDetails *d = NULL;
    for (size_t i = 0; r && i < r->n_credentials; i++)
        if (strcmp(key_of(r, i), proto) == 0) {
            *found = true;
            d = r->credentials[i]->value;
        }
    return d;
}

/* A secret's value, "" when missing (Go's zero value). */
static const char *secret(const Cosi__V1alpha1__CredentialDetails *d, const char *key)
{
    const char *v = "";
    for (size_t i = 0; d && i < d->n_secrets; i++) {
        const Cosi__V1alpha1__CredentialDetails__SecretsEntry *e = d->secrets[i];
        if (e && e->key && strcmp(e->key, key) == 0)
            v = e->value ? e->value : "";
    }
    return v;
}

int csc_grant_check(const json_object *access, const grant_resp *resp, csc_event *ev)
{
    memset(ev, 0, sizeof(*ev));
    if (distinct_keys(resp) == 1)
        return 0;
    ev->reason = COSI_REASON_FAILED_GRANT_ACCESS;
    ev->message = util_asprintf("BucketAccess %s: Credentials returned in "
                                "DriverGrantBucketAccessResponse should be of length 1",
                                kobj_name(access) ? kobj_name(access) : "");
    return util_err_set(-EINVAL, "%s", ev->message);
}

/* ---- Go's JSON strings --------------------------------------------------------------------- */

static void put(util_buf *b, const char *s)
{
    util_buf_put(b, s, strlen(s));
}

/* A JSON string as encoding/json writes it with HTML escaping on (the
 * json.Marshal default). */
static void go_string(util_buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    put(b, "\"");
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) {
            char hexbuf[8];
            const char *esc = NULL;
            switch (c) {
            case '"':
                esc = "\\\"";
                break;
            case '\\':
                esc = "\\\\";
                break;
            case '\b':
                esc = "\\b";
                break;
            case '\f':
                esc = "\\f";
                break;
            case '\n':
                esc = "\\n";
                break;
            case '\r':
                esc = "\\r";
                break;
            case '\t':
                esc = "\\t";
                break;
            default:
                if (c < 0x20 || c == '<' || c == '>' || c == '&') {
                    snprintf(hexbuf, sizeof(hexbuf), "\\u00%c%c", hex[c >> 4], hex[c & 0xf]);
                    esc = hexbuf;
                }
            }
            if (esc)
                put(b, esc);
            else
                util_buf_put(b, s + i, 1);
            i++;
            continue;
        }
        unsigned rune;
        size_t n = util_utf8_decode(s + i, len - i, &rune);
        if (n == 0) {
            put(b, "\\ufffd");
            i++;
        } else if (rune == 0x2028 || rune == 0x2029) {
            put(b, rune == 0x2028 ? "\\u2028" : "\\u2029");
            i += n;
        } else {
            util_buf_put(b, s + i, n);
            i += n;
        }
    }
    put(b, "\"");
}

static void field(util_buf *b, const char *name, const char *value, bool comma)
{
    if (comma)
        put(b, ",");
    go_string(b, name);
    put(b, ":");
    go_string(b, value ? value : "");
}

/* ---- Go's time.Parse for "2006-01-02 15:04:05.999999999 -0700 MST" ------------------------ */

struct scan {
    const char *v; /* what is left of the value */
};

static bool digit(const struct scan *s, size_t i)
{
    for (size_t k = 0; k <= i; k++)
        if (!s->v[k])
            return false;
    return s->v[i] >= '0' && s->v[i] <= '9';
}

/* Go's getnum: one or two digits (exactly two when fixed). */
static bool getnum(struct scan *s, bool fixed, int *out)
{
    if (!digit(s, 0))
        return false;
    if (!digit(s, 1)) {
        if (fixed)
            return false;
        *out = s->v[0] - '0';
        s->v += 1;
        return true;
    }
    *out = (s->v[0] - '0') * 10 + (s->v[1] - '0');
    s->v += 2;
    return true;
}

static bool literal(struct scan *s, char ch)
{
    if (*s->v != ch)
        return false;
    s->v++;
    return true;
}

/* A space in the layout matches a run of spaces (none at the very end). */
static bool spaces(struct scan *s)
{
    if (*s->v && *s->v != ' ')
        return false;
    while (*s->v == ' ')
        s->v++;
    return true;
}

/* Go's parseSignedOffset: a sign and a number up to 23; its length or 0. */
static size_t signed_offset(const char *v)
{
    if (v[0] != '+' && v[0] != '-')
        return 0;
    size_t i = 1;
    uint64_t x = 0;
    while (v[i] >= '0' && v[i] <= '9') {
        if (x > 100)
            return 0; /* past 23 already (and no overflow) */
        x = x * 10 + (uint64_t)(v[i] - '0');
        i++;
    }
    if (i == 1 || x > 23)
        return 0;
    return i;
}

/* Go's parseTimeZone: the length of a zone abbreviation at v, or 0. */
static size_t zone_name(const char *v)
{
    size_t len = strlen(v);
    if (len < 3)
        return 0;
    if (len >= 4 && (strncmp(v, "ChST", 4) == 0 || strncmp(v, "MeST", 4) == 0))
        return 4;
    if (strncmp(v, "GMT", 3) == 0)
        return len == 3 ? 3 : 3 + signed_offset(v + 3);
    if (v[0] == '+' || v[0] == '-')
        return signed_offset(v);
    size_t upper = 0;
    while (upper < 6 && v[upper] >= 'A' && v[upper] <= 'Z')
        upper++;
    switch (upper) {
    case 3:
        return 3;
    case 4:
        return v[3] == 'T' || strncmp(v, "WITA", 4) == 0 ? 4 : 0;
    case 5:
        return v[4] == 'T' ? 5 : 0;
    default:
        return 0;
    }
}

static bool leap(int64_t y)
{
    return y % 4 == 0 && (y % 100 != 0 || y % 400 == 0);
}

static int days_in(int m, int64_t y)
{
    static const int d[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && leap(y) ? 29 : d[m - 1];
}

/* Days from 1970-01-01 of a proleptic Gregorian date (any year). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

/* Seconds from 1970 of 0001-01-01T00:00:00Z, Go's zero Time. */
#define GO_ZERO_UNIX (-62135596800LL)

int csc_azure_expiry(const char *ts, char *out)
{
    snprintf(out, CSC_EXPIRY_MAX, "null");
    if (!ts)
        return -EINVAL;
    struct scan s = {ts};
    int year = 0, month, day, hour, min, sec;
    long nsec = 0;
    /* 2006: four digits. */
    for (int i = 0; i < 4; i++) {
        if (!digit(&s, 0))
            return -EINVAL;
        year = year * 10 + (*s.v++ - '0');
    }
    if (!literal(&s, '-') || !getnum(&s, true, &month) || month < 1 || month > 12)
        return -EINVAL;
    if (!literal(&s, '-') || !getnum(&s, true, &day))
        return -EINVAL;
    if (!spaces(&s) || !getnum(&s, false, &hour) || hour > 23)
        return -EINVAL;
    if (!literal(&s, ':') || !getnum(&s, true, &min) || min > 59)
        return -EINVAL;
    if (!literal(&s, ':') || !getnum(&s, true, &sec) || sec > 59)
        return -EINVAL;
    /* .999999999: optional, any number of digits, comma or period; the
     * first nine count. */
    if ((s.v[0] == '.' || s.v[0] == ',') && s.v[1] >= '0' && s.v[1] <= '9') {
        s.v++;
        int n = 0;
        while (*s.v >= '0' && *s.v <= '9') {
            if (n < 9)
                nsec = nsec * 10 + (*s.v - '0'), n++;
            s.v++;
        }
        for (; n < 9; n++)
            nsec *= 10;
    }
    /* -0700: a sign and two two-digit numbers, up to 24 and 60. */
    if (!spaces(&s))
        return -EINVAL;
    char sign = s.v[0];
    for (size_t i = 1; i <= 4; i++)
        if (!digit(&s, i))
            return -EINVAL;
    int ohr = (s.v[1] - '0') * 10 + (s.v[2] - '0'), omin = (s.v[3] - '0') * 10 + (s.v[4] - '0');
    if (ohr > 24 || omin > 60 || (sign != '+' && sign != '-'))
        return -EINVAL;
    s.v += 5;
    int offset = (ohr * 60 + omin) * 60 * (sign == '-' ? -1 : 1);
    /* MST: "UTC" makes the time UTC whatever the offset said (Go checks
     * the named location before the offset). */
    if (!spaces(&s))
        return -EINVAL;
    bool utc = strncmp(s.v, "UTC", 3) == 0;
    size_t zn = utc ? 3 : zone_name(s.v);
    if (zn == 0 || s.v[zn] != '\0')
        return -EINVAL;
    if (day < 1 || day > days_in(month, year))
        return -EINVAL;
    int64_t t =
        days_from_civil(year, month, day) * 86400 + (int64_t)hour * 3600 + (int64_t)min * 60 + sec;
    if (!utc)
        t -= offset;
    if (t == GO_ZERO_UNIX && nsec == 0)
        return -EINVAL; /* metav1.Time writes the zero time as null */
    int64_t days = t >= 0 ? t / 86400 : -((-t + 86399) / 86400);
    int64_t rem = t - days * 86400, y;
    int mo, d;
    civil_from_days(days, &y, &mo, &d);
    /* The year is within -1..10000 here; Go pads it to four digits after
     * any sign. */
    int yr = (int)y;
    snprintf(out, CSC_EXPIRY_MAX, "\"%s%04d-%02d-%02dT%02d:%02d:%02dZ\"", yr < 0 ? "-" : "",
             yr < 0 ? -yr : yr, mo, d, (int)(rem / 3600), (int)(rem % 3600 / 60), (int)(rem % 60));
    return 0;
}

/* ---- BucketInfo ---------------------------------------------------------------------------- */

int csc_bucket_info(const json_object *access, const json_object *access_class,
                    const char *bucket_name, const grant_resp *resp, char **out)
{
    *out = NULL;
    util_buf b = {0};
    const char *uid = kobj_uid(access);
    char *name = util_asprintf("%s%s", COSI_BUCKETINFO_PREFIX, uid ? uid : "");
    put(&b, "{\"metadata\":{");
    field(&b, "name", name, false);
    free(name);
    put(&b, ",\"creationTimestamp\":null},\"spec\":{");
    field(&b, "bucketName", bucket_name, false);
    field(&b, "authenticationType", kobj_str(access_class, "authenticationType"), true);
    bool s3, az;
    const Cosi__V1alpha1__CredentialDetails *d = details(resp, "s3", &s3);
    put(&b, ",\"secretS3\":");
    if (s3) {
        put(&b, "{");
        field(&b, "endpoint", secret(d, "endpoint"), false);
        field(&b, "region", secret(d, "region"), true);
        field(&b, "accessKeyID", secret(d, "accessKeyID"), true);
        field(&b, "accessSecretKey", secret(d, "accessSecretKey"), true);
        put(&b, "}");
    } else {
        put(&b, "null");
    }
    put(&b, ",\"secretAzure\":");
    d = s3 ? NULL : details(resp, "azure", &az);
    if (!s3 && az) {
        char exp[CSC_EXPIRY_MAX];
        csc_azure_expiry(secret(d, "expiryTs"), exp);
        put(&b, "{");
        field(&b, "accessToken", secret(d, "accessToken"), false);
        put(&b, ",\"expiryTimeStamp\":");
        put(&b, exp);
        put(&b, "}");
    } else {
        put(&b, "null");
    }
    put(&b, ",\"protocols\":[");
    const char *proto = kobj_str(kobj_obj(access, "spec"), "protocol");
    go_string(&b, proto ? proto : "");
    put(&b, "]}}");
    *out = b.buf;
    return 0;
}

/* ---- the Secret ---------------------------------------------------------------------------- */

int csc_secret_object(const json_object *access, const char *info, json_object **out)
{
    *out = NULL;
    const char *name = csc_access_secret_name(access), *ns = kobj_namespace(access);
    if (!name || !ns || !*ns || !info)
        return util_err_set(-EINVAL, "BucketAccess %s: the Secret needs a name and a namespace",
                            kobj_name(access) ? kobj_name(access) : "");
    json_object *s = json_object_new_object();
    json_object_object_add(s, "apiVersion", json_object_new_string("v1"));
    json_object_object_add(s, "kind", json_object_new_string("Secret"));
    json_object *md = json_object_new_object();
    json_object_object_add(md, "name", json_object_new_string(name));
    json_object_object_add(md, "namespace", json_object_new_string(ns));
    json_object *fins = json_object_new_array();
    json_object_array_add(fins, json_object_new_string(COSI_FINALIZER_SECRET));
    json_object_object_add(md, "finalizers", fins);
    json_object_object_add(s, "metadata", md);
    json_object_object_add(s, "type", json_object_new_string("Opaque"));
    json_object *data = json_object_new_object();
    json_object_object_add(data, COSI_SECRET_KEY, json_object_new_string(info));
    json_object_object_add(s, "stringData", data);
    *out = s;
    return 0;
}

bool csc_secret_is_ours(const json_object *secret_obj)
{
    return kobj_has_finalizer(secret_obj, COSI_FINALIZER_SECRET);
}
