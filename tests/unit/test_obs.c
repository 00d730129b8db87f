/*
 * Logging: klog's line format, verbosity, --vmodule, JSON format and the
 * logging flags an upstream manifest passes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "obs/obs.h"

/* Captures what the logger writes to stderr while `fn` runs. */
static char captured[8192];

static void capture(void (*fn)(void))
{
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    char path[] = "/tmp/obs-test-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    dup2(fd, STDERR_FILENO);
    fn();
    dup2(saved, STDERR_FILENO);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    ssize_t n = read(fd, captured, sizeof(captured) - 1);
    captured[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
}

static void matches(const char *text, const char *pattern)
{
    regex_t re;
    assert_int_equal(regcomp(&re, pattern, REG_EXTENDED | REG_NEWLINE), 0);
    int r = regexec(&re, text, 0, NULL, 0);
    regfree(&re);
    if (r != 0)
        fail_msg("\"%s\" does not match /%s/", text, pattern);
}

static void log_three_levels(void)
{
    obs_info("plain info %d", 1);
    obs_v(2, "at v2");
    obs_v(5, "at v5 %s", "detail");
    obs_warn("careful");
    obs_error("broken: %s", "why");
}

static void test_text_lines_follow_klog_format(void **state)
{
    (void)state;
    obs_log_set_json(false);
    obs_log_set_vmodule(NULL);
    obs_log_set_verbosity(2);
    capture(log_three_levels);
    matches(captured,
            "^I[0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6} +[0-9]+ test_obs\\.c:[0-9]+\\] "
            "plain info 1$");
    matches(captured, "^I.* test_obs\\.c:[0-9]+\\] at v2$");
    matches(captured, "^W.*\\] careful$");
    matches(captured, "^E.*\\] broken: why$");
    assert_null(strstr(captured, "at v5"));
}

static void test_verbosity_5_shows_developer_detail(void **state)
{
    (void)state;
    obs_log_set_json(false);
    obs_log_set_verbosity(5);
    capture(log_three_levels);
    assert_non_null(strstr(captured, "at v5 detail"));
    obs_log_set_verbosity(0);
    capture(log_three_levels);
    assert_null(strstr(captured, "at v2"));
    assert_non_null(strstr(captured, "plain info"));
}

static void test_vmodule_raises_verbosity_per_file(void **state)
{
    (void)state;
    obs_log_set_verbosity(0);
    assert_int_equal(obs_log_set_vmodule("other=9,test_ob*=5"), 0);
    assert_true(obs_log_enabled(5, "tests/unit/test_obs.c"));
    assert_false(obs_log_enabled(6, "tests/unit/test_obs.c"));
    assert_true(obs_log_enabled(9, "x/other.c"));
    assert_false(obs_log_enabled(1, "x/unrelated.c"));
    static const char *bad[] = {"x", "=3", "x=", "x=abc", "x=-1"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(obs_log_set_vmodule(bad[i]), -EINVAL);
    obs_log_set_vmodule(NULL);
}

static void log_json(void)
{
    obs_info("quote \" and\nnewline");
    obs_error("bad");
}

static void test_json_format_is_one_object_per_line(void **state)
{
    (void)state;
    obs_log_set_json(true);
    obs_log_set_verbosity(0);
    capture(log_json);
    obs_log_set_json(false);
    matches(captured,
            "^\\{\"ts\":\"[0-9-]{10}T[0-9:.]+[-+][0-9]{4}\",\"caller\":\"test_obs\\.c:[0-9]+\","
            "\"msg\":\"quote \\\\\" and newline\",\"v\":0\\}$");
    matches(captured, "^\\{.*\"err\":\"bad\",\"v\":0\\}$");
}

static void test_logging_flags_parse_like_upstream(void **state)
{
    (void)state;
    util_flags *f = util_flags_new("test", "v0");
    assert_int_equal(obs_log_add_flags(f), 0);
    char *argv[] = {
        "test", "--v=3", "--logging-format=json", "--log-flush-frequency=10s", "--vmodule=foo=4",
        NULL};
    assert_int_equal(util_flags_parse(f, 5, argv, NULL), 0);
    assert_int_equal(obs_log_apply(), 0);
    assert_true(obs_log_enabled(3, "a.c"));
    assert_false(obs_log_enabled(4, "a.c"));
    assert_true(obs_log_enabled(4, "foo.c"));
    util_flags_free(f);

    f = util_flags_new("test", "v0");
    obs_log_add_flags(f);
    char *bad[] = {"test", "--logging-format=yaml", NULL};
    assert_int_equal(util_flags_parse(f, 2, bad, NULL), 0);
    assert_int_equal(obs_log_apply(), -EINVAL);
    assert_non_null(strstr(util_err_last(), "--logging-format"));
    util_flags_free(f);
    obs_log_set_json(false);
    obs_log_set_verbosity(0);
    obs_log_set_vmodule(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_lines_follow_klog_format),
        cmocka_unit_test(test_verbosity_5_shows_developer_detail),
        cmocka_unit_test(test_vmodule_raises_verbosity_per_file),
        cmocka_unit_test(test_json_format_is_one_object_per_line),
        cmocka_unit_test(test_logging_flags_parse_like_upstream),
    };
    return cmocka_run_group_tests_name("obs logging", tests, NULL, NULL);
}
