/* test_dtype.c — dtype names/sizes and exact half/bfloat16 conversions
 * (M3-NUM-DTYPE-1, M3-NUM-BF16-1). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "dtype.h"

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_names_sizes(void **state)
{
    (void)state;
    static const char *names[] = {"F32", "F16", "BF16", "F64", "I64",
                                  "I32", "I16", "I8",   "U8",  "BOOL"};
    static const size_t sizes[] = {4, 2, 2, 8, 8, 4, 2, 1, 1, 1};
    for (int i = 0; i < M3_DTYPE_COUNT; i++) {
        m3_dtype dt;
        assert_int_equal(m3_dtype_parse(names[i], &dt), 0);
        assert_int_equal(dt, i);
        assert_string_equal(m3_dtype_name(dt), names[i]);
        assert_int_equal(m3_dtype_size(dt), sizes[i]);
    }
    m3_dtype dt;
    assert_int_equal(m3_dtype_parse("F8_E4M3", &dt), -1);
    assert_int_equal(m3_dtype_parse("f32", &dt), -1);
    assert_int_equal(m3_dtype_parse(NULL, &dt), -1);
}

/* Every finite half round-trips through fp32 exactly; NaNs stay NaN. */
static void test_f16_roundtrip_exhaustive(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = m3_f16_to_f32((uint16_t)h);
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) {
            assert_true(isnan(f));
            uint16_t back = m3_f32_to_f16(f);
            assert_true((back & 0x7c00u) == 0x7c00u && (back & 0x3ffu));
            continue;
        }
        assert_int_equal(m3_f32_to_f16(f), h);
    }
}

static void test_f16_values(void **state)
{
    (void)state;
    assert_true(m3_f16_to_f32(0x3c00) == 1.0f);
    assert_true(m3_f16_to_f32(0xc000) == -2.0f);
    assert_true(m3_f16_to_f32(0x7bff) == 65504.0f);
    assert_true(m3_f16_to_f32(0x0001) == ldexpf(1.0f, -24)); /* smallest subnormal */
    assert_true(m3_f16_to_f32(0x03ff) == ldexpf(1023.0f, -24));
    assert_true(isinf(m3_f16_to_f32(0x7c00)));
    assert_true(signbit(m3_f16_to_f32(0x8000)));
    /* round to nearest even */
    assert_int_equal(m3_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);     /* tie -> even */
    assert_int_equal(m3_f32_to_f16(1.0f + 3 * ldexpf(1.0f, -11)), 0x3c02); /* tie -> even */
    assert_int_equal(m3_f32_to_f16(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)), 0x3c01);
    assert_int_equal(m3_f32_to_f16(65519.0f), 0x7bff);
    assert_int_equal(m3_f32_to_f16(65520.0f), 0x7c00); /* rounds up to inf */
    assert_int_equal(m3_f32_to_f16(1e10f), 0x7c00);
    assert_int_equal(m3_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);        /* tie -> 0 */
    assert_int_equal(m3_f32_to_f16(1.5f * ldexpf(1.0f, -25)), 0x0001);
    assert_int_equal(m3_f32_to_f16(ldexpf(1.0f, -26)), 0x0000);
    assert_int_equal(m3_f32_to_f16(3 * ldexpf(1.0f, -25)), 0x0002);    /* 1.5 ulp tie -> 2 */
    assert_int_equal(m3_f32_to_f16(ldexpf(1023.5f, -24)), 0x0400);     /* carries to normal */
    assert_int_equal(m3_f32_to_f16(-0.0f), 0x8000);
}

static void test_bf16_and_load(void **state)
{
    (void)state;
    assert_int_equal(m3_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(m3_f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80); /* tie -> even */
    assert_int_equal(m3_f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82); /* tie -> even */
    assert_int_equal(m3_f32_to_bf16(bits_f32(0x3f808001u)), 0x3f81);
    assert_true(isnan(m3_bf16_to_f32(m3_f32_to_bf16(NAN))));

    float f[3] = {1.5f, -2.25f, 3.0f};
    uint16_t h[2] = {0x3c00, 0xc100};
    uint16_t b[2] = {0x3f80, 0xc040};
    double d[2] = {0.125, -7.5};
    assert_true(m3_load_f32(f, M3_F32, 1) == -2.25f);
    assert_true(m3_load_f32(h, M3_F16, 1) == -2.5f);
    assert_true(m3_load_f32(b, M3_BF16, 1) == -3.0f);
    assert_true(m3_load_f32(d, M3_F64, 1) == -7.5f);
    assert_true(m3_load_f32(h, M3_F16, 0) == 1.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_sizes),
        cmocka_unit_test(test_f16_roundtrip_exhaustive),
        cmocka_unit_test(test_f16_values),
        cmocka_unit_test(test_bf16_and_load),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
