/* progress.h — how far a long run is: one status line on stderr.
 *
 * A meter is a plain struct the caller owns (no global state). It is told
 * a task (a label, a unit, a total), optionally a stage ("layer 3/60"), and
 * how much is done; it then draws, at most every interval:
 *   - on a terminal (M3_PROGRESS_TTY): one line redrawn in place with "\r"
 *     and cleared when the task ends or before other output;
 *   - elsewhere (M3_PROGRESS_PLAIN, e.g. a CI log): a plain line ending in
 *     "\n", at most every plain_interval_s (30 s by default), so that a long
 *     job shows it is alive and a short one prints nothing;
 *   - under --quiet (M3_PROGRESS_QUIET): nothing at all.
 * The line carries the stage, done/total (counts for tokens, items and
 * bytes), the percentage, the rate (rows/s, tokens/s, MiB/s, ...), the
 * elapsed time and an estimate of the time left (remaining / average rate
 * since the task began). m3_progress_summary prints the final line with
 * the wall time since m3_progress_init and the peak RSS (getrusage), in
 * TTY and plain styles.
 *
 * Time comes from a clock function (CLOCK_MONOTONIC unless one is given),
 * so that tests drive it. The formatting helpers are pure functions.
 */
#ifndef M3_PROGRESS_H
#define M3_PROGRESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum m3_progress_style {
    M3_PROGRESS_QUIET = 0, /* print nothing, not even the summary */
    M3_PROGRESS_PLAIN,     /* a "\n"-terminated line every plain_interval_s, and the summary */
    M3_PROGRESS_TTY,       /* one line redrawn in place every tty_interval_s, and the summary */
} m3_progress_style;

typedef enum m3_progress_unit {
    M3_UNIT_ROWS = 0, /* activation rows (a forward counts one per row per layer) */
    M3_UNIT_TOKENS,   /* generated tokens */
    M3_UNIT_BYTES,    /* bytes (written, uploaded), shown as KiB/MiB/GiB */
    M3_UNIT_ITEMS,    /* anything else: cases, layers, files */
} m3_progress_unit;

/* Seconds from some fixed origin; ctx is the clock's own state. */
typedef double (*m3_clock_fn)(void *ctx);

/* Seconds on CLOCK_MONOTONIC (the real clock of the meters; for timing runs). */
double m3_monotonic_s(void);

#define M3_PROGRESS_TTY_INTERVAL 0.2
#define M3_PROGRESS_PLAIN_INTERVAL 30.0

typedef struct m3_progress {
    /* settings, from m3_progress_init; the intervals may be changed after it */
    FILE *out;
    m3_progress_style style;
    m3_clock_fn clock;
    void *clock_ctx;
    double tty_interval_s, plain_interval_s;
    char prog[64];         /* prefix of every line, e.g. "m3-ref forward" */
    /* the current task */
    char task[160];        /* e.g. "prefill" */
    char stage_name[16];   /* e.g. "layer" */
    m3_progress_unit unit;
    int64_t total, done;
    int stage, nstages;    /* 1-based stage of nstages; nstages 0: none */
    double t_init, t_task, t_last; /* clock at init, task start, last draw */
    int active;            /* a task is running */
    int on_screen;         /* a TTY line is drawn and not yet cleared */
    int lines;             /* lines drawn so far (both styles) */
} m3_progress;

/* The style for a stream: QUIET when quiet, TTY when f is a terminal, else PLAIN. */
m3_progress_style m3_progress_style_for(FILE *f, int quiet);
/* Start a meter writing to out (NULL: stderr) under the prefix prog; clock NULL: CLOCK_MONOTONIC. */
void m3_progress_init(m3_progress *p, FILE *out, m3_progress_style style, const char *prog,
                      m3_clock_fn clock, void *clock_ctx);
/* The programs' meter: stderr, its style for quiet, the real clock; the
 * environment's M3_PROGRESS_INTERVAL (seconds > 0) replaces the plain interval. */
void m3_progress_init_stderr(m3_progress *p, const char *prog, int quiet);
/* Seconds on p's clock. */
double m3_progress_now(const m3_progress *p);

/* Begin a task (ending any current one): label, unit, total (0: unknown; no percentage or ETA). */
void m3_progress_task(m3_progress *p, const char *label, m3_progress_unit unit, int64_t total);
/* Name the current stage: stage i (0-based) of n, shown as "<name> i+1/n"; n 0 hides it. */
void m3_progress_stage(m3_progress *p, const char *name, int i, int n);
/* Set the current task's total (0: unknown), e.g. once a callee knows it. */
void m3_progress_set_total(m3_progress *p, int64_t total);
/* Add delta to the count and redraw when the interval has passed. */
void m3_progress_add(m3_progress *p, int64_t delta);
/* Set the count and redraw when the interval has passed. */
void m3_progress_set(m3_progress *p, int64_t done);
/* End the task: erase the TTY line. The count stays readable until the next task. */
void m3_progress_end(m3_progress *p);
/* Erase the TTY line (if drawn) so that other stderr output starts on a clean line. */
void m3_progress_clear(m3_progress *p);
/* End any task and print "<prog>: <detail>; wall <t>; peak RSS <m>" (not when QUIET). */
void m3_progress_summary(m3_progress *p, const char *detail);

/* The status line of p's task at time now (no newline) into buf; returns its length. */
size_t m3_progress_format(const m3_progress *p, double now, char *buf, size_t cap);
/* The summary line (no newline) into buf; returns its length. */
size_t m3_progress_format_summary(const char *prog, const char *detail, double wall_s,
                                  int64_t peak_rss_bytes, char *buf, size_t cap);
/* Seconds as "0.42 s", "12.3 s", "4m05s", "2h03m"; negative or non-finite: "?". */
void m3_fmt_duration(double s, char *buf, size_t cap);
/* A byte count as "512 B", "1.5 KiB", "12.0 MiB", "3.25 GiB". */
void m3_fmt_bytes(double bytes, char *buf, size_t cap);
/* Peak resident set size in bytes (getrusage) of this process or, when larger,
 * of its largest waited-for child (worker processes); -1 if unknown. */
int64_t m3_peak_rss_bytes(void);

#endif
