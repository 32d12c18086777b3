/* test_cli_opts.c — the command-line parser shared by bin/m3-ref and
 * bin/m3-gpu (ref/cli_opts.h): option groups, batches, value checks and
 * their messages, the --model rule, and the number parsers.
 * Spec: M3-SAMPLE-1 (--temperature 0 is greedy). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cli_opts.h"

#define ALL_GEN (M3_CLI_TOKENS | M3_CLI_PROMPT | M3_CLI_DTYPE | M3_CLI_GEN | M3_CLI_VISION)

/* Parse the NULL-terminated arguments; returns the status, message in e. */
static int parse(unsigned allow, m3_cli_opts *o, m3_err *e, ...)
{
    char *argv[64];
    int argc = 0;
    va_list ap;
    va_start(ap, e);
    for (char *a; argc < 64 && (a = va_arg(ap, char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    memset(e, 0, sizeof *e);
    return m3_cli_parse(argc, argv, allow, o, e);
}

/* parse fails with a message containing want */
#define FAILS(want, allow, ...)                                                                    \
    do {                                                                                           \
        m3_cli_opts o_;                                                                            \
        m3_err e_;                                                                                 \
        assert_int_equal(parse(allow, &o_, &e_, __VA_ARGS__, NULL), -1);                          \
        if (!strstr(e_.msg, want))                                                                 \
            fail_msg("message '%s' lacks '%s'", e_.msg, want);                                     \
    } while (0)

static void test_generate_options(void **state)
{
    (void)state;
    m3_cli_opts o;
    m3_err e;
    assert_int_equal(parse(ALL_GEN, &o, &e, "--model", "m", "--prompt", "hi", "--dtype", "bf16",
                           "--top-p", "0.5", "--top-k", "7", "--seed", "12", "--max-new-tokens",
                           "0", "--draft", "d", "--spec-tokens", "5", "--print-ids", "-q", NULL),
                     0);
    assert_string_equal(o.model, "m");
    assert_string_equal(o.prompt, "hi");
    assert_null(o.tokens);
    assert_int_equal(o.n_src, 1);
    assert_int_equal(o.src_text[0], 1);
    assert_true(m3_cli_bf16(&o));
    assert_true(o.have_top_p && o.top_p == 0.5f);
    assert_true(o.have_top_k && o.top_k == 7);
    assert_true(o.have_seed && o.seed == 12);
    assert_int_equal(o.max_new, 0);
    assert_string_equal(o.draft, "d");
    assert_int_equal(o.spec_k, 5);
    assert_true(o.print_ids && o.quiet);
    assert_false(o.greedy);
    /* defaults */
    assert_int_equal(parse(ALL_GEN, &o, &e, "--model", "m", "--tokens", "1", NULL), 0);
    assert_int_equal(o.max_new, 32);
    assert_int_equal(o.spec_k, 3);
    assert_false(m3_cli_bf16(&o));
    /* --temperature 0 is greedy (M3-SAMPLE-1), a positive one is a temperature */
    assert_int_equal(parse(ALL_GEN, &o, &e, "--model", "m", "--temperature", "0", NULL), 0);
    assert_true(o.greedy);
    assert_false(o.have_temp);
    assert_int_equal(parse(ALL_GEN, &o, &e, "--model", "m", "--temperature", "0.25", NULL), 0);
    assert_false(o.greedy);
    assert_true(o.have_temp && o.temperature == 0.25f);
}

static void test_batches(void **state)
{
    (void)state;
    m3_cli_opts o;
    m3_err e;
    assert_int_equal(parse(ALL_GEN | M3_CLI_BATCH, &o, &e, "--model", "m", "--tokens", "1,2",
                           "--prompt", "a", "--tokens", "3", NULL),
                     0);
    assert_int_equal(o.n_src, 3);
    assert_string_equal(o.src[0], "1,2");
    assert_string_equal(o.src[1], "a");
    assert_string_equal(o.src[2], "3");
    assert_int_equal(o.src_text[0], 0);
    assert_int_equal(o.src_text[1], 1);
    assert_int_equal(o.src_text[2], 0);
    /* one prompt per run without M3_CLI_BATCH; --tokens with --prompt is the caller's call */
    FAILS("--tokens given twice", ALL_GEN, "--model", "m", "--tokens", "1", "--tokens", "2");
    assert_int_equal(parse(ALL_GEN, &o, &e, "--model", "m", "--tokens", "1", "--prompt", "a",
                           NULL),
                     0);
    assert_int_equal(o.n_src, 2);
    /* at most M3_CLI_MAX_PROMPTS */
    char *argv[2 + 2 * (M3_CLI_MAX_PROMPTS + 1)];
    int argc = 0;
    argv[argc++] = "--model";
    argv[argc++] = "m";
    for (int i = 0; i <= M3_CLI_MAX_PROMPTS; i++) {
        argv[argc++] = "--tokens";
        argv[argc++] = "1";
    }
    assert_int_equal(m3_cli_parse(argc - 2, argv, M3_CLI_TOKENS | M3_CLI_BATCH, &o, &e), 0);
    assert_int_equal(o.n_src, M3_CLI_MAX_PROMPTS);
    assert_int_equal(m3_cli_parse(argc, argv, M3_CLI_TOKENS | M3_CLI_BATCH, &o, &e), -1);
    assert_non_null(strstr(e.msg, "at most 64"));
}

static void test_groups_and_errors(void **state)
{
    (void)state;
    m3_cli_opts o;
    m3_err e;
    /* an option outside the command's groups is unknown */
    FAILS("unknown option or argument '--greedy'", M3_CLI_TOKENS, "--model", "m", "--greedy");
    FAILS("unknown option or argument '--teacher-forced'", ALL_GEN, "--model", "m",
          "--teacher-forced", "g");
    FAILS("unknown option or argument 'stray'", ALL_GEN, "--model", "m", "stray");
    FAILS("option --tokens needs a value", ALL_GEN, "--model", "m", "--tokens");
    /* values */
    FAILS("--dtype must be fp32 or bf16 (got 'f16')", ALL_GEN, "--model", "m", "--dtype", "f16");
    FAILS("--top-p needs a number in (0, 1] (got '2')", ALL_GEN, "--model", "m", "--top-p", "2");
    FAILS("--temperature", ALL_GEN, "--model", "m", "--temperature", "1e-5");
    FAILS("--temperature", ALL_GEN, "--model", "m", "--temperature", "nan");
    FAILS("--seed needs an integer >= 0 (got '-1')", ALL_GEN, "--model", "m", "--seed", "-1");
    FAILS("--seed", ALL_GEN, "--model", "m", "--seed", "+5");
    FAILS("--top-k", ALL_GEN, "--model", "m", "--top-k", " 5");
    FAILS("--spec-tokens needs an integer in [1, 32] (got '33')", ALL_GEN, "--model", "m",
          "--spec-tokens", "33");
    FAILS("--fps needs a number > 0 (got '0')", ALL_GEN, "--model", "m", "--fps", "0");
    FAILS("--dump: empty output path", M3_CLI_DUMP, "--model", "m", "--dump", "");
    FAILS("--video: empty frame list", ALL_GEN, "--model", "m", "--video", "");
    /* --model is required, --case stands in for it */
    FAILS("--model DIR is required", ALL_GEN, "--tokens", "1");
    FAILS("--model DIR (or --case DIR) is required", M3_CLI_CASE | M3_CLI_DUMP, "--dump", "x");
    assert_int_equal(parse(M3_CLI_CASE | M3_CLI_DUMP, &o, &e, "--case", "c", "--dump", "x", NULL),
                     0);
    assert_string_equal(o.model, "c");
    /* --help stops parsing (a bad option after it is not read) */
    assert_int_equal(parse(ALL_GEN, &o, &e, "--help", "--bogus", NULL), 0);
    assert_true(o.help);
}

static void test_prompt_rules(void **state)
{
    (void)state;
    m3_cli_opts o;
    m3_err e;
    assert_int_equal(parse(ALL_GEN, &o, &e, "--model", "m", "--tokens", "1", "--image", "a.png",
                           "--vision-joint", NULL),
                     0);
    assert_true(m3_cli_vision_requested(&o));
    assert_int_equal(m3_cli_prompt_check(&o, &e), 0);
    const m3_prompt_opts po = m3_cli_prompt_opts(&o);
    assert_int_equal(po.n_images, 1);
    assert_true(po.joint);
    assert_false(po.have_text);
    /* ref/prompt.h's rules apply: --chat needs a --prompt, --fps needs --video */
    assert_int_equal(parse(ALL_GEN, &o, &e, "--model", "m", "--tokens", "1", "--chat", NULL), 0);
    assert_int_equal(m3_cli_prompt_check(&o, &e), -1);
    assert_non_null(strstr(e.msg, "--chat"));
    assert_int_equal(parse(ALL_GEN, &o, &e, "--model", "m", "--tokens", "1", "--fps", "2", NULL),
                     0);
    assert_int_equal(m3_cli_prompt_check(&o, &e), -1);
    assert_non_null(strstr(e.msg, "--fps"));
    assert_false(m3_cli_vision_requested(&o));
}

static void test_numbers(void **state)
{
    (void)state;
    long long v = 0;
    float f = 0;
    assert_int_equal(m3_cli_parse_ll("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(m3_cli_parse_ll("-3", -5, 5, &v), 0);
    assert_int_equal(v, -3);
    assert_int_equal(m3_cli_parse_ll("-3", 0, 5, &v), -1);
    assert_int_equal(m3_cli_parse_ll("101", 0, 100, &v), -1);
    assert_int_equal(m3_cli_parse_ll("9223372036854775808", 0, INT64_MAX, &v), -1);
    assert_int_equal(m3_cli_parse_ll("1e3", 0, 10000, &v), -1);
    assert_int_equal(m3_cli_parse_ll("", 0, 1, &v), -1);
    assert_int_equal(m3_cli_parse_float("0.5", &f), 0);
    assert_true(f == 0.5f);
    assert_int_equal(m3_cli_parse_float("inf", &f), -1);
    assert_int_equal(m3_cli_parse_float("4e38", &f), -1);
    assert_int_equal(m3_cli_parse_float("1.5x", &f), -1);
    int32_t *ids = NULL;
    int n = 0;
    m3_err e;
    assert_int_equal(m3_cli_parse_tokens("3, 4 5", &ids, &n, &e), 0);
    assert_int_equal(n, 3);
    assert_int_equal(ids[0], 3);
    assert_int_equal(ids[2], 5);
    free(ids);
    assert_int_equal(m3_cli_parse_tokens("3,-4", &ids, &n, &e), -1);
    assert_null(ids);
    assert_int_equal(n, 0);
}

/* The last --temperature wins; --chunks, --stream-weights and --max-new-tokens
 * in their own groups; m3_cli_parse_chunks checks sizes against the prompt. */
static void test_repeats_and_chunks(void **state)
{
    (void)state;
    m3_cli_opts o;
    m3_err e;
    assert_int_equal(parse(ALL_GEN, &o, &e, "--model", "m", "--temperature", "0.7", "--temperature",
                           "0", NULL), 0);
    assert_true(o.greedy && !o.have_temp);
    assert_int_equal(parse(ALL_GEN, &o, &e, "--model", "m", "--temperature", "0", "--temperature",
                           "0.5", NULL), 0);
    assert_true(!o.greedy && o.have_temp && o.temperature == 0.5f);
    /* an explicit --greedy stays; the pair is the command's to refuse */
    assert_int_equal(parse(ALL_GEN, &o, &e, "--model", "m", "--greedy", "--temperature", "0",
                           "--temperature", "0.5", NULL), 0);
    assert_true(o.greedy && o.have_temp);
    FAILS("unknown option", ALL_GEN, "--model", "m", "--chunks", "1,2");
    FAILS("unknown option", ALL_GEN, "--model", "m", "--stream-weights");
    const unsigned fwd = M3_CLI_TOKENS | M3_CLI_CHUNKS | M3_CLI_STREAM | M3_CLI_CONTINUE;
    assert_int_equal(parse(fwd, &o, &e, "--model", "m", "--tokens", "1,2,3", "--chunks", "2,1",
                           "--stream-weights", NULL), 0);
    assert_true(o.stream_weights && !o.have_max_new && o.max_new == 32);
    assert_int_equal(parse(fwd, &o, &e, "--model", "m", "--max-new-tokens", "4", NULL), 0);
    assert_true(o.have_max_new && o.max_new == 4);
    FAILS("--chunks: empty list", fwd, "--model", "m", "--chunks", "");
    int *c = NULL, n = 0;
    assert_int_equal(m3_cli_parse_chunks("2,1", 3, &c, &n, &e), 0);
    assert_int_equal(n, 2);
    assert_int_equal(c[0], 2);
    assert_int_equal(c[1], 1);
    free(c);
    assert_int_equal(m3_cli_parse_chunks("2,2", 3, &c, &n, &e), -1);
    assert_non_null(strstr(e.msg, "sum to 4 tokens, but the prompt has 3"));
    assert_int_equal(m3_cli_parse_chunks("3,0", 3, &c, &n, &e), -1);
    assert_non_null(strstr(e.msg, "chunk 1 has 0 tokens"));
    assert_int_equal(m3_cli_parse_chunks("1,x", 2, &c, &n, &e), -1);
    assert_non_null(strstr(e.msg, "--chunks"));
    assert_null(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_generate_options),
        cmocka_unit_test(test_batches),
        cmocka_unit_test(test_groups_and_errors),
        cmocka_unit_test(test_prompt_rules),
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_repeats_and_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
