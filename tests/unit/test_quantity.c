/*
 * Unit tests for common/util quantities: the one parser behind every size a
 * sidecar or kube-lite reads. Expected values are Go's Quantity.Value() for
 * the same text (apimachinery's own tables where it has them), the fuzz
 * findings that made two parsers disagree, and the int64 bounds.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#define N_ROWS(t) (sizeof(t) / sizeof((t)[0]))

#define ERR_FORMAT                                                                                 \
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
#define ERR_SUFFIX  "unable to parse quantity's suffix"
#define ERR_NUMERIC "unable to parse numeric part of quantity"

typedef struct qty_row {
    const char *name;
    const char *in;
    int64_t want;
    const char *want_err; /* NULL: parses */
} qty_row;

static void check_rows(const qty_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int64_t got = -42;
        util_err_clear();
        int r = util_quantity_parse(rows[i].in, &got);
        if (rows[i].want_err != NULL) {
            if (r != -EINVAL || strcmp(util_err_last(), rows[i].want_err) != 0)
                fail_msg("[%s] \"%s\": got %d \"%s\", want -EINVAL \"%s\"", rows[i].name,
                         rows[i].in, r, util_err_last(), rows[i].want_err);
            if (got != 0)
                fail_msg("[%s] a failed parse leaves %lld, want 0", rows[i].name, (long long)got);
            continue;
        }
        if (r != 0)
            fail_msg("[%s] \"%s\": got %d \"%s\", want %lld", rows[i].name, rows[i].in, r,
                     util_err_last(), (long long)rows[i].want);
        if (got != rows[i].want)
            fail_msg("[%s] \"%s\": got %lld, want %lld", rows[i].name, rows[i].in, (long long)got,
                     (long long)rows[i].want);
    }
}

static void test_quantity_values_match_go_value(void **state)
{
    (void)state;
    static const qty_row rows[] = {
        {"zero", "0", 0, NULL},
        {"plain", "1500", 1500, NULL},
        {"leading_zeros", "00012", 12, NULL},
        {"binary_ki", "1Ki", 1024, NULL},
        {"binary_mi", "500Mi", 524288000LL, NULL},
        {"binary_gi", "1Gi", 1073741824LL, NULL},
        {"binary_ti", "1Ti", 1099511627776LL, NULL},
        {"binary_pi", "1Pi", 1125899906842624LL, NULL},
        {"binary_ei", "7Ei", 8070450532247928832LL, NULL},
        {"binary_fraction", "1.5Gi", 1610612736LL, NULL},
        {"binary_fraction_rounds_up", "0.3Ki", 308, NULL},
        {"binary_fraction_without_integer", ".5Ki", 512, NULL},
        {"binary_suffix_alone_is_zero", "Gi", 0, NULL},
        {"decimal_k", "1k", 1000, NULL},
        {"decimal_M_is_mega", "2M", 2000000, NULL},
        {"decimal_G", "10G", 10000000000LL, NULL},
        {"decimal_T", "1T", 1000000000000LL, NULL},
        {"decimal_P", "1P", 1000000000000000LL, NULL},
        {"decimal_E", "1E", 1000000000000000000LL, NULL},
        {"decimal_fraction", "1.5G", 1500000000LL, NULL},
        {"milli_rounds_up_to_one", "100m", 1, NULL},
        {"milli_whole", "3000m", 3, NULL},
        {"milli_above_whole_rounds_up", "1500m", 2, NULL},
        {"micro_rounds_up", "1u", 1, NULL},
        {"nano_rounds_up", "1n", 1, NULL},
        {"below_nano_rounds_up", "0.9n", 1, NULL},
        {"exponent_lower", "1e3", 1000, NULL},
        {"exponent_upper", "1E3", 1000, NULL},
        {"exponent_plus", "1e+3", 1000, NULL},
        {"exponent_negative_rounds_up", "12E-1", 2, NULL},
        {"exponent_with_fraction", "1.5e3", 1500, NULL},
        {"exponent_leading_zeros", "1e-0003", 1, NULL},
        {"fraction_rounds_up", "2.5", 3, NULL},
        {"plus_fraction", "+.5", 1, NULL},
        {"trailing_dot", "5.", 5, NULL},
        {"bare_sign_is_zero", "-", 0, NULL},
        {"bare_dot_is_zero", ".", 0, NULL},
        {"negative_zero", "-0.000", 0, NULL},
        {"negative_rounds_away_from_zero", "-1500m", -2, NULL},
        {"negative_milli_rounds_to_minus_one", "-100m", -1, NULL},
        {"negative_binary_exact", "-9.5Gi", -10200547328LL, NULL},
        {"negative_binary_fraction_away_from_zero", "-9.5000000001Gi", -10200547329LL, NULL},
        {"many_fraction_digits", "1.0000000000000000000000000000001", 2, NULL},
        {"tiny_rounds_up_to_one", "0.000000000000000000001", 1, NULL},
        {"huge_negative_exponent_rounds_up_to_one", "1e-1000", 1, NULL},
        {"many_digits_scaled_down", "123456789012345678901234567890e-20", 1234567891LL, NULL},
        {"trailing_zeros_cancel_exponent", "1000000000000000000000000000000e-30", 1, NULL},
        {"zero_with_small_exponent", "0e-10", 0, NULL},
        {"binary_suffix_alone_up_to_ti", "Ti", 0, NULL},
    };
    check_rows(rows, N_ROWS(rows));
}

/* The inputs fuzz_quantity found while two parsers disagreed
 * (tests/fuzz/corpus/fuzz_quantity/crash-*). */
static void test_quantity_fuzz_findings(void **state)
{
    (void)state;
    static const qty_row rows[] = {
        {"twenty_digits_round_up_not_down", "2588888888888620476.1", 2588888888888620477LL, NULL},
        {"negative_twenty_digits_round_away", "-2588888888888620476.85488888888",
         -2588888888888620477LL, NULL},
        {"fifty_digit_fraction_of_ei_rounds_up",
         ".566666666666666666666666666666666666666666666666Ei", 653322185943879954LL, NULL},
        {"exponent_beyond_int32_wraps_like_go", "1E-4294967295", 10, NULL},
        {"exponent_far_beyond_int32_wraps_to_tiny",
         "000024691342E-000000000000000000000015506894316953811", 1, NULL},
        {"negative_8ei_is_minus_int64_max_like_go", "-8Ei", -INT64_MAX, NULL},
    };
    check_rows(rows, N_ROWS(rows));
}

static void test_quantity_bounds_saturate_like_go(void **state)
{
    (void)state;
    static const qty_row rows[] = {
        {"int64_max_exact", "9223372036854775807", INT64_MAX, NULL},
        {"just_below_max_rounds_up_to_max", "9223372036854775806.5", INT64_MAX, NULL},
        {"two_to_63_saturates", "9223372036854775808", INT64_MAX, NULL},
        {"int64_min_exact", "-9223372036854775808", INT64_MIN, NULL},
        {"int64_min_plus_one", "-9223372036854775807", INT64_MIN + 1, NULL},
        {"below_int64_min_saturates", "-9223372036854775809", INT64_MIN, NULL},
        {"negative_fraction_past_min_saturates", "-9223372036854775808.1", INT64_MIN, NULL},
        {"ten_e_saturates", "10E", INT64_MAX, NULL},
        {"hundred_e_saturates", "100E", INT64_MAX, NULL},
        {"negative_hundred_e_saturates", "-100E", INT64_MIN, NULL},
        {"ten_to_100_saturates", "1e100", INT64_MAX, NULL},
        {"negative_ten_to_30_saturates", "-1e30", INT64_MIN, NULL},
        {"thirty_digits_saturate", "123456789012345678901234567890", INT64_MAX, NULL},
        {"binary_8ei_capped", "8Ei", INT64_MAX, NULL},
        {"binary_20ei_capped", "20Ei", INT64_MAX, NULL},
        {"binary_negative_20ei_capped", "-20Ei", -INT64_MAX, NULL},
        {"binary_just_under_8ei_capped", "7.99999999999999999999Ei", INT64_MAX, NULL},
        {"binary_8192pi_capped", "8192Pi", INT64_MAX, NULL},
        {"exponent_2_32_plus_1_is_ten", "1e4294967297", 10, NULL},
        {"exponent_int64_max_wraps_to_minus_one", "1e9223372036854775807", 1, NULL},
        {"exponent_int64_min_wraps_to_zero", "5e-9223372036854775808", 5, NULL},
        {"exponent_int32_max_saturates", "1e2147483647", INT64_MAX, NULL},
        {"exponent_int32_min_rounds_up", "1e-2147483648", 1, NULL},
    };
    check_rows(rows, N_ROWS(rows));
}

static void test_quantity_errors_name_what_is_wrong(void **state)
{
    (void)state;
    static const qty_row rows[] = {
        {"empty", "", 0, ERR_FORMAT},
        {"space_inside", "1 Gi", 0, ERR_FORMAT},
        {"letters_after_suffix", "1GiB", 0, ERR_FORMAT},
        {"letters_only", "abc", 0, ERR_FORMAT},
        {"two_dots", "1.5.5", 0, ERR_FORMAT},
        {"fractional_exponent", "1e3.5", 0, ERR_FORMAT},
        {"capital_k", "1K", 0, ERR_SUFFIX},
        {"letter_outside_the_suffix_alphabet", "1Zi", 0, ERR_FORMAT},
        {"suffix_letters_in_no_known_order", "1iK", 0, ERR_SUFFIX},
        {"lone_e", "1e", 0, ERR_SUFFIX},
        {"exponent_sign_only", "1e+", 0, ERR_SUFFIX},
        {"exponent_two_signs", "1e+-3", 0, ERR_FORMAT},
        {"gii", "1Gii", 0, ERR_SUFFIX},
        {"double_sign", "--1", 0, ERR_SUFFIX},
        {"exponent_beyond_int64", "1e9223372036854775808", 0, ERR_SUFFIX},
        {"exponent_below_int64", "1e-9223372036854775809", 0, ERR_SUFFIX},
        /* Go reads these through inf.Dec, which wants a digit. */
        {"ei_without_digits", "Ei", 0, ERR_NUMERIC},
        {"pi_without_digits", "-Pi", 0, ERR_NUMERIC},
        {"below_nano_without_digits", ".e-10", 0, ERR_NUMERIC},
    };
    check_rows(rows, N_ROWS(rows));
    int64_t v = 7;
    assert_int_equal(util_quantity_parse(NULL, &v), -EINVAL);
    assert_int_equal(v, 0);
}

/* Thousands of digits cost a linear pass, not a failure or a crash. */
static void test_quantity_long_texts_are_exact(void **state)
{
    (void)state;
    size_t n = 100000;
    char *s = malloc(n + 8);
    assert_non_null(s);
    /* "0.000...0001": one significant digit far below 1 rounds up to 1. */
    memset(s, '0', n);
    s[1] = '.';
    s[n - 1] = '1';
    s[n] = '\0';
    int64_t v = 0;
    assert_int_equal(util_quantity_parse(s, &v), 0);
    assert_int_equal(v, 1);
    /* "1000...000e-99999": exactly 1. */
    memset(s, '0', n);
    s[0] = '1';
    snprintf(s + n, 8, "e-%zu", n - 1);
    assert_int_equal(util_quantity_parse(s, &v), 0);
    assert_int_equal(v, 1);
    /* "777...777Ki" with every digit significant saturates. */
    memset(s, '7', n);
    memcpy(s + n, "Ki", 3);
    assert_int_equal(util_quantity_parse(s, &v), 0);
    assert_int_equal(v, INT64_MAX);
    /* "1.777...777" with every digit significant: 2. */
    memset(s, '7', n);
    s[0] = '1';
    s[1] = '.';
    s[n] = '\0';
    assert_int_equal(util_quantity_parse(s, &v), 0);
    assert_int_equal(v, 2);
    free(s);
}

static void test_quantity_format_is_binary_si(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int64_t in;
        const char *want;
    } rows[] = {
        {"zero", 0, "0"},
        {"small_plain", 999, "999"},
        {"ten", 10, "10"},
        {"thousand_below_1024_is_decimal_k", 1000, "1k"},
        {"1023_plain", 1023, "1023"},
        {"1024_is_ki", 1024, "1Ki"},
        {"1500_not_a_power_of_1024", 1500, "1500"},
        {"500ki", 512000, "500Ki"},
        {"1gi", 1073741824LL, "1Gi"},
        {"1536mi", 1610612736LL, "1536Mi"},
        {"5pi", 5LL << 50, "5Pi"},
        {"1ei", 1LL << 60, "1Ei"},
        {"int64_max", INT64_MAX, "9223372036854775807"},
        {"negative_ki", -1024, "-1Ki"},
        {"negative_k", -1000, "-1k"},
        {"int64_min", INT64_MIN, "-9223372036854775808"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char buf[UTIL_QUANTITY_MAX];
        util_quantity_format(rows[i].in, buf, sizeof(buf));
        if (strcmp(buf, rows[i].want) != 0)
            fail_msg("[%s] got \"%s\", want \"%s\"", rows[i].name, buf, rows[i].want);
    }
}

/* Whatever is formatted parses back to the same integer: a size written
 * into a PV or a CSIStorageCapacity reads back unchanged. */
static void test_quantity_format_parses_back(void **state)
{
    (void)state;
    static const int64_t values[] = {
        0,         1,          -1,         7,          1000,          1023,
        1024,      1025,       1536,       999999,     1LL << 40,     (1LL << 40) + 1,
        3LL << 60, INT64_MAX,  INT64_MIN,  -INT64_MAX, INT64_MAX - 1, -(1LL << 62),
        123456789, 1000000000, -999999999, 10,         100,           -1048576,
    };
    for (size_t i = 0; i < N_ROWS(values); i++) {
        char buf[UTIL_QUANTITY_MAX];
        int64_t back = 0;
        util_quantity_format(values[i], buf, sizeof(buf));
        if (util_quantity_parse(buf, &back) != 0 || back != values[i])
            fail_msg("%lld formats as \"%s\", parses back as %lld", (long long)values[i], buf,
                     (long long)back);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_quantity_values_match_go_value),
        cmocka_unit_test(test_quantity_fuzz_findings),
        cmocka_unit_test(test_quantity_bounds_saturate_like_go),
        cmocka_unit_test(test_quantity_errors_name_what_is_wrong),
        cmocka_unit_test(test_quantity_long_texts_are_exact),
        cmocka_unit_test(test_quantity_format_is_binary_si),
        cmocka_unit_test(test_quantity_format_parses_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
