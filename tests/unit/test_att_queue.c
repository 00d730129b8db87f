/*
 * Unit tests for the attacher's queue with backlog visibility
 * (attacher/queue.c): depth and the oldest waiting key's age as gauges,
 * slow items counted, retries (backoff) not counted as backlog. Ages are
 * only checked as lower bounds or as zero, never against wall time.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "attacher/internal.h"

static double metric(obs_registry *r, const char *name, const char *queue)
{
    size_t len = 0;
    char *text = obs_registry_render(r, &len);
    char *line = util_asprintf("%s{queue=\"%s\"} ", name, queue);
    char *at = strstr(text, line);
    double v = at ? strtod(at + strlen(line), NULL) : -1;
    free(line);
    free(text);
    return v;
}

static void test_depth_and_oldest_age_follow_waiting_keys(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    att_queue *q = att_queue_new("csi-attacher-va", UTIL_MS, UTIL_SECOND, r, UTIL_HOUR);
    assert_int_equal(att_queue_depth(q), 0);
    assert_int_equal(att_queue_oldest(q), 0);
    assert_true(metric(r, "csi_attacher_queue_depth", "csi-attacher-va") == 0);
    att_queue_add(q, "a");
    att_queue_add(q, "b");
    att_queue_add(q, "a"); /* deduplicated */
    util_sleep(2 * UTIL_MS);
    assert_int_equal(att_queue_depth(q), 2);
    assert_true(att_queue_oldest(q) >= 2 * UTIL_MS);
    assert_true(metric(r, "csi_attacher_queue_depth", "csi-attacher-va") == 2);
    assert_true(metric(r, "csi_attacher_queue_oldest_waiting_seconds", "csi-attacher-va") > 0);
    char *k = NULL;
    assert_int_equal(att_queue_get(q, &k), 0);
    assert_string_equal(k, "a");
    att_queue_done(q, k);
    free(k);
    assert_int_equal(att_queue_get(q, &k), 0);
    att_queue_done(q, k);
    free(k);
    assert_int_equal(att_queue_depth(q), 0);
    assert_int_equal(att_queue_oldest(q), 0);
    assert_true(metric(r, "csi_attacher_queue_oldest_waiting_seconds", "csi-attacher-va") == 0);
    assert_true(metric(r, "csi_attacher_queue_slow_items_total", "csi-attacher-va") == 0);
    att_queue_shutdown(q);
    assert_int_equal(att_queue_get(q, &k), -ESHUTDOWN);
    att_queue_free(q);
    obs_registry_free(r);
}

static void test_items_waiting_past_the_threshold_are_counted(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    att_queue *q = att_queue_new("csi-attacher-va-detach", UTIL_MS, UTIL_SECOND, r, UTIL_MS);
    att_queue_add(q, "slow");
    util_sleep(3 * UTIL_MS);
    char *k = NULL;
    assert_int_equal(att_queue_get(q, &k), 0);
    att_queue_done(q, k);
    free(k);
    assert_true(metric(r, "csi_attacher_queue_slow_items_total", "csi-attacher-va-detach") == 1);
    att_queue_free(q);
    obs_registry_free(r);
}

static void test_retries_in_backoff_are_not_backlog(void **state)
{
    (void)state;
    att_queue *q = att_queue_new("csi-attacher-pv", 50 * UTIL_MS, UTIL_SECOND, NULL, UTIL_HOUR);
    att_queue_add_rate_limited(q, "retry");
    att_queue_add_after(q, "later", 50 * UTIL_MS);
    assert_int_equal(att_queue_depth(q), 0);
    assert_int_equal(att_queue_oldest(q), 0);
    char *k = NULL;
    assert_int_equal(att_queue_get(q, &k), 0); /* comes back after its delay */
    att_queue_forget(q, k);
    att_queue_done(q, k);
    free(k);
    att_queue_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_depth_and_oldest_age_follow_waiting_keys),
        cmocka_unit_test(test_items_waiting_past_the_threshold_are_counted),
        cmocka_unit_test(test_retries_in_backoff_are_not_backlog),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
