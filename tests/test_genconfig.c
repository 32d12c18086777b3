/* test_genconfig.c — generation_config.json defaults (M3-SAMPLE-3).
 *
 * Each case writes a generation_config.json into a fresh temp directory and
 * checks what m3_gen_config_load makes of it: absent file leaves the built-in
 * defaults, present fields override them, malformed ones fail naming the
 * file and the field.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "genconfig.h"

typedef struct dir {
    char path[64];
    char file[96];
} dir;

static void mkdir_tmp(dir *d)
{
    snprintf(d->path, sizeof d->path, "/tmp/m3_genconfig.XXXXXX");
    assert_non_null(mkdtemp(d->path));
    snprintf(d->file, sizeof d->file, "%s/generation_config.json", d->path);
}

static void put(const dir *d, const char *text)
{
    FILE *f = fopen(d->file, "wb");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void rm_tmp(const dir *d)
{
    unlink(d->file);
    rmdir(d->path);
}

static void test_absent_and_builtin(void **st)
{
    (void)st;
    dir d;
    mkdir_tmp(&d);
    m3_gen_defaults g = m3_gen_defaults_builtin(7);
    m3_err e = {{0}};
    assert_int_equal(m3_gen_config_load(d.path, &g, &e), 0);
    assert_int_equal(g.greedy, 0);
    assert_true(g.temperature == 1.0f && g.top_p == 0.95f && g.top_k == 40);
    assert_int_equal(g.n_eos, 1);
    assert_int_equal(g.eos[0], 7);
    rm_tmp(&d);
}

static void test_overrides(void **st)
{
    (void)st;
    dir d;
    mkdir_tmp(&d);
    m3_err e = {{0}};
    put(&d, "{\"do_sample\": true, \"temperature\": 0.6, \"top_p\": 0.9, \"top_k\": 0,"
            " \"eos_token_id\": [3, 200019], \"max_new_tokens\": 5}");
    m3_gen_defaults g = m3_gen_defaults_builtin(1);
    assert_int_equal(m3_gen_config_load(d.path, &g, &e), 0);
    assert_int_equal(g.greedy, 0);
    assert_true(g.temperature == 0.6f && g.top_p == 0.9f && g.top_k == 0);
    assert_int_equal(g.n_eos, 2);
    assert_int_equal(g.eos[0], 3);
    assert_int_equal(g.eos[1], 200019);
    /* do_sample false, temperature 0: greedy; a single eos number */
    put(&d, "{\"do_sample\": false, \"eos_token_id\": 9}");
    g = m3_gen_defaults_builtin(1);
    assert_int_equal(m3_gen_config_load(d.path, &g, &e), 0);
    assert_int_equal(g.greedy, 1);
    assert_int_equal(g.n_eos, 1);
    assert_int_equal(g.eos[0], 9);
    put(&d, "{\"temperature\": 0, \"eos_token_id\": null}");
    g = m3_gen_defaults_builtin(4);
    assert_int_equal(m3_gen_config_load(d.path, &g, &e), 0);
    assert_int_equal(g.greedy, 1);
    assert_int_equal(g.eos[0], 4); /* null keeps config.json's eos */
    rm_tmp(&d);
}

static void test_malformed(void **st)
{
    (void)st;
    static const struct {
        const char *text, *field;
    } bad[] = {
        {"[1, 2]", "not a well-formed JSON object"},
        {"{\"do_sample\": \"yes\"}", "do_sample"},
        {"{\"temperature\": -1}", "temperature"},
        {"{\"top_p\": 0}", "top_p"},
        {"{\"top_p\": 1.5}", "top_p"},
        {"{\"top_k\": 2.5}", "top_k"},
        {"{\"top_k\": 1e300}", "top_k"},
        {"{\"eos_token_id\": 1e300}", "eos_token_id"},
        {"{\"eos_token_id\": -1}", "eos_token_id"},
        {"{\"eos_token_id\": [1, \"2\"]}", "eos_token_id"},
        {"{\"eos_token_id\": [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17]}", "eos_token_id"},
        {"{\"top_k\": 4", "not a well-formed JSON object"},
    };
    dir d;
    mkdir_tmp(&d);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        put(&d, bad[i].text);
        m3_gen_defaults g = m3_gen_defaults_builtin(1);
        m3_err e = {{0}};
        assert_int_equal(m3_gen_config_load(d.path, &g, &e), -1);
        if (!strstr(e.msg, d.file) || !strstr(e.msg, bad[i].field))
            fail_msg("case %zu: message \"%s\" lacks the file or \"%s\"", i, e.msg, bad[i].field);
    }
    /* larger than the 1 MiB cap */
    FILE *f = fopen(d.file, "wb");
    assert_non_null(f);
    fputc('{', f);
    for (unsigned i = 0; i < M3_GENCONFIG_MAX_FILE; i++)
        fputc(' ', f);
    fputc('}', f);
    fclose(f);
    m3_gen_defaults g = m3_gen_defaults_builtin(1);
    m3_err e = {{0}};
    assert_int_equal(m3_gen_config_load(d.path, &g, &e), -1);
    assert_non_null(strstr(e.msg, d.file));
    rm_tmp(&d);
}

/* Flags over the file over the built-ins (M3-SAMPLE-3). */
static void test_flags(void **st)
{
    (void)st;
    m3_gen_defaults g = m3_gen_defaults_builtin(1);
    g.greedy = 1; /* as from do_sample false */
    float t = 0.7f;
    m3_gen_apply_flags(&g, 0, &t, NULL, NULL); /* a sampling flag overrides the file's greedy */
    assert_int_equal(g.greedy, 0);
    assert_true(g.temperature == 0.7f && g.top_p == 0.95f && g.top_k == 40);
    g = m3_gen_defaults_builtin(1);
    g.greedy = 1;
    m3_gen_apply_flags(&g, 0, NULL, NULL, NULL); /* no flags: the file's greedy stays */
    assert_int_equal(g.greedy, 1);
    g = m3_gen_defaults_builtin(1);
    float p = 0.5f;
    int k = 7;
    m3_gen_apply_flags(&g, 1, NULL, &p, &k); /* --greedy always wins */
    assert_int_equal(g.greedy, 1);
    assert_true(g.top_p == 0.5f && g.top_k == 7 && g.temperature == 1.0f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_absent_and_builtin),
        cmocka_unit_test(test_overrides),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_flags),
    };
    return cmocka_run_group_tests_name("genconfig", tests, NULL, NULL);
}
