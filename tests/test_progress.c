/* test_progress.c — the status line of long runs (ref/progress.h): duration,
 * byte and rate formatting, percentage and ETA, the TTY and plain styles'
 * throttling and line discipline, quiet, and the summary; all on a fake
 * clock and an in-memory stream. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#include "progress.h"

typedef struct fake_clock {
    double t;
} fake_clock;

static double fake_now(void *ctx) { return ((fake_clock *)ctx)->t; }

/* A meter on a memory stream and a fake clock starting at 0. */
typedef struct rig {
    fake_clock clk;
    char *buf;
    size_t len;
    FILE *f;
    m3_progress p;
} rig;

static void rig_open(rig *r, m3_progress_style style, const char *prog)
{
    memset(r, 0, sizeof *r);
    r->f = open_memstream(&r->buf, &r->len);
    assert_non_null(r->f);
    m3_progress_init(&r->p, r->f, style, prog, fake_now, &r->clk);
}

static const char *rig_text(rig *r)
{
    fflush(r->f);
    return r->buf ? r->buf : "";
}

static void rig_close(rig *r)
{
    fclose(r->f);
    free(r->buf);
}

static size_t count(const char *s, const char *needle)
{
    size_t n = 0, k = strlen(needle);
    for (const char *q = strstr(s, needle); q; q = strstr(q + k, needle))
        n++;
    return n;
}

static void test_durations(void **st)
{
    (void)st;
    char b[32];
    m3_fmt_duration(0.42, b, sizeof b);
    assert_string_equal(b, "0.42 s");
    m3_fmt_duration(12.34, b, sizeof b);
    assert_string_equal(b, "12.3 s");
    m3_fmt_duration(4 * 60 + 5, b, sizeof b); /* minutes and seconds from 60 s on */
    assert_string_equal(b, "4m05s");
    m3_fmt_duration(2 * 3600 + 3 * 60 + 59, b, sizeof b); /* hours and minutes, truncated */
    assert_string_equal(b, "2h03m");
    m3_fmt_duration(-1, b, sizeof b);
    assert_string_equal(b, "?");
    m3_fmt_duration(NAN, b, sizeof b);
    assert_string_equal(b, "?");
    m3_fmt_duration(INFINITY, b, sizeof b);
    assert_string_equal(b, "?");
}

static void test_bytes(void **st)
{
    (void)st;
    char b[32];
    m3_fmt_bytes(512, b, sizeof b);
    assert_string_equal(b, "512 B");
    m3_fmt_bytes(1536, b, sizeof b); /* 1.5 KiB */
    assert_string_equal(b, "1.50 KiB");
    m3_fmt_bytes(12.0 * 1024 * 1024, b, sizeof b);
    assert_string_equal(b, "12.0 MiB");
    m3_fmt_bytes(3.25 * 1024 * 1024 * 1024, b, sizeof b);
    assert_string_equal(b, "3.25 GiB");
    m3_fmt_bytes(200.0 * 1024 * 1024 * 1024 * 1024, b, sizeof b);
    assert_string_equal(b, "200 TiB");
}

/* A forward of 100 rows through 6 layers: 600 row-layers. After 10 s, 150
 * are done (layer 2 is running): 25.0%, 15.0 rows/s, 450 left / 15 = 30 s. */
static void test_rows_with_layers(void **st)
{
    (void)st;
    rig r;
    rig_open(&r, M3_PROGRESS_TTY, "m3-ref forward");
    m3_progress_task(&r.p, "prefill", M3_UNIT_ROWS, 6 * 100);
    m3_progress_stage(&r.p, "layer", 1, 6);
    r.p.done = 150;
    char line[256];
    size_t n = m3_progress_format(&r.p, 10.0, line, sizeof line);
    assert_string_equal(line, "m3-ref forward: prefill, layer 2/6, 25.0%, 15.0 rows/s, 10.0 s "
                              "elapsed, ETA 30.0 s");
    assert_int_equal(n, strlen(line));
    /* before anything is done there is no rate, and no ETA */
    r.p.done = 0;
    m3_progress_format(&r.p, 1.0, line, sizeof line);
    assert_string_equal(line, "m3-ref forward: prefill, layer 2/6, 0.0%, 1.00 s elapsed, ETA ?");
    /* done: ETA 0 */
    r.p.done = 600;
    m3_progress_format(&r.p, 40.0, line, sizeof line);
    assert_string_equal(line, "m3-ref forward: prefill, layer 2/6, 100.0%, 15.0 rows/s, 40.0 s "
                              "elapsed, ETA 0 s");
    rig_close(&r);
}

/* Decode: 8 of 32 tokens in 2 s is 4 tokens/s, 24 left take 6 s. Counts are
 * shown for tokens; the rate starts at the task, not at init. */
static void test_tokens(void **st)
{
    (void)st;
    rig r;
    rig_open(&r, M3_PROGRESS_PLAIN, "m3-ref generate");
    r.clk.t = 100.0;
    m3_progress_task(&r.p, "decode", M3_UNIT_TOKENS, 32);
    r.p.done = 8;
    char line[256];
    m3_progress_format(&r.p, 102.0, line, sizeof line);
    assert_string_equal(line, "m3-ref generate: decode, 8/32 tokens, 25.0%, 4.00 tokens/s, 2.00 s "
                              "elapsed, ETA 6.00 s");
    rig_close(&r);
}

/* Bytes: 1 GiB of 4 GiB in 2 s is 512 MiB/s, 3 GiB left take 6 s; with a
 * stage. Unknown total: no percentage, no ETA. */
static void test_bytes_and_unknown_total(void **st)
{
    (void)st;
    rig r;
    rig_open(&r, M3_PROGRESS_TTY, "m3-gpu");
    m3_progress_task(&r.p, "weight upload", M3_UNIT_BYTES, 4LL << 30);
    m3_progress_stage(&r.p, "layer", 0, 60);
    r.p.done = 1LL << 30;
    char line[256];
    m3_progress_format(&r.p, 2.0, line, sizeof line);
    assert_string_equal(line, "m3-gpu: weight upload, layer 1/60, 1.00 GiB/4.00 GiB, 25.0%, 512 "
                              "MiB/s, 2.00 s elapsed, ETA 6.00 s");
    r.clk.t = 2.0;
    m3_progress_task(&r.p, "", M3_UNIT_ITEMS, 0);
    r.p.done = 5;
    m3_progress_format(&r.p, 4.0, line, sizeof line);
    assert_string_equal(line, "m3-gpu: 5 items, 2.50 items/s, 2.00 s elapsed");
    /* a cut buffer stays terminated and reports its length */
    char small[12];
    size_t n = m3_progress_format(&r.p, 4.0, small, sizeof small);
    assert_int_equal(n, strlen(small));
    assert_string_equal(small, "m3-gpu: 5 i");
    rig_close(&r);
}

/* TTY: redrawn in place with "\r" and erase-to-end, no newline, at most
 * every tty_interval_s since the last line; cleared by end. */
static void test_tty_throttle(void **st)
{
    (void)st;
    rig r;
    rig_open(&r, M3_PROGRESS_TTY, "t");
    assert_true(r.p.tty_interval_s == M3_PROGRESS_TTY_INTERVAL);
    r.p.tty_interval_s = 0.25; /* binary-exact steps */
    m3_progress_task(&r.p, "work", M3_UNIT_ITEMS, 100);
    for (int i = 1; i <= 100; i++) { /* one item every 1/16 s: 6.25 s */
        r.clk.t = 0.0625 * i;
        m3_progress_add(&r.p, 1);
    }
    const char *s = rig_text(&r);
    /* draws at 0.25, 0.5, ..., 6.25 s: every 4th item, 25 lines */
    assert_int_equal(r.p.lines, 25);
    assert_int_equal(count(s, "\r"), (size_t)r.p.lines);
    assert_int_equal(count(s, "\033[K"), (size_t)r.p.lines);
    assert_null(strchr(s, '\n'));
    assert_true(r.p.on_screen);
    assert_non_null(strstr(s, "t: work, 100/100 items, 100.0%"));
    m3_progress_end(&r.p);
    s = rig_text(&r);
    assert_false(r.p.on_screen);
    assert_int_equal(strlen(s) >= 4 ? strcmp(s + strlen(s) - 4, "\r\033[K") : -1, 0);
    /* a second clear writes nothing */
    size_t before = strlen(s);
    m3_progress_clear(&r.p);
    assert_int_equal(strlen(rig_text(&r)), before);
    rig_close(&r);
}

/* A TTY line is cut to the terminal width less one (80 when the stream is
 * not a terminal), so that "\r" redraws one row. */
static void test_tty_width(void **st)
{
    (void)st;
    rig r;
    rig_open(&r, M3_PROGRESS_TTY, "t");
    char label[150];
    memset(label, 'x', sizeof label - 1);
    label[sizeof label - 1] = 0;
    m3_progress_task(&r.p, label, M3_UNIT_ITEMS, 0);
    r.clk.t = 1.0;
    m3_progress_add(&r.p, 1);
    const char *s = rig_text(&r);
    assert_int_equal(strlen(s), 1 + 79 + 3);
    rig_close(&r);
}

/* Plain (not a terminal): newline-terminated lines at most every 30 s, none
 * before the first 30 s, no control characters; the interval spans tasks. */
static void test_plain_heartbeat(void **st)
{
    (void)st;
    rig r;
    rig_open(&r, M3_PROGRESS_PLAIN, "m3-conform");
    for (int k = 0; k < 10; k++) { /* ten tasks of 10 s, one tick per second */
        m3_progress_task(&r.p, "case", M3_UNIT_ROWS, 10);
        for (int i = 0; i < 10; i++) {
            r.clk.t += 1.0;
            m3_progress_add(&r.p, 1);
        }
    }
    const char *s = rig_text(&r);
    assert_int_equal(r.p.lines, 3); /* at 30, 60 and 90 s of 100 */
    assert_int_equal(count(s, "\n"), 3);
    assert_null(strchr(s, '\r'));
    assert_null(strchr(s, '\033'));
    m3_progress_end(&r.p); /* nothing to erase in plain style */
    assert_int_equal(count(rig_text(&r), "\n"), 3);
    /* a shorter interval set after init is honoured */
    r.p.plain_interval_s = 1.0;
    m3_progress_task(&r.p, "fast", M3_UNIT_ITEMS, 0);
    r.clk.t += 1.0;
    m3_progress_add(&r.p, 1);
    assert_int_equal(r.p.lines, 4);
    rig_close(&r);
}

/* Quiet: nothing at all, not even the summary. No task: add draws nothing. */
static void test_quiet(void **st)
{
    (void)st;
    rig r;
    rig_open(&r, M3_PROGRESS_QUIET, "q");
    m3_progress_task(&r.p, "x", M3_UNIT_ROWS, 10);
    r.clk.t = 100;
    m3_progress_add(&r.p, 5);
    m3_progress_summary(&r.p, "5 rows");
    assert_int_equal(strlen(rig_text(&r)), 0);
    rig_close(&r);

    rig_open(&r, M3_PROGRESS_TTY, "q");
    r.clk.t = 100;
    m3_progress_add(&r.p, 5); /* no task begun */
    assert_int_equal(strlen(rig_text(&r)), 0);
    rig_close(&r);
}

/* The summary: wall time since init, peak RSS; it clears a TTY line first. */
static void test_summary(void **st)
{
    (void)st;
    char b[256];
    m3_progress_format_summary("m3-ref forward", "4 rows x 2 layers", 1.5, 12LL << 20, b, sizeof b);
    assert_string_equal(b, "m3-ref forward: 4 rows x 2 layers; wall 1.50 s; peak RSS 12.0 MiB");
    m3_progress_format_summary("p", NULL, 75, -1, b, sizeof b);
    assert_string_equal(b, "p: done; wall 1m15s; peak RSS ?");
    assert_true(m3_peak_rss_bytes() > 0);

    rig r;
    rig_open(&r, M3_PROGRESS_TTY, "m3-ref forward");
    r.clk.t = 3.0;
    m3_progress_task(&r.p, "prefill", M3_UNIT_ROWS, 10);
    r.clk.t = 5.0;
    m3_progress_add(&r.p, 5);
    assert_true(r.p.on_screen);
    m3_progress_summary(&r.p, "10 rows");
    const char *s = rig_text(&r);
    const char *sum = strstr(s, "\r\033[Km3-ref forward: 10 rows; wall 5.00 s; peak RSS ");
    assert_non_null(sum);
    assert_int_equal(s[strlen(s) - 1], '\n');
    assert_false(r.p.on_screen);
    rig_close(&r);

    rig_open(&r, M3_PROGRESS_PLAIN, "p");
    r.clk.t = 0.5;
    m3_progress_summary(&r.p, "");
    assert_int_equal(strncmp(rig_text(&r), "p: done; wall 0.50 s; peak RSS ", 31), 0);
    rig_close(&r);
}

/* The style of a stream: quiet wins; a regular file is not a terminal. */
static void test_style_for(void **st)
{
    (void)st;
    FILE *f = tmpfile();
    assert_non_null(f);
    assert_int_equal(m3_progress_style_for(f, 0), M3_PROGRESS_PLAIN);
    assert_int_equal(m3_progress_style_for(f, 1), M3_PROGRESS_QUIET);
    assert_int_equal(m3_progress_style_for(NULL, 0), M3_PROGRESS_QUIET);
    fclose(f);
    /* the default clock is monotonic */
    m3_progress p;
    m3_progress_init(&p, NULL, M3_PROGRESS_QUIET, NULL, NULL, NULL);
    double a = m3_progress_now(&p), b = m3_progress_now(&p);
    assert_true(b >= a && a > 0);
    assert_ptr_equal(p.out, stderr);
    assert_string_equal(p.prog, "m3");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_durations),
        cmocka_unit_test(test_bytes),
        cmocka_unit_test(test_rows_with_layers),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_bytes_and_unknown_total),
        cmocka_unit_test(test_tty_throttle),
        cmocka_unit_test(test_tty_width),
        cmocka_unit_test(test_plain_heartbeat),
        cmocka_unit_test(test_quiet),
        cmocka_unit_test(test_summary),
        cmocka_unit_test(test_style_for),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
