/* progress.c — the status line of long runs (contract in progress.h).
 *
 * Throttling: a line is due when the style's interval has passed since the
 * last line drawn by this meter (or since m3_progress_init), whatever the
 * task; so a run of many short tasks draws no more often than one long
 * task, and a run shorter than the interval draws nothing but its summary.
 * On a terminal the line is cut to the terminal's width so that "\r" can
 * redraw it; ANSI "erase to end of line" removes the rest of a longer
 * previous line.
 */
#include "progress.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

double m3_monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double monotonic_s(void *ctx)
{
    (void)ctx;
    return m3_monotonic_s();
}

m3_progress_style m3_progress_style_for(FILE *f, int quiet)
{
    if (quiet || !f)
        return M3_PROGRESS_QUIET;
    return isatty(fileno(f)) ? M3_PROGRESS_TTY : M3_PROGRESS_PLAIN;
}

void m3_progress_init(m3_progress *p, FILE *out, m3_progress_style style, const char *prog,
                      m3_clock_fn clock, void *clock_ctx)
{
    memset(p, 0, sizeof *p);
    p->out = out ? out : stderr;
    p->style = style;
    p->clock = clock ? clock : monotonic_s;
    p->clock_ctx = clock ? clock_ctx : NULL;
    p->tty_interval_s = M3_PROGRESS_TTY_INTERVAL;
    p->plain_interval_s = M3_PROGRESS_PLAIN_INTERVAL;
    snprintf(p->prog, sizeof p->prog, "%s", prog ? prog : "m3");
    p->t_init = p->t_task = p->t_last = m3_progress_now(p);
}

void m3_progress_init_stderr(m3_progress *p, const char *prog, int quiet)
{
    m3_progress_init(p, stderr, m3_progress_style_for(stderr, quiet), prog, NULL, NULL);
    const char *iv = getenv("M3_PROGRESS_INTERVAL");
    if (iv && *iv) {
        char *end;
        double v = strtod(iv, &end);
        if (*end == 0 && isfinite(v) && v > 0)
            p->plain_interval_s = v;
    }
}

double m3_progress_now(const m3_progress *p) { return p->clock(p->clock_ctx); }

void m3_progress_task(m3_progress *p, const char *label, m3_progress_unit unit, int64_t total)
{
    if (p->active)
        m3_progress_end(p);
    snprintf(p->task, sizeof p->task, "%s", label ? label : "");
    p->unit = unit;
    p->total = total > 0 ? total : 0;
    p->done = 0;
    p->stage = p->nstages = 0;
    p->stage_name[0] = 0;
    p->t_task = m3_progress_now(p);
    p->active = 1;
}

void m3_progress_stage(m3_progress *p, const char *name, int i, int n)
{
    snprintf(p->stage_name, sizeof p->stage_name, "%s", name ? name : "");
    p->stage = i + 1;
    p->nstages = n > 0 ? n : 0;
}

void m3_progress_set_total(m3_progress *p, int64_t total) { p->total = total > 0 ? total : 0; }

/* ---- formatting ---------------------------------------------------------- */

void m3_fmt_duration(double s, char *buf, size_t cap)
{
    if (!isfinite(s) || s < 0) {
        snprintf(buf, cap, "?");
    } else if (s < 10.0) {
        snprintf(buf, cap, "%.2f s", s);
    } else if (s < 60.0) {
        snprintf(buf, cap, "%.1f s", s);
    } else if (s < 3600.0) {
        long t = (long)s;
        snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    } else if (s < 1e9) {
        long t = (long)(s / 60.0);
        snprintf(buf, cap, "%ldh%02ldm", t / 60, t % 60);
    } else {
        snprintf(buf, cap, "?");
    }
}

void m3_fmt_bytes(double b, char *buf, size_t cap)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (!isfinite(b) || b < 0) {
        snprintf(buf, cap, "?");
        return;
    }
    if (b < 1024.0) {
        snprintf(buf, cap, "%.0f B", b);
        return;
    }
    int u = -1;
    while (b >= 1024.0 && u < 3) {
        b /= 1024.0;
        u++;
    }
    snprintf(buf, cap, b < 10.0 ? "%.2f %s" : b < 100.0 ? "%.1f %s" : "%.0f %s", b, units[u]);
}

static const char *unit_name(m3_progress_unit u)
{
    switch (u) {
    case M3_UNIT_ROWS: return "rows";
    case M3_UNIT_TOKENS: return "tokens";
    case M3_UNIT_BYTES: return "bytes";
    default: return "items";
    }
}

/* A count (or a rate when rate != 0) of unit u. */
static void fmt_amount(double v, m3_progress_unit u, int rate, char *buf, size_t cap)
{
    if (u == M3_UNIT_BYTES) {
        m3_fmt_bytes(v, buf, cap);
        if (rate)
            snprintf(buf + strlen(buf), cap - strlen(buf), "/s");
        return;
    }
    if (!rate)
        snprintf(buf, cap, "%.0f", v);
    else
        snprintf(buf, cap, v >= 100.0 ? "%.0f %s/s" : v >= 10.0 ? "%.1f %s/s" : "%.2f %s/s", v,
                 unit_name(u));
}

/* Append to buf [cap] at *len, keeping it terminated. */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, const char *a, const char *b)
{
    if (*len >= cap)
        return;
    int n = snprintf(buf + *len, cap - *len, fmt, a, b);
    if (n > 0)
        *len = *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

size_t m3_progress_format(const m3_progress *p, double now, char *buf, size_t cap)
{
    char a[160], b[48], sep[3] = ", ";
    size_t len = 0;
    if (!cap)
        return 0;
    buf[0] = 0;
    put(buf, cap, &len, "%s: %s", p->prog, p->task);
    if (!p->task[0])
        sep[0] = 0; /* "prog: layer 1/2" */
    if (p->nstages > 0) {
        snprintf(a, sizeof a, "%s%s%d/%d", p->stage_name, p->stage_name[0] ? " " : "", p->stage,
                 p->nstages);
        put(buf, cap, &len, "%s%s", sep, a);
        sep[0] = ',', sep[1] = ' ', sep[2] = 0;
    }
    if (!(p->unit == M3_UNIT_ROWS && p->nstages > 0)) { /* row-layer counts read as noise */
        fmt_amount((double)p->done, p->unit, 0, a, sizeof a);
        if (p->total > 0) {
            fmt_amount((double)p->total, p->unit, 0, b, sizeof b);
            snprintf(a + strlen(a), sizeof a - strlen(a), "/%s", b);
        }
        if (p->unit != M3_UNIT_BYTES)
            snprintf(a + strlen(a), sizeof a - strlen(a), " %s", unit_name(p->unit));
        put(buf, cap, &len, "%s%s", sep, a);
        sep[0] = ',', sep[1] = ' ', sep[2] = 0;
    }
    if (p->total > 0) {
        double pct = 100.0 * (double)p->done / (double)p->total;
        snprintf(a, sizeof a, "%.1f%%", pct > 100.0 ? 100.0 : pct);
        put(buf, cap, &len, "%s%s", sep, a);
        sep[0] = ',', sep[1] = ' ', sep[2] = 0;
    }
    const double el = now - p->t_task;
    const double rate = el > 0 && p->done > 0 ? (double)p->done / el : 0.0;
    if (rate > 0) {
        fmt_amount(rate, p->unit, 1, a, sizeof a);
        put(buf, cap, &len, "%s%s", sep, a);
        sep[0] = ',', sep[1] = ' ', sep[2] = 0;
    }
    m3_fmt_duration(el, a, sizeof a);
    put(buf, cap, &len, "%s%s elapsed", sep, a);
    if (p->total > 0) {
        if (p->done >= p->total)
            snprintf(a, sizeof a, "0 s");
        else if (rate > 0)
            m3_fmt_duration((double)(p->total - p->done) / rate, a, sizeof a);
        else
            snprintf(a, sizeof a, "?");
        put(buf, cap, &len, ", ETA %s%s", a, "");
    }
    return len;
}

size_t m3_progress_format_summary(const char *prog, const char *detail, double wall_s,
                                  int64_t rss, char *buf, size_t cap)
{
    char w[32], r[32];
    m3_fmt_duration(wall_s, w, sizeof w);
    if (rss >= 0)
        m3_fmt_bytes((double)rss, r, sizeof r);
    else
        snprintf(r, sizeof r, "?");
    int n = snprintf(buf, cap, "%s: %s; wall %s; peak RSS %s", prog ? prog : "m3",
                     detail && *detail ? detail : "done", w, r);
    if (n < 0)
        return 0;
    return (size_t)n < cap ? (size_t)n : cap ? cap - 1 : 0;
}

int64_t m3_peak_rss_bytes(void)
{
    struct rusage self, kids;
    if (getrusage(RUSAGE_SELF, &self) != 0)
        return -1;
    long kib = self.ru_maxrss; /* Linux: kibibytes */
    if (getrusage(RUSAGE_CHILDREN, &kids) == 0 && kids.ru_maxrss > kib)
        kib = kids.ru_maxrss; /* worker processes (m3-conform --jobs) */
    return (int64_t)kib * 1024;
}

/* ---- drawing ------------------------------------------------------------- */

static size_t term_width(FILE *f)
{
    struct winsize ws;
    if (ioctl(fileno(f), TIOCGWINSZ, &ws) == 0 && ws.ws_col > 8)
        return ws.ws_col;
    return 80;
}

static void draw(m3_progress *p, double now)
{
    char line[512];
    size_t n = m3_progress_format(p, now, line, sizeof line);
    if (p->style == M3_PROGRESS_TTY) {
        size_t w = term_width(p->out) - 1; /* the last column would wrap on some terminals */
        if (n > w)
            line[w] = 0;
        fprintf(p->out, "\r%s\033[K", line);
        p->on_screen = 1;
    } else {
        fprintf(p->out, "%s\n", line);
    }
    fflush(p->out);
    p->t_last = now;
    p->lines++;
}

static void maybe_draw(m3_progress *p)
{
    if (p->style == M3_PROGRESS_QUIET || !p->active)
        return;
    const double now = m3_progress_now(p);
    const double iv = p->style == M3_PROGRESS_TTY ? p->tty_interval_s : p->plain_interval_s;
    if (now - p->t_last >= iv)
        draw(p, now);
}

void m3_progress_add(m3_progress *p, int64_t delta)
{
    p->done += delta;
    maybe_draw(p);
}

void m3_progress_set(m3_progress *p, int64_t done)
{
    p->done = done;
    maybe_draw(p);
}

void m3_progress_clear(m3_progress *p)
{
    if (p->on_screen) {
        fputs("\r\033[K", p->out);
        fflush(p->out);
        p->on_screen = 0;
    }
}

void m3_progress_end(m3_progress *p)
{
    m3_progress_clear(p);
    p->active = 0;
}

void m3_progress_summary(m3_progress *p, const char *detail)
{
    m3_progress_end(p);
    if (p->style == M3_PROGRESS_QUIET)
        return;
    char line[1024];
    m3_progress_format_summary(p->prog, detail, m3_progress_now(p) - p->t_init,
                               m3_peak_rss_bytes(), line, sizeof line);
    fprintf(p->out, "%s\n", line);
    fflush(p->out);
}
